//! The pod lifecycle event generator (kubelet's PLEG): one thread that relists every pod's
//! runtime state once per `resync` and wakes the pod workers whose pods changed, so that an idle
//! pod wakes no thread of its own.
//!
//! A relist is made cheap. After a worker's read, the next relist looks at the inode, size and
//! modification time of the pod's state files (every record is replaced by a rename, so a
//! change gives a new inode), at the `containers/` folder (a new container is a new folder in
//! it, which moves its link count) and polls the pidfds of the shim and pause processes the
//! read saw running (a pause killed by `kill -9` changes no file), as the stamp taken before
//! the read knew them; and it watches them from then on: the pidfds in the thread's epoll set
//! (an exit wakes the pod's worker at once) and the pod's folders in an inotify instance (a
//! change marks the pod for the next relist). A watched pod costs the relist no system call,
//! which at 1000 idle pods was most of the agent's time. A difference wakes the worker, which
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

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
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
    /// `processes` and the state folders are watched by the relist thread's epoll set and
    /// inotify: a relist then looks at `touched` alone, not at the files and pidfds.
    watched: bool,
    /// A watched state folder changed since the read began: the next relist wakes the worker.
    touched: bool,
    /// The next relist must report a change (a process was already gone when the last read
    /// tried to watch it, or the stamp was taken over other records than were read).
    dirty: bool,
    /// The worker was woken and has not read the pod since.
    reported: bool,
    /// With a CRI runtime: the ids and states the last full read saw ([`digest`]).
    states: u64,
}

impl Relist {
    /// A full read of `sandboxes` begins: their stamp now, and changes seen from now on count.
    pub fn start_read(
        &mut self,
        runtime: &dyn RuntimeService,
        sandboxes: &[SandboxId],
    ) -> Vec<u64> {
        self.touched = false;
        self.stamp(runtime, sandboxes)
    }

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
        self.watched = false;
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
            self.watched = false;
            self.dirty = true;
        }
    }

    /// Nothing the last full read saw has moved since, as far as the PLEG's watches tell:
    /// every process and state folder it saw is watched, and no change, exit or notice came.
    /// (False until the relist thread has placed the watches, and with a CRI runtime.)
    pub fn unchanged(&self) -> bool {
        self.watched && !self.touched && !self.dirty && !self.reported
    }

    /// Whether anything changed since [`Relist::record`], by the files and processes themselves.
    pub fn changed(&self, runtime: &dyn RuntimeService) -> bool {
        self.dirty
            || self.touched
            || self.any_exited()
            || self.stamp(runtime, &self.sandboxes) != self.stamp
    }

    /// The folders whose entries make the stamp: each sandbox's, its `containers/`, and each
    /// read container's.
    fn folders(&self, layout: &podlab_runtime::state::Layout) -> Vec<PathBuf> {
        let mut folders = Vec::with_capacity(self.sandboxes.len() * 2 + self.containers.len());
        for id in &self.sandboxes {
            let paths = layout.sandbox(id);
            folders.push(paths.containers_dir());
            folders.push(paths.dir);
        }
        for (sandbox, container) in &self.containers {
            folders.push(layout.sandbox(sandbox).container(container).dir);
        }
        folders
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
    /// Names the entry in the epoll set's events.
    key: u64,
    relist: Weak<Mutex<Relist>>,
    wake: Sender<WorkerMsg>,
}

/// The epoll event data of the shims' notices (the entries' keys count up from 0).
const NOTICES: u64 = u64::MAX;

/// The registry of pods to relist.
#[derive(Default)]
pub struct Pleg {
    entries: Mutex<Vec<Entry>>,
    next_key: AtomicU64,
    /// What the relist thread waits on, once it runs; until then, or when the kernel would
    /// not make them, every relist reads every pod's files and pidfds.
    watches: OnceLock<Watches>,
}

/// The relist thread's epoll set: the shims' notices, the watched pods' pidfds, and an inotify
/// instance on their state folders (an idle pod then costs the relist no system call).
struct Watches {
    epoll: Epoll,
    folders: Inotify,
    /// Each watched folder's pod (its entry's key).
    keys: Mutex<HashMap<WatchDescriptor, u64>>,
}

/// The epoll event data of the inotify instance.
const FOLDERS: u64 = u64::MAX - 1;

