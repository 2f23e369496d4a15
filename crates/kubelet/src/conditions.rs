//! Pod conditions (kubelet's `status/generate.go` and `generateAPIPodStatus`, spec 5, COND-*):
//! the kubelet-owned conditions regenerated every pass, with kubelet's reasons and messages.

use crate::model::{
    ApiState, CarriedCondition, PassContext, PodSpecView, ResizeInProgress, ResizeState,
};
use crate::phase::Phase;
use crate::rules::{go_slice, RuleId, Trace};
use crate::sandbox::SandboxCheck;
use crate::status::{ApiContainerStatus, PodStatuses};

pub const UNKNOWN_CONTAINER_STATUSES: &str = "UnknownContainerStatuses";
pub const POD_COMPLETED: &str = "PodCompleted";
pub const POD_FAILED: &str = "PodFailed";
pub const CONTAINERS_NOT_INITIALIZED: &str = "ContainersNotInitialized";
pub const CONTAINERS_NOT_READY: &str = "ContainersNotReady";
pub const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// One pod condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// `"True"` or `"False"` (or whatever a carried condition says).
    pub status: &'static str,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub rule: RuleId,
}

impl Condition {
    fn new(status: bool, reason: Option<&str>, message: Option<String>, rule: RuleId) -> Self {
        Condition {
            status: if status { "True" } else { "False" },
            reason: reason.map(String::from),
            message,
            rule,
        }
    }

    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// The conditions of a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodConditions {
    pub ready_to_start_containers: Condition,
    pub initialized: Condition,
    pub containers_ready: Condition,
    pub ready: Condition,
    pub scheduled: Condition,
    /// Copied from the previous status (COND-DT).
    pub disruption_target: Option<CarriedCondition>,
    pub resize_pending: Option<Condition>,
    pub resize_in_progress: Option<Condition>,
}

/// All conditions. `statuses` is `None` when there are no container statuses at all.
pub fn compute(
    pod: &PodSpecView,
    sandbox: &SandboxCheck,
    statuses: Option<&PodStatuses>,
    phase: Phase,
    ctx: &PassContext,
    trace: &mut Trace,
) -> PodConditions {
    let ready_to_start_containers = ready_to_start(sandbox, trace);
    let initialized = initialized(pod, statuses, phase, trace);
    let containers_ready = containers_ready(pod, statuses, phase, trace);
    let disruption_target = ctx
        .previous
        .as_ref()
        .and_then(|p| p.disruption_target.clone());
    if let Some(dt) = &disruption_target {
        trace.fire("COND-DT", || {
            format!(
                "DisruptionTarget ({}, {}) is copied from the previous status, never recomputed",
                dt.status,
                dt.reason.as_deref().unwrap_or("no reason")
            )
        });
    }
    let gate_status = |gate: &str| -> Option<String> {
        if let Some((_, status)) = ctx.other_conditions.iter().find(|(t, _)| t == gate) {
            return Some(status.clone());
        }
        match gate {
            "DisruptionTarget" => disruption_target.as_ref().map(|d| d.status.clone()),
            "PodReadyToStartContainers" => Some(ready_to_start_containers.status.to_string()),
            "Initialized" => Some(initialized.status.to_string()),
            _ => None,
        }
    };
    let ready = ready(pod, &containers_ready, gate_status, trace);
    trace.fire("COND-SCHED", || {
        "PodScheduled is True: the pod is on this node".into()
    });
    let (resize_pending, resize_in_progress) = resize(ctx.resize.as_ref(), phase, trace);
    PodConditions {
        ready_to_start_containers,
        initialized,
        containers_ready,
        ready,
        scheduled: Condition::new(true, None, None, "COND-SCHED"),
        disruption_target,
        resize_pending,
        resize_in_progress,
    }
}

/// COND-RTS.
fn ready_to_start(sandbox: &SandboxCheck, trace: &mut Trace) -> Condition {
    let ok = !sandbox.recreate;
    trace.fire("COND-RTS", || {
        if ok {
            "PodReadyToStartContainers is True: the sandbox with its network exists".into()
        } else {
            "PodReadyToStartContainers is False: a sandbox must be (re)created first".into()
        }
    });
    Condition::new(ok, None, None, "COND-RTS")
}

fn find<'a>(list: &'a [ApiContainerStatus], name: &str) -> Option<&'a ApiContainerStatus> {
    list.iter().find(|s| s.name == name)
}

