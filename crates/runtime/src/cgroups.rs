//! The runtime's cgroups, as containerd's CRI plugin and runc place them: the pod's cgroup
//! (kubelet's `kubepods/<qos>/pod<uid>`, named by the sandbox config's `cgroup_parent` and given
//! the pod-level values kubelet computes), and below it one cgroup per container, the pause
//! sandbox included, named by its id, given its own values and the device rules. A container
//! of CreateContainer gets its cgroup from the shim at its start (containerd's CRI runs
//! `runc create`, which makes it, in StartContainer); the first container of a pod made with
//! it (`run`) gets its while the shim starts.
//!
//! Every process podlab starts enters its cgroup and takes its `oom_score_adj` first thing
//! after the fork ([`Placement::enter`]), before it joins a namespace or allocates anything of
//! the container's. The pause process is the exception: the caller makes the pod's and the
//! pause's cgroups while the shim starts and the pause makes the pod's namespaces, and the
//! pause enters them once told, before its mount namespace and root (as runc's parent places
//! its init once that has made its namespaces). The cgroups go with their sandbox and
//! container (RemoveContainer, RemovePodSandbox, a failed RunPodSandbox); the pod's and its QoS
//! folder's when empty; and `gc` removes every cgroup below this root whose sandbox or
//! container is gone.
//!
//! `oom_score_adj` below the current value needs CAP_SYS_RESOURCE. Without it (a container
//! host that withholds it, as this lab's machine does), a lower value is kept at the current
//! one, as containerd's `restrict_oom_score_adj` does, rather than failing the start.

use std::collections::BTreeSet;
use std::path::Path;

use podlab_cgroups::{devices, memory, Cgroup, CgroupRoot, Hierarchy, QosClass};
use serde::{Deserialize, Serialize};

use crate::init::{failure, Step};
use crate::state::Layout;
use crate::Result;

/// containerd's `oom_score_adj` for the pause process (`defaultSandboxOOMAdj`).
pub const SANDBOX_OOM_SCORE_ADJ: i32 = -998;

/// The levels above a container's cgroup that may be removed when left empty: pod, QoS
/// folder (or kubepods for Guaranteed), kubepods, podlab's root.
const PRUNE_LEVELS: usize = 4;

/// The node's cgroups: the hierarchy and podlab's root in it. None when cgroups are off
/// (`PODLAB_CGROUPS=off`, kubelet's `--cgroups-per-qos=false`), when not root, or when the
/// machine has no cgroups.
#[derive(Debug, Clone)]
pub struct NodeCgroups {
    pub hierarchy: Hierarchy,
    pub root: CgroupRoot,
}

impl NodeCgroups {
    pub fn detect(state_root: &Path) -> Option<NodeCgroups> {
        let off = std::env::var("PODLAB_CGROUPS")
            .is_ok_and(|v| matches!(v.as_str(), "off" | "false" | "0"));
        if off || !nix::unistd::geteuid().is_root() {
            return None;
        }
        let hierarchy = Hierarchy::detect().ok()?;
        Some(NodeCgroups {
            hierarchy,
            root: CgroupRoot::for_state_root(state_root),
        })
    }

    /// The pod's cgroup for a sandbox config's `cgroup_parent` (relative to podlab's root).
    pub fn pod(&self, cgroup_parent: &str) -> Cgroup {
        self.hierarchy.cgroup(&format!(
            "{}/{}",
            self.root.name,
            cgroup_parent.trim_matches('/')
        ))
    }

    /// Makes the pod's cgroup with its values (kubelet's pod container manager).
    pub fn make_pod(
        &self,
        cgroup_parent: &str,
        resources: &podlab_cgroups::Resources,
    ) -> Result<Cgroup> {
        let pod = self.pod(cgroup_parent);
        pod.create()?;
        // kubelet gives the BestEffort folder the least share once, when it makes it.
        if let Some(qos) = pod.parent().filter(|p| p.relative.ends_with("/besteffort")) {
            podlab_cgroups::cpu::set_shares(&qos, podlab_cgroups::cpu::MIN_SHARES)?;
        }
        resources.apply(&pod)?;
        Ok(pod)
    }

    /// The node's folders that no pod uses any more: each QoS folder, `kubepods` and podlab's
    /// root, removed when empty (no process, no child); never a pod's folder (a pod being made
    /// may not have its first container's yet), never killing. What is in use stays.
    pub fn remove_node_folders_if_empty(&self) {
        if self.root.name.is_empty() {
            return;
        }
        let kubepods = self.hierarchy.cgroup(&self.root.kubepods());
        for qos in [QosClass::Burstable, QosClass::BestEffort] {
            if let Some(folder) = qos.folder() {
                kubepods.child(folder).remove_if_empty(0);
            }
        }
        // Then podlab's root, once `kubepods` is gone.
        kubepods.remove_if_empty(1);
    }