/// What changes a state folder's entries: a record replaced by a rename, a container's folder
/// made or removed, a file written in place. (Opening and reading, as the agent's own reads
/// and locks do, is not among them.)
const FOLDER_CHANGES: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MODIFY)
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR);

impl Watches {
    fn new(notices: Option<&Listener>) -> Result<Watches, String> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| format!("epoll_create1: {e}"))?;
        let folders = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| format!("inotify_init1: {e}"))?;
        epoll
            .add(&folders, EpollEvent::new(EpollFlags::EPOLLIN, FOLDERS))
            .map_err(|e| format!("epoll_ctl of the inotify instance: {e}"))?;
        if let Some(listener) = notices {
            epoll
                .add(listener, EpollEvent::new(EpollFlags::EPOLLIN, NOTICES))
                .map_err(|e| format!("epoll_ctl of the notices' socket: {e}"))?;
        }
        Ok(Watches {
            epoll,
            folders,
            keys: Mutex::new(HashMap::new()),
        })
    }
}

impl Pleg {
    /// Relists the pod whose worker owns `relist`, waking it through `wake`. The entry goes
    /// when the worker drops its relist.
    pub fn register(&self, relist: &Arc<Mutex<Relist>>, wake: Sender<WorkerMsg>) {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        self.lock().push(Entry {
            key,
            relist: Arc::downgrade(relist),
            wake,
        });
    }

    /// Makes what the relist thread waits on.
    fn start_watching(&self, notices: Option<&Listener>) {
        match Watches::new(notices) {
            Ok(watches) => {
                let _ = self.watches.set(watches);
            }
            Err(e) => eprintln!("podlab node: {e}; every relist reads every pod's files"),
        }
    }

