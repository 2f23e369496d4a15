//! The pod lifecycle event generator (kubelet's PLEG): one thread that relists every pod's
//! runtime state once per `resync` and wakes the pod workers whose pods changed, so that an idle
//! pod costs a few `stat`s a second and no thread of its own wakes up.
//!
//! A relist is made cheap: instead of reading every record again it looks at the inode, size and
//! modification time of the pod's state files (every record is replaced by a rename, so a change
//! gives a new inode), at the `containers/` folder (a new container is a new folder in it, which
//! moves its link count), and polls pidfds of the shim and pause processes the last full read
//! saw running (a pause killed by `kill -9` changes no file). A difference wakes the worker, which
//! reads the records and runs the rules again.
//!
//! With a CRI runtime at the other end of a socket ([`super::remote`]) there are no files to
//! `stat`: the relist is kubelet's generic PLEG's, one ListPodSandbox and one ListContainers
//! each period, and a pod's worker is woken when the ids and states of its sandboxes and
//! containers differ from what its last full read saw.
//!
//! Between relists the thread listens for the shims' notices ([`podlab_runtime::events`], as
//! kubelet's evented PLEG hears the runtime's container events): a container's exit wakes its
//! pod's worker at once, and the relist stays what catches what no notice told (a `kill -9`).

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use podlab_runtime::events::Listener;
use podlab_runtime::liveness::Pidfd;
use podlab_runtime::{ContainerId, ContainerState, SandboxId, SandboxState};

use super::runtime_service::RuntimeService;
use super::view::PodRuntime;
use super::worker::WorkerMsg;

/// What the last full read of one pod saw.
#[derive(Debug, Default)]
pub struct Relist {
    /// The pod's sandboxes.
    sandboxes: Vec<SandboxId>,
    stamp: Vec<u64>,
    /// The container records the last full read saw, whose files are stamped.
    containers: Vec<(SandboxId, ContainerId)>,
    processes: Vec<Pidfd>,
    /// The next relist must report a change (a process was already gone when the last read
    /// tried to watch it, or the stamp was taken over other records than were read).
    dirty: bool,
    /// The worker was woken and has not read the pod since.
    reported: bool,
    /// With a CRI runtime: the ids and states the last full read saw ([`digest`]).
    states: u64,
}

impl Relist {
    /// The stamp of `sandboxes` now, taken before they are read.
    /// Empty with a CRI runtime, whose relist compares states instead.
    pub fn stamp(&self, runtime: &dyn RuntimeService, sandboxes: &[SandboxId]) -> Vec<u64> {
        let Some(runtime) = runtime.local() else {
            return Vec::new();
        };
        let layout = runtime.layout();
        let mut stamp = Vec::with_capacity((sandboxes.len() * 3 + self.containers.len()) * 4);
        for id in sandboxes {
            let paths = layout.sandbox(id);
            push_file(&mut stamp, &paths.record());
            push_file(&mut stamp, &paths.shim_record());
            push_file(&mut stamp, &paths.containers_dir());
        }
        for (sandbox, container) in &self.containers {
            push_file(
                &mut stamp,
                &layout.sandbox(sandbox).container(container).record(),
            );
        }
        stamp
    }

    /// Remembers what a full read of `sandboxes` saw: the stamp taken before it, its records,
    /// and the processes that ran.
    pub fn record(&mut self, stamp: Vec<u64>, sandboxes: &[SandboxId], observed: &PodRuntime) {
        let containers: Vec<_> = observed
            .containers
            .iter()
            .map(|c| (c.sandbox_id.clone(), c.id.clone()))
            .collect();
        self.dirty = containers != self.containers;
        self.states = digest(
            observed.sandboxes.iter().map(|s| (&s.id, s.state)),
            observed
                .containers
                .iter()
                .map(|c| (&c.sandbox_id, &c.id, c.state)),
        );
        self.containers = containers;
        self.sandboxes = sandboxes.to_vec();
        self.stamp = stamp;
        self.reported = false;
        self.processes.clear();
        let pids = observed
            .sandboxes
            .iter()
            .flat_map(|s| s.shim_pid.into_iter().chain(s.pause_pid));
        for pid in pids {
            match Pidfd::open(pid) {
                Ok(pidfd) => self.processes.push(pidfd),
                Err(_) => self.dirty = true,
            }
        }
    }

