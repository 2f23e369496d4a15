//! A pass's decisions as the `v1.PodStatus` the API shows (kubelet's `generateAPIPodStatus` and
//! the status manager): phase, conditions whose `lastTransitionTime` only moves when their
//! status does, the three container status lists, pod and host IPs, start time, QoS class.

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, ContainerUser, HostIP, LinuxContainerUser, Pod,
    PodCondition, PodIP, PodStatus, ResourceRequirements, VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use podlab_runtime::{Runtime, SandboxFilter};

use crate::conditions::Condition;
use crate::model::{ApiState, PassContext, Termination};
use crate::status::ApiContainerStatus;
use crate::sync::SyncResult;

use super::allocation::PodAllocation;
use super::view::{PodRuntime, CONTAINER_ID_SCHEME, KUBELET_CONDITIONS};

/// Pods without resource requests or limits are BestEffort.
pub const QOS_BEST_EFFORT: &str = "BestEffort";

/// What the status is made from besides the pass.
pub struct StatusInputs<'a> {
    pub pod: &'a Pod,
    pub observed: &'a PodRuntime,
    /// The node's allocated and actuated resources of the pod (in-place resize), when kept.
    pub allocation: Option<&'a PodAllocation>,
    /// The node's address (`status.hostIP`); never contacted.
    pub host_ip: &'a str,
    pub now: Time,
}

/// The status to write for a pass.
pub fn pod_status(result: &SyncResult, inputs: &StatusInputs) -> PodStatus {
    let pod = inputs.pod;
    let old = pod.status.as_ref();
    let spec = pod.spec.clone().unwrap_or_default();
    let host_network = spec.host_network.unwrap_or(false);

    let find_spec = |list: &[Container], name: &str| list.iter().find(|c| c.name == name).cloned();
    let init_specs = spec.init_containers.clone().unwrap_or_default();
    let convert_list = |statuses: &[ApiContainerStatus],
                        specs: &dyn Fn(&str) -> Option<Container>| {
        statuses
            .iter()
            .map(|s| {
                let mut status = container_status(s, specs(&s.name).as_ref(), inputs.observed);
                if let Some(allocation) = inputs.allocation {
                    set_resources(&mut status, s.state.is_running(), allocation);
                }
                status
            })
            .collect::<Vec<_>>()
    };
    let init = convert_list(&result.statuses.init, &|n| find_spec(&init_specs, n));
    let containers = convert_list(&result.statuses.containers, &|n| {
        find_spec(&spec.containers, n)
    });
    let ephemeral_specs = spec.ephemeral_containers.clone().unwrap_or_default();
    let ephemeral = convert_list(&result.statuses.ephemeral, &|n| {
        ephemeral_specs
            .iter()
            .find(|e| e.name == n)
            .map(|e| Container {
                name: e.name.clone(),
                image: e.image.clone(),
                volume_mounts: e.volume_mounts.clone(),
                ..Container::default()
            })
    });

    let pod_ips: Vec<String> = if host_network {
        vec![inputs.host_ip.to_string()]
    } else {
        match inputs.observed.newest_sandbox().and_then(|s| s.ip.clone()) {
            Some(ip) => {
                let mut ips = vec![ip];
                ips.extend(
                    inputs
                        .observed
                        .newest_sandbox()
                        .unwrap()
                        .additional_ips
                        .clone(),
                );
                ips
            }
            // kubelet keeps the IPs it reported while no sandbox has any.
            None => old
                .and_then(|s| s.pod_ips.as_ref())
                .map(|ips| ips.iter().map(|p| p.ip.clone()).collect())
                .unwrap_or_default(),
        }
    };

    let phase = &result.phase;
    PodStatus {
        phase: Some(phase.phase.as_str().into()),
        reason: phase.reason.clone().or_else(|| {
            old.and_then(|s| s.reason.clone())
                .filter(|_| same_phase(old, phase.phase))
        }),
        message: phase.message.clone().or_else(|| {
            old.and_then(|s| s.message.clone())
                .filter(|_| same_phase(old, phase.phase))
        }),
        conditions: Some(conditions(
            result,
            old,
            &inputs.now,
            pod.metadata.generation,
        )),
        host_ip: Some(inputs.host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: inputs.host_ip.to_string(),
        }]),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        start_time: old
            .and_then(|s| s.start_time.clone())
            .or_else(|| Some(inputs.now.clone())),
        init_container_statuses: (!init.is_empty()).then_some(init),
        container_statuses: Some(containers),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
        qos_class: Some(podlab_api::resources::pod_qos(pod).into()),
        observed_generation: pod.metadata.generation,
        ..PodStatus::default()
    }
}

fn same_phase(old: Option<&PodStatus>, phase: crate::phase::Phase) -> bool {
    old.and_then(|s| s.phase.as_deref()) == Some(phase.as_str())
}

