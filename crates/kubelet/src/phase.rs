//! Pod phase (kubelet's `getPhase` and the post-processing of `generateAPIPodStatus`, spec 4,
//! PH-1..9): counters over the API container statuses, then a first-match table.

use serde::{Deserialize, Serialize};

use crate::model::{ApiState, PassContext, PodSpecView, RestartPolicy, RuntimeState, RuntimeView};
use crate::rules::{RuleId, Trace};
use crate::status::{ApiContainerStatus, PodStatuses};

/// `status.phase`. There is no `Unknown`: the kubelet never produces it (PH-9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
}

/// The phase of a pass with the rules that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseDecision {
    pub phase: Phase,
    /// `status.reason` / `status.message` when an eviction hook set them (PH-8).
    pub reason: Option<String>,
    pub message: Option<String>,
    pub rules: Vec<RuleId>,
}

/// The counters of getPhase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseCounters {
    pub pending_regular_init: u32,
    pub failed_regular_init: u32,
    pub pending_sidecar: u32,
    pub unknown: u32,
    pub running: u32,
    pub waiting: u32,
    pub stopped: u32,
    pub succeeded: u32,
}

/// Counts init and regular statuses (ephemeral ones are not looked at: EPH-3).
pub fn count(pod: &PodSpecView, statuses: &PodStatuses) -> PhaseCounters {
    let mut n = PhaseCounters::default();
    let find_init = |name: &str| statuses.init.iter().find(|s| s.name == name);
    for init in pod.init_containers.iter().filter(|c| !c.sidecar) {
        match find_init(&init.name) {
            None => n.pending_regular_init += 1,
            Some(s) => match &s.state {
                ApiState::Running { .. } => n.pending_regular_init += 1,
                ApiState::Terminated(t) => n.failed_regular_init += u32::from(t.exit_code != 0),
                ApiState::Waiting { .. } => match s.waiting_after_termination() {
                    Some(t) => n.failed_regular_init += u32::from(t.exit_code != 0),
                    None => n.pending_regular_init += 1,
                },
            },
        }
    }
    for sidecar in pod.init_containers.iter().filter(|c| c.sidecar) {
        match find_init(&sidecar.name) {
            None => n.unknown += 1,
            Some(s) => match &s.state {
                ApiState::Running { .. } => {
                    n.running += 1;
                    n.pending_sidecar += u32::from(!s.started);
                }
                ApiState::Terminated(_) => {}
                ApiState::Waiting { .. } => {
                    if s.waiting_after_termination().is_none() {
                        n.pending_sidecar += 1;
                        n.waiting += 1;
                    }
                }
            },
        }
    }
    for container in &pod.containers {
        match statuses
            .containers
            .iter()
            .find(|s| s.name == container.name)
        {
            None => n.unknown += 1,
            Some(s) => count_regular(s, &mut n),
        }
    }
    n
}

fn count_regular(s: &ApiContainerStatus, n: &mut PhaseCounters) {
    match &s.state {
        ApiState::Running { .. } => n.running += 1,
        ApiState::Terminated(t) => {
            n.stopped += 1;
            n.succeeded += u32::from(t.exit_code == 0);
        }
        ApiState::Waiting { .. } => {
            if s.waiting_after_termination().is_some() {
                n.stopped += 1;
            } else {
                n.waiting += 1;
            }
        }
    }
}

