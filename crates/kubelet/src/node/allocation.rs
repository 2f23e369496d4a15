//! The node agent's record of each pod's resources, for in-place resize (kubelet's allocation
//! manager, which checkpoints `allocated_pods_state` and `actuated_pods_state` so that a
//! restarted kubelet neither re-admits nor re-actuates what it did before).
//!
//! One file per pod, `<root>/pods/<uid>/allocation.json` (state root 0700, removed with the
//! pod's folder): the resources the node **allocated** to each resizable container (admitted:
//! the pod runs with these, whatever its spec asks for meanwhile) and those **actuated** (handed
//! to the runtime, which accepted them: at CreateContainer, or at an UpdateContainerResources of
//! a resize). A resize is in progress while a running container's two differ.
//!
//! [`Resizes`] is the node's list of pods whose resize is Deferred: a pod leaving the node, or a
//! resize admitted, wakes them to try again (kubelet's `RetryPendingResizes`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use crate::resize::{self, Allocation};

use super::worker::WorkerMsg;

/// One pod's allocated and actuated resources.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodAllocation {
    pub allocated: Allocation,
    pub actuated: Allocation,
}

impl PodAllocation {
    /// `<root>/pods/<uid>/allocation.json`.
    pub fn path(root: &Path, uid: &str) -> PathBuf {
        root.join("pods").join(uid).join("allocation.json")
    }

    /// The pod's record, if the node wrote one.
    pub fn load(path: &Path) -> Option<PodAllocation> {
        let text = std::fs::read(path).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The record of a pod admitted now: allocated as its spec asks, and taken as actuated
    /// (its containers are made from the allocation; a pod found running by a new agent,
    /// without a record, runs what its spec asked for when it started).
    pub fn admitted(pod: &Pod) -> PodAllocation {
        let allocated = resize::requested(pod);
        PodAllocation {
            actuated: allocated.clone(),
            allocated,
        }
    }

    /// Written whole (a new file renamed over the old one), readable by root alone.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(dir) = path.parent() {
            // As the volumes make it, if they have not yet: 0750, root's.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(crate::volume::POD_DIR_MODE)
                .create(dir)?;
        }
        let partial = path.with_extension("json.partial");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)?;
        file.write_all(&serde_json::to_vec(self).expect("an allocation serializes"))?;
        std::fs::rename(&partial, path)
    }
}

/// The pods admitted to this node besides `uid`, each at its allocated resources: what a
/// resize must fit beside. Pods in a terminal phase hold nothing.
pub fn admitted_others(root: &Path, store: &podlab_control::Store, uid: &str) -> Vec<Pod> {
    let Ok((pods, _)) = store.list::<Pod>(None) else {
        return Vec::new();
    };
    pods.into_iter()
        .filter(|p| p.metadata.uid.as_deref().is_some_and(|u| u != uid))
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .map(|p| {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            match PodAllocation::load(&PodAllocation::path(root, &uid)) {
                Some(allocation) => resize::allocated_pod(&p, &allocation.allocated),
                None => p,
            }
        })
        .collect()
}

/// The pods whose resize is Deferred, each with its worker's channel.
#[derive(Default)]
pub struct Resizes {
    deferred: Mutex<BTreeMap<String, Sender<WorkerMsg>>>,
}

impl Resizes {
    /// Notes whether `uid`'s resize is Deferred now.
    pub fn set_deferred(&self, uid: &str, deferred: bool, wake: &Sender<WorkerMsg>) {
        let mut list = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        if deferred {
            list.insert(uid.to_string(), wake.clone());
        } else {
            list.remove(uid);
        }
    }

    /// `uid`'s worker ended: its resize is no longer tried.
    pub fn forget(&self, uid: &str) {
        let mut list = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        list.remove(uid);
    }

    /// Something may have made room: every Deferred resize but `except`'s is tried again.
    pub fn retry(&self, except: Option<&str>) {
        let list = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        for (uid, wake) in list.iter() {
            if Some(uid.as_str()) != except {
                let _ = wake.send(WorkerMsg::Wake);
            }
        }
    }
}
