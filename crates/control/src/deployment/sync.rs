//! One sync of one Deployment as a pure function (`syncDeployment` of sync.go with
//! rolling.go's `rolloutRolling` and recreate.go's `rolloutRecreate`), taking the Deployment
//! and the ReplicaSets it controls and returning what to do. Like upstream, a sync makes one
//! step and then reports status; the next change (a ReplicaSet's status moving) brings the
//! next step.
//!
//! * The new ReplicaSet is the one whose template equals the Deployment's, ignoring the
//!   `pod-template-hash` label; it is named `<deployment>-<hash>` and carries revision
//!   `max(old revisions) + 1` (an old one brought back by `rollout undo` gets a new revision,
//!   its old ones kept in `revision-history`).
//! * RollingUpdate: grow the new ReplicaSet within `replicas + maxSurge` pods; else shrink
//!   old ones, unhealthy replicas first, while `replicas − maxUnavailable` stay available.
//! * Recreate: old ReplicaSets to zero, wait until their pods are gone, then the new one.
//! * Once complete, old ReplicaSets beyond `revisionHistoryLimit` (with no pods) are deleted.
//!
//! * A scaling event (an active ReplicaSet's `desired-replicas` annotation is not the
//!   Deployment's `replicas`) or `paused` takes sync.go's `sync` instead of a rollout step: no
//!   new ReplicaSet is made; the one active ReplicaSet (or the newest) takes `replicas`; a
//!   saturated new one leaves the old ones none; else, for RollingUpdate, what
//!   `replicas + maxSurge` allows more (or less) is spread over the active ReplicaSets in
//!   proportion to their size against their `max-replicas` annotation (`scale`), the largest
//!   first, the rounding leftover to the first.
//! * A paused Deployment's `Progressing` condition says `DeploymentPaused` (then
//!   `DeploymentResumed`); its old ReplicaSets past the history limit are cleaned up.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

use super::hash::{compute_hash, POD_TEMPLATE_HASH};
use super::status::{
    self, calculate, calculate_counts, condition, is_complete, set_paused_condition, FOUND_NEW_RS,
    NEW_RS_CREATED, PROGRESSING,
};
use super::strategy::{
    available_total, is_rolling_update, max_surge, max_unavailable, new_rs_new_replicas, replicas,
    rs_available, rs_replicas, spec_total,
};

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// Annotations of the Deployment that are not copied to its ReplicaSets.
pub const NOT_COPIED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// What a sync decided, in the order the driver carries it out.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    CreateReplicaSet(Box<ReplicaSet>),
    /// Write this ReplicaSet's `spec.replicas` and annotations (a scale, a new revision).
    UpdateReplicaSet(Box<ReplicaSet>),
    DeleteReplicaSet {
        name: String,
        uid: String,
    },
    /// The Deployment's `deployment.kubernetes.io/revision` annotation.
    SetRevision(String),
    UpdateStatus(Box<DeploymentStatus>),
    /// A `Normal` event on the Deployment (`ScalingReplicaSet`).
    Event {
        reason: String,
        message: String,
    },
}

/// The revision annotation as a number (0 when missing or malformed, as upstream's `Revision`).
pub fn revision_of(meta: &ObjectMeta) -> i64 {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// `EqualIgnoreHash`: the templates equal once `pod-template-hash` is taken out of the labels.
pub fn equal_ignore_hash(
    a: &k8s_openapi::api::core::v1::PodTemplateSpec,
    b: &k8s_openapi::api::core::v1::PodTemplateSpec,
) -> bool {
    strip_hash(a) == strip_hash(b)
}

/// The template without its `pod-template-hash` label (and an empty label map as none).
pub fn strip_hash(
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
) -> k8s_openapi::api::core::v1::PodTemplateSpec {
    let mut template = template.clone();
    if let Some(meta) = template.metadata.as_mut() {
        if let Some(labels) = meta.labels.as_mut() {
            labels.remove(POD_TEMPLATE_HASH);
            if labels.is_empty() {
                meta.labels = None;
            }
        }
    }
    template
}

/// The ownerReference a Deployment puts on its ReplicaSets.
pub fn controller_ref(deployment: &Deployment) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: deployment.metadata.name.clone().unwrap_or_default(),
        uid: deployment.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

struct Sync<'a> {
    deployment: &'a Deployment,
    actions: Vec<Action>,
}

