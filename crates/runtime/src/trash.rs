//! The second half of a removal, after the caller's answer when it asks for that.
//!
//! RemoveContainer and RemovePodSandbox end by renaming the container's or sandbox's folder
//! into `<root>/trash/` (one `rename(2)`: from then on no listing or lookup finds it, so the
//! removal is complete as far as any caller can tell), and what is left, its cgroups (rmdir in
//! each hierarchy) and its files (the overlay's upper layer, logs, the pod's /dev/shm mount),
//! goes when the trash is emptied:
//!
//! - at once, in the same call, by default (the CLI, the node agent);
//! - by a cleaner process when the caller started one ([`Runtime::start_cleaner`], the CRI
//!   server): the removal wakes it with one byte on a pipe and answers; the cleaner, forked
//!   from the server while it was single-threaded, empties the trash on the other core 3 ms
//!   later (once the answer has gone), at nice 19 so that it yields to the server and its
//!   clients. When the server ends (or dies: the pipe's end closes with it) the cleaner
//!   empties the trash once more and exits; the server waits for that on its way out.
//!
//! The caller may give the cleaner one more task of its own ([`Runtime::start_cleaner_with`]:
//! the CRI server's image garbage collection, after a RemoveImage has answered), run when the
//! caller asks for it ([`Runtime::defer_task`]) and once more at the end.
//!
//! StopPodSandbox hands the cleaner the network's teardown too, when it has one and the pod
//! has no host ports: the shim takes the pod's processes and namespaces down, the kernel
//! destroys the network namespace with its end of the veth, and the CNI DEL (two Go programs:
//! `bridge` and its `host-local`, which release the lease) runs after the answer, without a
//! namespace, as the CNI spec allows DEL to. What the DEL reads from the sandbox's folder (its
//! record, the ADD's cached result) is hard-linked into `<root>/network-teardown/<id>/` while
//! StopPodSandbox holds the sandbox's lock, and the DEL runs from there: the cleaner takes no
//! lock a later RPC waits for, and a RemovePodSandbox right after the answer removes the
//! sandbox as usual. A pod with host ports keeps its DEL in StopPodSandbox: its DNAT rules must
//! be gone before another pod may take the same port.
//!
//! Nothing is left behind after a `kill -9`: a trash entry is a folder like any sandbox's, and
//! `podlab gc` (and the next cleaner's start) empties the trash and runs the waiting DELs; a
//! cgroup whose container or sandbox is gone is removed by gc's cgroup sweep as well.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::id::SandboxId;
use crate::runtime::{remove_tree, Runtime};
use crate::state::{self, ContainerRecord, SandboxLock, SandboxPaths, SandboxRecord};
use crate::{Error, Result};

/// The bytes that wake the cleaner: the trash has an entry, the caller's task is asked for, a
/// network teardown waits.
const WAKE_TRASH: u8 = 1;
const WAKE_TASK: u8 = 2;
const WAKE_NETWORK: u8 = 3;

/// How long a woken cleaner lets a removal's answer go before it empties the trash. Emptying
/// it at once (telling the shim to forget the container, rmdir of its cgroup in every
/// hierarchy, unlinking its folder) ran while the answer travelled to the client and the
/// client woke, nice 19 or SCHED_IDLE alike: critest's RemoveContainer took 0.59-0.72 ms
/// against 0.48-0.53 with the work 3 ms later (alternated runs), in the next call or the idle
/// time after it.
const TRASH_DELAY: std::time::Duration = std::time::Duration::from_millis(3);

/// A removed container's entry is `c-<id>`, a sandbox's `s-<id>`.
const CONTAINER: &str = "c-";
const SANDBOX: &str = "s-";

/// The cleaner process of a runtime that defers its removals' cleanup.
#[derive(Debug)]
pub(crate) struct Cleaner {
    /// The pipe's write end: a byte wakes the cleaner, its close ends it.
    wake: Option<OwnedFd>,
    pid: nix::unistd::Pid,
    /// It was started with a task of the caller's.
    has_task: bool,
}

impl Drop for Cleaner {
    fn drop(&mut self) {
        // The cleaner reads the end of the pipe, empties the trash a last time and exits.
        drop(self.wake.take());
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

/// `work` on each entry of `dir` (none when it is missing); one that fails does not stop the
/// others, and the first error is returned.
fn for_each_entry(dir: &Path, mut work: impl FnMut(&Path) -> Result<()>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("listing", dir, e)),
    };
    let mut first_error = None;
    for entry in entries.flatten() {
        if let Err(e) = work(&entry.path()) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

impl Runtime {
    /// `<root>/trash`: folders of removed containers and sandboxes whose cleanup is pending.
    pub fn trash_dir(&self) -> PathBuf {
        self.config.root.join("trash")
    }

    /// Renames `dir` (a container's or sandbox's folder) into the trash as `<kind><id>`, then
    /// empties that entry now, or wakes the cleaner to do it after the caller's answer.
    pub(crate) fn discard(&self, dir: &Path, kind: &str, id: &str) -> Result<()> {
        let trash = self.trash_dir();
        std::fs::create_dir_all(&trash).map_err(|e| Error::io("creating", &trash, e))?;
        let entry = trash.join(format!("{kind}{id}"));
        match std::fs::rename(dir, &entry) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("moving into the trash", dir, e)),
        }
        if self.wake_cleaner(WAKE_TRASH) {
            Ok(())
        } else {
            self.empty_entry(&entry)
        }
    }

