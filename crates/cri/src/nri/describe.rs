//! Pods and containers as NRI's messages describe them, from the runtime's records: what a
//! plugin is told at each event and in Synchronize.

use podlab_runtime::state::ContainerRecord;
use podlab_runtime::status::ContainerState;
use podlab_runtime::{
    ContainerFilter, ContainerId, ContainerStatus, Runtime, SandboxId, SandboxStatus,
};

use super::{adjust, api};
use crate::convert;

/// The pod `id`, or None once it is gone.
pub fn pod(runtime: &Runtime, id: &SandboxId) -> Option<api::PodSandbox> {
    let status = runtime.pod_sandbox_status(id).ok()?;
    Some(pod_of(runtime, &status))
}

/// The pod whose status was read already.
fn pod_of(runtime: &Runtime, status: &SandboxStatus) -> api::PodSandbox {
    let cgroup_parent = runtime
        .pod_sandbox_record(&status.id)
        .map(|record| record.config.linux.cgroup_parent)
        .unwrap_or_default();
    api::PodSandbox {
        id: status.id.to_string(),
        name: status.metadata.name.clone(),
        uid: status.metadata.uid.clone(),
        namespace: status.metadata.namespace.clone(),
        labels: convert::hash(&status.labels),
        annotations: convert::hash(&status.annotations),
        runtime_handler: String::new(),
        linux: Some(api::LinuxPodSandbox {
            cgroup_parent,
            ..Default::default()
        }),
        pid: status
            .pause_pid
            .and_then(|pid| u32::try_from(pid).ok())
            .unwrap_or(0),
        ips: status
            .ip
            .iter()
            .chain(&status.additional_ips)
            .cloned()
            .collect(),
    }
}

/// The container `id` and its pod, or None once either is gone.
pub fn container(runtime: &Runtime, id: &ContainerId) -> Option<(api::PodSandbox, api::Container)> {
    let (status, record) = runtime.container_status_and_record(id).ok()?;
    Some((
        pod(runtime, &status.sandbox_id)?,
        container_of(&status, &record),
    ))
}

/// The container `id` without its pod (for a pod's containers, the pod described once).
pub fn container_alone(runtime: &Runtime, id: &ContainerId) -> Option<api::Container> {
    let (status, record) = runtime.container_status_and_record(id).ok()?;
    Some(container_of(&status, &record))
}

fn container_of(status: &ContainerStatus, record: &ContainerRecord) -> api::Container {
    let state = match status.state {
        ContainerState::Created => api::ContainerState::ContainerCreated,
        ContainerState::Running => api::ContainerState::ContainerRunning,
        ContainerState::Exited => api::ContainerState::ContainerStopped,
        ContainerState::Unknown => api::ContainerState::ContainerUnknown,
    };
    api::Container {
        id: status.id.to_string(),
        pod_sandbox_id: status.sandbox_id.to_string(),
        name: status.metadata.name.clone(),
        state: state as i32,
        labels: convert::hash(&status.labels),
        annotations: match &record.spec_annotations {
            Some(adjusted) => convert::hash(adjusted),
            None => convert::hash(&status.annotations),
        },
        args: record.process.argv.clone(),
        env: record.process.env.clone(),
        mounts: record
            .config
            .mounts
            .iter()
            .map(adjust::describe_mount)
            .collect(),
        linux: Some(api::LinuxContainer {
            resources: Some(adjust::describe_resources(&record.config.resources.cgroup)),
            oom_score_adj: record
                .config
                .resources
                .oom_score_adj
                .map(|value| api::OptionalInt {
                    value: value.into(),
                }),
            ..Default::default()
        }),
        pid: status
            .pid
            .and_then(|pid| u32::try_from(pid).ok())
            .unwrap_or(0),
        created_at: status.created_at,
        started_at: status.started_at,
        finished_at: status.finished_at,
        exit_code: status.exit_code.unwrap_or(0),
        status_reason: status.reason.clone().unwrap_or_default(),
        status_message: status.message.clone().unwrap_or_default(),
        ..Default::default()
    }
}

/// Every pod and container the CRI shows (not those whose creating hook is under way), for a
/// plugin's Synchronize.
pub fn snapshot(
    runtime: &Runtime,
    hidden: impl Fn(&str) -> bool,
) -> (Vec<api::PodSandbox>, Vec<api::Container>) {
    let pods = runtime
        .list_pod_sandboxes()
        .unwrap_or_default()
        .iter()
        .filter(|s| !hidden(s.id.as_str()))
        .map(|s| pod_of(runtime, s))
        .collect();
    let containers = runtime
        .list_containers(&ContainerFilter::default())
        .unwrap_or_default()
        .iter()
        .filter(|c| !hidden(c.id.as_str()) && !hidden(c.sandbox_id.as_str()))
        .filter_map(|c| container_alone(runtime, &c.id))
        .collect();
    (pods, containers)
}
