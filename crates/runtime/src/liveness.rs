//! Is this still the process we started? A pid alone is not an identity: once its process is
//! reaped the number is free for the next fork. A pid plus the process's start time (field 22 of
//! `/proc/PID/stat`, in clock ticks since boot) is, so every recorded process carries both, and
//! nothing is signalled before they are checked. Waiting for a process that is not our child is
//! done on a pidfd, which becomes readable when it exits: an event, not a polling loop.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A process as recorded in a state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: i32,
    /// Clock ticks after boot at which it started.
    pub start_time: u64,
}

impl ProcessIdentity {
    /// The identity of the running process `pid`.
    pub fn of(pid: i32) -> Result<ProcessIdentity> {
        let stat = read_stat(pid)?.ok_or_else(|| {
            Error::Invalid(format!("process {pid} is gone before it could be recorded"))
        })?;
        Ok(ProcessIdentity {
            pid,
            start_time: stat.start_time,
        })
    }

    /// Whether this very process still runs (exists, same start time, not a zombie).
    pub fn is_alive(&self) -> bool {
        matches!(read_stat(self.pid), Ok(Some(stat)) if stat.start_time == self.start_time && stat.state != 'Z')
    }

    /// A pidfd for this process if it still is the one recorded. Opening the pidfd first and
    /// checking the start time after makes the pair race-free: the pidfd then refers to the
    /// recorded process for good, even if it exits and its pid is reused.
    pub fn open(&self) -> Option<Pidfd> {
        let pidfd = Pidfd::open(self.pid).ok()?;
        match read_stat(self.pid) {
            Ok(Some(stat)) if stat.start_time == self.start_time && stat.state != 'Z' => {
                Some(pidfd)
            }
            _ => None,
        }
    }
}

/// The fields of `/proc/PID/stat` that say who and how a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFields {
    pub state: char,
    pub ppid: i32,
    pub start_time: u64,
}

/// Parses `/proc/PID/stat`: the command name ends at the last `)`, then come state (field 3),
/// ppid (4), ... start time (22).
pub fn parse_stat(text: &str) -> Option<StatFields> {
    let close = text.rfind(')')?;
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    Some(StatFields {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// `/proc/PID/stat`, or None when there is no such process.
pub fn read_stat(pid: i32) -> Result<Option<StatFields>> {
    let path = format!("/proc/{pid}/stat");
    // Reads into a buffer the line fits (about 300 bytes): `read_to_string` costs a `statx`
    // and five growing reads, and every status call checks a shim this way.
    let read = std::fs::File::open(&path).and_then(|mut file| {
        let mut buf = [0u8; 4096];
        let mut len = 0;
        while len < buf.len() {
            match std::io::Read::read(&mut file, &mut buf[len..])? {
                0 => break,
                n => len += n,
            }
        }
        String::from_utf8(buf[..len].to_vec()).map_err(std::io::Error::other)
    });
    match read {
        Ok(text) => Ok(parse_stat(&text)),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            Ok(None)
        }
        Err(e) => Err(Error::io("reading", path, e)),
    }
}

/// A pidfd (`pidfd_open(2)`): a handle on one process that no pid reuse can redirect.
#[derive(Debug)]
pub struct Pidfd {
    fd: OwnedFd,
    pid: i32,
}

impl Pidfd {
    pub fn open(pid: i32) -> Result<Pidfd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(Error::sys(
                "pidfd_open",
                format!("pid {pid}"),
                nix::Error::last(),
            ));
        }
        // SAFETY: the kernel just gave us this fd (opened close-on-exec).
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(Pidfd { fd, pid })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal` to exactly this process (`pidfd_send_signal(2)`); Ok if it is gone.
    pub fn signal(&self, signal: i32) -> Result<()> {
        // SAFETY: plain syscall on an fd we own.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        match rc {
            0 => Ok(()),
            _ if nix::Error::last() == nix::Error::ESRCH => Ok(()),
            _ => Err(Error::sys(
                "pidfd_send_signal",
                format!("pid {}", self.pid),
                nix::Error::last(),
            )),
        }
    }

    /// Waits until the process has exited, at most `timeout`; true if it did.
    pub fn wait_exit(&self, timeout: Duration) -> bool {
        wait_all_exit(std::slice::from_ref(self), timeout)
    }

    /// Reaps the process if we are its parent (or its subreaper); harmless otherwise.
    pub fn reap_if_child(&self) {
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid with P_PIDFD fills `info`; ECHILD when it is not our child.
        unsafe {
            libc::waitid(
                libc::P_PIDFD,
                self.fd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG,
            );
        }
    }
}

impl AsFd for Pidfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Waits until every process has exited, at most `timeout` in all; true if they all did.
pub fn wait_all_exit(pidfds: &[Pidfd], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<&Pidfd> = pidfds.iter().collect();
    while !pending.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds: Vec<PollFd> = pending
            .iter()
            .map(|p| PollFd::new(p.as_fd(), PollFlags::POLLIN))
            .collect();
        let millis = left.as_millis().min(i32::MAX as u128) as i32;
        match nix::poll::poll(
            &mut fds,
            PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) => return false,
            Ok(_) => {
                let done: Vec<bool> = fds
                    .iter()
                    .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
                    .collect();
                let mut index = 0;
                pending.retain(|_| {
                    let keep = !done[index];
                    index += 1;
                    keep
                });
            }
            Err(nix::Error::EINTR) => continue,
            Err(_) => return false,
        }
    }
    true
}

/// Nanoseconds since the epoch, the CRI's time unit.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_survive_odd_command_names() {
        let text = "42 (a (b) c) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        let stat = parse_stat(text).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 7);
        assert_eq!(stat.start_time, 123456);
    }

    #[test]
    fn our_own_identity_is_alive_and_a_changed_one_is_not() {
        let me = ProcessIdentity::of(std::process::id() as i32).unwrap();
        assert!(me.is_alive());
        let other = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!other.is_alive());
        assert!(me.open().is_some());
        assert!(other.open().is_none());
    }
}
