//! The three inputs of a pass, made from what the agent can read: the runtime's records of the
//! pod ([`PodRuntime`] → [`RuntimeView`]), the pod's spec ([`spec_view`]), and the status the API
//! holds from the previous pass ([`previous_status`]).
//!
//! Runtime records carry the labels [`crate::translate`] put on them, so a record maps back to
//! its pod (uid) and container (name, list); times become the rules' plain seconds, except the
//! creation time, kept in nanoseconds because it orders a container's records.

use k8s_openapi::api::core::v1::{ContainerState, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use podlab_runtime::{
    ContainerFilter, ContainerStatus, NetworkMode, SandboxId, SandboxState as CriState,
    SandboxStatus,
};

use super::runtime_service::RuntimeService;

use crate::model::{
    container_hash, ApiState, CarriedCondition, ContainerRecord, ContainerSpecView,
    EphemeralSpecView, NetnsMode, PodSpecView, PreviousContainerStatus, PreviousStatus, Probes,
    RestartPolicy, RuntimeState, RuntimeView, SandboxRecord, SandboxState, Termination,
};
use crate::phase::Phase;
use crate::translate;

/// The `containerID` scheme podlab reports (`containerd://…` on a containerd node).
pub const CONTAINER_ID_SCHEME: &str = "podlab://";

/// Conditions the kubelet owns and regenerates every pass (spec 5); the others are kept.
pub const KUBELET_CONDITIONS: &[&str] = &[
    "PodScheduled",
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
    "PodResizePending",
    "PodResizeInProgress",
];
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// What the runtime holds for one pod: its sandboxes (oldest first) and every container record
/// in them.
#[derive(Debug, Clone, Default)]
pub struct PodRuntime {
    pub sandboxes: Vec<SandboxStatus>,
    pub containers: Vec<ContainerStatus>,
}

impl PodRuntime {
    /// Reads the sandboxes `ids` and their containers: from the runtime's state files in
    /// process (no shim is asked), or by PodSandboxStatus and ListContainers from a CRI
    /// runtime. Sandboxes that are gone are left out.
    pub fn observe(
        runtime: &dyn RuntimeService,
        ids: &[SandboxId],
    ) -> podlab_runtime::Result<PodRuntime> {
        let mut observed = PodRuntime::default();
        for id in ids {
            match runtime.pod_sandbox_status(id) {
                Ok(status) => observed.sandboxes.push(status),
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            }
            let filter = ContainerFilter {
                sandbox_id: Some(id.clone()),
                ..ContainerFilter::default()
            };
            observed
                .containers
                .extend(runtime.list_containers(&filter)?);
        }
        observed.sandboxes.sort_by_key(|s| s.created_at);
        Ok(observed)
    }

    pub fn sandbox_ids(&self) -> Vec<SandboxId> {
        self.sandboxes.iter().map(|s| s.id.clone()).collect()
    }

    /// The newest sandbox (the one the pod runs in, or was last running in).
    pub fn newest_sandbox(&self) -> Option<&SandboxStatus> {
        self.sandboxes.last()
    }

    pub fn container(&self, id: &str) -> Option<&ContainerStatus> {
        self.containers.iter().find(|c| c.id.as_str() == id)
    }

    /// The rules' view of these records.
    pub fn view(&self) -> RuntimeView {
        RuntimeView {
            sandboxes: self.sandboxes.iter().map(sandbox_record).collect(),
            containers: self.containers.iter().map(container_record).collect(),
        }
    }
}

fn sandbox_record(status: &SandboxStatus) -> SandboxRecord {
    SandboxRecord {
        id: status.id.to_string(),
        created: status.created_at,
        state: match status.state {
            CriState::Ready => SandboxState::Ready,
            CriState::NotReady => SandboxState::NotReady,
        },
        netns: match status.network_mode {
            NetworkMode::Pod => NetnsMode::Pod,
            NetworkMode::Node => NetnsMode::Node,
        },
        // The runtime reports no network status until a plugin gave an IP, so SBX-5 (a status
        // with an empty IP) can only come from a plugin that answered without one.
        ip: status.ip.clone(),
        attempt: status.metadata.attempt,
    }
}

fn container_record(status: &ContainerStatus) -> ContainerRecord {
    use podlab_runtime::ContainerState as Cri;
    ContainerRecord {
        id: status.id.to_string(),
        name: status.metadata.name.clone(),
        state: match status.state {
            Cri::Created => RuntimeState::Created,
            Cri::Running => RuntimeState::Running,
            Cri::Exited => RuntimeState::Exited,
            Cri::Unknown => RuntimeState::Unknown,
        },
        created: status.created_at,
        exit_code: status.exit_code.unwrap_or(0),
        reason: status.reason.clone().unwrap_or_default(),
        message: status.message.clone().unwrap_or_default(),
        restart_count: status.metadata.attempt,
        sandbox_id: status.sandbox_id.to_string(),
        hash: status
            .annotations
            .get(translate::ANNOTATION_HASH)
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .unwrap_or_else(|| container_hash(&status.metadata.name, &status.image)),
        started_at: seconds(status.started_at),
        finished_at: seconds(status.finished_at),
    }
}

/// CRI nanoseconds to the rules' seconds; 0 means "has not happened".
pub fn seconds(nanos: i64) -> Option<i64> {
    (nanos > 0).then(|| nanos.div_euclid(1_000_000_000))
}

/// What the lifecycle rules read of a pod.
pub fn spec_view(pod: &Pod) -> PodSpecView {
    let (namespace, name, uid) = translate::identity(pod);
    let spec = pod.spec.clone().unwrap_or_default();
    let restart_policy = match spec.restart_policy.as_deref() {
        Some("OnFailure") => RestartPolicy::OnFailure,
        Some("Never") => RestartPolicy::Never,
        _ => RestartPolicy::Always,
    };
    let container = |c: &k8s_openapi::api::core::v1::Container, sidecar: bool| ContainerSpecView {
        name: c.name.clone(),
        sidecar,
        probes: Probes {
            liveness: c.liveness_probe.is_some(),
            readiness: c.readiness_probe.is_some(),
            startup: c.startup_probe.is_some(),
        },
        hash: container_hash(&c.name, c.image.as_deref().unwrap_or("")),
        resize_restart: false,
    };
    PodSpecView {
        name,
        namespace,
        uid,
        restart_policy,
        host_network: spec.host_network.unwrap_or(false),
        share_process_namespace: spec.share_process_namespace.unwrap_or(false),
        host_pid: spec.host_pid.unwrap_or(false),
        deletion_requested: pod.metadata.deletion_timestamp.is_some(),
        readiness_gates: spec
            .readiness_gates
            .iter()
            .flatten()
            .map(|g| g.condition_type.clone())
            .collect(),
        init_containers: spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| container(c, c.restart_policy.as_deref() == Some("Always")))
            .collect(),
        containers: spec
            .containers
            .iter()
            .map(|c| container(c, false))
            .collect(),
        ephemeral_containers: spec
            .ephemeral_containers
            .iter()
            .flatten()
            .map(|e| EphemeralSpecView {
                name: e.name.clone(),
                target_container: e.target_container_name.clone(),
            })
            .collect(),
    }
}