    /// The worker's sandboxes changed after the read (RunPodSandbox): relist those.
    pub fn follow(&mut self, sandboxes: &[SandboxId]) {
        if self.sandboxes != sandboxes {
            self.sandboxes = sandboxes.to_vec();
            self.dirty = true;
        }
    }

    /// Whether anything changed since [`Relist::record`].
    pub fn changed(&self, runtime: &dyn RuntimeService) -> bool {
        self.dirty || self.any_exited() || self.stamp(runtime, &self.sandboxes) != self.stamp
    }

    fn any_exited(&self) -> bool {
        if self.processes.is_empty() {
            return false;
        }
        let mut fds: Vec<nix::poll::PollFd> = self
            .processes
            .iter()
            .map(|p| nix::poll::PollFd::new(p.as_fd(), nix::poll::PollFlags::POLLIN))
            .collect();
        !matches!(
            nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO),
            Ok(0)
        )
    }
}

/// A digest of the ids and states of a pod's sandboxes and containers, in any order: what a
/// CRI relist compares (kubelet's generic PLEG compares each container's state the same way).
fn digest<'a>(
    sandboxes: impl Iterator<Item = (&'a SandboxId, SandboxState)>,
    containers: impl Iterator<Item = (&'a SandboxId, &'a ContainerId, ContainerState)>,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut items: Vec<u64> = Vec::new();
    for (id, state) in sandboxes {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (id, state == SandboxState::Ready).hash(&mut h);
        items.push(h.finish());
    }
    for (sandbox, id, state) in containers {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (sandbox, id, state.to_string()).hash(&mut h);
        items.push(h.finish());
    }
    items.sort_unstable();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    items.hash(&mut h);
    h.finish()
}

/// A file's identity and version: inode, link count, size, modification time (0s when absent).
fn push_file(stamp: &mut Vec<u64>, path: &Path) {
    match std::fs::metadata(path) {
        Ok(meta) => stamp.extend([
            meta.ino() ^ (meta.nlink() << 48),
            meta.size(),
            meta.mtime() as u64,
            meta.mtime_nsec() as u64,
        ]),
        Err(_) => stamp.extend([0, 0, 0, 0]),
    }
}

struct Entry {
    relist: Weak<Mutex<Relist>>,
    wake: Sender<WorkerMsg>,
}

/// The registry of pods to relist.
#[derive(Default)]
pub struct Pleg {
    entries: Mutex<Vec<Entry>>,
}

