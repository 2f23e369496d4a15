//! The pod that `exec`, `attach` and `port-forward` work on, from kubectl's argument forms:
//! `NAME` or `pod/NAME` is that pod; `replicaset/NAME`, `rs/NAME`, `deployment/NAME` or
//! `deploy/NAME` is a pod its selector chooses, as kubectl's
//! `polymorphichelpers.AttachablePodForObject` picks it: the pods of the selector sorted by
//! `sort.Reverse(podutils.ActivePods)` (the most active first: on a node, running, ready, not
//! being deleted, ready the longest, the fewest restarts, the oldest), the first taken; with
//! none yet, it waits for one up to `--pod-running-timeout`, polling the store.

use std::cmp::Ordering;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use podlab_control::replicaset::status::{is_pod_ready, ready_since};
use podlab_control::Kind;

use crate::context::Ctx;

/// kubectl's default `--pod-running-timeout`.
pub const DEFAULT_TIMEOUT: &str = "1m0s";

/// How often the store is read again while no pod matches.
const POLL: Duration = Duration::from_millis(100);

/// The pod `arg` (`NAME` or `TYPE/NAME`) names in `namespace`.
pub fn pod(ctx: &Ctx, arg: &str, namespace: &str, timeout: Duration) -> Result<Pod> {
    let Some((word, name)) = arg.split_once('/') else {
        return get_pod(ctx, namespace, arg);
    };
    let kind = crate::objects::kind(word)?;
    let selector: LabelSelector = match kind {
        Kind::Pod => return get_pod(ctx, namespace, name),
        Kind::ReplicaSet => {
            let rs: ReplicaSet = ctx.store.get(namespace, name).map_err(|e| apps(e, name))?;
            rs.spec.unwrap_or_default().selector
        }
        Kind::Deployment => {
            let d: Deployment = ctx.store.get(namespace, name).map_err(|e| apps(e, name))?;
            d.spec.unwrap_or_default().selector
        }
        other => {
            // kubectl's words, with the Go type it names (`*v1.ConfigMap`).
            crate::objects::fetch(ctx, other, namespace, name)?;
            let go_type = format!("*v1.{}", other.name());
            bail!("cannot attach to {go_type}: selector for {go_type} not implemented");
        }
    };
    let selector = podlab_control::Selector::from_label_selector(Some(&selector), "spec.selector")
        .map_err(|errors| {
            let errors: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            anyhow!(
                "cannot attach to *v1.{}: invalid label selector: {}",
                kind.name(),
                errors.join(", ")
            )
        })?;
    let deadline = Instant::now() + timeout;
    loop {
        let (mut pods, _) = ctx.store.list::<Pod>(Some(namespace))?;
        pods.retain(|p| selector.matches(p.metadata.labels.as_ref()));
        if !pods.is_empty() {
            pods.sort_by(|a, b| active_order(b, a));
            return Ok(pods.swap_remove(0));
        }
        if Instant::now() >= deadline {
            bail!("timed out waiting for the condition");
        }
        std::thread::sleep(POLL);
    }
}

fn get_pod(ctx: &Ctx, namespace: &str, name: &str) -> Result<Pod> {
    ctx.store.get(namespace, name).map_err(not_found)
}

/// The API server's 404 as kubectl prints it.
fn not_found(e: podlab_control::Error) -> anyhow::Error {
    match e.is_not_found() {
        true => anyhow!("Error from server (NotFound): {e}"),
        false => e.into(),
    }
}

/// A 404 for a kind of the `apps` group, named as kubectl names it
/// (`deployments.apps "web" not found`).
fn apps(e: podlab_control::Error, name: &str) -> anyhow::Error {
    match e {
        podlab_control::Error::NotFound { resource, .. } => {
            anyhow!("Error from server (NotFound): {resource}.apps {name:?} not found")
        }
        other => other.into(),
    }
}