/// The status the API holds, as the rules' previous status (API-1, API-3, PH-7, COND-DT).
pub fn previous_status(status: &PodStatus) -> PreviousStatus {
    let list = |statuses: &Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>| {
        statuses
            .iter()
            .flatten()
            .map(|s| PreviousContainerStatus {
                name: s.name.clone(),
                state: s.state.as_ref().map_or(
                    ApiState::Waiting {
                        reason: None,
                        message: None,
                    },
                    api_state,
                ),
                last_state: s
                    .last_state
                    .as_ref()
                    .filter(|l| {
                        l.running.is_some() || l.terminated.is_some() || l.waiting.is_some()
                    })
                    .map(api_state),
                restart_count: s.restart_count.max(0) as u32,
            })
            .collect()
    };
    PreviousStatus {
        phase: status.phase.as_deref().and_then(parse_phase),
        init: list(&status.init_container_statuses),
        containers: list(&status.container_statuses),
        ephemeral: list(&status.ephemeral_container_statuses),
        disruption_target: status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == DISRUPTION_TARGET)
            .map(|c| CarriedCondition {
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            }),
    }
}

/// Conditions owned by others (readiness gates), type → status.
pub fn other_conditions(status: Option<&PodStatus>) -> Vec<(String, String)> {
    status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()) && c.type_ != DISRUPTION_TARGET)
        .map(|c| (c.type_.clone(), c.status.clone()))
        .collect()
}

