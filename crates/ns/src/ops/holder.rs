//! [`Holder`]: a sleeping child that keeps new namespaces alive, the way a pod's pause process
//! keeps the pod's. Demos, tests and benchmarks use it to have namespaces to join and inspect
//! without running the real pause binary.
//!
//! The child reports over a pipe once its namespaces are ready (or why they are not), then
//! closes every inherited descriptor and sleeps until it is killed. For a new pid namespace it
//! forks once more, so that the holder is that namespace's PID 1, and the process in between
//! stays to reap it.

use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use nix::unistd::{ForkResult, Pid};

use super::{create, ns_inode, ns_path, open_pid};
use crate::{Error, NsKind, Result};

/// A sleeping child process that keeps new namespaces alive, like a pod's pause process.
///
/// The holder dies with the thread that spawned it (`PR_SET_PDEATHSIG`), so a crashed demo or
/// test leaves nothing behind; keep the `Holder` on the thread that made it.
#[derive(Debug)]
pub struct Holder {
    /// The host pid of the process in the namespaces (PID 1 of the new pid namespace, if any).
    pub pid: Pid,
    /// The child this process reaps: the holder itself, or the helper that forked it into a new
    /// pid namespace and waits for it.
    child: Pid,
}

impl Holder {
    /// Forks a child that unshares `kinds` and runs `setup` inside them; returns once `setup`
    /// succeeded, with its error otherwise. With [`NsKind::Pid`] the child forks once more so
    /// that the holder is PID 1 of the new pid namespace.
    pub fn spawn(kinds: &[NsKind], setup: impl FnOnce() -> Result<()>) -> Result<Holder> {
        let (ready_read, ready_write) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::sys("pipe2", e))?;
        // SAFETY: the child only unshares, runs `setup`, reports and sleeps, then _exits.
        match unsafe { nix::unistd::fork() }.map_err(|e| Error::sys("fork", e))? {
            ForkResult::Child => {
                drop(ready_read);
                die_with_parent();
                let report = match create(kinds) {
                    Err(err) => Err(err.to_string()),
                    Ok(()) if kinds.contains(&NsKind::Pid) => {
                        hold_as_pid1(setup, ready_write);
                    }
                    Ok(()) => setup()
                        .map(|()| nix::unistd::getpid().as_raw())
                        .map_err(|err| err.to_string()),
                };
                let ok = send_report(&ready_write, &report) && report.is_ok();
                drop(ready_write);
                if ok {
                    sleep_forever();
                }
                // SAFETY: leave without the parent's atexit handlers and buffers.
                unsafe { libc::_exit(1) }
            }
            ForkResult::Parent { child } => {
                drop(ready_write);
                let mut holder = Holder { pid: child, child };
                let mut line = String::new();
                let read = BufReader::new(std::fs::File::from(ready_read)).read_line(&mut line);
                match serde_json::from_str::<std::result::Result<i32, String>>(&line) {
                    Ok(Ok(pid)) if read.is_ok() => {
                        holder.pid = Pid::from_raw(pid);
                        Ok(holder)
                    }
                    Ok(Err(message)) => {
                        // It exits by itself after a failed setup. Killing the helper of a pid
                        // namespace now could orphan its PID 1 before it is reaped.
                        let _ = crate::child::wait_for(child);
                        holder.child = Pid::from_raw(0);
                        Err(Error::Child {
                            pid: child.as_raw(),
                            message: format!(
                                "holding {}: {message}",
                                crate::error::kinds_text(kinds)
                            ),
                        })
                    }
                    _ => {
                        let status = holder.reap();
                        Err(Error::Child {
                            pid: child.as_raw(),
                            message: format!(
                                "holding {}: died without reporting ({status})",
                                crate::error::kinds_text(kinds)
                            ),
                        })
                    }
                }
            }
        }
    }

    /// `/proc/PID/ns/KIND` of the holder.
    pub fn ns_path(&self, kind: NsKind) -> PathBuf {
        ns_path(self.pid.as_raw(), kind)
    }

    /// The inode id of the holder's namespace of `kind`.
    pub fn inode(&self, kind: NsKind) -> Result<u64> {
        ns_inode(self.pid.as_raw(), kind)
    }

    /// Opens the holder's namespace of `kind`, for [`super::join`].
    pub fn open(&self, kind: NsKind) -> Result<OwnedFd> {
        open_pid(self.pid.as_raw(), kind)
    }

    /// Kills the holder (SIGKILL) and reaps it; its namespaces end unless something else holds
    /// them (a pin, an open file, another process).
    pub fn kill(mut self) {
        self.reap();
    }

    fn reap(&mut self) -> String {
        // Killing PID 1 of a pid namespace kills everything in it; the helper above it then
        // reaps it and exits, so one wait on our own child collects both. The helper itself is
        // not killed: dying first, it would leave PID 1 a zombie for someone else's init.
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        let status = crate::child::wait_for(self.child)
            .map(crate::child::describe)
            .unwrap_or_else(|err| err.to_string());
        // Drop must not kill a recycled pid.
        self.child = Pid::from_raw(0);
        status
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if self.child.as_raw() > 0 {
            self.reap();
        }
    }
}