    /// Writes `byte` to the cleaner; false when there is none.
    fn wake_cleaner(&self, byte: u8) -> bool {
        match &self.cleaner {
            Some(Cleaner {
                wake: Some(wake), ..
            }) => {
                // Non-blocking: a full pipe means a wake-up is pending already.
                let _ = nix::unistd::write(wake, &[byte]);
                true
            }
            _ => false,
        }
    }

    /// `<root>/network-teardown`: a folder per stopped sandbox whose CNI DEL is still to run.
    fn network_teardown_dir(&self) -> PathBuf {
        self.config.root.join("network-teardown")
    }

    /// Whether StopPodSandbox leaves `record`'s network teardown to the cleaner (see the module
    /// doc); if so, the sandbox's files are linked into its teardown folder (the caller holds
    /// the sandbox's lock, and wakes the cleaner by [`Runtime::start_deferred`] once the
    /// namespace is gone).
    pub(crate) fn defer_network_teardown(
        &self,
        record: &SandboxRecord,
        paths: &SandboxPaths,
    ) -> Result<bool> {
        if self.cleaner.is_none() || !record.config.port_mappings.is_empty() {
            return Ok(false);
        }
        let queued = self.network_teardown_dir().join(record.id.as_str());
        let linked = std::fs::create_dir_all(&queued).and_then(|()| {
            for entry in std::fs::read_dir(&paths.dir)? {
                let entry = entry?;
                if entry.file_type()?.is_file() {
                    let link = queued.join(entry.file_name());
                    match std::fs::hard_link(entry.path(), &link) {
                        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                        _ => {}
                    }
                }
            }
            Ok(())
        });
        match linked {
            Ok(()) => Ok(true),
            Err(e) => {
                // The DEL is then made before the answer, as without a cleaner.
                let _ = std::fs::remove_dir_all(&queued);
                eprintln!(
                    "podlab: linking {} into {}: {e}; its CNI DEL runs now",
                    paths.dir.display(),
                    queued.display()
                );
                Ok(false)
            }
        }
    }

    /// Wakes the cleaner when `id`'s teardown was queued ([`Runtime::defer_network_teardown`]).
    pub(crate) fn start_deferred(&self, id: &SandboxId) {
        if self.cleaner.is_some() && self.network_teardown_dir().join(id.as_str()).exists() {
            self.wake_cleaner(WAKE_NETWORK);
        }
    }

    /// Runs every queued network teardown from its folder, then removes the folder; one that
    /// fails stays for the next time (and for `podlab gc`). Under the trash's lock: a cleaner
    /// and a gc may both try.
    pub fn finish_network_teardowns(&self) -> Result<()> {
        for_each_entry(&self.network_teardown_dir(), |queued| {
            let _lock = self.trash_lock()?;
            self.finish_network_teardown(queued)
        })
    }

    /// The CNI DEL of one queued teardown, from its folder, which then goes.
    fn finish_network_teardown(&self, queued: &Path) -> Result<()> {
        if !queued.exists() {
            return Ok(());
        }
        let paths = SandboxPaths::new(queued.to_path_buf());
        if let Some(record) = state::read_record::<SandboxRecord>(&paths.record())? {
            self.network_del(&record, &paths)?;
            self.pod_trace(&record.config.metadata)
                .mark("CNI DEL (in the cleaner, after the answer)");
        }
        remove_tree(queued)
    }

    /// Asks the cleaner to run the task it was started with, after the caller's answer; false
    /// when there is no cleaner or no task (the caller does the work itself).
    pub fn defer_task(&self) -> bool {
        matches!(self.cleaner, Some(Cleaner { has_task: true, .. })) && self.wake_cleaner(WAKE_TASK)
    }

    /// Removes what is in the trash: each entry's cgroups, then its folder. An entry that
    /// cannot be removed yet stays for the next time (and for `podlab gc`).
    pub fn empty_trash(&self) -> Result<()> {
        for_each_entry(&self.trash_dir(), |entry| self.empty_entry(entry))
    }

    /// The lock of the cleanup that a cleaner and a gc may both try: the trash's entries and
    /// the queued network teardowns.
    fn trash_lock(&self) -> Result<SandboxLock> {
        SandboxLock::acquire(&self.config.root.join("trash.lock"))
    }