    /// Every cgroup below podlab's root whose sandbox or container no longer exists: removed
    /// (with what still runs there), then the folders above them that are left empty. The
    /// whole root is walked, not only `kubepods`: a CRI client's `cgroup_parent` may name any
    /// folder below it (`podlab-cri/<name>` when it names none). Returns the removed cgroups'
    /// paths.
    pub fn sweep(&self, layout: &Layout) -> Result<Vec<String>> {
        // `PODLAB_CGROUP_ROOT=/` would make the hierarchy's own root podlab's: walking that
        // would reach every cgroup of the host.
        if self.root.name.is_empty() {
            return Ok(Vec::new());
        }
        let mut alive: BTreeSet<String> = BTreeSet::new();
        for sandbox in layout.sandbox_ids()? {
            let paths = layout.sandbox(&sandbox);
            alive.extend(paths.container_ids()?.iter().map(|c| c.to_string()));
            alive.insert(sandbox.to_string());
        }
        let root = self.hierarchy.cgroup(&self.root.name);
        let mut removed = Vec::new();
        sweep_below(&root, &alive, &mut removed)?;
        root.remove_if_empty(0);
        Ok(removed)
    }
}

/// Below `folder`: a cgroup named by a sandbox or container id (64 hex digits) that is not
/// alive is removed, with what runs in it; one that is alive stays, with all below it (its
/// container may make its own). Other folders (a pod's, a QoS class's, a `cgroup_parent`'s)
/// are walked, then removed when left empty with no process in them: a remover killed between
/// its pod's rmdir and its ancestors' leaves such folders. Nothing else is killed, whatever a
/// `PODLAB_CGROUP_ROOT` shared with others holds.
fn sweep_below(folder: &Cgroup, alive: &BTreeSet<String>, removed: &mut Vec<String>) -> Result<()> {
    for child in folder.children()? {
        let name = child.relative.rsplit('/').next().unwrap_or_default();
        if crate::id::is_full_id(name) {
            if !alive.contains(name) {
                child.remove()?;
                removed.push(child.relative.clone());
            }
            continue;
        }
        sweep_below(&child, alive, removed)?;
        if child.children()?.is_empty() && child.remove_if_empty(0) {
            removed.push(child.relative.clone());
        }
    }
    Ok(())
}

/// Which of the folders above a container's cgroup its removal takes when they are left
/// empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prune {
    /// The pod's folder only: the node's (QoS folder, `kubepods`, podlab's root) stay for the
    /// next pod ([`crate::Runtime::keep_node_cgroups`]).
    PodOnly,
    /// The pod's folder and each node folder above it that is left empty.
    UpToRoot,
}

/// Removes a sandbox's or container's cgroup (killing what is left in it), then its pod's and,
/// as `prune` says, the folders above when they are left empty.
pub fn remove_with_pod(cgroup: &Cgroup, prune: Prune) -> Result<()> {
    cgroup.remove()?;
    if let Some(pod) = cgroup.parent() {
        pod.remove_if_empty(match prune {
            Prune::PodOnly => 0,
            Prune::UpToRoot => PRUNE_LEVELS - 1,
        });
    }
    Ok(())
}

/// Makes a container's (or the sandbox's) cgroup below the pod's: its values, and runc's
/// device rules (v1 `devices.*` files, v2 a BPF device program); a privileged container gets
/// every device, as containerd gives it.
pub fn make_container(
    pod: &Cgroup,
    id: &str,
    resources: &podlab_cgroups::Resources,
    privileged: bool,
) -> Result<Cgroup> {
    let cgroup = pod.child(id);
    cgroup.create()?;
    let made = resources.apply(&cgroup).and_then(|()| {
        if privileged {
            devices::apply_privileged(&cgroup).map(drop)
        } else {
            devices::apply_default(&cgroup).map(drop)
        }
    });
    if let Err(e) = made {
        let _ = cgroup.remove();
        return Err(e.into());
    }
    Ok(cgroup)
}

/// Whether the OOM killer killed a process of the container's cgroup: containerd's OOM event,
/// which makes the exit's reason `OOMKilled`.
pub fn oom_killed(cgroup: &Cgroup) -> bool {
    memory::oom_kills(cgroup).is_ok_and(|kills| kills > 0)
}

/// Where a forked process goes before anything else: its cgroup and its `oom_score_adj`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub cgroup: Option<Cgroup>,
    pub oom_score_adj: Option<i32>,
}

impl Placement {
    /// In the forked child: enter the cgroup (every hierarchy), then set `oom_score_adj`.
    pub fn enter(&self) -> Step<()> {
        self.enter_cgroup()?;
        self.set_oom_score_adj()
    }

    /// In the forked child: enter the cgroup (every hierarchy).
    pub fn enter_cgroup(&self) -> Step<()> {
        match &self.cgroup {
            Some(cgroup) => cgroup.enter_self().map_err(|e| {
                failure(
                    "enter the cgroup",
                    None,
                    e.raw_os_error().map(nix::Error::from_raw),
                    e.to_string(),
                )
            }),
            None => Ok(()),
        }
    }

    /// In the forked child: set `oom_score_adj`.
    pub fn set_oom_score_adj(&self) -> Step<()> {
        match self.oom_score_adj {
            Some(value) => set_oom_score_adj(value),
            None => Ok(()),
        }
    }
}

/// Writes `/proc/self/oom_score_adj`. A value below what this process may set without
/// CAP_SYS_RESOURCE (EACCES) is kept at the current value, as containerd's
/// `restrict_oom_score_adj`.
pub fn set_oom_score_adj(value: i32) -> Step<()> {
    let path = Path::new("/proc/self/oom_score_adj");
    match std::fs::write(path, value.to_string()) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) && value < 0 => Ok(()),
        Err(e) => Err(failure(
            "set oom_score_adj",
            Some(path),
            e.raw_os_error().map(nix::Error::from_raw),
            format!("writing {value}: {e}"),
        )),
    }
}
