//! A Deployment's status from its ReplicaSets (`calculateStatus` in sync.go) and its two
//! conditions (`syncRolloutStatus` in progress.go): `Available` (at least replicas −
//! maxUnavailable available: `MinimumReplicasAvailable`, else `MinimumReplicasUnavailable`) and
//! `Progressing` (`NewReplicaSetCreated`, `FoundNewReplicaSet`, `ReplicaSetUpdated` while pods
//! move, `NewReplicaSetAvailable` when complete, `ProgressDeadlineExceeded` after
//! `progressDeadlineSeconds` without progress); a paused Deployment's `Progressing` is
//! `Unknown` with `DeploymentPaused`, and `DeploymentResumed` once resumed
//! (`checkPausedConditions`).

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::strategy::{available_total, max_unavailable, replicas};

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub const RS_UPDATED: &str = "ReplicaSetUpdated";
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const PAUSED: &str = "DeploymentPaused";
pub const RESUMED: &str = "DeploymentResumed";

/// `NewDeploymentCondition`: both times now.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

pub fn get_condition<'a>(
    status: &'a DeploymentStatus,
    type_: &str,
) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
}

/// `SetDeploymentCondition`: the same status and reason changes nothing; the same status keeps
/// its transition time; the condition moves to the end.
pub fn set_condition(status: &mut DeploymentStatus, mut new: DeploymentCondition) {
    if let Some(current) = get_condition(status, &new.type_) {
        if current.status == new.status && current.reason == new.reason {
            return;
        }
        if current.status == new.status {
            new.last_transition_time = current.last_transition_time.clone();
        }
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != new.type_);
    conditions.push(new);
}

fn count(
    sets: &[&ReplicaSet],
    field: impl Fn(&k8s_openapi::api::apps::v1::ReplicaSetStatus) -> i32,
) -> i32 {
    sets.iter()
        .filter_map(|rs| rs.status.as_ref())
        .map(field)
        .sum()
}

/// `DeploymentComplete`: every replica updated and available, and the spec observed.
pub fn is_complete(deployment: &Deployment, status: &DeploymentStatus) -> bool {
    let want = replicas(deployment);
    status.updated_replicas.unwrap_or(0) == want
        && status.replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
        && status.observed_generation.unwrap_or(0) >= deployment.metadata.generation.unwrap_or(0)
}

/// `DeploymentProgressing`: more updated, ready or available pods, or fewer old ones.
fn is_progressing(old: &DeploymentStatus, new: &DeploymentStatus) -> bool {
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

/// `DeploymentTimedOut`: no progress recorded for `progressDeadlineSeconds`.
fn is_timed_out(deployment: &Deployment, status: &DeploymentStatus, now: Timestamp) -> bool {
    let Some(deadline) = deployment
        .spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
    else {
        return false;
    };
    let Some(progressing) = get_condition(status, PROGRESSING) else {
        return false;
    };
    if progressing.reason.as_deref() == Some(NEW_RS_AVAILABLE) {
        return false;
    }
    if progressing.reason.as_deref() == Some(TIMED_OUT) {
        return true;
    }
    progressing
        .last_update_time
        .as_ref()
        .is_some_and(|t| t.0 + SignedDuration::from_secs(i64::from(deadline)) < now)
}

/// `checkPausedConditions`: with a progress deadline (and no timeout reported), a paused
/// Deployment's `Progressing` becomes `Unknown`/`DeploymentPaused`, a resumed one's
/// `Unknown`/`DeploymentResumed`.
pub fn set_paused_condition(
    deployment: &Deployment,
    status: &mut DeploymentStatus,
    now: Timestamp,
) {
    let spec = deployment.spec.clone().unwrap_or_default();
    if spec.progress_deadline_seconds.is_none_or(|s| s == i32::MAX) {
        return;
    }
    let reason = get_condition(status, PROGRESSING).and_then(|c| c.reason.clone());
    if reason.as_deref() == Some(TIMED_OUT) {
        return;
    }
    let paused_before = reason.as_deref() == Some(PAUSED);
    let (reason, message) = match spec.paused == Some(true) {
        true if !paused_before => (PAUSED, "Deployment is paused"),
        false if paused_before => (RESUMED, "Deployment is resumed"),
        _ => return,
    };
    let mut unknown = condition(PROGRESSING, true, reason, message.into(), now);
    unknown.status = "Unknown".into();
    set_condition(status, unknown);
}

/// `calculateStatus` of sync.go: the counts of `all` (every ReplicaSet of the Deployment, the
/// new one among them) and the `Available` condition, the other conditions as in `before`.
pub fn calculate_counts(
    deployment: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    before: &DeploymentStatus,
    now: Timestamp,
) -> DeploymentStatus {
    let some = |n: i32| Some(n).filter(|n| *n > 0);
    let total = count(all, |s| s.replicas);
    let available = available_total(all.iter().copied());
    let mut status = DeploymentStatus {
        observed_generation: deployment.metadata.generation,
        replicas: some(total),
        updated_replicas: some(new.map_or(0, |rs| count(&[rs], |s| s.replicas))),
        ready_replicas: some(count(all, |s| s.ready_replicas.unwrap_or(0))),
        available_replicas: some(available),
        unavailable_replicas: some((total - available).max(0)),
        collision_count: before.collision_count,
        conditions: before.conditions.clone(),
        terminating_replicas: None,
    };
    if available >= replicas(deployment) - max_unavailable(deployment) {
        set_condition(
            &mut status,
            condition(
                AVAILABLE,
                true,
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
                now,
            ),
        );
    } else {
        set_condition(
            &mut status,
            condition(
                AVAILABLE,
                false,
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
                now,
            ),
        );
    }
    status
}

/// The status for `all` (every ReplicaSet of the Deployment, the new one among them), with
/// `before` as the status the sync started from (the stored one, with a condition the sync
/// already set): [`calculate_counts`], then the `Progressing` condition of a rollout
/// (`syncRolloutStatus`).
pub fn calculate(
    deployment: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    before: &DeploymentStatus,
    now: Timestamp,
) -> DeploymentStatus {
    let mut status = calculate_counts(deployment, all, new, before, now);
    let current = get_condition(before, PROGRESSING).cloned();
    let complete_before = status.replicas == status.updated_replicas
        && current
            .as_ref()
            .is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE));
    if complete_before {
        return status;
    }
    let subject = |what: &str| match new {
        Some(rs) => format!(
            "ReplicaSet {:?} {what}",
            rs.metadata.name.as_deref().unwrap_or_default()
        ),
        None => format!(
            "Deployment {:?} {what}",
            deployment.metadata.name.as_deref().unwrap_or_default()
        ),
    };
    if is_complete(deployment, &status) {
        set_condition(
            &mut status,
            condition(
                PROGRESSING,
                true,
                NEW_RS_AVAILABLE,
                subject("has successfully progressed."),
                now,
            ),
        );
    } else if is_progressing(before, &status) {
        let mut progressing = condition(
            PROGRESSING,
            true,
            RS_UPDATED,
            subject("is progressing."),
            now,
        );
        if let Some(current) = &current {
            if current.status == "True" {
                progressing.last_transition_time = current.last_transition_time.clone();
            }
            status
                .conditions
                .get_or_insert_with(Vec::new)
                .retain(|c| c.type_ != PROGRESSING);
        }
        set_condition(&mut status, progressing);
    } else if is_timed_out(deployment, &status, now) {
        set_condition(
            &mut status,
            condition(
                PROGRESSING,
                false,
                TIMED_OUT,
                subject("has timed out progressing."),
                now,
            ),
        );
    }
    status
}