/// kubectl's `podutils.ActivePods.Less` as an ordering (`Less`: `a` is the less active, the
/// one a controller would delete first). Upstream compares `maxContainerRestarts` of regular
/// containers, then of restartable init containers (sidecars), as here.
pub fn active_order(a: &Pod, b: &Pod) -> Ordering {
    let node = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let (node_a, node_b) = (node(a), node(b));
    // 1. Unassigned < assigned.
    if node_a != node_b && (node_a.is_empty() || node_b.is_empty()) {
        return less_if(node_a.is_empty());
    }
    // 2. Pending < Unknown < Running (any other phase counts as Pending, as a Go map's zero).
    let phase = |p: &Pod| match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    };
    if phase(a) != phase(b) {
        return phase(a).cmp(&phase(b));
    }
    // 3. Not ready < ready.
    let (ready_a, ready_b) = (is_pod_ready(a), is_pod_ready(b));
    if ready_a != ready_b {
        return less_if(!ready_a);
    }
    // 4. Deleting < not deleting; 5. the older deletion timestamp first.
    let deleting = |p: &Pod| p.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    match (deleting(a), deleting(b)) {
        (Some(_), None) => return Ordering::Less,
        (None, Some(_)) => return Ordering::Greater,
        (Some(x), Some(y)) if x != y => return x.cmp(&y),
        _ => {}
    }
    // 6. Both ready: ready for less time < more time (a zero time counts as the latest).
    if ready_a && ready_b {
        let (since_a, since_b) = (ready_since(a), ready_since(b));
        if since_a != since_b {
            return less_if(after_or_zero(since_a, since_b));
        }
    }
    // 7. More restarts < fewer (regular containers, then sidecars).
    let (regular_a, sidecar_a) = max_restarts(a);
    let (regular_b, sidecar_b) = max_restarts(b);
    if regular_a != regular_b {
        return less_if(regular_a > regular_b);
    }
    if sidecar_a != sidecar_b {
        return less_if(sidecar_a > sidecar_b);
    }
    // 8. Empty creation time < newer < older.
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    if created(a) != created(b) {
        return less_if(after_or_zero(created(a), created(b)));
    }
    Ordering::Equal
}

fn less_if(a_first: bool) -> Ordering {
    match a_first {
        true => Ordering::Less,
        false => Ordering::Greater,
    }
}

/// `afterOrZero`: `t1` after `t2`, a zero (missing) time counting as after any other.
fn after_or_zero(t1: Option<Timestamp>, t2: Option<Timestamp>) -> bool {
    match (t1, t2) {
        (Some(t1), Some(t2)) => t1 > t2,
        (t1, _) => t1.is_none(),
    }
}

/// The highest restart count of the regular containers, and of the restartable init
/// containers (sidecars).
fn max_restarts(pod: &Pod) -> (i32, i32) {
    let status = pod.status.clone().unwrap_or_default();
    let regular = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0);
    let sidecars: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.clone())
        .collect();
    let sidecar = status
        .init_container_statuses
        .iter()
        .flatten()
        .filter(|c| sidecars.contains(&c.name))
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0);
    (regular, sidecar)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(1_700_000_000 + seconds).unwrap())
    }

    fn pod(name: &str, phase: &str, ready_at: Option<i64>, restarts: i32, created: i64) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(at(created)),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: ready_at.map(|t| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(at(t)),
                        ..Default::default()
                    }]
                }),
                container_statuses: Some(vec![ContainerStatus {
                    name: "c".into(),
                    restart_count: restarts,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    /// The first pod as kubectl's AttachablePodForObject takes it.
    fn first(mut pods: Vec<Pod>) -> String {
        pods.sort_by(|a, b| active_order(b, a));
        pods[0].metadata.name.clone().unwrap()
    }

    #[test]
    fn the_most_active_pod_is_the_one_attached_to() {
        // Running and ready beats pending and not ready.
        let pending = pod("pending", "Pending", None, 0, 0);
        let running = pod("running", "Running", None, 0, 5);
        let ready = pod("ready", "Running", Some(10), 0, 9);
        assert_eq!(first(vec![pending.clone(), running.clone()]), "running");
        assert_eq!(first(vec![running, ready.clone(), pending]), "ready");
        // Both ready: ready the longest.
        let longer = pod("longer", "Running", Some(2), 0, 1);
        assert_eq!(first(vec![ready.clone(), longer.clone()]), "longer");
        // Ready as long: fewer restarts; then the oldest.
        let restarted = pod("restarted", "Running", Some(2), 3, 0);
        assert_eq!(first(vec![restarted, longer.clone()]), "longer");
        let older = pod("older", "Running", Some(2), 0, 0);
        assert_eq!(first(vec![longer.clone(), older]), "older");
        // Being deleted loses to not.
        let mut deleting = pod("deleting", "Running", Some(0), 0, 0);
        deleting.metadata.deletion_timestamp = Some(at(20));
        assert_eq!(first(vec![deleting, longer]), "longer");
        // Unassigned loses to assigned.
        let mut unassigned = pod("unassigned", "Running", Some(0), 0, 0);
        unassigned.spec.as_mut().unwrap().node_name = None;
        assert_eq!(first(vec![unassigned, ready]), "ready");
    }
}