/// In the child that unshared a pid namespace: forks the PID 1 that runs `setup` and holds the
/// namespaces, forwards its report with its host pid, then waits for it and exits with it.
fn hold_as_pid1(setup: impl FnOnce() -> Result<()>, ready_write: OwnedFd) -> ! {
    let (inner_read, inner_write) = match nix::unistd::pipe2(OFlag::O_CLOEXEC) {
        Ok(pipe) => pipe,
        Err(e) => exit_reporting(&ready_write, Error::sys("pipe2", e).to_string()),
    };
    // SAFETY: single-threaded child of a fork.
    match unsafe { nix::unistd::fork() } {
        Err(e) => exit_reporting(&ready_write, Error::sys("fork", e).to_string()),
        Ok(ForkResult::Child) => {
            drop(inner_read);
            drop(ready_write);
            die_with_parent();
            let report = setup().map(|()| 1).map_err(|err| err.to_string());
            let ok = send_report(&inner_write, &report) && report.is_ok();
            drop(inner_write);
            if ok {
                sleep_forever();
            }
            // SAFETY: see above.
            unsafe { libc::_exit(1) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(inner_write);
            let mut line = String::new();
            let _ = BufReader::new(std::fs::File::from(inner_read)).read_line(&mut line);
            let report = match serde_json::from_str::<std::result::Result<i32, String>>(&line) {
                Ok(Ok(_)) => Ok(child.as_raw()),
                Ok(Err(message)) => Err(message),
                Err(_) => Err("PID 1 of the new pid namespace died without reporting".into()),
            };
            if !send_report(&ready_write, &report) {
                let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
            }
            drop(ready_write);
            close_inherited_fds();
            let code = match crate::child::wait_for(child) {
                Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => code,
                _ => 1,
            };
            // SAFETY: see above.
            unsafe { libc::_exit(code) }
        }
    }
}

/// Writes one JSON line: the holder's host pid, or why it could not hold. One short write to a
/// pipe is atomic, so the reader sees the whole line or none of it.
/// Returns whether it was written.
fn send_report(pipe: &OwnedFd, report: &std::result::Result<i32, String>) -> bool {
    let mut line = serde_json::to_string(report).unwrap_or_else(|_| "null".into());
    line.push('\n');
    nix::unistd::write(pipe, line.as_bytes()) == Ok(line.len())
}

fn exit_reporting(pipe: &OwnedFd, message: String) -> ! {
    let _ = send_report(pipe, &Err(message));
    // SAFETY: see above.
    unsafe { libc::_exit(1) }
}

/// Asks for SIGKILL when the parent thread ends. The race where it already has is caught when
/// the report cannot be written (its reader is gone).
fn die_with_parent() {
    // SAFETY: plain prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
}

fn sleep_forever() -> ! {
    close_inherited_fds();
    loop {
        nix::unistd::pause();
    }
}

/// Closes every file descriptor above stderr. A long-lived child forked from a busy process
/// would otherwise keep copies of its pipes open, and readers waiting for end-of-file on them
/// would wait as long as it lives.
fn close_inherited_fds() {
    // SAFETY: nothing in this process uses those descriptors any more. The raw system call:
    // musl's libc has no wrapper for it.
    unsafe { libc::syscall(libc::SYS_close_range, 3, libc::c_uint::MAX, 0) };
}
