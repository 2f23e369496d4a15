//! The Deployment controller's driver: kube-controller-manager's `deployment` controller
//! around the pure [`sync`].
//!
//! Three informers (Deployments, ReplicaSets, pods with the controller-UID index) feed a queue
//! of Deployment keys: a Deployment's change, a change of a ReplicaSet it controls, and the
//! deletion of a pod of such a ReplicaSet (what Recreate waits for) wake it. A sync reads the
//! ReplicaSets it controls from the cache, decides, and carries the actions out on the store:
//! a ReplicaSet update reads it fresh and sets only `spec.replicas` and the annotations, so
//! that it cannot undo a write of the ReplicaSet controller; a failed action queues the key
//! again. As the ReplicaSet controller does, it waits until its informers have seen its own
//! last write before the next sync, instead of upstream's expectations.
//!
//! The ReplicaSets a sync works on are claimed as upstream's `ControllerRefManager` claims
//! them: those it controls whose labels its selector still matches; one it controls that no
//! longer matches is released (its ownerReference removed); an orphan that matches (and is
//! not being deleted) is adopted (this Deployment added as its controller), once the
//! Deployment read fresh from the store is still the same and not being deleted. An orphan
//! ReplicaSet's change wakes the Deployments whose selector matches it.
//!
//! A deleted Deployment's ReplicaSets are deleted (the garbage collector's background cascade,
//! done here for this kind); their pods then go with them through the ReplicaSet controller.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;

use super::sync::{controller_ref, equal_ignore_hash, sync, Action, REVISION};
use crate::error::Result;
use crate::events::{self, NORMAL};
use crate::indexer::Indexer;
use crate::indexes::{
    controller_index_key, pod_indexers, NAMESPACE_INDEX, POD_CONTROLLER_UID_INDEX,
};
use crate::informer::{HandlerFuncs, Informer};
use crate::kind::{controller_of, object_key};
use crate::selector::Selector;
use crate::store::{Preconditions, Store};

/// The component name on events, as kube-controller-manager's.
pub const COMPONENT: &str = "deployment-controller";

pub struct DeploymentController {
    store: Store,
    deployments: Informer<Deployment>,
    replicasets: Informer<ReplicaSet>,
    pods: Informer<Pod>,
    queue: Arc<Mutex<BTreeSet<String>>>,
    deleted: Arc<Mutex<Vec<Deployment>>>,
    last_write: u64,
    settle_timeout: Duration,
}

impl DeploymentController {
    pub fn new(store: Store) -> Self {
        let queue: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let deleted: Arc<Mutex<Vec<Deployment>>> = Arc::default();
        let mut deployments: Informer<Deployment> = Informer::new(store.clone());
        let mut replicasets: Informer<ReplicaSet> = Informer::new(store.clone());
        let mut pods = Informer::with_indexers(store.clone(), pod_indexers());

        let (q_add, q_update) = (queue.clone(), queue.clone());
        let gone = deleted.clone();
        deployments.add_event_handler(
            HandlerFuncs::new()
                .on_add(move |d: &Deployment| enqueue(&q_add, object_key(&d.metadata)))
                .on_update(move |_: &Deployment, d: &Deployment| {
                    enqueue(&q_update, object_key(&d.metadata))
                })
                .on_delete(move |d: &Deployment| lock(&gone).push(d.clone())),
        );
        let (q_add, q_update, q_delete) = (queue.clone(), queue.clone(), queue.clone());
        let (d_add, d_update) = (deployments.indexer(), deployments.indexer());
        replicasets.add_event_handler(
            HandlerFuncs::new()
                .on_add(move |rs: &ReplicaSet| enqueue_for(&q_add, &d_add, rs))
                .on_update(move |old: &ReplicaSet, rs: &ReplicaSet| {
                    // A controller that changed: the one it had hears of it too.
                    if controller_of(&old.metadata).map(|o| &o.uid)
                        != controller_of(&rs.metadata).map(|o| &o.uid)
                    {
                        enqueue_owner(&q_update, old);
                    }
                    enqueue_for(&q_update, &d_update, rs)
                })
                .on_delete(move |rs: &ReplicaSet| enqueue_owner(&q_delete, rs)),
        );
        let q_pod = queue.clone();
        let rs_cache = replicasets.indexer();
        pods.add_event_handler(HandlerFuncs::new().on_delete(move |pod: &Pod| {
            let Some(owner) = controller_of(&pod.metadata).filter(|o| o.kind == "ReplicaSet")
            else {
                return;
            };
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            if let Some(rs) = rs_cache.get_by_key(&format!("{namespace}/{}", owner.name)) {
                enqueue_owner(&q_pod, &rs);
            }
        }));
        DeploymentController {
            store,
            deployments,
            replicasets,
            pods,
            queue,
            deleted,
            last_write: 0,
            settle_timeout: Duration::from_secs(10),
        }
    }