fn parse_phase(phase: &str) -> Option<Phase> {
    match phase {
        "Pending" => Some(Phase::Pending),
        "Running" => Some(Phase::Running),
        "Succeeded" => Some(Phase::Succeeded),
        "Failed" => Some(Phase::Failed),
        _ => None,
    }
}

fn api_state(state: &ContainerState) -> ApiState {
    let secs = |t: &Option<Time>| t.as_ref().map(|t| t.0.as_second());
    if let Some(running) = &state.running {
        return ApiState::Running {
            started_at: secs(&running.started_at),
        };
    }
    if let Some(t) = &state.terminated {
        return ApiState::Terminated(Termination {
            exit_code: t.exit_code,
            reason: t.reason.clone(),
            message: t.message.clone(),
            started_at: secs(&t.started_at),
            finished_at: secs(&t.finished_at),
            container_id: t.container_id.as_deref().map(|id| {
                id.strip_prefix(CONTAINER_ID_SCHEME)
                    .unwrap_or(id)
                    .to_string()
            }),
        });
    }
    let waiting = state.waiting.as_ref();
    ApiState::Waiting {
        reason: waiting.and_then(|w| w.reason.clone()),
        message: waiting.and_then(|w| w.message.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerStateRunning, ContainerStateTerminated, ContainerStatus as ApiStatus, PodCondition,
    };

    fn time(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())
    }

    #[test]
    fn previous_status_reads_states_phase_and_carried_conditions() {
        let status = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ApiStatus {
                name: "app".into(),
                restart_count: 2,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(time(100)),
                    }),
                    ..Default::default()
                }),
                last_state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 1,
                        container_id: Some("podlab://abc".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            conditions: Some(vec![
                PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                },
                PodCondition {
                    type_: DISRUPTION_TARGET.into(),
                    status: "True".into(),
                    reason: Some("EvictionByEvictionAPI".into()),
                    ..Default::default()
                },
                PodCondition {
                    type_: "example.com/gate".into(),
                    status: "False".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let prev = previous_status(&status);
        assert_eq!(prev.phase, Some(Phase::Running));
        let app = &prev.containers[0];
        assert_eq!(app.restart_count, 2);
        assert_eq!(
            app.state,
            ApiState::Running {
                started_at: Some(100)
            }
        );
        let last = app
            .last_state
            .as_ref()
            .and_then(ApiState::terminated)
            .unwrap();
        assert_eq!(
            (last.exit_code, last.container_id.as_deref()),
            (1, Some("abc"))
        );
        assert_eq!(
            prev.disruption_target.map(|d| d.reason),
            Some(Some("EvictionByEvictionAPI".into()))
        );
        assert_eq!(
            other_conditions(Some(&status)),
            [("example.com/gate".to_string(), "False".to_string())]
        );
    }

    #[test]
    fn spec_view_marks_sidecars_probes_and_deletion() {
        let yaml = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  restartPolicy: OnFailure
  initContainers:
  - {name: setup, image: busybox}
  - {name: proxy, image: busybox, restartPolicy: Always}
  containers:
  - name: app
    image: busybox
    readinessProbe: {exec: {command: ["true"]}}
"#;
        let mut pod = podlab_api::decode_pod(yaml, "test").unwrap();
        pod.metadata.uid = Some("u1".into());
        let view = spec_view(&pod);
        assert_eq!(view.restart_policy, RestartPolicy::OnFailure);
        assert_eq!(
            view.init_containers
                .iter()
                .map(|c| c.sidecar)
                .collect::<Vec<_>>(),
            [false, true]
        );
        assert!(view.containers[0].probes.readiness && !view.containers[0].probes.liveness);
        assert_eq!(view.containers[0].hash, container_hash("app", "busybox"));
        assert!(!view.deletion_requested);
        pod.metadata.deletion_timestamp = Some(time(5));
        assert!(spec_view(&pod).deletion_requested);
        assert_eq!(view.display_name(), "web_default(u1)");
    }

    #[test]
    fn nanoseconds_become_seconds_and_zero_is_none() {
        assert_eq!(seconds(0), None);
        assert_eq!(seconds(1_999_999_999), Some(1));
    }
}
