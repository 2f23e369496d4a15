//! `gc`: removes what a crashed podlab left behind, so that `kill -9` of any of its processes
//! followed by a gc leaves no pin, mount, process or folder.
//!
//! A sandbox whose shim is alive is left alone, unless nobody finished making it (no
//! sandbox.json, and its lock is free, so its maker is dead). Everything else without a living
//! shim is cleaned: its processes are found by the kernel's word, as every process whose ipc,
//! net, uts or pid namespace is one the pod pinned (and by the recorded pause and container
//! identities, pid + start time), and SIGKILLed through pidfds; its mounts (pins, the pod's
//! /dev/shm) are detached; a sandbox that was Ready when its shim died is removed, while a
//! cleanly stopped one keeps its records for RemovePodSandbox. Last, shims and pause processes
//! of this root whose sandbox folder is gone are killed, and every cgroup below this root's
//! cgroup root whose sandbox or container is gone is removed with what still ran in it.
//!
//! A sandbox that was Ready still holds its network: between the kill and the unpin, its network
//! namespace is handed to the network plugin for a teardown (CNI DEL, which releases the IP
//! lease, whether the built-in IPAM or host-local holds it), as StopPodSandbox would have done.
//! A teardown that fails keeps the namespace pinned and the sandbox in place, so that the next
//! gc tries the DEL again: CNI wants a DEL for every ADD. Before the DEL, the plugins still
//! running for the sandbox (an ADD its killed maker had started) are killed and waited for, so
//! that none writes a lease after the DEL.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use podlab_ns::NsKind;
use serde::{Deserialize, Serialize};

use crate::id::SandboxId;
use crate::liveness::{wait_all_exit, Pidfd};
use crate::runtime::{remove_tree, Runtime};
use crate::sandbox::{open_alive, EXIT_WAIT};
use crate::state::{self, ContainerRecord, SandboxLock, SandboxPaths, SandboxRecord, ShimRecord};
use crate::status::{ContainerState, SandboxState};
use crate::Result;

/// What a gc did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReport {
    /// Sandboxes removed whole (their shim had died while they were Ready, or they were never
    /// finished).
    pub sandboxes_removed: Vec<SandboxId>,
    /// Stopped sandboxes that still had something running or mounted.
    pub sandboxes_cleaned: Vec<SandboxId>,
    /// Processes killed (pids).
    pub processes_killed: Vec<i32>,
    /// Mounts detached (pins, shm).
    pub unmounted: Vec<PathBuf>,
    /// Sandboxes skipped because another podlab process holds their lock.
    pub busy: Vec<SandboxId>,
    /// Sandboxes whose network the plugin tore down (their IP released).
    #[serde(default)]
    pub networks_released: Vec<SandboxId>,
    /// Sandboxes kept because their network teardown failed, with the plugin's error.
    #[serde(default)]
    pub network_failures: Vec<(SandboxId, String)>,
    /// Cgroups removed (paths below each hierarchy's root): those of sandboxes and containers
    /// that are gone, and pods' left empty.
    #[serde(default)]
    pub cgroups_removed: Vec<String>,
}

/// What cleaning one sandbox did.
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    pub killed: Vec<i32>,
    pub unmounted: Vec<PathBuf>,
}

impl Leftovers {
    fn is_empty(&self) -> bool {
        self.killed.is_empty() && self.unmounted.is_empty()
    }
}