    fn pump(&mut self, timeout: Duration) -> Result<usize> {
        let d = self.deployments.pump(Duration::ZERO)?;
        let rs = self.replicasets.pump(Duration::ZERO)?;
        let pods = self.pods.pump(timeout)?;
        Ok(d + rs
            + pods
            + self.deployments.pump(Duration::ZERO)?
            + self.replicasets.pump(Duration::ZERO)?)
    }

    /// Syncs every queued Deployment once (and deletes the ReplicaSets of deleted ones).
    pub fn sync_pending(&mut self) -> Result<()> {
        self.pump(Duration::ZERO)?;
        let gone: Vec<Deployment> = std::mem::take(&mut *lock(&self.deleted));
        for d in gone {
            self.collect_garbage(&d);
        }
        let keys: Vec<String> = std::mem::take(&mut *lock(&self.queue))
            .into_iter()
            .collect();
        for key in keys {
            if let Err(e) = self.sync_deployment(&key) {
                eprintln!("deployment-controller: syncing {key}: {e}");
                enqueue(&self.queue, key);
            }
        }
        self.settle()
    }

    /// Watches and syncs until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<()> {
        while !stop.load(Ordering::Relaxed) {
            self.pump(crate::watch::RECHECK)?;
            self.sync_pending()?;
        }
        Ok(())
    }

    /// One sync of one Deployment (`namespace/name`).
    pub fn sync_deployment(&mut self, key: &str) -> Result<()> {
        let Some(d) = self.deployments.indexer().get_by_key(key) else {
            return Ok(());
        };
        let owned = self.claim_replicasets(&d)?;
        let template = d
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let pods = self.pods.indexer();
        let namespace = d.metadata.namespace.clone().unwrap_or_default();
        let old_pods_running = owned
            .iter()
            .filter(|rs| {
                !rs.spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| equal_ignore_hash(t, &template))
            })
            .flat_map(|rs| {
                pods.by_index(
                    POD_CONTROLLER_UID_INDEX,
                    &controller_index_key(
                        &namespace,
                        rs.metadata.uid.as_deref().unwrap_or_default(),
                    ),
                )
                .unwrap_or_default()
            })
            .any(|pod| {
                !matches!(
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
            });
        let now = crate::names::now().0;
        let mut failed = None;
        for action in sync(&d, &owned, old_pods_running, now) {
            if let Err(e) = self.carry_out(&d, action) {
                failed = Some(e);
                break; // the next sync starts again from what was written
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn owned_replicasets(&self, d: &Deployment) -> Vec<ReplicaSet> {
        let namespace = d.metadata.namespace.clone().unwrap_or_default();
        let uid = d.metadata.uid.clone().unwrap_or_default();
        self.replicasets
            .indexer()
            .by_index(NAMESPACE_INDEX, &namespace)
            .unwrap_or_default()
            .into_iter()
            .filter(|rs| controller_of(&rs.metadata).is_some_and(|o| o.uid == uid))
            .map(|rs| (*rs).clone())
            .collect()
    }

    /// `getReplicaSetsForDeployment`: the ReplicaSets of the namespace claimed as
    /// `ClaimReplicaSets` does (kept, released, adopted; see the module's doc).
    fn claim_replicasets(&mut self, d: &Deployment) -> Result<Vec<ReplicaSet>> {
        let namespace = d.metadata.namespace.clone().unwrap_or_default();
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let selector = d.spec.as_ref().map(|s| &s.selector);
        let Ok(selector) = Selector::from_label_selector(selector, "spec.selector") else {
            return Ok(self.owned_replicasets(d)); // refused by validation; nothing to claim
        };
        let deleting = d.metadata.deletion_timestamp.is_some();
        let mut claimed = Vec::new();
        let mut can_adopt: Option<bool> = None;
        let candidates = self
            .replicasets
            .indexer()
            .by_index(NAMESPACE_INDEX, &namespace)
            .unwrap_or_default();
        for rs in candidates {
            let matches = selector.matches(rs.metadata.labels.as_ref());
            match controller_of(&rs.metadata) {
                Some(owner) if owner.uid != uid => {}
                Some(_) if matches => claimed.push((*rs).clone()),
                Some(_) if deleting => {}
                Some(_) => self.release(d, &rs)?,
                None => {
                    if deleting || !matches || rs.metadata.deletion_timestamp.is_some() {
                        continue;
                    }
                    if !*can_adopt.get_or_insert_with(|| self.still_adoptable(d)) {
                        continue;
                    }
                    match self.adopt(d, &rs) {
                        Ok(adopted) => claimed.push(adopted),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(claimed)
    }

    /// `RecheckDeletionTimestamp`: the Deployment read fresh is the one cached, not being
    /// deleted.
    fn still_adoptable(&self, cached: &Deployment) -> bool {
        let namespace = cached.metadata.namespace.as_deref().unwrap_or_default();
        let name = cached.metadata.name.as_deref().unwrap_or_default();
        self.store
            .get::<Deployment>(namespace, name)
            .is_ok_and(|fresh| {
                fresh.metadata.uid == cached.metadata.uid
                    && fresh.metadata.deletion_timestamp.is_none()
            })
    }

    /// This Deployment becomes the orphan's controller; the cached copy's resourceVersion
    /// guards the write (a stale one is a Conflict, and the sync runs again).
    fn adopt(&mut self, d: &Deployment, rs: &ReplicaSet) -> Result<ReplicaSet> {
        let mut patched = rs.clone();
        patched
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(controller_ref(d));
        let adopted = self.store.update(patched)?;
        self.wrote(adopted.metadata.resource_version.as_ref());
        Ok(adopted)
    }

    /// The ReplicaSet's ownerReference to this Deployment is removed.
    fn release(&mut self, d: &Deployment, rs: &ReplicaSet) -> Result<()> {
        let mut patched = rs.clone();
        let uid = d.metadata.uid.as_deref().unwrap_or_default();
        if let Some(owners) = patched.metadata.owner_references.as_mut() {
            owners.retain(|o| o.uid != uid);
            if owners.is_empty() {
                patched.metadata.owner_references = None;
            }
        }
        match self.store.update(patched) {
            Ok(released) => {
                self.wrote(released.metadata.resource_version.as_ref());
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()), // gone already: nothing to release
            Err(e) => Err(e),
        }
    }

    fn carry_out(&mut self, d: &Deployment, action: Action) -> Result<()> {
        let namespace = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        match action {
            Action::CreateReplicaSet(rs) => {
                let created = self.store.create(*rs)?;
                self.wrote(created.metadata.resource_version.as_ref());
            }
            Action::UpdateReplicaSet(rs) => {
                let rs_name = rs.metadata.name.clone().unwrap_or_default();
                let updated = retry_on_conflict(|| {
                    let mut fresh: ReplicaSet = self.store.get(&namespace, &rs_name)?;
                    fresh.metadata.annotations = rs.metadata.annotations.clone();
                    let replicas = rs.spec.as_ref().and_then(|s| s.replicas);
                    fresh.spec.get_or_insert_with(Default::default).replicas = replicas;
                    self.store.update(fresh)
                })?;
                self.wrote(updated.metadata.resource_version.as_ref());
            }
            Action::DeleteReplicaSet { name: rs_name, uid } => {
                let preconditions = Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                };
                match self
                    .store
                    .delete_with::<ReplicaSet>(&namespace, &rs_name, &preconditions)
                {
                    Ok(_) => self.last_write = self.last_write.max(self.store.resource_version()?),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
            Action::SetRevision(revision) => {
                let updated = retry_on_conflict(|| {
                    let mut fresh: Deployment = self.store.get(&namespace, &name)?;
                    fresh
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(REVISION.into(), revision.clone());
                    self.store.update(fresh)
                })?;
                self.wrote(updated.metadata.resource_version.as_ref());
            }
            Action::UpdateStatus(status) => {
                let updated = retry_on_conflict(|| {
                    let mut fresh: Deployment = self.store.get(&namespace, &name)?;
                    if fresh.metadata.uid != d.metadata.uid {
                        return Ok(fresh); // deleted and made again: its own sync will come
                    }
                    fresh.status = Some((*status).clone());
                    self.store.update_status(fresh)
                })?;
                self.wrote(updated.metadata.resource_version.as_ref());
            }
            Action::Event { reason, message } => {
                // An event that cannot be written must not fail the sync (client-go's recorder).
                let _ = events::record(
                    &self.store,
                    events::reference_to(d),
                    NORMAL,
                    &reason,
                    &message,
                    COMPONENT,
                );
            }
        }
        Ok(())
    }

    /// The background cascade: the ReplicaSets a deleted Deployment controlled are deleted.
    fn collect_garbage(&mut self, d: &Deployment) {
        for rs in self.owned_replicasets(d) {
            let namespace = rs.metadata.namespace.clone().unwrap_or_default();
            let name = rs.metadata.name.clone().unwrap_or_default();
            let preconditions = Preconditions {
                uid: rs.metadata.uid.clone(),
                resource_version: None,
            };
            if self
                .store
                .delete_with::<ReplicaSet>(&namespace, &name, &preconditions)
                .is_ok()
            {
                if let Ok(rv) = self.store.resource_version() {
                    self.last_write = self.last_write.max(rv);
                }
            }
        }
    }

    fn settle(&mut self) -> Result<()> {
        let timeout = self.settle_timeout;
        self.deployments.wait_for(self.last_write, timeout)?;
        self.replicasets.wait_for(self.last_write, timeout)?;
        self.pods.wait_for(self.last_write, timeout)?;
        Ok(())
    }

    fn wrote(&mut self, resource_version: Option<&String>) {
        if let Some(rv) = resource_version.and_then(|rv| rv.parse().ok()) {
            self.last_write = self.last_write.max(rv);
        }
    }
}

fn retry_on_conflict<T>(mut change: impl FnMut() -> Result<T>) -> Result<T> {
    let mut attempts = 0;
    loop {
        match change() {
            Err(e) if e.is_conflict() && attempts < 10 => attempts += 1,
            other => return other,
        }
    }
}

fn enqueue(queue: &Mutex<BTreeSet<String>>, key: String) {
    lock(queue).insert(key);
}

/// A ReplicaSet's change wakes the Deployment that controls it.
fn enqueue_owner(queue: &Mutex<BTreeSet<String>>, rs: &ReplicaSet) {
    if let Some(owner) = controller_of(&rs.metadata).filter(|o| o.kind == "Deployment") {
        let namespace = rs.metadata.namespace.clone().unwrap_or_default();
        enqueue(queue, format!("{namespace}/{}", owner.name));
    }
}

/// A ReplicaSet's change wakes its controlling Deployment, or, for an orphan, every
/// Deployment whose selector matches its labels (one that may adopt it).
fn enqueue_for(
    queue: &Mutex<BTreeSet<String>>,
    deployments: &Indexer<Deployment>,
    rs: &ReplicaSet,
) {
    if controller_of(&rs.metadata).is_some() {
        return enqueue_owner(queue, rs);
    }
    let namespace = rs.metadata.namespace.clone().unwrap_or_default();
    for d in deployments
        .by_index(NAMESPACE_INDEX, &namespace)
        .unwrap_or_default()
    {
        let selector = d.spec.as_ref().map(|s| &s.selector);
        if Selector::from_label_selector(selector, "spec.selector")
            .is_ok_and(|s| !s.is_empty() && s.matches(rs.metadata.labels.as_ref()))
        {
            enqueue(queue, object_key(&d.metadata));
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
