//! Kill details (spec 2.7): the grace period a container gets when it is stopped, and the
//! `Killing` event message.

use crate::actions::KillReason;

/// kubelet never gives a container less than this to shut down.
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;
/// API default of `terminationGracePeriodSeconds`.
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;

/// What decides a kill's grace period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraceInputs {
    /// `metadata.deletionGracePeriodSeconds` when the pod is being deleted.
    pub deletion_grace_period: Option<i64>,
    /// `spec.terminationGracePeriodSeconds` (`None` = the API default, 30).
    pub pod_grace_period: Option<i64>,
    /// The probe-level `terminationGracePeriodSeconds` of the probe that caused the kill.
    pub probe_grace_period: Option<i64>,
    /// Why the container is killed (`None` = a plain stop).
    pub reason: Option<KillReason>,
    /// An explicit override (eviction, `--grace-period`).
    pub override_grace_period: Option<i64>,
}

/// The grace period before SIGKILL, before the preStop hook runs.
pub fn grace_period(inputs: &GraceInputs) -> i64 {
    if let Some(over) = inputs.override_grace_period {
        return over;
    }
    if let Some(deletion) = inputs.deletion_grace_period {
        return deletion;
    }
    let probe_kill = matches!(
        inputs.reason,
        Some(KillReason::LivenessProbe | KillReason::StartupProbe)
    );
    match inputs.probe_grace_period {
        Some(probe) if probe_kill => probe,
        _ => inputs
            .pod_grace_period
            .unwrap_or(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS),
    }
}

/// What is left for SIGTERM → SIGKILL after a preStop hook took `pre_stop_elapsed` seconds
/// (the hook runs only when the budget is positive); never below 2 s.
pub fn grace_after_pre_stop(grace: i64, pre_stop_elapsed: Option<i64>) -> i64 {
    let left = match pre_stop_elapsed {
        Some(elapsed) if grace > 0 => grace - elapsed,
        _ => grace,
    };
    left.max(MINIMUM_GRACE_PERIOD_SECONDS)
}

/// The `Killing` event message: the kill's own message, or `Stopping container <n>`.
pub fn killing_message(container: &str, message: Option<&str>) -> String {
    match message {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => format!("Stopping container {container}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletion_grace_wins_then_probe_then_pod() {
        let mut g = GraceInputs {
            deletion_grace_period: Some(5),
            pod_grace_period: Some(60),
            probe_grace_period: Some(7),
            reason: Some(KillReason::LivenessProbe),
            override_grace_period: None,
        };
        assert_eq!(grace_period(&g), 5);
        g.deletion_grace_period = None;
        assert_eq!(grace_period(&g), 7);
        g.reason = Some(KillReason::DefinitionChanged);
        assert_eq!(grace_period(&g), 60);
        g.pod_grace_period = None;
        assert_eq!(grace_period(&g), 30);
        g.override_grace_period = Some(0);
        assert_eq!(grace_period(&g), 0);
    }

    #[test]
    fn pre_stop_consumes_budget_but_floor_is_two_seconds() {
        assert_eq!(grace_after_pre_stop(30, Some(10)), 20);
        assert_eq!(grace_after_pre_stop(30, Some(40)), 2);
        assert_eq!(grace_after_pre_stop(0, Some(5)), 2);
        assert_eq!(grace_after_pre_stop(30, None), 30);
    }

    #[test]
    fn killing_message_defaults_to_stopping() {
        assert_eq!(killing_message("app", None), "Stopping container app");
        assert_eq!(
            killing_message("app", Some("Container app failed liveness probe")),
            "Container app failed liveness probe"
        );
    }
}