impl Runtime {
    pub fn gc(&self) -> Result<GcReport> {
        let mut report = GcReport::default();
        // Network teardowns and removals whose cleanup did not happen (a cleaner killed with
        // its server).
        self.finish_network_teardowns()?;
        self.empty_trash()?;
        for id in self.layout.sandbox_ids()? {
            let paths = self.layout.sandbox(&id);
            let Some(_lock) = SandboxLock::try_acquire(&paths.lock())? else {
                report.busy.push(id);
                continue;
            };
            let record = state::read_record::<SandboxRecord>(&paths.record())
                .ok()
                .flatten();
            let shim = state::read_record::<ShimRecord>(&paths.shim_record())
                .ok()
                .flatten();
            let shim_alive = shim.as_ref().is_some_and(|s| s.shim.is_alive());
            if shim_alive && record.is_some() {
                continue;
            }
            if shim_alive {
                // Half-made: its maker died between starting the shim and recording the sandbox.
                report.processes_killed.extend(kill_shim(&paths)?);
            }
            let mut leftovers = kill_sandbox_leftovers(&paths)?;
            // Without a record, its maker may have died after the network ADD (which comes
            // before the record): it gets its DEL too, or its lease would stay.
            let unfinished = record
                .is_none()
                .then(|| Self::unfinished_record(&paths))
                .flatten();
            let ready = record.as_ref().filter(|r| r.state == SandboxState::Ready);
            if let Some(ready) = ready.or(unfinished.as_ref()) {
                leftovers.killed.extend(kill_network_plugins(&id)?);
                match self.tear_down_network(ready, &paths) {
                    Ok(true) => report.networks_released.push(id.clone()),
                    Ok(false) => {}
                    Err(e) => {
                        report.processes_killed.extend(leftovers.killed);
                        report.network_failures.push((id.clone(), e.to_string()));
                        continue;
                    }
                }
            }
            detach_sandbox_leftovers(&paths, &mut leftovers)?;
            let stopped = record
                .as_ref()
                .is_some_and(|r| r.state == SandboxState::NotReady);
            if stopped {
                if !leftovers.is_empty() {
                    report.sandboxes_cleaned.push(id.clone());
                }
            } else {
                remove_tree(&paths.dir)?;
                report.sandboxes_removed.push(id.clone());
            }
            report.processes_killed.extend(leftovers.killed);
            report.unmounted.extend(leftovers.unmounted);
        }
        report.processes_killed.extend(self.kill_strays()?);
        if let Some(node) = &self.cgroups {
            report.cgroups_removed = node.sweep(&self.layout)?;
        }
        Ok(report)
    }

    /// Shims and pause processes of this root whose sandbox folder is gone, or (for pause) whose
    /// sandbox has no living shim.
    fn kill_strays(&self) -> Result<Vec<i32>> {
        let sandboxes = self.layout.sandboxes_dir();
        let mut pidfds = Vec::new();
        for pid in all_pids() {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let Some(program) = args.first().and_then(|a| Path::new(a).file_name()) else {
                continue;
            };
            let stray = if program == "podlab-shim" {
                args.windows(2)
                    .find(|w| w[0] == "--sandbox-dir")
                    .map(|w| PathBuf::from(&w[1]))
                    .is_some_and(|dir| dir.parent() == Some(sandboxes.as_path()) && !dir.exists())
            } else if program == "podlab-pause" {
                args.iter()
                    .find_map(|a| a.strip_prefix("sandbox="))
                    .map(PathBuf::from)
                    .filter(|dir| dir.parent() == Some(sandboxes.as_path()))
                    .is_some_and(|dir| {
                        !dir.exists()
                            || self
                                .live_shim(&SandboxPaths::new(dir))
                                .ok()
                                .flatten()
                                .is_none()
                    })
            } else {
                false
            };
            if !stray {
                continue;
            }
            if let Ok(pidfd) = Pidfd::open(pid) {
                let _ = pidfd.signal(libc::SIGKILL);
                pidfds.push(pidfd);
            }
        }
        finish_kills(&pidfds);
        Ok(pidfds.iter().map(|p| p.pid()).collect())
    }
}

/// SIGKILLs the sandbox's shim if it still runs (before cleaning a sandbox nobody will ask it
/// to shut down); returns its pid.
pub(crate) fn kill_shim(paths: &SandboxPaths) -> Result<Option<i32>> {
    let shim = state::read_record::<ShimRecord>(&paths.shim_record())
        .ok()
        .flatten();
    let Some(pidfd) = shim.and_then(|s| s.shim.open()) else {
        return Ok(None);
    };
    pidfd.signal(libc::SIGKILL)?;
    finish_kills(std::slice::from_ref(&pidfd));
    Ok(Some(pidfd.pid()))
}

/// Makes sure nothing of a sandbox whose shim is dead still runs or is mounted: kills every
/// process in the pod's pinned namespaces and every recorded one, then detaches every mount
/// in the sandbox folder. Never call it while the sandbox's shim lives.
pub(crate) fn clean_sandbox_leftovers(paths: &SandboxPaths) -> Result<Leftovers> {
    let mut leftovers = kill_sandbox_leftovers(paths)?;
    detach_sandbox_leftovers(paths, &mut leftovers)?;
    Ok(leftovers)
}