/// One sync. `owned` are the ReplicaSets this Deployment controls; `old_pods_running` says
/// whether a pod of an old ReplicaSet still runs (what Recreate waits for).
pub fn sync(
    deployment: &Deployment,
    owned: &[ReplicaSet],
    old_pods_running: bool,
    now: Timestamp,
) -> Vec<Action> {
    let Some(spec) = &deployment.spec else {
        return Vec::new();
    };
    if deployment.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let mut sets: Vec<ReplicaSet> = owned.to_vec();
    sets.sort_by(|a, b| {
        (
            a.metadata.creation_timestamp.as_ref().map(|t| t.0),
            &a.metadata.name,
        )
            .cmp(&(
                b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                &b.metadata.name,
            ))
    });
    let new_index = sets.iter().position(|rs| {
        rs.spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .is_some_and(|t| equal_ignore_hash(t, &spec.template))
    });
    let mut new = new_index.map(|i| sets.remove(i));
    let mut old = sets;
    let mut me = Sync {
        deployment,
        actions: Vec::new(),
    };
    let mut before = deployment.status.clone().unwrap_or_default();
    set_paused_condition(deployment, &mut before, now);
    let paused = spec.paused == Some(true);

    let max_old = old
        .iter()
        .map(|rs| revision_of(&rs.metadata))
        .max()
        .unwrap_or(0);
    if let Some(rs) = new.as_mut() {
        if me.sync_new_annotations(rs, max_old + 1) {
            me.actions
                .push(Action::UpdateReplicaSet(Box::new(rs.clone())));
        }
        if status::get_condition(&before, PROGRESSING).is_none() {
            let name = rs.metadata.name.clone().unwrap_or_default();
            status::set_condition(
                &mut before,
                condition(
                    PROGRESSING,
                    true,
                    FOUND_NEW_RS,
                    format!("Found new replica set {name:?}"),
                    now,
                ),
            );
        }
    }

    if paused || is_scaling_event(deployment, new.as_ref(), &old) {
        // sync.go's `sync`: replicas spread over what exists, no new ReplicaSet.
        me.scale_all(new.as_mut(), &mut old);
        if paused {
            me.clean_up(&old);
        }
        me.sync_revision(new.as_ref());
        let all: Vec<&ReplicaSet> = old.iter().chain(new.as_ref()).collect();
        let status = calculate_counts(deployment, &all, new.as_ref(), &before, now);
        me.update_status(status);
        return me.actions;
    }

    let rolling = is_rolling_update(deployment);
    // Recreate makes the new ReplicaSet only once the old pods are gone.
    let may_create = rolling || (old.iter().all(|rs| rs_replicas(rs) == 0) && !old_pods_running);
    if new.is_none() && may_create {
        let rs = me.new_replicaset(&old, max_old + 1);
        let name = rs.metadata.name.clone().unwrap_or_default();
        let count = rs_replicas(&rs);
        me.actions
            .push(Action::CreateReplicaSet(Box::new(rs.clone())));
        if count > 0 {
            me.event(format!("Scaled up replica set {name} from 0 to {count}"));
        }
        status::set_condition(
            &mut before,
            condition(
                PROGRESSING,
                true,
                NEW_RS_CREATED,
                format!("Created new replica set {name:?}"),
                now,
            ),
        );
        new = Some(rs);
    } else if rolling {
        let new_rs = new.as_mut().expect("created above when missing");
        if !me.reconcile_new(new_rs, &old) {
            me.reconcile_old(&mut old, new_rs);
        }
    } else {
        me.recreate(&mut old, new.as_mut(), old_pods_running);
    }
    me.sync_revision(new.as_ref());
    let scaled = me
        .actions
        .iter()
        .any(|a| matches!(a, Action::UpdateReplicaSet(_) | Action::CreateReplicaSet(_)));
    let stored_status = deployment.status.clone().unwrap_or_default();
    if !scaled && is_complete(deployment, &stored_status) {
        me.clean_up(&old);
    }
    let all: Vec<&ReplicaSet> = old.iter().chain(new.as_ref()).collect();
    let status = calculate(deployment, &all, new.as_ref(), &before, now);
    me.update_status(status);
    me.actions
}

/// `isScalingEvent`: an active ReplicaSet's `desired-replicas` annotation is not the
/// Deployment's `replicas`.
fn is_scaling_event(deployment: &Deployment, new: Option<&ReplicaSet>, old: &[ReplicaSet]) -> bool {
    let want = replicas(deployment);
    old.iter()
        .chain(new)
        .filter(|rs| rs_replicas(rs) > 0)
        .filter_map(|rs| int_annotation(rs, DESIRED_REPLICAS))
        .any(|desired| desired != want)
}

fn int_annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

/// `IsSaturated`: the new ReplicaSet has all the Deployment's replicas, all available.
fn is_saturated(deployment: &Deployment, rs: &ReplicaSet) -> bool {
    let want = replicas(deployment);
    int_annotation(rs, DESIRED_REPLICAS) == Some(want)
        && rs_replicas(rs) == want
        && rs_available(rs) == want
}

/// `GetReplicaSetProportion`: this ReplicaSet's share of `to_add`, within what is left of it.
fn proportion(rs: &ReplicaSet, deployment: &Deployment, to_add: i32, added: i32) -> i32 {
    if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = fraction(rs, deployment);
    let allowed = to_add - added;
    match to_add > 0 {
        true => fraction.min(allowed),
        false => fraction.max(allowed),
    }
}