impl Pleg {
    /// Relists the pod whose worker owns `relist`, waking it through `wake`. The entry goes
    /// when the worker drops its relist.
    pub fn register(&self, relist: &Arc<Mutex<Relist>>, wake: Sender<WorkerMsg>) {
        self.lock().push(Entry {
            relist: Arc::downgrade(relist),
            wake,
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The relist loop, every `period` until `stop`; in between, the shims' notices (if
    /// `notices` listens) wake the worker of a sandbox that changed at once, so that a
    /// container's exit reaches the pod's status without waiting for the relist.
    pub fn run(
        &self,
        runtime: &dyn RuntimeService,
        period: Duration,
        stop: &AtomicBool,
        notices: Option<&Listener>,
    ) {
        let mut next = Instant::now() + period;
        while !stop.load(Ordering::SeqCst) {
            let left = next
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            match notices {
                Some(listener) => {
                    if let Some(sandbox) = listener.next(left) {
                        self.sandbox_changed(&sandbox);
                    }
                }
                None => std::thread::sleep(left),
            }
            if Instant::now() < next {
                continue;
            }
            next += period;
            self.relist_all(runtime);
        }
    }

    /// A shim said `sandbox` changed: its pod's worker is woken without a relist. (Woken
    /// again if it already was: the change may have come after its read began.)
    pub fn sandbox_changed(&self, sandbox: &SandboxId) {
        for entry in self.lock().iter() {
            let Some(relist) = entry.relist.upgrade() else {
                continue;
            };
            let mut relist = relist.lock().unwrap_or_else(|e| e.into_inner());
            if relist.sandboxes.contains(sandbox) {
                relist.reported = true;
                let _ = entry.wake.send(WorkerMsg::Wake);
            }
        }
    }

    /// One relist of every pod.
    pub fn relist_all(&self, runtime: &dyn RuntimeService) {
        if runtime.local().is_none() {
            return self.relist_remote(runtime);
        }
        self.lock().retain(|entry| {
            let Some(relist) = entry.relist.upgrade() else {
                return false;
            };
            let mut relist = relist.lock().unwrap_or_else(|e| e.into_inner());
            if !relist.reported && relist.changed(runtime) {
                relist.reported = true;
                return entry.wake.send(WorkerMsg::Wake).is_ok();
            }
            true
        });
    }

    /// kubelet's generic relist over the CRI: ListPodSandbox and ListContainers once, and each
    /// pod whose sandboxes' and containers' ids and states moved is woken.
    fn relist_remote(&self, runtime: &dyn RuntimeService) {
        let listed = runtime
            .list_pod_sandboxes()
            .and_then(|s| Ok((s, runtime.list_container_states()?)));
        let (sandboxes, containers) = match listed {
            Ok(lists) => lists,
            Err(e) => {
                eprintln!("podlab node: relisting the runtime: {e}");
                return;
            }
        };
        self.lock().retain(|entry| {
            let Some(relist) = entry.relist.upgrade() else {
                return false;
            };
            let mut relist = relist.lock().unwrap_or_else(|e| e.into_inner());
            if relist.reported {
                return true;
            }
            let ours = |id: &SandboxId| relist.sandboxes.contains(id);
            let now = digest(
                sandboxes
                    .iter()
                    .filter(|s| ours(&s.id))
                    .map(|s| (&s.id, s.state)),
                containers
                    .iter()
                    .filter(|(sandbox, _, _)| ours(sandbox))
                    .map(|(sandbox, id, state)| (sandbox, id, *state)),
            );
            if relist.dirty || now != relist.states {
                relist.reported = true;
                return entry.wake.send(WorkerMsg::Wake).is_ok();
            }
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podlab_runtime::{Runtime, RuntimeConfig};

    /// Issue 13, defect 9: `get` showed a container's exit up to a second late, because only
    /// the once-a-second relist woke the pod's worker. A shim's notice wakes it at once: here
    /// the relist period is an hour, so the Wake can only come from the notice.
    #[test]
    fn defect_9_a_shims_notice_wakes_the_pods_worker_without_waiting_for_the_relist() {
        let dir = std::env::temp_dir().join(format!("podlab-pleg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let runtime = Runtime::open(RuntimeConfig::with_root(&dir)).unwrap();
        let pleg = Pleg::default();
        let ours = SandboxId::generate();
        let (wake, woken) = std::sync::mpsc::channel();
        let relist = Arc::new(Mutex::new(Relist {
            sandboxes: vec![ours.clone()],
            ..Relist::default()
        }));
        pleg.register(&relist, wake);
        let (other_wake, other_woken) = std::sync::mpsc::channel();
        let other = Arc::new(Mutex::new(Relist {
            sandboxes: vec![SandboxId::generate()],
            ..Relist::default()
        }));
        pleg.register(&other, other_wake);
        let listener = Listener::bind(&dir).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| pleg.run(&runtime, Duration::from_secs(3600), &stop, Some(&listener)));
            podlab_runtime::events::notify(&dir, &ours);
            let message = woken.recv_timeout(Duration::from_secs(30));
            stop.store(true, Ordering::SeqCst);
            assert!(matches!(message, Ok(WorkerMsg::Wake)), "{message:?}");
        });
        assert!(
            other_woken.try_recv().is_err(),
            "another pod's worker slept on"
        );
        drop(listener);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