/// getPhase's decision table (PH-1..6).
pub fn get_phase(
    policy: RestartPolicy,
    n: &PhaseCounters,
    pod_is_terminal: bool,
    pod_has_initialized: bool,
) -> (Phase, RuleId) {
    if n.failed_regular_init > 0 && policy == RestartPolicy::Never {
        return (Phase::Failed, "PH-1");
    }
    if n.pending_regular_init > 0 || (n.pending_sidecar > 0 && !pod_has_initialized) {
        return (Phase::Pending, "PH-2");
    }
    if n.waiting > 0 {
        return (Phase::Pending, "PH-3");
    }
    if n.running > 0 && n.unknown == 0 {
        return (Phase::Running, "PH-4");
    }
    if n.running == 0 && n.stopped > 0 && n.unknown == 0 {
        let all_succeeded = n.stopped == n.succeeded;
        if pod_is_terminal {
            let phase = if all_succeeded {
                Phase::Succeeded
            } else {
                Phase::Failed
            };
            return (phase, "PH-5a");
        }
        return match policy {
            RestartPolicy::Always => (Phase::Running, "PH-5b"),
            _ if all_succeeded => (Phase::Succeeded, "PH-5d"),
            RestartPolicy::Never => (Phase::Failed, "PH-5c"),
            RestartPolicy::OnFailure => (Phase::Running, "PH-5e"),
        };
    }
    (Phase::Pending, "PH-6")
}

/// kubelet's `HasAnyActiveRegularContainerStarted`: a regular container has a record in the
/// active sandbox (the newest one, if READY).
pub fn pod_has_initialized(pod: &PodSpecView, rt: &RuntimeView) -> bool {
    let Some(active) = rt.active_sandbox() else {
        return false;
    };
    rt.containers
        .iter()
        .any(|r| r.sandbox_id == active.id && pod.containers.iter().any(|c| c.name == r.name))
}

/// The phase of the pass: getPhase, then sticky terminal phases (PH-7) and eviction (PH-8).
pub fn compute(
    pod: &PodSpecView,
    rt: &RuntimeView,
    statuses: &PodStatuses,
    ctx: &PassContext,
    trace: &mut Trace,
) -> PhaseDecision {
    let n = count(pod, statuses);
    let initialized = pod_has_initialized(pod, rt);
    let (phase, rule) = get_phase(pod.restart_policy, &n, ctx.pod_is_terminal, initialized);
    trace.fire(rule, || {
        explain_rule(rule, phase, &n, pod.restart_policy, initialized)
    });
    let mut decision = PhaseDecision {
        phase,
        reason: None,
        message: None,
        rules: vec![rule],
    };

    let previous = ctx.previous.as_ref().and_then(|p| p.phase);
    if let Some(old) = previous.filter(|p| p.is_terminal()) {
        if old != decision.phase {
            decision.phase = old;
            decision.rules.push("PH-7");
            trace.fire("PH-7", || {
                format!(
                    "the pod already reported {old}; terminal phases are sticky, so it stays {old}",
                    old = old.as_str()
                )
            });
        }
    } else if let Some(eviction) = &ctx.eviction {
        decision.phase = Phase::Failed;
        decision.reason = Some(eviction.reason.clone());
        decision.message = Some(eviction.message.clone());
        decision.rules.push("PH-8");
        trace.fire("PH-8", || {
            format!(
                "an eviction hook asked for the pod to be evicted ({}): phase Failed",
                eviction.reason
            )
        });
    }

    let unknown_record = pod
        .init_containers
        .iter()
        .chain(&pod.containers)
        .filter_map(|c| rt.newest(&c.name))
        .find(|r| r.state == RuntimeState::Unknown);
    if let Some(record) = unknown_record {
        decision.rules.push("PH-9");
        let phase = decision.phase;
        trace.fire("PH-9", || {
            format!(
                "{} is in state unknown, yet the phase is {}: the kubelet never reports phase Unknown",
                record.name,
                phase.as_str()
            )
        });
    }
    if !pod.ephemeral_containers.is_empty() {
        trace.fire("EPH-3", || {
            "ephemeral containers are ignored by the phase and by every condition".into()
        });
    }
    decision
}