/// Others' conditions first (readiness gates, and `DisruptionTarget`, copied as it is: COND-DT),
/// then kubelet's in its order; a condition keeps its `lastTransitionTime` while its status
/// stays the same.
fn conditions(
    result: &SyncResult,
    old: Option<&PodStatus>,
    now: &Time,
    generation: Option<i64>,
) -> Vec<PodCondition> {
    let old_conditions: &[PodCondition] = old.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let mut out: Vec<PodCondition> = old_conditions
        .iter()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    let c = &result.conditions;
    let mut ours: Vec<(&str, &Condition)> = Vec::with_capacity(7);
    if let Some(pending) = &c.resize_pending {
        ours.push(("PodResizePending", pending));
    }
    if let Some(progress) = &c.resize_in_progress {
        ours.push(("PodResizeInProgress", progress));
    }
    ours.extend([
        ("PodReadyToStartContainers", &c.ready_to_start_containers),
        ("Initialized", &c.initialized),
        ("Ready", &c.ready),
        ("ContainersReady", &c.containers_ready),
        ("PodScheduled", &c.scheduled),
    ]);
    for (type_, condition) in ours {
        let previous = old_conditions.iter().find(|o| o.type_ == type_);
        let last_transition_time = match previous {
            Some(p) if p.status == condition.status => p.last_transition_time.clone(),
            _ => Some(now.clone()),
        };
        out.push(PodCondition {
            type_: type_.into(),
            status: condition.status.into(),
            reason: condition.reason.clone(),
            message: condition.message.clone(),
            last_transition_time,
            last_probe_time: None,
            observed_generation: generation,
        });
    }
    out
}

fn container_status(
    status: &ApiContainerStatus,
    spec: Option<&Container>,
    observed: &PodRuntime,
) -> ContainerStatus {
    let record = status
        .container_id
        .as_deref()
        .and_then(|id| observed.container(id));
    let image = record
        .map(|r| r.image.clone())
        .or_else(|| spec.and_then(|s| s.image.clone()))
        .unwrap_or_default();
    ContainerStatus {
        name: status.name.clone(),
        state: Some(api_state(&status.state)),
        last_state: Some(
            status
                .last_state
                .as_ref()
                .map(api_state)
                .unwrap_or_default(),
        ),
        ready: status.ready,
        restart_count: status.restart_count as i32,
        started: Some(status.started),
        image,
        image_id: record.map(|r| r.image_id.clone()).unwrap_or_default(),
        container_id: status
            .container_id
            .as_ref()
            .map(|id| format!("{CONTAINER_ID_SCHEME}{id}")),
        volume_mounts: spec.and_then(|s| s.volume_mounts.as_ref()).map(|mounts| {
            mounts
                .iter()
                .map(|m| {
                    let read_only = m.read_only.unwrap_or(false);
                    VolumeMountStatus {
                        name: m.name.clone(),
                        mount_path: m.mount_path.clone(),
                        read_only: Some(read_only),
                        recursive_read_only: read_only.then(|| "Disabled".into()),
                    }
                })
                .collect()
        }),
        // kubelet copies the runtime's ContainerUser (SupplementalGroupsPolicy, on by
        // default): the identity the kernel gave the container's first process.
        user: record
            .and_then(|r| r.user.as_ref())
            .map(|user| ContainerUser {
                linux: Some(LinuxContainerUser {
                    uid: user.uid.into(),
                    gid: user.gid.into(),
                    supplemental_groups: Some(
                        user.supplemental_groups
                            .iter()
                            .copied()
                            .map(i64::from)
                            .collect(),
                    ),
                }),
            }),
        ..ContainerStatus::default()
    }
}

/// A resizable container's resources in its status: `allocatedResources`, the requests the
/// node admitted, and `resources`, what it runs with (actuated) while running, else what it
/// will be started with (allocated), as kubelet reports them.
fn set_resources(status: &mut ContainerStatus, running: bool, allocation: &PodAllocation) {
    let Some(allocated) = allocation.allocated.get(&status.name) else {
        return;
    };
    let current = match running {
        true => allocation.actuated.get(&status.name).unwrap_or(allocated),
        false => allocated,
    };
    status.allocated_resources = allocated.requests.clone().filter(|r| !r.is_empty());
    let set =
        |r: &Option<std::collections::BTreeMap<_, _>>| r.as_ref().is_some_and(|r| !r.is_empty());
    if set(&current.requests) || set(&current.limits) {
        status.resources = Some(ResourceRequirements {
            requests: current.requests.clone(),
            limits: current.limits.clone(),
            ..ResourceRequirements::default()
        });
    }
}

/// Whole seconds to an API time.
pub fn time(seconds: i64) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::from_second(seconds)
        .ok()
        .map(Time)
}

fn api_state(state: &ApiState) -> ContainerState {
    match state {
        ApiState::Waiting { reason, message } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: reason.clone(),
                message: message.clone(),
            }),
            ..ContainerState::default()
        },
        ApiState::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: started_at.and_then(time),
            }),
            ..ContainerState::default()
        },
        ApiState::Terminated(t) => ContainerState {
            terminated: Some(terminated(t)),
            ..ContainerState::default()
        },
    }
}

