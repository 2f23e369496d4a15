//! kubelet's `ShouldContainerBeRestarted` (spec 2.3, RST-0..5): should a container that is not
//! running be started (again)? Used by computePodActions (CTR-1) and by the status (API-5).

use crate::model::{ContainerRecord, PodSpecView, RestartPolicy, RuntimeState};
use crate::rules::{RuleId, Trace};

/// The answer and the rule that gave it (`None` rule = the newest record is running).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartDecision {
    pub restart: bool,
    pub rule: Option<RuleId>,
}

/// RST-0..5 for a container whose newest record is `newest`, checked in the spec's order.
pub fn should_restart(pod: &PodSpecView, newest: Option<&ContainerRecord>) -> RestartDecision {
    let decided = |restart, rule| RestartDecision {
        restart,
        rule: Some(rule),
    };
    if pod.deletion_requested {
        return decided(false, "RST-0");
    }
    let Some(record) = newest else {
        return decided(true, "RST-1");
    };
    match record.state {
        RuntimeState::Running => RestartDecision {
            restart: false,
            rule: None,
        },
        RuntimeState::Unknown | RuntimeState::Created => decided(true, "RST-2"),
        RuntimeState::Exited => match pod.restart_policy {
            RestartPolicy::Never => decided(false, "RST-3"),
            RestartPolicy::OnFailure if record.exit_code == 0 => decided(false, "RST-4"),
            _ => decided(true, "RST-5"),
        },
    }
}

/// [`should_restart`] with narration of the rule that decided.
pub fn should_restart_traced(
    pod: &PodSpecView,
    name: &str,
    newest: Option<&ContainerRecord>,
    trace: &mut Trace,
) -> bool {
    let decision = should_restart(pod, newest);
    if let Some(rule) = decision.rule {
        trace.fire(rule, || match rule {
            "RST-0" => format!("{name} is not restarted: the pod has a deletion timestamp"),
            "RST-1" => format!("{name} has no record, so it is started"),
            "RST-2" => format!(
                "{name}'s newest record is {}, so it is started whatever the restart policy",
                newest.map_or("?", |r| r.state.as_str())
            ),
            "RST-3" => format!("{name} exited and restartPolicy is Never: not restarted"),
            "RST-4" => format!("{name} exited 0 and restartPolicy is OnFailure: not restarted"),
            _ => format!(
                "{name} exited with code {} under restartPolicy {:?}: restarted",
                newest.map_or(0, |r| r.exit_code),
                pod.restart_policy
            ),
        });
    }
    decision.restart
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: RuntimeState, exit_code: i32) -> ContainerRecord {
        ContainerRecord {
            exit_code,
            ..crate::testkit::record("app", state, 1)
        }
    }

    fn decide(
        policy: RestartPolicy,
        deleting: bool,
        r: Option<ContainerRecord>,
    ) -> RestartDecision {
        let mut pod = PodSpecView::new(policy, &["app"]);
        pod.deletion_requested = deleting;
        should_restart(&pod, r.as_ref())
    }

    #[test]
    fn rst_0_deletion_wins_over_everything() {
        assert_eq!(
            decide(RestartPolicy::Always, true, None).rule,
            Some("RST-0")
        );
    }

    #[test]
    fn rst_1_no_record_starts() {
        assert!(decide(RestartPolicy::Never, false, None).restart);
    }

    #[test]
    fn rst_running_is_not_restarted_without_rule() {
        let d = decide(
            RestartPolicy::Always,
            false,
            Some(record(RuntimeState::Running, 0)),
        );
        assert_eq!(
            d,
            RestartDecision {
                restart: false,
                rule: None
            }
        );
    }

    #[test]
    fn rst_2_unknown_and_created_restart_under_never() {
        for state in [RuntimeState::Unknown, RuntimeState::Created] {
            let d = decide(RestartPolicy::Never, false, Some(record(state, 0)));
            assert_eq!((d.restart, d.rule), (true, Some("RST-2")));
        }
    }

    #[test]
    fn rst_3_4_5_exited_by_policy() {
        let exited = |code| Some(record(RuntimeState::Exited, code));
        assert_eq!(
            decide(RestartPolicy::Never, false, exited(1)).rule,
            Some("RST-3")
        );
        assert_eq!(
            decide(RestartPolicy::OnFailure, false, exited(0)).rule,
            Some("RST-4")
        );
        assert_eq!(
            decide(RestartPolicy::OnFailure, false, exited(2)).rule,
            Some("RST-5")
        );
        assert!(decide(RestartPolicy::Always, false, exited(0)).restart);
    }
}