fn explain_rule(
    rule: RuleId,
    phase: Phase,
    n: &PhaseCounters,
    policy: RestartPolicy,
    initialized: bool,
) -> String {
    let p = phase.as_str();
    match rule {
        "PH-1" => format!("{} regular init container(s) failed and restartPolicy is Never: {p}", n.failed_regular_init),
        "PH-2" if n.pending_regular_init > 0 => {
            format!("{} regular init container(s) are still pending: {p}", n.pending_regular_init)
        }
        "PH-2" => format!(
            "{} sidecar(s) have not started and no regular container has a record in the active sandbox \
             (initialized = {initialized}): {p}",
            n.pending_sidecar
        ),
        "PH-3" => format!("{} container(s) are waiting without a previous termination: {p}", n.waiting),
        "PH-4" => format!("{} container(s) running and none unknown: {p}", n.running),
        "PH-5a" => format!(
            "nothing runs, {} stopped ({} succeeded), on the termination path exit codes decide: {p}",
            n.stopped, n.succeeded
        ),
        "PH-5b" => "nothing runs and everything stopped, but restartPolicy Always restarts them: Running".into(),
        "PH-5d" => format!("every stopped container ({}) succeeded under {policy:?}: {p}", n.stopped),
        "PH-5c" => format!(
            "nothing runs, {} of {} stopped containers failed and restartPolicy is Never: {p}",
            n.stopped - n.succeeded,
            n.stopped
        ),
        "PH-5e" => "nothing runs, a container failed and OnFailure restarts it: Running".into(),
        _ => format!(
            "no other row matched (running {}, unknown {}, stopped {}): {p}",
            n.running, n.unknown, n.stopped
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(f: impl FnOnce(&mut PhaseCounters)) -> PhaseCounters {
        let mut n = PhaseCounters::default();
        f(&mut n);
        n
    }

    #[test]
    fn ph_1_failed_init_under_never() {
        let n = counters(|n| n.failed_regular_init = 1);
        assert_eq!(
            get_phase(RestartPolicy::Never, &n, false, false),
            (Phase::Failed, "PH-1")
        );
        assert_eq!(
            get_phase(RestartPolicy::OnFailure, &n, false, false).1,
            "PH-6"
        );
    }

    #[test]
    fn ph_2_pending_sidecar_only_before_initialization() {
        let n = counters(|n| {
            n.pending_sidecar = 1;
            n.running = 2;
        });
        assert_eq!(
            get_phase(RestartPolicy::Always, &n, false, false),
            (Phase::Pending, "PH-2")
        );
        assert_eq!(
            get_phase(RestartPolicy::Always, &n, false, true),
            (Phase::Running, "PH-4")
        );
    }

    #[test]
    fn ph_5_rows_in_order() {
        let all_ok = counters(|n| {
            n.stopped = 2;
            n.succeeded = 2;
        });
        let one_failed = counters(|n| {
            n.stopped = 2;
            n.succeeded = 1;
        });
        assert_eq!(
            get_phase(RestartPolicy::Always, &all_ok, true, false),
            (Phase::Succeeded, "PH-5a")
        );
        assert_eq!(
            get_phase(RestartPolicy::Always, &one_failed, true, false),
            (Phase::Failed, "PH-5a")
        );
        assert_eq!(
            get_phase(RestartPolicy::Always, &all_ok, false, false),
            (Phase::Running, "PH-5b")
        );
        assert_eq!(
            get_phase(RestartPolicy::OnFailure, &all_ok, false, false),
            (Phase::Succeeded, "PH-5d")
        );
        assert_eq!(
            get_phase(RestartPolicy::Never, &one_failed, false, false),
            (Phase::Failed, "PH-5c")
        );
        assert_eq!(
            get_phase(RestartPolicy::OnFailure, &one_failed, false, false),
            (Phase::Running, "PH-5e")
        );
    }

    #[test]
    fn ph_6_unknown_blocks_running() {
        let n = counters(|n| {
            n.running = 1;
            n.unknown = 1;
        });
        assert_eq!(
            get_phase(RestartPolicy::Always, &n, false, false),
            (Phase::Pending, "PH-6")
        );
    }
}
