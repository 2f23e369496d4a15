//! One sync of one ReplicaSet as a pure function: `syncReplicaSet` from upstream's
//! replica_set.go with its `claimPods` (controller_ref_manager.go) and `manageReplicas`, taking
//! the ReplicaSet and the candidate pods (those the controller-UID index holds under its key
//! and under its namespace's orphan key) and returning what to do.
//!
//! * Inactive pods (finished, or being deleted) are dropped first: never adopted, released,
//!   counted or deleted.
//! * Claim: a pod controlled by this ReplicaSet that still matches the selector is kept; one
//!   that no longer matches is released (its ownerReference removed); an orphan that matches is
//!   adopted; a pod controlled by anyone else is ignored. A ReplicaSet being deleted neither
//!   adopts nor releases.
//! * Manage (not while being deleted): too few → create from the template (at most
//!   [`BURST_REPLICAS`] per sync); too many → delete in [`rank`](super::rank) order.
//! * Status from the claimed pods, updated only when it changed.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

use super::rank::pods_to_delete;
use super::status::{calculate_status, is_pod_active};
use crate::kind::controller_of;
use crate::selector::Selector;

/// Most pods created or deleted in one sync (upstream's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// A pod as an action names it: enough to find it again and to refuse a stale copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
}

impl PodRef {
    pub fn of(pod: &Pod) -> Self {
        let meta = &pod.metadata;
        PodRef {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a sync decided, in the order the driver carries it out.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Remove this ReplicaSet's ownerReference: the pod's labels no longer match.
    Release(PodRef),
    /// Add this ReplicaSet as the controller of an orphan whose labels match.
    Adopt(PodRef),
    /// Create this pod (named by `generateName`).
    Create(Box<Pod>),
    /// Delete this surplus pod.
    Delete(PodRef),
    UpdateStatus(Box<ReplicaSetStatus>),
}

/// Why a candidate was left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// Succeeded, Failed, or being deleted.
    Inactive,
    /// Controlled by another object.
    OtherController,
    /// An orphan whose labels do not match the selector.
    NotSelected,
    /// The ReplicaSet is being deleted: it adopts and releases nothing.
    OwnerDeleting,
}

/// How the candidates were claimed.
#[derive(Debug, Clone, Default)]
pub struct Claim {
    /// The pods the ReplicaSet owns after this sync: kept and adopted.
    pub owned: Vec<Arc<Pod>>,
    pub adopt: Vec<Arc<Pod>>,
    pub release: Vec<Arc<Pod>>,
    pub ignored: Vec<(Arc<Pod>, Ignored)>,
}

/// The ownerReference a ReplicaSet puts on its pods.
pub fn controller_ref(rs: &ReplicaSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: rs.metadata.name.clone().unwrap_or_default(),
        uid: rs.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A new pod from the template (`GetPodFromTemplate`): its labels, annotations and spec,
/// `generateName: <rs-name>-`, the ReplicaSet's namespace and controller reference.
pub fn pod_from_template(rs: &ReplicaSet) -> Pod {
    let template = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let template_meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!(
                "{}-",
                rs.metadata.name.as_deref().unwrap_or_default()
            )),
            namespace: rs.metadata.namespace.clone(),
            labels: template_meta.labels,
            annotations: template_meta.annotations,
            finalizers: template_meta.finalizers,
            owner_references: Some(vec![controller_ref(rs)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// `ClaimPods`: sorts the candidates into kept, adopted, released and ignored.
pub fn claim_pods(rs: &ReplicaSet, selector: &Selector, candidates: &[Arc<Pod>]) -> Claim {
    let uid = rs.metadata.uid.as_deref().unwrap_or_default();
    let deleting = rs.metadata.deletion_timestamp.is_some();
    let mut claim = Claim::default();
    for pod in candidates {
        if !is_pod_active(pod) {
            claim.ignored.push((pod.clone(), Ignored::Inactive));
            continue;
        }
        let matches = selector.matches(pod.metadata.labels.as_ref());
        match controller_of(&pod.metadata) {
            Some(owner) if owner.uid != uid => {
                claim.ignored.push((pod.clone(), Ignored::OtherController))
            }
            Some(_) if matches => claim.owned.push(pod.clone()),
            Some(_) if deleting => claim.ignored.push((pod.clone(), Ignored::OwnerDeleting)),
            Some(_) => claim.release.push(pod.clone()),
            None if !matches => claim.ignored.push((pod.clone(), Ignored::NotSelected)),
            None if deleting => claim.ignored.push((pod.clone(), Ignored::OwnerDeleting)),
            None => {
                claim.adopt.push(pod.clone());
                claim.owned.push(pod.clone());
            }
        }
    }
    claim
}

/// One sync: what to release, adopt, create and delete, and the new status if it changed.
/// `candidates` must be the pods under the ReplicaSet's controller key and its namespace's
/// orphan key; anything else among them is ignored safely (it is someone else's).
pub fn reconcile(rs: &ReplicaSet, candidates: &[Arc<Pod>], now: Timestamp) -> Vec<Action> {
    let Some(spec) = &rs.spec else {
        return Vec::new();
    };
    let Ok(selector) = Selector::from_label_selector(Some(&spec.selector), "spec.selector") else {
        return Vec::new(); // an invalid stored selector: upstream logs and does nothing
    };
    let claim = claim_pods(rs, &selector, candidates);
    let mut actions: Vec<Action> = Vec::new();
    actions.extend(claim.release.iter().map(|p| Action::Release(PodRef::of(p))));
    actions.extend(claim.adopt.iter().map(|p| Action::Adopt(PodRef::of(p))));

    if rs.metadata.deletion_timestamp.is_none() {
        let wanted = spec.replicas.unwrap_or(1).max(0) as usize;
        let have = claim.owned.len();
        if have < wanted {
            let pod = pod_from_template(rs);
            let count = (wanted - have).min(BURST_REPLICAS);
            actions.extend((0..count).map(|_| Action::Create(Box::new(pod.clone()))));
        } else if have > wanted {
            let count = (have - wanted).min(BURST_REPLICAS);
            let doomed = pods_to_delete(&claim.owned, &claim.owned, count, now);
            actions.extend(doomed.iter().map(|p| Action::Delete(PodRef::of(p))));
        }
    }

    let status = calculate_status(rs, &claim.owned, None, now);
    if rs.status.as_ref() != Some(&status) {
        actions.push(Action::UpdateStatus(Box::new(status)));
    }
    actions
}
