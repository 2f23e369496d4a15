//! Whether recorded processes still run, for a caller that asks again and again: the CRI
//! server's status and list calls and the node agent ask after a pod's shim and pause process
//! at every call, and each answer read `/proc/PID/stat` (an open, two reads and a close: about
//! 3 µs here, the kernel formatting 52 fields) to compare the start time.
//!
//! A process found running is kept as a pidfd, opened before its start time was checked (see
//! [`ProcessIdentity::open`]), so that no pid reuse can redirect it; from then on one `poll`
//! says whether it has exited. A kept pidfd is a descriptor of the caller's, so at most an
//! eighth of the descriptors it may open (and never more than 512) are kept; past that, and
//! when no descriptor is to be had, the answer is read from `/proc` as before. A process is
//! kept under its sandbox's folder and forgotten with the sandbox ([`LiveProcesses::forget_below`],
//! as the record caches forget its records), when it is found gone, and when a new one is kept
//! after it has exited (one `poll` over the set), so that a long-running caller's descriptors
//! stay as many as the pods it runs.
//!
//! A forked copy of the caller (the CRI server's cleaner closes every descriptor it does not
//! use) must not poll, nor close, descriptors that the numbers may now name: the set belongs to
//! the process that made it, and a copy lets its inherited pidfds go without closing them.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::liveness::{Pidfd, ProcessIdentity};

/// At most this many pidfds are kept, whatever the descriptor limit.
const KEPT_AT_MOST: usize = 512;

#[derive(Debug)]
pub(crate) struct LiveProcesses {
    /// Each process with the folder of the sandbox it belongs to.
    kept: Mutex<HashMap<ProcessIdentity, (PathBuf, Pidfd)>>,
    limit: usize,
    /// The process whose descriptors `kept` holds.
    owner: AtomicU32,
}

impl Default for LiveProcesses {
    fn default() -> Self {
        let descriptors =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
                .map_or(1024, |(soft, _)| soft);
        LiveProcesses {
            kept: Mutex::default(),
            limit: usize::try_from(descriptors / 8)
                .unwrap_or(KEPT_AT_MOST)
                .min(KEPT_AT_MOST),
            owner: AtomicU32::new(std::process::id()),
        }
    }
}

impl Drop for LiveProcesses {
    fn drop(&mut self) {
        if self.owner.load(Ordering::Relaxed) != std::process::id() {
            let_go_inherited(self.kept.get_mut().unwrap_or_else(|e| e.into_inner()));
        }
    }
}

impl LiveProcesses {
    /// Whether `who`, a process of the sandbox whose folder is `sandbox`, still runs (exists,
    /// the same start time, not a zombie).
    pub(crate) fn runs(&self, who: &ProcessIdentity, sandbox: &Path) -> bool {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        if self.owner.swap(me, Ordering::Relaxed) != me {
            let_go_inherited(&mut kept);
        }
        if let Some((_, pidfd)) = kept.get(who) {
            if !pidfd.wait_exit(Duration::ZERO) {
                return true;
            }
            kept.remove(who);
            return false;
        }
        match Pidfd::open(who.pid) {
            // Gone, or no descriptor to spare: /proc says which.
            Err(_) => who.is_alive(),
            Ok(pidfd) => {
                if !who.is_alive() {
                    return false;
                }
                sweep(&mut kept);
                if kept.len() < self.limit {
                    kept.insert(*who, (sandbox.to_path_buf(), pidfd));
                }
                true
            }
        }
    }

    /// Forgets the processes of the sandbox whose folder is `dir` (it is being removed).
    pub(crate) fn forget_below(&self, dir: &Path) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|_, (sandbox, _)| !sandbox.starts_with(dir));
    }

    #[cfg(test)]
    fn kept(&self) -> usize {
        self.kept.lock().unwrap().len()
    }
}

/// Lets go the pidfds a forked copy inherited without closing them: their numbers may be
/// closed in the copy, or name other files now.
fn let_go_inherited(kept: &mut HashMap<ProcessIdentity, (PathBuf, Pidfd)>) {
    kept.drain()
        .for_each(|(_, inherited)| std::mem::forget(inherited));
}