    /// One trash entry's cleanup, under the trash's lock.
    fn empty_entry(&self, entry: &Path) -> Result<()> {
        let _lock = self.trash_lock()?;
        if !entry.exists() {
            return Ok(());
        }
        let name = entry
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with(CONTAINER) {
            let record = state::read_record::<ContainerRecord>(&entry.join("container.json"))
                .ok()
                .flatten();
            if let Some(record) = &record {
                self.forget_in_shim(record);
            }
            if let Some(cgroup) = record.and_then(|r| r.cgroup) {
                // With its pod's folder when that is left empty: the cleaner may empty the
                // sandbox's entry first (both are in the trash when it looks), and then only
                // this removal sees the folder empty.
                crate::cgroups::remove_with_pod(&cgroup, self.pruned_above_pod())?;
            }
        } else if let Some(id) = name.strip_prefix(SANDBOX) {
            let paths = SandboxPaths::new(entry.to_path_buf());
            let record = state::read_record::<SandboxRecord>(&paths.record())
                .ok()
                .flatten();
            if let (Some(pod), Ok(id)) = (record.and_then(|r| r.cgroup), SandboxId::parse(id)) {
                self.remove_cgroups(&id, &paths, &pod)?;
            }
        }
        // Detaches what is still mounted below it (a pod's /dev/shm) before removing.
        remove_tree(entry)
    }

    /// Tells the shim of a removed container's pod to drop what it kept of the container (its
    /// exit, its log pipe, attach sessions), when that shim still runs. One way: the container
    /// is stopped, and its reply would only make the remover wait a round trip through the
    /// shim's loop. Sent with the trash, so that a RemoveContainer with a cleaner answers
    /// without waking the shim.
    fn forget_in_shim(&self, record: &ContainerRecord) {
        if let Ok(client) = self.shim(&record.sandbox_id) {
            let _ = client.send(
                &crate::protocol::Request::Forget {
                    container: record.id.clone(),
                },
                &[],
            );
        }
    }

    /// Defers the cleanup of every later removal to a cleaner process forked now (see the
    /// module doc), which first empties what an earlier one left. Call it while the process is
    /// single-threaded (before any runtime thread or async runtime exists).
    pub fn start_cleaner(&mut self) -> Result<()> {
        self.start_cleaner_with(None)
    }

    /// [`Runtime::start_cleaner`], with a task of the caller's that the cleaner runs when
    /// [`Runtime::defer_task`] asks, and once more when it ends.
    pub fn start_cleaner_with(&mut self, task: Option<Box<dyn Fn()>>) -> Result<()> {
        let has_task = task.is_some();
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::sys("pipe2", "the cleaner's pipe", e))?;
        // SAFETY: the caller is single-threaded; the child empties the trash and _exits.
        match unsafe { nix::unistd::fork() } {
            Ok(nix::unistd::ForkResult::Child) => {
                drop(write);
                let keep = read.as_raw_fd() as libc::c_uint;
                // SAFETY: closes descriptors this copy does not use (all above stderr but the
                // pipe's read end: the server's sockets, locks, the mount template).
                unsafe {
                    if keep > 3 {
                        libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0u32);
                    }
                    libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
                }
                let _ = nix::sys::prctl::set_name(c"podlab-cleaner");
                // Nice 19: on a node of two cores the cleaner, woken by a removal just before
                // its answer, competed with the server and its client for the answer's way out
                // (critest's RemoveContainer: 0.66-0.72 ms at nice 0, 0.54-0.60 at 19). It
                // still gets its share when the node is busy, so the trash does not wait long.
                // SAFETY: setpriority of this process only.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
                self.cleaner = None;
                let code = self.clean_until_closed(&read, task.as_deref());
                // SAFETY: nothing of the parent's may be dropped or flushed in this copy.
                unsafe { libc::_exit(code) }
            }
            Ok(nix::unistd::ForkResult::Parent { child }) => {
                drop(read);
                nix::fcntl::fcntl(
                    &write,
                    nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
                )
                .map_err(|e| Error::sys("fcntl", "the cleaner's pipe", e))?;
                self.cleaner = Some(Cleaner {
                    wake: Some(write),
                    pid: child,
                    has_task,
                });
                Ok(())
            }
            Err(e) => Err(Error::sys("fork", "the cleaner", e)),
        }
    }

    /// The cleaner's life: the trash emptied at its start, when a byte says so, and at the
    /// pipe's end; the caller's task when a byte says so, and at the end.
    fn clean_until_closed(&self, wake: &OwnedFd, task: Option<&dyn Fn()>) -> i32 {
        let report = |result: Result<()>| {
            if let Err(e) = result {
                eprintln!("podlab-cleaner: {e}");
            }
        };
        report(self.finish_network_teardowns());
        report(self.empty_trash());
        let mut buffer = [0u8; 64];
        loop {
            match nix::unistd::read(wake, &mut buffer) {
                Ok(0) => {
                    report(self.finish_network_teardowns());
                    report(self.empty_trash());
                    if let Some(task) = task {
                        task();
                    }
                    return 0;
                }
                Ok(n) => {
                    let asked = &buffer[..n];
                    if asked.contains(&WAKE_NETWORK) {
                        report(self.finish_network_teardowns());
                    }
                    if asked.contains(&WAKE_TRASH) {
                        // The removal's answer goes out first (see TRASH_DELAY).
                        std::thread::sleep(TRASH_DELAY);
                        report(self.empty_trash());
                    }
                    if let Some(task) = task.filter(|_| asked.contains(&WAKE_TASK)) {
                        task();
                    }
                }
                Err(nix::Error::EINTR) => continue,
                Err(_) => return 1,
            }
        }
    }
}
