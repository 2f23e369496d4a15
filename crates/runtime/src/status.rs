//! What the runtime answers: sandbox and container statuses (CRI `PodSandboxStatus`,
//! `ContainerStatus`), the filters of the list calls, and the result of an exec.

use std::collections::BTreeMap;
use std::path::PathBuf;

use podlab_ns::NsKind;
use serde::{Deserialize, Serialize};

use crate::config::{ContainerMetadata, PodSandboxMetadata};
use crate::id::{ContainerId, SandboxId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxState {
    /// The pause process runs and holds the pod's namespaces.
    Ready,
    /// Stopped, or broken (its shim or pause process is gone).
    NotReady,
}

/// Whose network namespace the pod has (CRI `NamespaceMode` of the network).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetworkMode {
    /// Its own, held by the pause process.
    Pod,
    /// The node's (`hostNetwork: true`).
    Node,
}

/// A namespace of the pod kept alive by a bind mount in the sandbox folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedNamespace {
    pub kind: NsKind,
    pub path: PathBuf,
    /// The namespace's inode id, as `/proc/PID/ns/KIND` shows it.
    pub inode: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxStatus {
    pub id: SandboxId,
    pub metadata: PodSandboxMetadata,
    pub state: SandboxState,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    pub network_mode: NetworkMode,
    /// The pod IP; None until a network plugin gives one (and always with `hostNetwork`).
    pub ip: Option<String>,
    pub additional_ips: Vec<String>,
    pub hostname: String,
    pub pause_pid: Option<i32>,
    pub shim_pid: Option<i32>,
    /// The pinned namespaces (uts, ipc, net unless hostNetwork, pid when shared).
    pub namespaces: Vec<PinnedNamespace>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub log_directory: Option<PathBuf>,
    /// Why the sandbox is NotReady, when it is.
    pub reason: Option<String>,
}

impl SandboxStatus {
    /// The inode id of one pinned namespace.
    pub fn namespace_inode(&self, kind: NsKind) -> Option<u64> {
        self.namespaces
            .iter()
            .find(|ns| ns.kind == kind)
            .map(|ns| ns.inode)
    }

    pub fn namespace_path(&self, kind: NsKind) -> Option<&std::path::Path> {
        self.namespaces
            .iter()
            .find(|ns| ns.kind == kind)
            .map(|ns| ns.path.as_path())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    /// Recorded as running, but its shim is gone: nobody can say how it is.
    Unknown,
}

impl std::fmt::Display for ContainerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ContainerState::Created => "created",
            ContainerState::Running => "running",
            ContainerState::Exited => "exited",
            ContainerState::Unknown => "unknown",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerStatus {
    pub id: ContainerId,
    pub sandbox_id: SandboxId,
    pub metadata: ContainerMetadata,
    pub state: ContainerState,
    /// Nanoseconds since the epoch; 0 when it has not happened.
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: Option<i32>,
    /// `Completed` (exit 0), `Error`, `StartError`; None while it has not exited.
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The image name as asked for, and the id it resolved to.
    pub image: String,
    pub image_id: String,
    pub pid: Option<i32>,
    pub log_path: PathBuf,
    /// The container process's namespaces (inode ids), recorded when it started.
    pub namespaces: BTreeMap<NsKind, u64>,
    /// How long each step of its start took, from the shim's fork to the `execve`.
    pub start_trace: Vec<crate::report::StartStep>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The identity its first process got (uid, gid, groups), read from the kernel when it
    /// started; None before it started, or when it could not be read.
    pub user: Option<crate::process::LinuxUser>,
}

/// Which containers `list_containers` returns; empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerFilter {
    pub id: Option<ContainerId>,
    pub sandbox_id: Option<SandboxId>,
    pub state: Option<ContainerState>,
    /// Every one of these labels must be on the container.
    pub labels: BTreeMap<String, String>,
}

impl ContainerFilter {
    pub fn matches(&self, status: &ContainerStatus) -> bool {
        self.id.as_ref().is_none_or(|id| *id == status.id)
            && self
                .sandbox_id
                .as_ref()
                .is_none_or(|id| *id == status.sandbox_id)
            && self.state.is_none_or(|s| s == status.state)
            && labels_match(&self.labels, &status.labels)
    }
}

/// Which sandboxes `list_pod_sandboxes_filtered` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxFilter {
    pub id: Option<SandboxId>,
    pub state: Option<SandboxState>,
    pub labels: BTreeMap<String, String>,
}

impl SandboxFilter {
    pub fn matches(&self, status: &SandboxStatus) -> bool {
        self.id.as_ref().is_none_or(|id| *id == status.id)
            && self.state.is_none_or(|s| s == status.state)
            && labels_match(&self.labels, &status.labels)
    }
}

fn labels_match(wanted: &BTreeMap<String, String>, have: &BTreeMap<String, String>) -> bool {
    wanted.iter().all(|(k, v)| have.get(k) == Some(v))
}

/// What `exec_sync` brings back (CRI `ExecSyncResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecResult {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The exit status; 128+N when killed by signal N.
    pub exit_code: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_filters_need_every_label() {
        let mut have = BTreeMap::new();
        have.insert("app".to_string(), "web".to_string());
        have.insert("tier".to_string(), "front".to_string());
        let mut wanted = BTreeMap::new();
        assert!(labels_match(&wanted, &have));
        wanted.insert("app".to_string(), "web".to_string());
        assert!(labels_match(&wanted, &have));
        wanted.insert("tier".to_string(), "back".to_string());
        assert!(!labels_match(&wanted, &have));
    }
}