/// `containers with unknown status: [a], containers with incomplete status: [b]`.
fn message(parts: &[(&str, &[&str])]) -> String {
    parts
        .iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(what, names)| format!("containers with {what} status: {}", go_slice(names)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// COND-INIT-0..3.
pub fn initialized(
    pod: &PodSpecView,
    statuses: Option<&PodStatuses>,
    phase: Phase,
    trace: &mut Trace,
) -> Condition {
    let Some(statuses) = statuses.filter(|s| !s.is_empty()) else {
        if pod.has_init_containers() {
            trace.fire("COND-INIT-0", || {
                "Initialized is False (UnknownContainerStatuses): there are no container statuses at all".into()
            });
            return Condition::new(false, Some(UNKNOWN_CONTAINER_STATUSES), None, "COND-INIT-0");
        }
        trace.fire("COND-INIT-3", || {
            "Initialized is True: the pod has no init containers".into()
        });
        return Condition::new(true, None, None, "COND-INIT-3");
    };
    let mut unknown: Vec<&str> = Vec::new();
    let mut incomplete: Vec<&str> = Vec::new();
    for init in &pod.init_containers {
        match find(&statuses.init, &init.name) {
            None => unknown.push(&init.name),
            Some(s) => {
                let done = if init.sidecar { s.started } else { s.ready };
                if !done {
                    incomplete.push(&init.name);
                }
            }
        }
    }
    if phase == Phase::Succeeded && unknown.is_empty() {
        trace.fire("COND-INIT-1a", || {
            "Initialized is True (PodCompleted): the pod succeeded".into()
        });
        return Condition::new(true, Some(POD_COMPLETED), None, "COND-INIT-1a");
    }
    let regular_started = statuses
        .containers
        .iter()
        .find(|s| matches!(s.state, ApiState::Running { .. } | ApiState::Terminated(_)));
    if let Some(s) = regular_started {
        trace.fire("COND-INIT-1b", || {
            format!(
                "Initialized is True: regular container {} is {}, so initialization happened",
                s.name,
                s.state.kind()
            )
        });
        return Condition::new(true, None, None, "COND-INIT-1b");
    }
    let msg = message(&[("unknown", &unknown), ("incomplete", &incomplete)]);
    if !msg.is_empty() {
        trace.fire("COND-INIT-2", || {
            format!("Initialized is False (ContainersNotInitialized): {msg}")
        });
        return Condition::new(
            false,
            Some(CONTAINERS_NOT_INITIALIZED),
            Some(msg),
            "COND-INIT-2",
        );
    }
    trace.fire("COND-INIT-3", || {
        if pod.has_init_containers() {
            "Initialized is True: every init container completed (or started, for sidecars)".into()
        } else {
            "Initialized is True: the pod has no init containers".into()
        }
    });
    Condition::new(true, None, None, "COND-INIT-3")
}

/// COND-CR-1..4.
pub fn containers_ready(
    pod: &PodSpecView,
    statuses: Option<&PodStatuses>,
    phase: Phase,
    trace: &mut Trace,
) -> Condition {
    let Some(statuses) = statuses.filter(|s| !s.is_empty()) else {
        trace.fire("COND-CR-3", || {
            "ContainersReady is False (UnknownContainerStatuses): there are no container statuses at all".into()
        });
        return Condition::new(false, Some(UNKNOWN_CONTAINER_STATUSES), None, "COND-CR-3");
    };
    let mut unknown: Vec<&str> = Vec::new();
    let mut unready: Vec<&str> = Vec::new();
    let sidecars = pod.init_containers.iter().filter(|c| c.sidecar);
    for (name, list) in sidecars.map(|c| (c.name.as_str(), &statuses.init)).chain(
        pod.containers
            .iter()
            .map(|c| (c.name.as_str(), &statuses.containers)),
    ) {
        match find(list, name) {
            None => unknown.push(name),
            Some(s) if !s.ready => unready.push(name),
            Some(_) => {}
        }
    }
    if phase == Phase::Succeeded && unknown.is_empty() {
        trace.fire("COND-CR-1", || {
            "ContainersReady is False (PodCompleted): the pod succeeded".into()
        });
        return Condition::new(false, Some(POD_COMPLETED), None, "COND-CR-1");
    }
    if phase == Phase::Failed {
        trace.fire("COND-CR-2", || {
            "ContainersReady is False (PodFailed): the pod failed".into()
        });
        return Condition::new(false, Some(POD_FAILED), None, "COND-CR-2");
    }
    let msg = message(&[("unknown", &unknown), ("unready", &unready)]);
    if !msg.is_empty() {
        trace.fire("COND-CR-3", || {
            format!("ContainersReady is False (ContainersNotReady): {msg}")
        });
        return Condition::new(false, Some(CONTAINERS_NOT_READY), Some(msg), "COND-CR-3");
    }
    trace.fire("COND-CR-4", || {
        "ContainersReady is True: every sidecar and regular container is ready".into()
    });
    Condition::new(true, None, None, "COND-CR-4")
}

/// COND-READY-1..3; `gate_status` looks a readiness gate's condition up.
fn ready(
    pod: &PodSpecView,
    containers_ready: &Condition,
    gate_status: impl Fn(&str) -> Option<String>,
    trace: &mut Trace,
) -> Condition {
    if !containers_ready.is_true() {
        trace.fire("COND-READY-1", || {
            format!(
                "Ready copies ContainersReady: {}{}",
                containers_ready.status,
                containers_ready
                    .reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )
        });
        return Condition {
            rule: "COND-READY-1",
            ..containers_ready.clone()
        };
    }
    let problems: Vec<String> = pod
        .readiness_gates
        .iter()
        .filter_map(|gate| match gate_status(gate) {
            None => Some(format!(
                "corresponding condition of pod readiness gate \"{gate}\" does not exist."
            )),
            Some(status) if status != "True" => Some(format!(
                "the status of pod readiness gate \"{gate}\" is not \"True\", but {status}"
            )),
            Some(_) => None,
        })
        .collect();
    if !problems.is_empty() {
        let msg = problems.join(", ");
        trace.fire("COND-READY-2", || {
            format!("Ready is False (ReadinessGatesNotReady): {msg}")
        });
        return Condition::new(
            false,
            Some(READINESS_GATES_NOT_READY),
            Some(msg),
            "COND-READY-2",
        );
    }
    trace.fire("COND-READY-3", || {
        if pod.readiness_gates.is_empty() {
            "Ready is True: containers are ready".into()
        } else {
            "Ready is True: containers are ready and every readiness gate is True".into()
        }
    });
    Condition::new(true, None, None, "COND-READY-3")
}

/// COND-RESIZE-1/2.
fn resize(
    state: Option<&ResizeState>,
    phase: Phase,
    trace: &mut Trace,
) -> (Option<Condition>, Option<Condition>) {
    let Some(state) = state else {
        return (None, None);
    };
    let pending = state.pending.as_ref().map(|p| {
        let reason = &p.reason;
        trace.fire("COND-RESIZE-1", || {
            format!("PodResizePending is True ({reason}): the resize is not admitted yet")
        });
        let message = (!p.message.is_empty()).then(|| p.message.clone());
        Condition::new(true, Some(reason), message, "COND-RESIZE-1")
    });
    let in_progress = match &state.in_progress {
        None => None,
        Some(_) if phase.is_terminal() => {
            trace.fire("COND-RESIZE-2", || {
                "PodResizeInProgress is cleared: the pod is terminal".into()
            });
            None
        }
        Some(ResizeInProgress { error }) => {
            trace.fire("COND-RESIZE-2", || match error {
                Some(e) => format!("PodResizeInProgress is True (Error): actuation failed: {e}"),
                None => "PodResizeInProgress is True: the admitted resize is being actuated".into(),
            });
            let reason = error.as_ref().map(|_| "Error");
            Some(Condition::new(true, reason, error.clone(), "COND-RESIZE-2"))
        }
    };
    (pending, in_progress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContainerSpecView, RestartPolicy};

    fn status(name: &str, state: ApiState, started: bool, ready: bool) -> ApiContainerStatus {
        ApiContainerStatus {
            name: name.into(),
            state,
            last_state: None,
            restart_count: 0,
            container_id: None,
            started,
            ready,
            inferred: false,
            rules: vec![],
        }
    }

    #[test]
    fn cond_init_2_message_lists_incomplete_in_go_slice_form() {
        let mut pod = PodSpecView::new(RestartPolicy::Always, &["app"]);
        pod.init_containers = vec![ContainerSpecView::new("a"), ContainerSpecView::new("b")];
        let waiting = ApiState::waiting("PodInitializing");
        let statuses = PodStatuses {
            init: vec![
                status("a", waiting.clone(), false, false),
                status("b", waiting.clone(), false, false),
            ],
            containers: vec![status("app", waiting, false, false)],
            ephemeral: vec![],
        };
        let c = initialized(&pod, Some(&statuses), Phase::Pending, &mut Trace::quiet());
        assert_eq!(c.rule, "COND-INIT-2");
        assert_eq!(
            c.message.as_deref(),
            Some("containers with incomplete status: [a b]")
        );
    }

    #[test]
    fn cond_cr_3_unknown_part_comes_first() {
        let mut pod = PodSpecView::new(RestartPolicy::Always, &["a", "b", "c"]);
        pod.init_containers = vec![];
        let statuses = PodStatuses {
            init: vec![],
            containers: vec![status(
                "b",
                ApiState::Running { started_at: None },
                true,
                false,
            )],
            ephemeral: vec![],
        };
        let c = containers_ready(&pod, Some(&statuses), Phase::Running, &mut Trace::quiet());
        assert_eq!(
            c.message.as_deref(),
            Some("containers with unknown status: [a c], containers with unready status: [b]")
        );
    }

    #[test]
    fn cond_init_0_without_any_status() {
        let mut pod = PodSpecView::new(RestartPolicy::Always, &["app"]);
        pod.init_containers = vec![ContainerSpecView::new("i")];
        let c = initialized(&pod, None, Phase::Pending, &mut Trace::quiet());
        assert_eq!(
            (c.status, c.reason.as_deref()),
            ("False", Some(UNKNOWN_CONTAINER_STATUSES))
        );
    }
}