/// `getReplicaSetFraction`: the size this ReplicaSet would have at the Deployment's new
/// `replicas + maxSurge` in proportion to the `max-replicas` it was sized for (the
/// Deployment's status replicas when the annotation is missing), less its size now; all of
/// it when scaling to zero.
fn fraction(rs: &ReplicaSet, deployment: &Deployment) -> i32 {
    let have = rs_replicas(rs);
    let want = replicas(deployment);
    if want == 0 {
        return -have;
    }
    let max_now = want + max_surge(deployment);
    let sized_for = int_annotation(rs, MAX_REPLICAS).unwrap_or_else(|| {
        deployment
            .status
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or(0)
    });
    if sized_for == 0 {
        return 0;
    }
    // Go's math.Round: halves away from zero, as f64::round.
    (f64::from(have) * f64::from(max_now) / f64::from(sized_for)).round() as i32 - have
}

/// `ReplicaSetsByCreationTimestamp`: older first, equal times by name.
fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> std::cmp::Ordering {
    let key = |rs: &ReplicaSet| {
        (
            rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
            rs.metadata.name.clone(),
        )
    };
    key(a).cmp(&key(b))
}

/// A status that differs only in condition times is not written again.
fn same_but_times(old: Option<&DeploymentStatus>, new: &DeploymentStatus) -> bool {
    let strip = |s: &DeploymentStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_update_time = None;
            c.last_transition_time = None;
        }
        s
    };
    old.is_some_and(|old| strip(old) == strip(new))
}