fn terminated(t: &Termination) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        // Exit codes above 128 are a signal's, as the runtime reports a killed process.
        signal: None,
        reason: t.reason.clone(),
        message: t.message.clone(),
        started_at: t.started_at.and_then(time),
        finished_at: t.finished_at.and_then(time),
        container_id: t
            .container_id
            .as_ref()
            .map(|id| format!("{CONTAINER_ID_SCHEME}{id}")),
    }
}

/// The status the pod's next sync pass would write before it acts, from what the runtime holds
/// now: what `podlab gc` writes for the pods of a node whose agent is not running. After a
/// `kill -9` of everything and a gc, a pod's sandbox and containers are gone while its status
/// still says running and Ready; kubelet reports such a pod's containers as vanished
/// (ContainerStatusUnknown) and the pod not Ready, and so does this, until an agent runs again
/// and acts (its first pass starts from the same status). No probe has a result yet, as for
/// an agent that just started.
pub fn status_from_runtime(runtime: &Runtime, pod: &Pod) -> podlab_runtime::Result<PodStatus> {
    let (_, _, uid) = crate::translate::identity(pod);
    let filter = SandboxFilter {
        labels: [(crate::translate::LABEL_POD_UID.to_string(), uid)].into(),
        ..SandboxFilter::default()
    };
    let ids: Vec<_> = runtime
        .list_pod_sandboxes_filtered(&filter)?
        .into_iter()
        .map(|s| s.id)
        .collect();
    let observed = PodRuntime::observe(runtime, &ids)?;
    let ctx = PassContext {
        other_conditions: super::view::other_conditions(pod.status.as_ref()),
        previous: pod.status.as_ref().map(super::view::previous_status),
        ..PassContext::default()
    };
    let result = crate::sync::sync_pass(&super::view::spec_view(pod), &observed.view(), &ctx);
    let host_ip = pod
        .status
        .as_ref()
        .and_then(|s| s.host_ip.clone())
        .unwrap_or_else(super::agent::node_address);
    Ok(pod_status(
        &result,
        &StatusInputs {
            pod,
            observed: &observed,
            allocation: None,
            host_ip: &host_ip,
            now: podlab_control::names::now(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PassContext, RestartPolicy, RuntimeState};
    use crate::node::view;
    use crate::testkit::{record, runtime};

    fn pod() -> Pod {
        let mut pod = podlab_api::decode_pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: app, image: busybox}\n",
            "test",
        )
        .unwrap();
        pod.metadata.uid = Some("uid".into());
        pod
    }

    fn inputs<'a>(pod: &'a Pod, observed: &'a PodRuntime, now: i64) -> StatusInputs<'a> {
        StatusInputs {
            pod,
            observed,
            allocation: None,
            host_ip: "127.0.0.1",
            now: time(now).unwrap(),
        }
    }

    #[test]
    fn transition_times_stay_while_the_status_stays() {
        let mut pod = pod();
        let spec = view::spec_view(&pod);
        assert_eq!(spec.restart_policy, RestartPolicy::Always);
        let observed = PodRuntime::default();
        let mut rt = runtime(vec![record("app", RuntimeState::Running, 10)]);
        let pass = crate::sync_pass(&spec, &rt, &PassContext::default());
        let first = pod_status(&pass, &inputs(&pod, &observed, 100));
        assert_eq!(first.phase.as_deref(), Some("Running"));
        pod.status = Some(first.clone());

        let again = pod_status(&pass, &inputs(&pod, &observed, 200));
        assert_eq!(again, first, "nothing changed, so nothing moves");

        rt.containers[0].state = RuntimeState::Exited;
        rt.containers[0].exit_code = 1;
        let crashed = crate::sync_pass(&spec, &rt, &PassContext::default());
        let later = pod_status(&crashed, &inputs(&pod, &observed, 300));
        let ready = |s: &PodStatus| {
            s.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .cloned()
                .unwrap()
        };
        assert_eq!(ready(&later).status, "False");
        assert_eq!(ready(&later).last_transition_time, time(300));
        let scheduled = |s: &PodStatus| {
            s.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled")
                .and_then(|c| c.last_transition_time.clone())
        };
        assert_eq!(scheduled(&later), time(100));
        assert_eq!(later.start_time, time(100));
        let order: Vec<&str> = later
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            order,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
        let app = &later.container_statuses.as_ref().unwrap()[0];
        let terminated = app.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(terminated.exit_code, 1);
        assert_eq!(terminated.container_id.as_deref(), Some("podlab://app-10"));
        assert_eq!(later.qos_class.as_deref(), Some(QOS_BEST_EFFORT));
        assert_eq!(later.host_ip.as_deref(), Some("127.0.0.1"));
    }
}
