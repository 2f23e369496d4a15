//! A ReplicaSet's status from the pods it owns (`calculateStatus` in replica_set_utils.go), and
//! the pod predicates the controller uses (`IsPodActive`, `IsPodReady`, `IsPodAvailable`).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::selector::Selector;

/// The condition type set while creating or deleting pods fails.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// Why the last create or delete failed, for the `ReplicaFailure` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `FailedCreate` or `FailedDelete`.
    pub reason: String,
    pub message: String,
}

/// Not finished and not being deleted.
pub fn is_pod_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

/// The `Ready` condition is `True`.
pub fn is_pod_ready(pod: &Pod) -> bool {
    ready_condition(pod).is_some_and(|c| c.status == "True")
}

/// When the pod became ready (the `Ready=True` condition's last transition).
pub fn ready_since(pod: &Pod) -> Option<Timestamp> {
    ready_condition(pod)
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// Ready for at least `min_ready_seconds` (any ready pod when it is 0).
pub fn is_pod_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    if !is_pod_ready(pod) {
        return false;
    }
    if min_ready_seconds == 0 {
        return true;
    }
    ready_since(pod)
        .is_some_and(|since| since + SignedDuration::from_secs(i64::from(min_ready_seconds)) < now)
}

fn ready_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// The status for `owned` (the active pods this ReplicaSet has claimed). `failure` is the last
/// create/delete error, or `None` when managing the pods worked (which clears the condition).
pub fn calculate_status(
    rs: &ReplicaSet,
    owned: &[Arc<Pod>],
    failure: Option<&Failure>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let spec = rs.spec.as_ref();
    let template_labels = spec
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let template_selector = Selector::from_labels(&template_labels);
    let min_ready_seconds = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0);
    // The API omits zero counts (`omitempty`), so a zero is None here.
    let count = |test: &dyn Fn(&Pod) -> bool| {
        Some(owned.iter().filter(|p| test(p)).count() as i32).filter(|n| *n > 0)
    };

    let previous = rs.status.clone().unwrap_or_default();
    let mut conditions: Vec<ReplicaSetCondition> = previous
        .conditions
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ != REPLICA_FAILURE)
        .collect();
    if let Some(failure) = failure {
        conditions.push(ReplicaSetCondition {
            type_: REPLICA_FAILURE.into(),
            status: "True".into(),
            reason: Some(failure.reason.clone()),
            message: Some(failure.message.clone()),
            last_transition_time: Some(Time(now)),
        });
    }
    ReplicaSetStatus {
        replicas: owned.len() as i32,
        fully_labeled_replicas: count(&|p| template_selector.matches(p.metadata.labels.as_ref())),
        ready_replicas: count(&|p| is_pod_ready(p)),
        available_replicas: count(&|p| is_pod_available(p, min_ready_seconds, now)),
        observed_generation: rs.metadata.generation.filter(|g| *g > 0),
        conditions: (!conditions.is_empty()).then_some(conditions),
        terminating_replicas: previous.terminating_replicas,
    }
}