impl Sync<'_> {
    /// The Deployment's revision annotation follows the new ReplicaSet's.
    fn sync_revision(&mut self, new: Option<&ReplicaSet>) {
        let Some(rs) = new else {
            return;
        };
        let revision = revision_of(&rs.metadata).to_string();
        let current = self
            .deployment
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION));
        if current != Some(&revision) {
            self.actions.push(Action::SetRevision(revision));
        }
    }

    /// The status is written when it changed (more than its condition times).
    fn update_status(&mut self, status: DeploymentStatus) {
        let stored = self.deployment.status.as_ref();
        if stored != Some(&status) && !same_but_times(stored, &status) {
            self.actions.push(Action::UpdateStatus(Box::new(status)));
        }
    }

    /// sync.go's `scale`: the Deployment's `replicas` over its ReplicaSets when it was scaled
    /// (or is paused), without a rollout step.
    fn scale_all(&mut self, new: Option<&mut ReplicaSet>, old: &mut [ReplicaSet]) {
        let d = self.deployment;
        let want = replicas(d);
        let mut all: Vec<&mut ReplicaSet> = old.iter_mut().collect();
        let new_index = new.map(|rs| {
            all.push(rs);
            all.len() - 1
        });
        let active: Vec<usize> = (0..all.len())
            .filter(|&i| rs_replicas(all[i]) > 0)
            .collect();
        // FindActiveOrLatest: one active ReplicaSet (or none: the new one, else the newest old
        // one) takes every replica.
        let only = match active.len() {
            0 => new_index.or_else(|| (0..all.len()).max_by(|&a, &b| by_creation(all[a], all[b]))),
            1 => Some(active[0]),
            _ => None,
        };
        if let Some(i) = only {
            if rs_replicas(all[i]) != want {
                self.scale(all[i], want);
            }
            return;
        }
        // A saturated new ReplicaSet: the old ones go to zero.
        if let Some(n) = new_index.filter(|&n| is_saturated(d, all[n])) {
            for &i in active.iter().filter(|&&i| i != n) {
                self.scale(all[i], 0);
            }
            return;
        }
        if !is_rolling_update(d) {
            return;
        }
        let total: i32 = active.iter().map(|&i| rs_replicas(all[i])).sum();
        let allowed = if want > 0 { want + max_surge(d) } else { 0 };
        let to_add = allowed - total;
        let mut order = active;
        // The largest first; of equal sizes, the newer first when growing, the older first
        // when shrinking (ReplicaSetsBySizeNewer / BySizeOlder).
        order.sort_by(|&a, &b| {
            rs_replicas(all[b])
                .cmp(&rs_replicas(all[a]))
                .then_with(|| match to_add > 0 {
                    true => by_creation(all[b], all[a]),
                    false => by_creation(all[a], all[b]),
                })
        });
        let mut added = 0;
        let mut sizes = Vec::with_capacity(order.len());
        for &i in &order {
            let share = proportion(all[i], d, to_add, added);
            sizes.push(rs_replicas(all[i]) + share);
            added += share;
        }
        for (k, &i) in order.iter().enumerate() {
            let mut size = sizes[k];
            if k == 0 && to_add != 0 {
                size = (size + to_add - added).max(0);
            }
            self.scale(all[i], size);
        }
    }

    fn event(&mut self, message: String) {
        self.actions.push(Action::Event {
            reason: "ScalingReplicaSet".into(),
            message,
        });
    }

    /// Sets the ReplicaSet's replicas and records the scale as upstream's
    /// `scaleReplicaSetAndRecordEvent` does.
    fn scale(&mut self, rs: &mut ReplicaSet, to: i32) -> bool {
        let from = rs_replicas(rs);
        let annotations_changed = self.set_replicas_annotations(rs);
        if from == to && !annotations_changed {
            return false;
        }
        rs.spec.get_or_insert_with(Default::default).replicas = Some(to);
        self.actions
            .push(Action::UpdateReplicaSet(Box::new(rs.clone())));
        if from != to {
            let way = if to > from { "up" } else { "down" };
            let name = rs.metadata.name.clone().unwrap_or_default();
            self.event(format!(
                "Scaled {way} replica set {name} from {from} to {to}"
            ));
        }
        from != to
    }

    /// `desired-replicas` and `max-replicas` (replicas + maxSurge); whether they changed.
    fn set_replicas_annotations(&self, rs: &mut ReplicaSet) -> bool {
        let want = replicas(self.deployment);
        let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
        let mut changed = false;
        for (key, value) in [
            (DESIRED_REPLICAS, want),
            (MAX_REPLICAS, want + max_surge(self.deployment)),
        ] {
            let value = value.to_string();
            if annotations.get(key) != Some(&value) {
                annotations.insert(key.into(), value);
                changed = true;
            }
        }
        changed
    }

    /// The new ReplicaSet's revision (bumped past every old one, its previous revision kept in
    /// `revision-history`) and the Deployment's annotations; whether anything changed.
    fn sync_new_annotations(&self, rs: &mut ReplicaSet, revision: i64) -> bool {
        let mut changed = false;
        let current = revision_of(&rs.metadata);
        let annotations = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
        if current < revision {
            if current > 0 {
                let history = annotations
                    .get(REVISION_HISTORY)
                    .cloned()
                    .unwrap_or_default();
                let history = match history.is_empty() {
                    true => current.to_string(),
                    false => format!("{history},{current}"),
                };
                annotations.insert(REVISION_HISTORY.into(), history);
            }
            annotations.insert(REVISION.into(), revision.to_string());
            changed = true;
        }
        for (key, value) in self.copied_annotations() {
            if annotations.get(&key) != Some(&value) {
                annotations.insert(key, value);
                changed = true;
            }
        }
        // SetNewReplicaSetAnnotations sets the replicas annotations only on a ReplicaSet it
        // makes: an existing one keeps the max-replicas it was sized for, which a scaling
        // event's proportions are computed from.
        changed
    }

    fn copied_annotations(&self) -> BTreeMap<String, String> {
        self.deployment
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The new ReplicaSet (`getNewReplicaSet`): `<name>-<hash>`, the hash in its labels,
    /// selector and template, the Deployment as its controller.
    fn new_replicaset(&self, old: &[ReplicaSet], revision: i64) -> ReplicaSet {
        let d = self.deployment;
        let spec = d.spec.clone().unwrap_or_default();
        let collision = d.status.as_ref().and_then(|s| s.collision_count);
        let hash = compute_hash(&spec.template, collision);
        let mut template = spec.template.clone();
        let template_meta = template.metadata.get_or_insert_with(Default::default);
        template_meta
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let mut selector: LabelSelector = spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let mut annotations = self.copied_annotations();
        annotations.insert(REVISION.into(), revision.to_string());
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}-{hash}",
                    d.metadata.name.as_deref().unwrap_or_default()
                )),
                namespace: d.metadata.namespace.clone(),
                labels: template_meta.labels.clone(),
                annotations: Some(annotations),
                owner_references: Some(vec![controller_ref(d)]),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: spec.min_ready_seconds,
                selector,
                template: Some(template),
            }),
            status: None,
        };
        self.set_replicas_annotations(&mut rs);
        let all: Vec<&ReplicaSet> = old.iter().chain([&rs]).collect();
        let count = new_rs_new_replicas(d, &all, &rs);
        rs.spec.as_mut().expect("set above").replicas = Some(count);
        rs
    }

    /// `reconcileNewReplicaSet`: whether it scaled.
    fn reconcile_new(&mut self, new: &mut ReplicaSet, old: &[ReplicaSet]) -> bool {
        let want = replicas(self.deployment);
        let have = rs_replicas(new);
        if have > want {
            return self.scale(new, want);
        }
        let all: Vec<&ReplicaSet> = old.iter().chain([&*new]).collect();
        let next = new_rs_new_replicas(self.deployment, &all, new);
        self.scale(new, next)
    }

    /// `reconcileOldReplicaSets`: unhealthy replicas first, then available ones while enough
    /// stay available. Whether it scaled.
    fn reconcile_old(&mut self, old: &mut [ReplicaSet], new: &ReplicaSet) -> bool {
        if spec_total(old.iter()) == 0 {
            return false;
        }
        let d = self.deployment;
        let all_pods = spec_total(old.iter().chain([new]));
        let min_available = replicas(d) - max_unavailable(d);
        let new_unavailable = rs_replicas(new) - rs_available(new);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        let mut scaled = false;
        // cleanupUnhealthyReplicas
        let mut cleaned = 0;
        for rs in old.iter_mut() {
            if cleaned >= max_scaled_down {
                break;
            }
            let (have, available) = (rs_replicas(rs), rs_available(rs));
            if have == 0 || have <= available {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(have - available);
            scaled |= self.scale(rs, have - down);
            cleaned += down;
        }
        // scaleDownOldReplicaSetsForRollingUpdate
        let available = available_total(old.iter().chain([new]));
        if available > min_available {
            let total = available - min_available;
            let mut done = 0;
            for rs in old.iter_mut() {
                if done >= total {
                    break;
                }
                let have = rs_replicas(rs);
                if have == 0 {
                    continue;
                }
                let down = have.min(total - done);
                scaled |= self.scale(rs, have - down);
                done += down;
            }
        }
        scaled
    }

    /// `rolloutRecreate` once the new ReplicaSet exists or may not be made yet.
    fn recreate(
        &mut self,
        old: &mut [ReplicaSet],
        new: Option<&mut ReplicaSet>,
        old_pods_running: bool,
    ) {
        let mut scaled = false;
        for rs in old.iter_mut().filter(|rs| rs_replicas(rs) > 0) {
            scaled |= self.scale(rs, 0);
        }
        if scaled || old_pods_running {
            return;
        }
        if let Some(new) = new {
            let want = replicas(self.deployment);
            self.scale(new, want);
        }
    }

    /// `cleanupDeployment`: the oldest revisions past `revisionHistoryLimit`, if they have no
    /// pods.
    fn clean_up(&mut self, old: &[ReplicaSet]) {
        let limit = self
            .deployment
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10);
        let mut alive: Vec<&ReplicaSet> = old
            .iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        let surplus = alive.len() as i64 - i64::from(limit);
        if surplus <= 0 {
            return;
        }
        alive.sort_by_key(|rs| revision_of(&rs.metadata));
        for rs in alive.into_iter().take(surplus as usize) {
            let status = rs.status.clone().unwrap_or_default();
            let observed =
                status.observed_generation.unwrap_or(0) >= rs.metadata.generation.unwrap_or(0);
            if status.replicas != 0 || rs_replicas(rs) != 0 || !observed {
                continue;
            }
            self.actions.push(Action::DeleteReplicaSet {
                name: rs.metadata.name.clone().unwrap_or_default(),
                uid: rs.metadata.uid.clone().unwrap_or_default(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{
        DeploymentSpec, DeploymentStrategy, ReplicaSetStatus, RollingUpdateDeployment,
    };
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use k8s_openapi::jiff::SignedDuration;

    use super::*;

    fn template(image: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_string(), "web".to_string())].into()),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }
    }

    fn deployment(image: &str, strategy: DeploymentStrategy) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("d-uid".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(3),
                selector: LabelSelector {
                    match_labels: Some([("app".to_string(), "web".to_string())].into()),
                    ..Default::default()
                },
                strategy: Some(strategy),
                revision_history_limit: Some(1),
                template: template(image),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn rolling(surge: i32, unavailable: i32) -> DeploymentStrategy {
        DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(IntOrString::Int(surge)),
                max_unavailable: Some(IntOrString::Int(unavailable)),
            }),
        }
    }

    /// A ReplicaSet with its pods: (ready, starting, terminating).
    struct Set {
        rs: ReplicaSet,
        ready: i32,
        starting: i32,
        terminating: i32,
    }

    /// The world of one Deployment: its ReplicaSets and their pods, moved one step at a time by
    /// the Deployment controller's sync, the ReplicaSet controller (pods to `spec.replicas`,
    /// the status written from the pods it had before, as upstream) and the kubelet (a
    /// starting pod becomes ready, a terminating one goes).
    struct World {
        d: Deployment,
        sets: Vec<Set>,
        clock: Timestamp,
        made: i64,
    }

    impl World {
        fn new(d: Deployment) -> World {
            World {
                d,
                sets: Vec::new(),
                clock: Timestamp::UNIX_EPOCH,
                made: 0,
            }
        }

        fn owned(&self) -> Vec<ReplicaSet> {
            self.sets.iter().map(|s| s.rs.clone()).collect()
        }

        /// One Deployment sync, its actions carried out; whether it did anything.
        fn sync(&mut self) -> bool {
            self.clock += SignedDuration::from_secs(1);
            let old_running = self.sets.iter().any(|s| {
                let template = s.rs.spec.as_ref().unwrap().template.as_ref().unwrap();
                !equal_ignore_hash(template, &self.d.spec.as_ref().unwrap().template)
                    && s.ready + s.starting + s.terminating > 0
            });
            let actions = sync(&self.d, &self.owned(), old_running, self.clock);
            let acted = !actions.is_empty();
            for action in actions {
                match action {
                    Action::CreateReplicaSet(mut rs) => {
                        self.made += 1;
                        rs.metadata.uid = Some(format!("rs-{}", self.made));
                        rs.metadata.generation = Some(1);
                        rs.metadata.creation_timestamp = Some(Time(self.clock));
                        self.sets.push(Set {
                            rs: *rs,
                            ready: 0,
                            starting: 0,
                            terminating: 0,
                        });
                    }
                    Action::UpdateReplicaSet(rs) => {
                        let set = self
                            .sets
                            .iter_mut()
                            .find(|s| s.rs.metadata.name == rs.metadata.name)
                            .unwrap();
                        let generation = set.rs.metadata.generation.unwrap_or(1);
                        let replicas = rs.spec.as_ref().unwrap().replicas;
                        if set.rs.spec.as_ref().unwrap().replicas != replicas {
                            set.rs.metadata.generation = Some(generation + 1);
                        }
                        set.rs.spec.as_mut().unwrap().replicas = replicas;
                        set.rs.metadata.annotations = rs.metadata.annotations.clone();
                    }
                    Action::DeleteReplicaSet { name, .. } => self
                        .sets
                        .retain(|s| s.rs.metadata.name.as_ref() != Some(&name)),
                    Action::SetRevision(revision) => {
                        self.d
                            .metadata
                            .annotations
                            .get_or_insert_with(Default::default)
                            .insert(REVISION.into(), revision);
                    }
                    Action::UpdateStatus(status) => self.d.status = Some(*status),
                    Action::Event { .. } => {}
                }
            }
            acted
        }

        /// The ReplicaSet controller: status from the pods it sees, then pods to the spec.
        fn replicasets(&mut self) {
            for set in &mut self.sets {
                let want = rs_replicas(&set.rs);
                set.rs.status = Some(ReplicaSetStatus {
                    replicas: set.ready + set.starting,
                    ready_replicas: Some(set.ready),
                    available_replicas: Some(set.ready),
                    observed_generation: set.rs.metadata.generation,
                    ..Default::default()
                });
                let mut surplus = set.ready + set.starting - want;
                while surplus > 0 {
                    if set.starting > 0 {
                        set.starting -= 1;
                    } else {
                        set.ready -= 1;
                    }
                    set.terminating += 1;
                    surplus -= 1;
                }
                if surplus < 0 {
                    set.starting += -surplus;
                }
            }
        }

        /// The kubelet: starting pods become ready, terminating ones are gone.
        fn kubelet(&mut self) {
            for set in &mut self.sets {
                set.ready += set.starting;
                set.starting = 0;
                set.terminating = 0;
            }
        }

        fn ready(&self) -> i32 {
            self.sets.iter().map(|s| s.ready).sum()
        }

        fn pods(&self) -> i32 {
            self.sets
                .iter()
                .map(|s| s.ready + s.starting + s.terminating)
                .sum()
        }

        /// Runs until nothing moves; the fewest ready and the most live pods seen.
        fn settle(&mut self) -> (i32, i32) {
            let (mut fewest_ready, mut most_live) = (i32::MAX, 0);
            for _ in 0..100 {
                let acted = self.sync();
                self.replicasets();
                fewest_ready = fewest_ready.min(self.ready());
                most_live = most_live.max(self.pods() - self.terminating());
                self.replicasets();
                self.kubelet();
                self.replicasets();
                fewest_ready = fewest_ready.min(self.ready());
                if !acted && self.pods() == self.ready() {
                    return (fewest_ready, most_live);
                }
            }
            panic!("the rollout did not settle");
        }

        fn terminating(&self) -> i32 {
            self.sets.iter().map(|s| s.terminating).sum()
        }

        fn set_image(&mut self, image: &str) {
            self.d.spec.as_mut().unwrap().template = template(image);
            self.d.metadata.generation = Some(self.d.metadata.generation.unwrap() + 1);
        }

        fn image_of_ready(&self) -> Vec<String> {
            self.sets
                .iter()
                .filter(|s| s.ready > 0)
                .map(|s| {
                    let t = s.rs.spec.as_ref().unwrap().template.as_ref().unwrap();
                    t.spec.as_ref().unwrap().containers[0]
                        .image
                        .clone()
                        .unwrap()
                })
                .collect()
        }
    }

    fn revision(rs: &ReplicaSet) -> i64 {
        revision_of(&rs.metadata)
    }

    #[test]
    fn a_rolling_update_stays_within_its_fenceposts_and_undo_reuses_the_old_replicaset() {
        let mut world = World::new(deployment("a", rolling(1, 1)));
        world.settle();
        assert_eq!(world.ready(), 3);
        assert_eq!(world.sets.len(), 1);
        let first = world.sets[0].rs.clone();
        let hash = &first.metadata.labels.as_ref().unwrap()[POD_TEMPLATE_HASH];
        assert_eq!(
            first.metadata.name.as_deref(),
            Some(&*format!("web-{hash}"))
        );
        assert_eq!(
            first
                .spec
                .as_ref()
                .unwrap()
                .selector
                .match_labels
                .as_ref()
                .unwrap()[POD_TEMPLATE_HASH],
            *hash
        );
        assert_eq!(revision(&first), 1);
        assert_eq!(revision_of(&world.d.metadata), 1);

        world.set_image("b");
        let (fewest_ready, most_live) = world.settle();
        assert!(fewest_ready >= 2, "{fewest_ready} ready at one point");
        assert!(most_live <= 4, "{most_live} pods at one point");
        assert_eq!(world.image_of_ready(), ["b"]);
        assert_eq!(world.ready(), 3);
        assert_eq!(revision_of(&world.d.metadata), 2);

        // Back to "a": the first ReplicaSet is the new one again, under revision 3.
        world.set_image("a");
        let (fewest_ready, most_live) = world.settle();
        assert!(fewest_ready >= 2 && most_live <= 4);
        assert_eq!(world.image_of_ready(), ["a"]);
        let back = world
            .sets
            .iter()
            .find(|s| s.rs.metadata.name == first.metadata.name)
            .unwrap();
        assert_eq!(revision(&back.rs), 3);
        assert_eq!(
            back.rs.metadata.annotations.as_ref().unwrap()[REVISION_HISTORY],
            "1"
        );
        let status = world.d.status.clone().unwrap();
        let progressing = status::get_condition(&status, PROGRESSING).unwrap();
        assert_eq!(
            progressing.reason.as_deref(),
            Some(status::NEW_RS_AVAILABLE)
        );
    }

    #[test]
    fn only_surge_or_only_unavailability_still_finish() {
        for (surge, unavailable) in [(0, 1), (1, 0), (3, 3)] {
            let mut world = World::new(deployment("a", rolling(surge, unavailable)));
            world.settle();
            world.set_image("b");
            let (fewest_ready, most_live) = world.settle();
            assert!(fewest_ready >= 3 - unavailable, "{surge}/{unavailable}");
            assert!(most_live <= 3 + surge, "{surge}/{unavailable}");
            assert_eq!(world.image_of_ready(), ["b"]);
        }
    }

    #[test]
    fn recreate_scales_the_old_to_zero_and_waits_for_their_pods() {
        let recreate = DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        };
        let mut world = World::new(deployment("a", recreate));
        world.settle();
        world.set_image("b");
        for _ in 0..20 {
            world.sync();
            let images: Vec<bool> = world
                .sets
                .iter()
                .map(|s| s.ready + s.starting + s.terminating > 0)
                .collect();
            assert!(
                images.iter().filter(|live| **live).count() <= 1,
                "old and new pods at once"
            );
            world.replicasets();
            world.kubelet();
            world.replicasets();
        }
        assert_eq!(world.image_of_ready(), ["b"]);
        assert_eq!(world.ready(), 3);
    }

    #[test]
    fn a_stale_status_after_a_scale_down_is_not_counted_twice() {
        // The old ReplicaSet was just scaled from 3 to 2: its status, written by the sync that
        // deleted the pod, still says 3 available. The new one has 2, 1 of them available.
        let d = deployment("b", rolling(1, 1));
        let set =
            |name: &str, image: &str, revision: &str, replicas: i32, available: i32| ReplicaSet {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    uid: Some(name.into()),
                    creation_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
                    annotations: Some([(REVISION.to_string(), revision.to_string())].into()),
                    ..Default::default()
                },
                spec: Some(ReplicaSetSpec {
                    replicas: Some(replicas),
                    template: Some(template(image)),
                    ..Default::default()
                }),
                status: Some(ReplicaSetStatus {
                    replicas: available,
                    available_replicas: Some(available),
                    ..Default::default()
                }),
            };
        let old = set("web-a", "a", "1", 2, 3);
        let new = set("web-b", "b", "2", 2, 1);
        let actions = sync(&d, &[old, new], true, Timestamp::UNIX_EPOCH);
        // 3 pods are available (2 old, 1 new) and 2 must stay: one old one may go, no more (the
        // new one only gets its replicas annotations).
        let scaled: Vec<(Option<String>, Option<i32>)> = actions
            .iter()
            .filter_map(|a| match a {
                Action::UpdateReplicaSet(rs) => {
                    Some((rs.metadata.name.clone(), rs.spec.as_ref()?.replicas))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            scaled,
            [
                (Some("web-b".into()), Some(2)),
                (Some("web-a".into()), Some(1))
            ],
            "{actions:?}"
        );
    }

    /// An old and a new ReplicaSet in the middle of a rollout, sized for `max` pods.
    fn mid_rollout(old: i32, new: i32, desired: i32, max: i32) -> Vec<ReplicaSet> {
        let set = |name: &str, image: &str, revision: &str, replicas: i32, at: i64| ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(at).unwrap())),
                annotations: Some(
                    [
                        (REVISION.to_string(), revision.to_string()),
                        (DESIRED_REPLICAS.to_string(), desired.to_string()),
                        (MAX_REPLICAS.to_string(), max.to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                template: Some(template(image)),
                ..Default::default()
            }),
            status: Some(ReplicaSetStatus {
                replicas,
                available_replicas: Some(replicas),
                ..Default::default()
            }),
        };
        vec![
            set("web-a", "a", "1", old, 0),
            set("web-b", "b", "2", new, 10),
        ]
    }

    /// What a sync scaled: (name, replicas, desired-replicas, max-replicas).
    fn scaled(actions: &[Action]) -> Vec<(String, i32, String, String)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::UpdateReplicaSet(rs) => {
                    let annotations = rs.metadata.annotations.clone().unwrap_or_default();
                    Some((
                        rs.metadata.name.clone()?,
                        rs_replicas(rs),
                        annotations[DESIRED_REPLICAS].clone(),
                        annotations[MAX_REPLICAS].clone(),
                    ))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn scaled_in_the_middle_of_a_rollout_the_replicasets_grow_and_shrink_in_proportion() {
        // kubernetes.io's example: 10 replicas, maxSurge 3, the rollout at 8 old and 5 new
        // (13 = 10 + 3); scaled to 15, the 5 more pods that 18 allows go 3 to the old
        // ReplicaSet and 2 to the new one, and no rollout step is taken.
        let mut d = deployment("b", rolling(3, 2));
        d.spec.as_mut().unwrap().replicas = Some(15);
        let actions = sync(&d, &mid_rollout(8, 5, 10, 13), true, Timestamp::UNIX_EPOCH);
        assert_eq!(
            scaled(&actions),
            [
                ("web-a".into(), 11, "15".into(), "18".into()),
                ("web-b".into(), 7, "15".into(), "18".into())
            ],
            "{actions:?}"
        );
        assert!(actions
            .iter()
            .any(|a| matches!(a, Action::Event { message, .. }
            if message == "Scaled up replica set web-a from 8 to 11")));
        // Then down to 5: 8 allowed, 10 fewer, the larger (and, of equal sizes, the older)
        // first, the rounding's leftover to it.
        d.spec.as_mut().unwrap().replicas = Some(5);
        let actions = sync(&d, &mid_rollout(11, 7, 15, 18), true, Timestamp::UNIX_EPOCH);
        assert_eq!(
            scaled(&actions),
            [
                ("web-a".into(), 5, "5".into(), "8".into()),
                ("web-b".into(), 3, "5".into(), "8".into())
            ],
            "{actions:?}"
        );
        // To zero: each gives up all it has.
        d.spec.as_mut().unwrap().replicas = Some(0);
        let actions = sync(&d, &mid_rollout(5, 3, 5, 8), true, Timestamp::UNIX_EPOCH);
        let sizes: Vec<i32> = scaled(&actions).iter().map(|s| s.1).collect();
        assert_eq!(sizes, [0, 0], "{actions:?}");
        // Equal sizes growing (9 allowed, 5 more): the newer first takes its share, the older
        // what is left of it.
        d.spec.as_mut().unwrap().replicas = Some(6);
        let actions = sync(&d, &mid_rollout(2, 2, 3, 4), true, Timestamp::UNIX_EPOCH);
        assert_eq!(
            scaled(&actions)
                .iter()
                .map(|s| (s.0.as_str(), s.1))
                .collect::<Vec<_>>(),
            [("web-b", 5), ("web-a", 4)],
            "{actions:?}"
        );
    }

    #[test]
    fn a_scaling_event_with_one_active_replicaset_or_a_saturated_new_one() {
        let mut d = deployment("b", rolling(1, 1));
        d.spec.as_mut().unwrap().replicas = Some(6);
        // One active ReplicaSet takes every replica.
        let actions = sync(&d, &mid_rollout(0, 3, 3, 4), false, Timestamp::UNIX_EPOCH);
        assert_eq!(
            scaled(&actions),
            [("web-b".into(), 6, "6".into(), "7".into())]
        );
        // The new one saturated (its desired and available replicas are the Deployment's): the
        // old ones go to zero.
        let mut sets = mid_rollout(2, 6, 6, 7);
        let old = sets[0].metadata.annotations.as_mut().unwrap();
        old.insert(DESIRED_REPLICAS.into(), "5".into());
        let actions = sync(&d, &sets, true, Timestamp::UNIX_EPOCH);
        assert_eq!(
            scaled(&actions),
            [("web-a".into(), 0, "6".into(), "7".into())]
        );
    }

    fn pause(world: &mut World, paused: bool) {
        world.d.spec.as_mut().unwrap().paused = Some(paused);
        world.d.metadata.generation = Some(world.d.metadata.generation.unwrap() + 1);
    }

    fn progressing(world: &World) -> (String, String) {
        let status = world.d.status.clone().unwrap();
        let c = status::get_condition(&status, PROGRESSING).unwrap();
        (c.status.clone(), c.reason.clone().unwrap())
    }

    #[test]
    fn a_paused_deployment_makes_no_new_replicaset_but_scales_and_resumes() {
        let mut d = deployment("a", rolling(1, 1));
        d.spec.as_mut().unwrap().progress_deadline_seconds = Some(600);
        let mut world = World::new(d);
        world.settle();
        pause(&mut world, true);
        world.set_image("b");
        world.settle();
        assert_eq!(world.sets.len(), 1, "no new ReplicaSet while paused");
        assert_eq!(world.image_of_ready(), ["a"]);
        assert_eq!(
            progressing(&world),
            ("Unknown".into(), status::PAUSED.into())
        );
        // Scaled while paused: the one ReplicaSet takes the replicas.
        world.d.spec.as_mut().unwrap().replicas = Some(5);
        world.settle();
        assert_eq!(world.ready(), 5);
        assert_eq!(world.sets.len(), 1);
        // Resumed: the rollout goes on to "b".
        let mut resumed = world.d.status.clone().unwrap();
        pause(&mut world, false);
        status::set_paused_condition(&world.d, &mut resumed, Timestamp::UNIX_EPOCH);
        let c = status::get_condition(&resumed, PROGRESSING).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("Unknown", Some(status::RESUMED))
        );
        world.settle();
        assert_eq!(world.image_of_ready(), ["b"]);
        assert_eq!(world.ready(), 5);
        assert_eq!(
            progressing(&world),
            ("True".into(), status::NEW_RS_AVAILABLE.into())
        );
    }
}