/// Drops the processes that have exited, with one `poll` over all of them.
fn sweep(kept: &mut HashMap<ProcessIdentity, (PathBuf, Pidfd)>) {
    if kept.is_empty() {
        return;
    }
    let gone: Vec<ProcessIdentity> = {
        let entries: Vec<(&ProcessIdentity, &Pidfd)> =
            kept.iter().map(|(who, (_, pidfd))| (who, pidfd)).collect();
        let mut polled: Vec<PollFd<'_>> = entries
            .iter()
            .map(|(_, pidfd)| PollFd::new(pidfd.as_fd(), PollFlags::POLLIN))
            .collect();
        if poll(&mut polled, PollTimeout::ZERO).unwrap_or(0) <= 0 {
            return;
        }
        entries
            .iter()
            .zip(&polled)
            .filter(|(_, p)| p.revents().is_some_and(|r| !r.is_empty()))
            .map(|((who, _), _)| **who)
            .collect()
    };
    for who in gone {
        kept.remove(&who);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that sleeps until killed.
    fn sleeping() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_kept_process_is_running_until_it_exits_and_then_forgotten() {
        let live = LiveProcesses::default();
        let mut child = sleeping();
        let who = ProcessIdentity::of(child.id() as i32).unwrap();
        assert!(live.runs(&who, Path::new("/pods/one")));
        assert_eq!(live.kept(), 1, "kept as a pidfd");
        assert!(
            live.runs(&who, Path::new("/pods/one")),
            "asked again: the kept pidfd answers"
        );
        child.kill().unwrap();
        // A zombie until reaped: exited all the same, as /proc's `Z` says.
        assert!(
            crate::liveness::Pidfd::open(who.pid)
                .unwrap()
                .wait_exit(Duration::from_secs(10)),
            "the killed child exits"
        );
        assert!(!live.runs(&who, Path::new("/pods/one")));
        assert_eq!(live.kept(), 0, "forgotten once gone");
        child.wait().unwrap();
        assert!(
            !live.runs(&who, Path::new("/pods/one")),
            "reaped: still not running"
        );
    }

    #[test]
    fn another_start_time_under_the_same_pid_is_not_running() {
        let live = LiveProcesses::default();
        let me = ProcessIdentity::of(std::process::id() as i32).unwrap();
        let reused = ProcessIdentity {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        assert!(
            !live.runs(&reused, Path::new("/pods/one")),
            "the pid's process started at another time"
        );
        assert_eq!(live.kept(), 0);
        assert!(live.runs(&me, Path::new("/pods/one")));
        assert!(
            !live.runs(&reused, Path::new("/pods/one")),
            "the kept pidfd is this identity's only"
        );
    }

    #[test]
    fn a_forked_copy_neither_polls_nor_closes_the_inherited_descriptors() {
        let live = LiveProcesses::default();
        let me = ProcessIdentity::of(std::process::id() as i32).unwrap();
        assert!(live.runs(&me, Path::new("/pods/one")));
        // The test harness has threads; the child only polls, opens and exits.
        // SAFETY: the child makes no allocation-heavy call that a lock held elsewhere blocks.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                // As the cleaner does: every descriptor above stderr closed, then one opened,
                // which takes the lowest free number, the kept pidfd's.
                unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
                let file = std::fs::File::open("/proc/self/stat").unwrap();
                let answered = live.runs(&me, Path::new("/pods/one"));
                drop(live);
                // Still open: the copy did not close it as if it were the pidfd.
                let open = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_GETFD).is_ok();
                unsafe { libc::_exit(if answered && open { 0 } else { 1 }) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
        assert!(
            live.runs(&me, Path::new("/pods/one")),
            "the parent's set is as it was"
        );
    }

    #[test]
    fn a_sandboxs_processes_go_with_it_and_the_gone_go_when_another_is_kept() {
        let live = LiveProcesses::default();
        let (mut first, mut second, mut third) = (sleeping(), sleeping(), sleeping());
        let who = |child: &std::process::Child| ProcessIdentity::of(child.id() as i32).unwrap();
        assert!(live.runs(&who(&first), Path::new("/pods/one")));
        assert!(live.runs(&who(&second), Path::new("/pods/two")));
        assert_eq!(live.kept(), 2);
        live.forget_below(Path::new("/pods/one"));
        assert_eq!(live.kept(), 1, "the removed sandbox's process is let go");
        second.kill().unwrap();
        second.wait().unwrap();
        assert!(live.runs(&who(&third), Path::new("/pods/three")));
        assert_eq!(live.kept(), 1, "the exited one went when another was kept");
        for child in [&mut first, &mut third] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    #[test]
    fn past_its_limit_the_set_sweeps_out_the_gone_and_keeps_no_more() {
        let live = LiveProcesses {
            kept: Mutex::default(),
            limit: 1,
            owner: AtomicU32::new(std::process::id()),
        };
        let (mut first, mut second) = (sleeping(), sleeping());
        let (a, b) = (
            ProcessIdentity::of(first.id() as i32).unwrap(),
            ProcessIdentity::of(second.id() as i32).unwrap(),
        );
        assert!(live.runs(&a, Path::new("/pods/one")));
        assert!(
            live.runs(&b, Path::new("/pods/one")),
            "answered from /proc when the set is full"
        );
        assert_eq!(live.kept(), 1);
        first.kill().unwrap();
        first.wait().unwrap();
        assert!(
            live.runs(&b, Path::new("/pods/one")),
            "the gone one swept out, this one kept"
        );
        assert_eq!(live.kept(), 1);
        second.kill().unwrap();
        second.wait().unwrap();
        assert!(!live.runs(&b, Path::new("/pods/one")));
        assert!(!live.runs(&a, Path::new("/pods/one")));
    }
}