    /// Watches a pod's processes (each reports its exit once: the worker's next read watches
    /// the processes it then finds) and its state folders. Whether all of them are.
    fn watch(&self, key: u64, relist: &Relist, runtime: &dyn RuntimeService) -> bool {
        let (Some(watches), Some(local)) = (self.watches.get(), runtime.local()) else {
            return false;
        };
        let exits = relist.processes.iter().all(|pidfd| {
            let event = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLONESHOT, key);
            watches.epoll.add(pidfd, event).is_ok()
        });
        let mut keys = watches.keys.lock().unwrap_or_else(|e| e.into_inner());
        exits
            && relist.folders(local.layout()).iter().all(|folder| {
                match watches.folders.add_watch(folder, FOLDER_CHANGES) {
                    Ok(descriptor) => {
                        keys.insert(descriptor, key);
                        true
                    }
                    Err(_) => false,
                }
            })
    }

    /// Runs `action` on the relist of the entry `key` and wakes its worker if it says so.
    fn on_entry(&self, key: u64, action: impl Fn(&mut Relist) -> bool) {
        for entry in self.lock().iter().filter(|entry| entry.key == key) {
            if let Some(relist) = entry.relist.upgrade() {
                if action(&mut relist.lock().unwrap_or_else(|e| e.into_inner())) {
                    let _ = entry.wake.send(WorkerMsg::Wake);
                }
            }
        }
    }

    /// Waits up to `left` for a notice, a watched exit or a folder's change, and passes on
    /// what came: a notice or an exit wakes the pod's worker at once; a folder's change (the
    /// worker's own writes among them) at the next relist, so that no pod is woken more than
    /// once a period by files.
    fn wait(&self, notices: Option<&Listener>, left: Duration) {
        let Some(watches) = self.watches.get() else {
            match notices {
                Some(listener) => {
                    if let Some(sandbox) = listener.next(left) {
                        self.sandbox_changed(&sandbox);
                    }
                }
                None => std::thread::sleep(left),
            }
            return;
        };
        let mut events = [EpollEvent::empty(); 32];
        let timeout = EpollTimeout::try_from(left).unwrap_or(EpollTimeout::NONE);
        let Ok(count) = watches.epoll.wait(&mut events, timeout) else {
            return;
        };
        for event in &events[..count] {
            match (event.data(), notices) {
                (NOTICES, Some(listener)) => {
                    if let Some(sandbox) = listener.next(Duration::ZERO) {
                        self.sandbox_changed(&sandbox);
                    }
                }
                (NOTICES, None) => {}
                (FOLDERS, _) => self.folders_changed(watches),
                (key, _) => self.on_entry(key, |relist| {
                    relist.reported = true;
                    true
                }),
            }
        }
    }

    /// Marks the pods whose folders changed, for the next relist.
    fn folders_changed(&self, watches: &Watches) {
        while let Ok(events) = watches.folders.read_events() {
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    for entry in self.lock().iter() {
                        if let Some(relist) = entry.relist.upgrade() {
                            relist.lock().unwrap_or_else(|e| e.into_inner()).touched = true;
                        }
                    }
                    continue;
                }
                let mut keys = watches.keys.lock().unwrap_or_else(|e| e.into_inner());
                let key = if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                    keys.remove(&event.wd)
                } else {
                    keys.get(&event.wd).copied()
                };
                drop(keys);
                if let Some(key) = key {
                    self.on_entry(key, |relist| {
                        relist.touched = true;
                        false
                    });
                }
            }
        }
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
        self.start_watching(notices);
        let mut next = Instant::now() + period;
        while !stop.load(Ordering::SeqCst) {
            let left = next
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            self.wait(notices, left);
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
            if relist.reported {
                return true;
            }
            let changed = if relist.watched {
                relist.dirty || relist.touched
            } else {
                // Watched from now on; what changed before is in the files and pidfds.
                relist.watched = self.watch(entry.key, &relist, runtime);
                relist.changed(runtime)
            };
            if changed {
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

    /// An idle agent with 1000 pods spent most of its time in the relist's `stat`s and pidfd
    /// polls of every pod, every second. The processes and the state folders are watched by
    /// the relist thread instead: a folder's change wakes the worker at the next relist, a
    /// process's exit at once (here the relist period is an hour: only the test relists).
    #[test]
    fn a_watched_pods_folder_change_and_process_exit_wake_its_worker_without_reading_files() {
        let dir = std::env::temp_dir().join(format!("podlab-pleg-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let runtime = Runtime::open(RuntimeConfig::with_root(&dir)).unwrap();
        let ours = vec![SandboxId::generate()];
        let folder = runtime.layout().sandbox(&ours[0]);
        std::fs::create_dir_all(folder.containers_dir()).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        let relist = Arc::new(Mutex::new(Relist {
            sandboxes: ours.clone(),
            processes: vec![Pidfd::open(child.id() as i32).unwrap()],
            ..Relist::default()
        }));
        {
            let mut relist = relist.lock().unwrap();
            relist.stamp = relist.start_read(&runtime, &ours);
        }
        let pleg = Pleg::default();
        let (wake, woken) = std::sync::mpsc::channel();
        pleg.register(&relist, wake);
        let stop = AtomicBool::new(false);
        let until = |what: &dyn Fn() -> bool| {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !what() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        std::thread::scope(|scope| {
            scope.spawn(|| pleg.run(&runtime, Duration::from_secs(3600), &stop, None));
            until(&|| pleg.watches.get().is_some());
            pleg.relist_all(&runtime);
            let unchanged = woken.try_recv();
            let watched = relist.lock().unwrap().watched;
            let resync_may_skip_the_read = relist.lock().unwrap().unchanged();

            std::fs::write(folder.record(), "{}").unwrap();
            until(&|| relist.lock().unwrap().touched);
            let unchanged_after_change = relist.lock().unwrap().unchanged();
            pleg.relist_all(&runtime);
            let on_change = woken.try_recv();
            relist.lock().unwrap().reported = false;

            child.kill().unwrap();
            child.wait().unwrap();
            let on_exit = woken.recv_timeout(Duration::from_secs(30));
            stop.store(true, Ordering::SeqCst);
            assert!(watched, "the pod is not watched");
            assert!(
                resync_may_skip_the_read,
                "nothing changed, yet not unchanged"
            );
            assert!(!unchanged_after_change, "a folder changed, yet unchanged");
            assert!(
                unchanged.is_err(),
                "woken with nothing changed: {unchanged:?}"
            );
            assert!(matches!(on_change, Ok(WorkerMsg::Wake)), "{on_change:?}");
            assert!(matches!(on_exit, Ok(WorkerMsg::Wake)), "{on_exit:?}");
        });
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
