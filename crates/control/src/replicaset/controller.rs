//! The ReplicaSet controller's driver: kube-controller-manager's loop around the pure
//! [`reconcile`].
//!
//! Two informers (pods with the built-in pod indexes, ReplicaSets with the namespace index)
//! feed a queue of ReplicaSet keys, routed as upstream routes them: a pod change wakes its
//! controller, and an orphan's change wakes the ReplicaSets of its namespace whose selectors
//! match it. A sync looks the ReplicaSet's pods up in the controller-UID index under its key
//! and its namespace's orphan key (never by scanning the pod cache; [`SyncReport`] says how
//! many pods were handed out), reconciles, and carries the actions out against the store:
//! adoptions and releases as updates that carry the pod's resourceVersion (a stale cache is a
//! Conflict, and the key is synced again), creations one after another that stop at the first
//! error (upstream's `slowStartBatch` stops after a failing batch; here every batch is one pod),
//! deletions with the pod's UID as precondition, and events. Before an adoption it reads the ReplicaSet fresh from the store and adopts only if
//! it is the same object and not being deleted (upstream's `RecheckDeletionTimestamp`).
//!
//! Upstream avoids acting twice on a cache that has not caught up with its own writes by
//! counting "expectations"; here the store numbers every write, so the driver simply waits until
//! both informers have seen the last resourceVersion it wrote.
//!
//! When a ReplicaSet is deleted, the pods it controlled are deleted too: the garbage
//! collector's background cascade, done here for this one kind.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;

use super::reconcile::{controller_ref, reconcile, Action, PodRef};
use super::status::{calculate_status, is_pod_active, Failure};
use crate::error::{Error, Result};
use crate::events::{self, NORMAL, WARNING};
use crate::indexer::Indexer;
use crate::indexes::{
    controller_index_key, orphan_index_key, pod_indexers, NAMESPACE_INDEX, POD_CONTROLLER_UID_INDEX,
};
use crate::informer::{HandlerFuncs, Informer};
use crate::kind::{controller_of, object_key};
use crate::selector::Selector;
use crate::store::{PodDeletion, Preconditions, Store};

/// The component name on events, as kube-controller-manager's.
pub const COMPONENT: &str = "replicaset-controller";

/// How the driver behaves.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Delete surplus pods gracefully (a pod on a node gets a `deletionTimestamp` and its node
    /// agent finishes it) rather than removing them from the store at once.
    pub graceful_delete: bool,
    /// Record events (`SuccessfulCreate`, `SuccessfulDelete`, `FailedCreate`...).
    pub record_events: bool,
    /// How long a sync waits for the informers to see its own writes.
    pub settle_timeout: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            graceful_delete: true,
            record_events: true,
            settle_timeout: Duration::from_secs(10),
        }
    }
}

/// What one sync of one ReplicaSet did.
#[derive(Debug, Clone, Default)]
pub struct SyncReport {
    /// `namespace/name` of the ReplicaSet.
    pub key: String,
    /// The actions carried out (failed ones are in `errors`).
    pub done: Vec<Action>,
    pub errors: Vec<String>,
    /// Pods handed out by the pod cache for this sync: its own and its namespace's orphans.
    pub pods_examined: u64,
    /// Pods in the cache at the time, for comparison.
    pub pods_cached: usize,
}

/// The ReplicaSet controller, driven by its caller ([`sync_pending`](Self::sync_pending),
/// [`run_until_idle`](Self::run_until_idle), [`run`](Self::run)).
pub struct ReplicaSetController {
    store: Store,
    config: ControllerConfig,
    pods: Informer<Pod>,
    replicasets: Informer<ReplicaSet>,
    queue: Arc<Mutex<BTreeSet<String>>>,
    deleted_owners: Arc<Mutex<Vec<ReplicaSet>>>,
    last_write: u64,
}

