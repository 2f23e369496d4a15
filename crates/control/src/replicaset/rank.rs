//! Which pods a ReplicaSet deletes first when it has too many: upstream's
//! `ActivePodsWithRanks.Less` (pkg/controller/controller_utils.go) with the default feature gates
//! (`PodDeletionCost` and `LogarithmicScaleDown` on). Earlier in the order = deleted first:
//!
//! 1. not on a node before on a node;
//! 2. phase `Pending` before `Unknown` before `Running`;
//! 3. not ready before ready;
//! 4. lower `controller.kubernetes.io/pod-deletion-cost` annotation first;
//! 5. more pods of the same ReplicaSet on its node first (the rank: spreads what is left);
//! 6. both ready: ready for a shorter time first;
//! 7. more container restarts first;
//! 8. newer first (a missing creation time first).
//!
//! In 6 and 8 the times are compared on a log2 scale of their age (so pods made seconds apart
//! an hour ago count as equally old), and equal buckets are ordered by UID, which is random:
//! "newest first" holds between pods of clearly different ages, as in a cluster.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::status::{is_pod_active, is_pod_ready, ready_since};

pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The first `count` of `pods` in deletion order. `related` are the active pods of the same
/// owner (they give each node its rank).
pub fn pods_to_delete(
    pods: &[Arc<Pod>],
    related: &[Arc<Pod>],
    count: usize,
    now: Timestamp,
) -> Vec<Arc<Pod>> {
    let mut ranked: Vec<Arc<Pod>> = pods.to_vec();
    if count < pods.len() {
        let mut on_node: HashMap<&str, usize> = HashMap::new();
        for pod in related.iter().filter(|p| is_pod_active(p)) {
            *on_node.entry(node_of(pod)).or_default() += 1;
        }
        let rank = |pod: &Pod| on_node.get(node_of(pod)).copied().unwrap_or(0);
        ranked.sort_by(|a, b| deletion_order(a, rank(a), b, rank(b), now));
    }
    ranked.truncate(count);
    ranked
}

/// `Less` as an ordering: `Less` means `a` is deleted before `b`.
pub fn deletion_order(a: &Pod, rank_a: usize, b: &Pod, rank_b: usize, now: Timestamp) -> Ordering {
    let first = |a_first: bool| {
        if a_first {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    };
    let (node_a, node_b) = (node_of(a), node_of(b));
    if node_a != node_b && (node_a.is_empty() || node_b.is_empty()) {
        return first(node_a.is_empty());
    }
    let (phase_a, phase_b) = (phase_ordinal(a), phase_ordinal(b));
    if phase_a != phase_b {
        return first(phase_a < phase_b);
    }
    let (ready_a, ready_b) = (is_pod_ready(a), is_pod_ready(b));
    if ready_a != ready_b {
        return first(!ready_a);
    }
    let (cost_a, cost_b) = (deletion_cost(a), deletion_cost(b));
    if cost_a != cost_b {
        return first(cost_a < cost_b);
    }
    if rank_a != rank_b {
        return first(rank_a > rank_b);
    }
    if ready_a && ready_b {
        let (since_a, since_b) = (ready_since(a), ready_since(b));
        if since_a != since_b {
            return newer_first(a, since_a, b, since_b, now);
        }
    }
    let (restarts_a, restarts_b) = (max_restarts(a), max_restarts(b));
    if restarts_a != restarts_b {
        return first(restarts_a > restarts_b);
    }
    let (created_a, created_b) = (created(a), created(b));
    if created_a != created_b {
        return newer_first(a, created_a, b, created_b, now);
    }
    Ordering::Equal
}

/// Rules 6 and 8: a missing time first, then the younger on a log2 scale, UID breaking ties.
fn newer_first(
    a: &Pod,
    time_a: Option<Timestamp>,
    b: &Pod,
    time_b: Option<Timestamp>,
    now: Timestamp,
) -> Ordering {
    let (Some(time_a), Some(time_b)) = (time_a, time_b) else {
        return if time_a.is_none() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    };
    match log2_age(time_a, now).cmp(&log2_age(time_b, now)) {
        Ordering::Equal => a.metadata.uid.cmp(&b.metadata.uid),
        younger_first => younger_first,
    }
}

/// `int64(math.Log2(float64(age in ns)))`, or -1 for a time not in the past.
fn log2_age(time: Timestamp, now: Timestamp) -> i64 {
    let nanos = now.as_nanosecond() - time.as_nanosecond();
    if nanos > 0 {
        (nanos as f64).log2() as i64
    } else {
        -1
    }
}

fn node_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// Pending < Unknown < Running; any other phase counts as Pending, as in the upstream map.
fn phase_ordinal(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    }
}

/// The annotation as an int32; missing or malformed counts as 0.
fn deletion_cost(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

fn created(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::SignedDuration;

    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_750_000_000).unwrap()
    }

    fn pod(name: &str, age_hours: i64) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.uid = Some(format!("uid-{name}"));
        pod.metadata.creation_timestamp = Some(Time(now() - SignedDuration::from_hours(age_hours)));
        pod.spec = Some(PodSpec {
            node_name: Some("node-1".into()),
            ..Default::default()
        });
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        pod
    }

    fn ready(mut pod: Pod, for_hours: i64) -> Pod {
        pod.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some(Time(now() - SignedDuration::from_hours(for_hours))),
            ..Default::default()
        }]);
        pod
    }

    fn order(pods: Vec<Pod>) -> Vec<String> {
        let pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
        pods_to_delete(&pods, &pods, pods.len() - 1, now())
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn newest_goes_first_between_clearly_different_ages() {
        // 1 h, 10 h and 100 h old fall in different log2 buckets of their age.
        let names = order(vec![pod("old", 100), pod("new", 1), pod("mid", 10)]);
        assert_eq!(names, ["new", "mid"]);
    }

    #[test]
    fn unscheduled_pending_and_unready_pods_go_before_running_ready_ones() {
        let mut unscheduled = ready(pod("unscheduled", 100), 99);
        unscheduled.spec.as_mut().unwrap().node_name = None;
        let mut pending = ready(pod("pending", 100), 99);
        pending.status.as_mut().unwrap().phase = Some("Pending".into());
        let unready = pod("unready", 100);
        let fine = ready(pod("fine", 1), 1);
        let names = order(vec![fine, unready, pending, unscheduled]);
        assert_eq!(names, ["unscheduled", "pending", "unready"]);
    }

    #[test]
    fn cost_rank_readiness_time_and_restarts_break_the_ties_in_that_order() {
        let mut cheap = ready(pod("cheap", 1), 1);
        cheap
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(POD_DELETION_COST.into(), "-5".into());
        let crowded = ready(pod("crowded", 1), 1);
        let mut alone = ready(pod("alone", 1), 1);
        alone.spec.as_mut().unwrap().node_name = Some("node-2".into());
        let mut restarted = ready(pod("restarted", 1), 1);
        restarted.spec.as_mut().unwrap().node_name = Some("node-2".into());
        restarted.status.as_mut().unwrap().container_statuses =
            Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
                restart_count: 4,
                ..Default::default()
            }]);
        // node-1 has cheap + crowded (+ one more below), node-2 has alone + restarted.
        let extra = ready(pod("extra", 1), 50);
        let names = order(vec![alone, restarted, crowded, extra, cheap]);
        assert_eq!(names, ["cheap", "crowded", "extra", "restarted"]);
    }
}
