//! PID namespaces: a process numbering of its own, whose first process is PID 1.
//!
//! A process in a new pid namespace has two pids: the one the host knows it by and the one it
//! has inside (`NSpid:` in `/proc/PID/status` lists them, outermost first). The first process
//! made in the namespace is its PID 1, and PID 1 is special in two ways that matter to a pod:
//!
//! * every process orphaned inside is re-parented to it, so it must reap them, or zombies
//!   pile up (this is why, with `shareProcessNamespace`, the pause process is PID 1 and reaps);
//! * signals sent from inside the namespace to PID 1 are dropped unless it installed a handler,
//!   so `kill -TERM 1` inside does nothing to a PID 1 that did not ask for it, while the host
//!   can still SIGKILL it. When PID 1 exits the kernel kills everything else inside.
//!
//! `unshare(CLONE_NEWPID)` does not move the caller: only its next child goes in. So
//! [`fork_into_new_pidns`] does that in a throw-away helper process, and `/proc` shows the new
//! namespace only once a procfs is mounted from inside it ([`mount_own_proc`]).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use serde::{Deserialize, Serialize};

use crate::{Error, NsKind, Result};

/// Starts `child` as PID 1 of a new pid namespace and returns its pid as the caller sees it.
/// `child`'s return value is PID 1's exit status.
///
/// A forked helper calls `unshare(CLONE_NEWPID)` and then clones PID 1 with `CLONE_PARENT`, so
/// that PID 1 is the *caller's* child, to be waited for ([`crate::child::wait_for`]) or killed
/// like any other; the helper itself is reaped before this returns. An error of the helper (say,
/// EPERM from unshare) comes back as [`Error::Child`].
///
/// PID 1 gets SIGKILL if the thread that called this ends first (`PR_SET_PDEATHSIG`).
///
/// PID 1 starts as a copy of the caller made by a raw clone(2), which skips the C library's fork
/// handlers; it is single-threaded, but glibc's cached thread id in it is the helper's. Rust code
/// and async-signal-safe calls are fine; an `exec` makes a clean start.
pub fn fork_into_new_pidns(child: impl FnOnce() -> i32) -> Result<Pid> {
    let (read_end, write_end) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| Error::sys("pipe2", e))?;
    // SAFETY: the helper only unshares, clones and writes to a pipe before _exit.
    match unsafe { fork() }.map_err(|e| Error::sys("fork", e))? {
        ForkResult::Child => {
            drop(read_end);
            let answer = match start_pid1(child, &write_end) {
                Ok(pid) => format!("ok {pid}"),
                Err(err) => format!("error {err}"),
            };
            let sent = std::fs::File::from(write_end).write_all(answer.as_bytes());
            // SAFETY: leave without running the parent's atexit handlers or flushing its buffers.
            unsafe { libc::_exit(i32::from(sent.is_err())) }
        }
        ForkResult::Parent { child: helper } => {
            drop(write_end);
            let mut answer = String::new();
            let read = std::fs::File::from(read_end).read_to_string(&mut answer);
            let status = crate::child::wait_for(helper)?;
            let helper_failed = |message: String| Error::Child {
                pid: helper.as_raw(),
                message,
            };
            read.map_err(|e| helper_failed(format!("reading its answer: {e}")))?;
            if let Some(pid) = answer.strip_prefix("ok ") {
                let pid = pid
                    .parse()
                    .map_err(|_| helper_failed(format!("unreadable answer {answer:?}")))?;
                Ok(Pid::from_raw(pid))
            } else if let Some(message) = answer.strip_prefix("error ") {
                Err(helper_failed(message.to_string()))
            } else {
                Err(helper_failed(format!(
                    "died without answering ({})",
                    crate::child::describe(status)
                )))
            }
        }
    }
}

/// A child process that is killed (SIGKILL) and reaped when dropped, so that an early return or
/// an error leaves no process behind; [`OwnedChild::wait`] and [`OwnedChild::kill`] end it on
/// purpose and say how it ended.
#[derive(Debug)]
pub struct OwnedChild {
    pid: Pid,
    reaped: bool,
}