impl ReplicaSetController {
    pub fn new(store: Store, config: ControllerConfig) -> Self {
        let queue: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let deleted_owners: Arc<Mutex<Vec<ReplicaSet>>> = Arc::default();
        let mut pods = Informer::with_indexers(store.clone(), pod_indexers());
        let mut replicasets: Informer<ReplicaSet> = Informer::new(store.clone());
        let rs_cache = replicasets.indexer();

        let (q_add, q_update, q_delete) = (queue.clone(), queue.clone(), queue.clone());
        let (c_add, c_update, c_delete) = (rs_cache.clone(), rs_cache.clone(), rs_cache);
        pods.add_event_handler(
            HandlerFuncs::new()
                .on_add(move |pod: &Pod| enqueue_for_pod(&q_add, &c_add, pod))
                .on_update(move |old: &Pod, new: &Pod| {
                    let labels_changed = old.metadata.labels != new.metadata.labels;
                    let owner_changed =
                        controller_of(&old.metadata) != controller_of(&new.metadata);
                    if labels_changed || owner_changed {
                        enqueue_for_pod(&q_update, &c_update, old);
                    }
                    enqueue_for_pod(&q_update, &c_update, new);
                })
                .on_delete(move |pod: &Pod| enqueue_for_pod(&q_delete, &c_delete, pod)),
        );
        let (q_add, q_update) = (queue.clone(), queue.clone());
        let gone = deleted_owners.clone();
        replicasets.add_event_handler(
            HandlerFuncs::new()
                .on_add(move |rs: &ReplicaSet| enqueue(&q_add, object_key(&rs.metadata)))
                .on_update(move |_: &ReplicaSet, rs: &ReplicaSet| {
                    enqueue(&q_update, object_key(&rs.metadata))
                })
                .on_delete(move |rs: &ReplicaSet| lock(&gone).push(rs.clone())),
        );
        ReplicaSetController {
            store,
            config,
            pods,
            replicasets,
            queue,
            deleted_owners,
            last_write: 0,
        }
    }

    /// The pod cache with its indexes (`podControllerUID`, `spec.nodeName`, `namespace`).
    pub fn pod_indexer(&self) -> Arc<Indexer<Pod>> {
        self.pods.indexer()
    }

    pub fn replicaset_indexer(&self) -> Arc<Indexer<ReplicaSet>> {
        self.replicasets.indexer()
    }

    /// Asks for a sync of the ReplicaSet `namespace/name`.
    pub fn enqueue(&self, key: &str) {
        enqueue(&self.queue, key.to_string());
    }

    /// Applies the changes that have arrived to both caches, waiting up to `timeout` for the
    /// first; returns how many were applied.
    pub fn pump(&mut self, timeout: Duration) -> Result<usize> {
        let replicasets = self.replicasets.pump(Duration::ZERO)?;
        let pods = self.pods.pump(timeout)?;
        Ok(replicasets + pods + self.replicasets.pump(Duration::ZERO)?)
    }

    /// Syncs every queued ReplicaSet once (and deletes the pods of deleted ones).
    pub fn sync_pending(&mut self) -> Result<Vec<SyncReport>> {
        self.pump(Duration::ZERO)?;
        let gone: Vec<ReplicaSet> = std::mem::take(&mut *lock(&self.deleted_owners));
        for rs in gone {
            self.collect_garbage(&rs)?;
        }
        let keys: Vec<String> = std::mem::take(&mut *lock(&self.queue))
            .into_iter()
            .collect();
        let mut reports = Vec::new();
        for key in keys {
            reports.push(self.sync_replicaset(&key)?);
        }
        self.settle()?;
        Ok(reports)
    }

    /// Syncs until nothing is queued (the ReplicaSets have converged) or `timeout` passes.
    pub fn run_until_idle(&mut self, timeout: Duration) -> Result<Vec<SyncReport>> {
        let deadline = Instant::now() + timeout;
        let mut reports = Vec::new();
        loop {
            self.pump(Duration::ZERO)?;
            let idle = lock(&self.queue).is_empty() && lock(&self.deleted_owners).is_empty();
            if idle || Instant::now() >= deadline {
                return Ok(reports);
            }
            reports.extend(self.sync_pending()?);
        }
    }