/// The first half of [`clean_sandbox_leftovers`]: every process of the sandbox killed, the
/// running containers recorded as killed; the namespaces stay pinned.
fn kill_sandbox_leftovers(paths: &SandboxPaths) -> Result<Leftovers> {
    let mut leftovers = Leftovers::default();
    let shim = state::read_record::<ShimRecord>(&paths.shim_record())
        .ok()
        .flatten();
    let mut inodes: BTreeSet<(NsKind, u64)> = BTreeSet::new();
    if let Some(shim) = &shim {
        inodes.extend(shim.namespaces.iter().map(|ns| (ns.kind, ns.inode)));
    }
    for kind in crate::shim::PINNED_KINDS {
        let pin = paths.ns(kind);
        if podlab_ns::ops::is_pinned(&pin) {
            if let Ok(meta) = std::fs::metadata(&pin) {
                inodes.insert((kind, meta.ino()));
            }
        }
    }
    let mut pidfds = processes_in(&inodes);
    let mut recorded: Vec<_> = shim.iter().filter_map(|s| s.pause).collect();
    let mut orphaned = Vec::new();
    for id in paths.container_ids().unwrap_or_default() {
        if let Ok(Some(record)) =
            state::read_record::<ContainerRecord>(&paths.container(&id).record())
        {
            if record.state == ContainerState::Running {
                recorded.extend(record.pid);
                orphaned.push(record);
            }
        }
    }
    for pidfd in open_alive(recorded) {
        if !pidfds.iter().any(|p| p.pid() == pidfd.pid()) {
            pidfds.push(pidfd);
        }
    }
    for pidfd in &pidfds {
        pidfd.signal(libc::SIGKILL)?;
    }
    finish_kills(&pidfds);
    leftovers.killed = pidfds.iter().map(|p| p.pid()).collect();
    // Nobody was left to record how they ended; they ended by this SIGKILL, and are recorded so,
    // as containerd records the tasks of a dead shim.
    for mut record in orphaned {
        record.state = ContainerState::Exited;
        record.exit_code = Some(128 + libc::SIGKILL);
        record.reason = Some("Error".into());
        record.message = Some("its shim died; podlab killed what was left of it".into());
        record.finished_at = crate::liveness::now_ns();
        state::write_record(&paths.container(&record.id).record(), &record)?;
    }
    Ok(leftovers)
}

/// The second half of [`clean_sandbox_leftovers`]: every mount in the sandbox folder detached,
/// the namespaces unpinned, the shim's files removed.
fn detach_sandbox_leftovers(paths: &SandboxPaths, leftovers: &mut Leftovers) -> Result<()> {
    if paths.dir.exists() {
        crate::runtime::detach_mounts_below(&paths.dir, &mut leftovers.unmounted)?;
        for kind in crate::shim::PINNED_KINDS {
            podlab_ns::ops::unpin(&paths.ns(kind))?;
        }
        for file in [paths.shim_record(), paths.shim_pid(), paths.socket()] {
            let _ = std::fs::remove_file(file);
        }
    }
    Ok(())
}

/// The network plugins still running for sandbox `id`, killed and waited for: an ADD that
/// its maker started before it was killed would otherwise go on, and write its lease after
/// gc's DEL has released what there was then: the lease would stay. A CNI plugin is known by
/// the `CNI_CONTAINERID` of its environment (the spec's; podlab's is the sandbox id), checked
/// again once its pidfd is open, so a pid reused in between is not hit.
fn kill_network_plugins(id: &SandboxId) -> Result<Vec<i32>> {
    let wanted = format!("CNI_CONTAINERID={id}");
    let is_plugin = |pid: i32| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == wanted.as_bytes()))
    };
    let mut pidfds = Vec::new();
    for pid in all_pids() {
        if is_plugin(pid) {
            if let Ok(pidfd) = Pidfd::open(pid) {
                if is_plugin(pid) {
                    pidfds.push(pidfd);
                }
            }
        }
    }
    for pidfd in &pidfds {
        pidfd.signal(libc::SIGKILL)?;
    }
    finish_kills(&pidfds);
    Ok(pidfds.iter().map(|p| p.pid()).collect())
}

/// Every process (but this one) that is in one of `inodes`' namespaces, as pidfds. The
/// namespace is checked again after the pidfd is open, so a pid reused in between is not hit.
fn processes_in(inodes: &BTreeSet<(NsKind, u64)>) -> Vec<Pidfd> {
    if inodes.is_empty() {
        return Vec::new();
    }
    let me = std::process::id() as i32;
    let member = |pid: i32| {
        inodes
            .iter()
            .any(|(kind, inode)| podlab_ns::ops::ns_inode(pid, *kind).is_ok_and(|i| i == *inode))
    };
    all_pids()
        .into_iter()
        .filter(|pid| *pid != me && member(*pid))
        .filter_map(|pid| Pidfd::open(pid).ok())
        .filter(|pidfd| member(pidfd.pid()))
        .collect()
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits for killed processes to be gone and reaps those that are our children (when this
/// process is their subreaper).
fn finish_kills(pidfds: &[Pidfd]) {
    wait_all_exit(pidfds, EXIT_WAIT);
    for pidfd in pidfds {
        pidfd.reap_if_child();
    }
}