impl OwnedChild {
    /// Takes charge of `pid`, which must be a child of the calling process.
    pub fn new(pid: Pid) -> OwnedChild {
        OwnedChild { pid, reaped: false }
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Waits for the child to end by itself.
    pub fn wait(mut self) -> Result<WaitStatus> {
        self.reaped = true;
        crate::child::wait_for(self.pid)
    }

    /// Sends SIGKILL and reaps.
    pub fn kill(self) -> Result<WaitStatus> {
        let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL);
        self.wait()
    }
}

impl Drop for OwnedChild {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL);
            let _ = crate::child::wait_for(self.pid);
        }
    }
}

/// In the helper: new pid namespace for the children, then PID 1 as a sibling of the helper.
fn start_pid1(child: impl FnOnce() -> i32, report: &OwnedFd) -> Result<i32> {
    nix::sched::unshare(CloneFlags::CLONE_NEWPID)
        .map_err(|e| Error::sys_on("unshare(CLONE_NEWPID)", NsKind::Pid, e))?;
    let flags = (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: with no new stack clone(2) works like fork(2): PID 1 continues on a copy of this
    // single-threaded process's memory.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    match pid {
        -1 => Err(Error::sys_on(
            "clone(CLONE_PARENT)",
            NsKind::Pid,
            nix::Error::last(),
        )),
        0 => {
            // PID 1 must not hold the helper's answer pipe open, or the caller waits for it.
            // SAFETY: closing an inherited descriptor that nothing else in this process uses.
            unsafe { libc::close(report.as_raw_fd()) };
            // PID 1 dies with the thread that asked for it, so a crashed caller leaves no
            // namespace behind (its children then die with it, as the kernel kills them).
            // SAFETY: PR_SET_PDEATHSIG takes a signal number, no pointers.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            let code = child();
            // SAFETY: PID 1 ends here; it must never return into the helper's code.
            unsafe { libc::_exit(code) }
        }
        pid => Ok(pid as i32),
    }
}

/// Makes `/proc` show the caller's pid namespace, as `unshare --mount-proc` does: a new mount
/// namespace (private, so the host's `/proc` is untouched) with a fresh procfs on `/proc`.
/// Call it from PID 1 of the new namespace, or any process in it.
pub fn mount_own_proc() -> Result<()> {
    nix::sched::unshare(CloneFlags::CLONE_NEWNS)
        .map_err(|e| Error::sys_on("unshare(CLONE_NEWNS)", NsKind::Mnt, e))?;
    crate::mnt::make_rprivate(Path::new("/"))?;
    crate::mnt::mount_proc(Path::new("/proc"))
}

/// Reaps every child that has ended, without waiting for those still running: what a PID 1
/// does on SIGCHLD. Returns who was reaped and how they ended.
pub fn reap_all_nohang() -> Vec<(Pid, WaitStatus)> {
    let mut reaped = Vec::new();
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => break,
            Ok(status) => match status.pid() {
                Some(pid) => reaped.push((pid, status)),
                None => break,
            },
            Err(nix::Error::EINTR) => continue,
            Err(_) => break, // ECHILD: no children left
        }
    }
    reaped
}

/// Makes the caller a child subreaper: orphans among its descendants are re-parented to it
/// instead of to PID 1 (what catatonit and containerd's shim do).
pub fn set_child_subreaper() -> Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| Error::sys("prctl(PR_SET_CHILD_SUBREAPER)", e))
}

/// The pids of `host_pid` in every pid namespace it is in, from the one of the reader's `/proc`
/// inwards (the `NSpid:` line of `/proc/PID/status`): `[4711, 1]` for PID 1 of a child namespace.
pub fn pid_in_own_ns(host_pid: i32) -> Result<Vec<i32>> {
    let path = proc_path(host_pid, "status");
    let status = read_proc(&path)?;
    parse_nspid(&status)
        .ok_or_else(|| Error::Invalid(format!("{}: no readable NSpid line", path.display())))
}