    /// Watches and syncs until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<()> {
        while !stop.load(Ordering::Relaxed) {
            self.pump(crate::watch::RECHECK)?;
            self.sync_pending()?;
        }
        Ok(())
    }

    /// One sync of one ReplicaSet.
    pub fn sync_replicaset(&mut self, key: &str) -> Result<SyncReport> {
        let mut report = SyncReport {
            key: key.to_string(),
            pods_cached: self.pods.indexer().len(),
            ..Default::default()
        };
        let Some(rs) = self.replicasets.indexer().get_by_key(key) else {
            return Ok(report); // deleted; its pods are collected by sync_pending
        };
        let namespace = rs.metadata.namespace.clone().unwrap_or_default();
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        let pod_cache = self.pods.indexer();
        let before = pod_cache.objects_read();
        let mut candidates =
            by_controller_index(&pod_cache, &controller_index_key(&namespace, &uid));
        candidates.extend(by_controller_index(
            &pod_cache,
            &orphan_index_key(&namespace),
        ));
        report.pods_examined = pod_cache.objects_read() - before;

        let now = crate::names::now().0;
        let mut can_adopt: Option<bool> = None;
        let mut failure: Option<Failure> = None;
        for action in reconcile(&rs, &candidates, now) {
            let outcome = match &action {
                Action::Release(pod) => self.release(&rs, pod),
                Action::Adopt(pod) => {
                    let allowed = *can_adopt.get_or_insert_with(|| self.still_adoptable(&rs));
                    if !allowed {
                        continue;
                    }
                    self.adopt(&rs, pod)
                }
                Action::Create(pod) => {
                    if failure.is_some() {
                        continue; // as slowStartBatch: after a failure, create no more
                    }
                    let result = self.create(&rs, pod);
                    if let Err(e) = &result {
                        failure = Some(Failure {
                            reason: "FailedCreate".into(),
                            message: e.to_string(),
                        });
                    }
                    result
                }
                Action::Delete(pod) => {
                    let result = self.delete(&rs, pod);
                    if let Err(e) = &result {
                        failure = Some(Failure {
                            reason: "FailedDelete".into(),
                            message: e.to_string(),
                        });
                    }
                    result
                }
                Action::UpdateStatus(status) => {
                    let status = match &failure {
                        // Report the failure in the status written by this same sync.
                        Some(failure) => {
                            let owned = owned_pods(&rs, &candidates);
                            Box::new(calculate_status(&rs, &owned, Some(failure), now))
                        }
                        None => status.clone(),
                    };
                    self.update_status(&rs, *status)
                }
            };
            match outcome {
                Ok(()) => report.done.push(action),
                Err(e) => {
                    report.errors.push(e.to_string());
                    self.enqueue(key); // try again once the caches have caught up
                }
            }
        }
        if failure.is_some()
            && !report
                .done
                .iter()
                .any(|a| matches!(a, Action::UpdateStatus(_)))
        {
            let owned = owned_pods(&rs, &candidates);
            let status = calculate_status(&rs, &owned, failure.as_ref(), now);
            if let Err(e) = self.update_status(&rs, status) {
                report.errors.push(e.to_string());
            }
        }
        self.settle()?;
        Ok(report)
    }

    /// Waits until both caches reflect this controller's last write.
    fn settle(&mut self) -> Result<()> {
        let timeout = self.config.settle_timeout;
        self.pods.wait_for(self.last_write, timeout)?;
        self.replicasets.wait_for(self.last_write, timeout)?;
        Ok(())
    }

    fn wrote(&mut self, resource_version: Option<&String>) {
        if let Some(rv) = resource_version.and_then(|rv| rv.parse().ok()) {
            self.last_write = self.last_write.max(rv);
        }
    }

    fn still_adoptable(&self, cached: &ReplicaSet) -> bool {
        let namespace = cached.metadata.namespace.as_deref().unwrap_or_default();
        let name = cached.metadata.name.as_deref().unwrap_or_default();
        match self.store.get::<ReplicaSet>(namespace, name) {
            Ok(fresh) => {
                fresh.metadata.uid == cached.metadata.uid
                    && fresh.metadata.deletion_timestamp.is_none()
            }
            Err(_) => false,
        }
    }

    fn cached_pod(&self, pod: &PodRef) -> Result<Pod> {
        let key = format!("{}/{}", pod.namespace, pod.name);
        self.pods
            .indexer()
            .get_by_key(&key)
            .map(|p| (*p).clone())
            .ok_or_else(|| Error::NotFound {
                resource: "pods",
                name: pod.name.clone(),
            })
    }

    fn adopt(&mut self, rs: &ReplicaSet, pod: &PodRef) -> Result<()> {
        let mut patched = self.cached_pod(pod)?;
        patched
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(controller_ref(rs));
        let updated = self.store.update(patched)?;
        self.wrote(updated.metadata.resource_version.as_ref());
        Ok(())
    }

    fn release(&mut self, rs: &ReplicaSet, pod: &PodRef) -> Result<()> {
        let mut patched = match self.cached_pod(pod) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        let uid = rs.metadata.uid.as_deref().unwrap_or_default();
        if let Some(owners) = patched.metadata.owner_references.as_mut() {
            owners.retain(|o| o.uid != uid);
        }
        if patched
            .metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| o.is_empty())
        {
            patched.metadata.owner_references = None;
        }
        match self.store.update(patched) {
            Ok(updated) => {
                self.wrote(updated.metadata.resource_version.as_ref());
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()), // gone already: nothing to release
            Err(e) => Err(e),
        }
    }

    fn create(&mut self, rs: &ReplicaSet, pod: &Pod) -> Result<()> {
        match self.store.create(pod.clone()) {
            Ok(created) => {
                self.wrote(created.metadata.resource_version.as_ref());
                let name = created.metadata.name.unwrap_or_default();
                self.event(
                    rs,
                    NORMAL,
                    "SuccessfulCreate",
                    &format!("Created pod: {name}"),
                );
                Ok(())
            }
            Err(e) => {
                self.event(rs, WARNING, "FailedCreate", &format!("Error creating: {e}"));
                Err(e)
            }
        }
    }

    fn delete(&mut self, rs: &ReplicaSet, pod: &PodRef) -> Result<()> {
        match self.delete_pod(pod) {
            Ok(()) => {
                self.event(
                    rs,
                    NORMAL,
                    "SuccessfulDelete",
                    &format!("Deleted pod: {}", pod.name),
                );
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => {
                self.event(rs, WARNING, "FailedDelete", &format!("Error deleting: {e}"));
                Err(e)
            }
        }
    }

    fn delete_pod(&mut self, pod: &PodRef) -> Result<()> {
        let preconditions = Preconditions {
            uid: Some(pod.uid.clone()),
            resource_version: None,
        };
        if self.config.graceful_delete {
            let outcome = self.store.delete_pod_gracefully(
                &pod.namespace,
                &pod.name,
                None,
                &preconditions,
            )?;
            if let PodDeletion::Terminating(p) = &outcome {
                self.wrote(p.metadata.resource_version.as_ref());
            }
        } else {
            self.store
                .delete_with::<Pod>(&pod.namespace, &pod.name, &preconditions)?;
        }
        self.last_write = self.last_write.max(self.store.resource_version()?);
        Ok(())
    }

    fn update_status(
        &mut self,
        rs: &ReplicaSet,
        status: k8s_openapi::api::apps::v1::ReplicaSetStatus,
    ) -> Result<()> {
        let mut next = rs.clone();
        next.status = Some(status);
        let updated = self.store.update_status(next)?;
        self.wrote(updated.metadata.resource_version.as_ref());
        Ok(())
    }

    /// The background cascade: the pods a deleted ReplicaSet controlled are deleted.
    fn collect_garbage(&mut self, rs: &ReplicaSet) -> Result<()> {
        let namespace = rs.metadata.namespace.as_deref().unwrap_or_default();
        let uid = rs.metadata.uid.as_deref().unwrap_or_default();
        let dependents =
            by_controller_index(&self.pods.indexer(), &controller_index_key(namespace, uid));
        for pod in dependents {
            let owned = controller_of(&pod.metadata).is_some_and(|o| o.kind == "ReplicaSet");
            if owned && pod.metadata.deletion_timestamp.is_none() {
                match self.delete_pod(&PodRef::of(&pod)) {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() || e.is_conflict() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    fn event(&self, rs: &ReplicaSet, event_type: &str, reason: &str, message: &str) {
        if !self.config.record_events {
            return;
        }
        // An event that cannot be written must not fail the sync, as with client-go's recorder.
        let _ = events::record(
            &self.store,
            events::reference_to(rs),
            event_type,
            reason,
            message,
            COMPONENT,
        );
    }
}

/// The active pods among the candidates that this ReplicaSet controls or would adopt.
fn owned_pods(rs: &ReplicaSet, candidates: &[Arc<Pod>]) -> Vec<Arc<Pod>> {
    let Some(spec) = &rs.spec else {
        return Vec::new();
    };
    let Ok(selector) = Selector::from_label_selector(Some(&spec.selector), "spec.selector") else {
        return Vec::new();
    };
    super::reconcile::claim_pods(rs, &selector, candidates)
        .owned
        .into_iter()
        .filter(|p| is_pod_active(p))
        .collect()
}

fn by_controller_index(cache: &Indexer<Pod>, value: &str) -> Vec<Arc<Pod>> {
    cache
        .by_index(POD_CONTROLLER_UID_INDEX, value)
        .expect("the controller registers the podControllerUID index")
}

fn enqueue(queue: &Mutex<BTreeSet<String>>, key: String) {
    lock(queue).insert(key);
}

/// Upstream's pod event routing: the controller if the pod has one (and it is cached under
/// that UID), else every ReplicaSet of the namespace whose selector matches the pod.
fn enqueue_for_pod(queue: &Mutex<BTreeSet<String>>, replicasets: &Indexer<ReplicaSet>, pod: &Pod) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    if let Some(owner) = controller_of(&pod.metadata) {
        if owner.kind == "ReplicaSet" {
            let key = format!("{namespace}/{}", owner.name);
            let same = replicasets
                .get_by_key(&key)
                .is_some_and(|rs| rs.metadata.uid.as_deref() == Some(owner.uid.as_str()));
            if same {
                enqueue(queue, key);
            }
        }
        return;
    }
    let in_namespace = replicasets
        .by_index(NAMESPACE_INDEX, &namespace)
        .expect("the ReplicaSet informer has the namespace index");
    for rs in in_namespace {
        let selector = rs
            .spec
            .as_ref()
            .and_then(|s| Selector::from_label_selector(Some(&s.selector), "spec.selector").ok());
        if selector.is_some_and(|s| !s.is_empty() && s.matches(pod.metadata.labels.as_ref())) {
            enqueue(queue, object_key(&rs.metadata));
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