/// The numbers of the `NSpid:` line of a `/proc/PID/status` text.
pub fn parse_nspid(status: &str) -> Option<Vec<i32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let pids: Vec<i32> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()
        .ok()?;
    (!pids.is_empty()).then_some(pids)
}

/// The first fields of `/proc/PID/stat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcStat {
    pub pid: i32,
    pub comm: String,
    /// `R` running, `S` sleeping, `Z` zombie, `T` stopped, ...
    pub state: char,
    pub ppid: i32,
}

/// `/proc/PID/stat` of one process.
pub fn proc_stat(pid: i32) -> Result<ProcStat> {
    let path = proc_path(pid, "stat");
    let text = read_proc(&path)?;
    parse_stat(&text)
        .ok_or_else(|| Error::Invalid(format!("{}: unreadable: {text:?}", path.display())))
}

/// Parses `pid (comm) state ppid ...`. The command name may itself hold spaces and parentheses,
/// so it ends at the *last* `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut rest = text[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        comm,
        state,
        ppid,
    })
}

/// Every process in the reader's `/proc`. Processes that end during the scan are left out.
pub fn all_processes() -> Result<Vec<ProcStat>> {
    let proc = Path::new("/proc");
    let entries = std::fs::read_dir(proc).map_err(|e| Error::io("listing", proc, e))?;
    Ok(entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| proc_stat(pid).ok())
        .collect())
}

/// The children of `parent` that are zombies: ended, and not yet reaped by it.
pub fn zombies_of(parent: i32) -> Result<Vec<i32>> {
    let mut zombies: Vec<i32> = all_processes()?
        .into_iter()
        .filter(|p| p.ppid == parent && p.state == 'Z')
        .map(|p| p.pid)
        .collect();
    zombies.sort_unstable();
    Ok(zombies)
}

fn read_proc(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))
}

fn proc_path(pid: i32, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_lists_every_level() {
        let status = "Name:\tsleep\nTgid:\t4711\nPid:\t4711\nNSpid:\t4711\t12\t1\nNSsid:\t1\n";
        assert_eq!(parse_nspid(status), Some(vec![4711, 12, 1]));
        assert_eq!(parse_nspid("NSpid:\t42\n"), Some(vec![42]));
        assert_eq!(parse_nspid("Pid:\t42\n"), None);
        assert_eq!(parse_nspid("NSpid:\t\n"), None);
    }

    #[test]
    fn stat_survives_odd_command_names() {
        let stat = parse_stat("123 (my (odd) cmd) Z 45 123 123 0 -1").unwrap();
        assert_eq!(
            stat,
            ProcStat {
                pid: 123,
                comm: "my (odd) cmd".into(),
                state: 'Z',
                ppid: 45
            }
        );
        assert!(parse_stat("123 cmd S 1").is_none());
    }

    #[test]
    fn own_pid_is_in_nspid_and_stat() {
        let me = std::process::id() as i32;
        assert_eq!(pid_in_own_ns(me).unwrap()[0], me);
        assert_eq!(proc_stat(me).unwrap().ppid, nix::unistd::getppid().as_raw());
    }

    #[test]
    fn a_zombie_is_found_then_reaped() {
        let child = match unsafe { fork() }.unwrap() {
            ForkResult::Child => unsafe { libc::_exit(3) },
            ForkResult::Parent { child } => child,
        };
        let me = std::process::id() as i32;
        // Bounded poll: the child becomes a zombie as soon as it has exited.
        let mut seen = false;
        for _ in 0..500 {
            if zombies_of(me).unwrap().contains(&child.as_raw()) {
                seen = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(seen, "the exited child shows as a zombie of its parent");
        // Other tests in this process may fork too: reap only ours.
        assert_eq!(
            crate::child::wait_for(child).unwrap(),
            WaitStatus::Exited(child, 3)
        );
        assert!(!zombies_of(me).unwrap().contains(&child.as_raw()));
    }
}
