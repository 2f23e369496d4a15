//! Forked single-threaded helpers that bring their result, or their error, back to the parent.
//!
//! Namespace work often has to happen in a process of its own: `setns(CLONE_NEWNS)` and
//! `unshare(CLONE_NEWUSER)` refuse a multi-threaded caller, `unshare(CLONE_NEWPID)` only affects
//! the children made afterwards, and a test harness must not move its own threads into other
//! namespaces. [`run_in_child`] forks, runs a closure in the child, and sends what it returned
//! back as JSON over a pipe, so that an error raised inside a namespace is shown by the parent
//! with its full message instead of being lost with the child.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Error, Result};

/// Runs `f` in a forked child and returns its result. The child exits right after `f`; an error
/// it returns becomes [`Error::Child`] carrying the child's message, and a child that dies
/// without answering (a signal, an abort) is reported with how it died.
///
/// The child starts with only the calling thread, so it may `unshare` and `setns` freely; the
/// parent's namespaces are never touched.
pub fn run_in_child<T, F>(f: F) -> Result<T>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce() -> Result<T>,
{
    let (read_end, write_end) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| Error::sys("pipe2", e))?;
    // SAFETY: the child only runs `f` and exits; glibc resets its malloc locks across fork.
    match unsafe { fork() }.map_err(|e| Error::sys("fork", e))? {
        ForkResult::Child => {
            drop(read_end);
            let answer: std::result::Result<T, String> = f().map_err(|e| e.to_string());
            let code = send_answer(write_end, &answer);
            // SAFETY: leave without running the parent's atexit handlers or flushing its buffers.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            drop(write_end);
            receive_answer(child, read_end)
        }
    }
}

fn send_answer<T: Serialize>(write_end: OwnedFd, answer: &std::result::Result<T, String>) -> i32 {
    let mut pipe = std::fs::File::from(write_end);
    match serde_json::to_vec(answer) {
        Ok(bytes) if pipe.write_all(&bytes).is_ok() => 0,
        _ => 1,
    }
}

fn receive_answer<T: DeserializeOwned>(child: Pid, read_end: OwnedFd) -> Result<T> {
    let mut bytes = Vec::new();
    let read = std::fs::File::from(read_end).read_to_end(&mut bytes);
    let status = wait_for(child)?;
    let pid = child.as_raw();
    if let Err(err) = read {
        return Err(Error::Child {
            pid,
            message: format!("reading its answer: {err}"),
        });
    }
    if bytes.is_empty() {
        return Err(Error::Child {
            pid,
            message: format!("died without answering ({})", describe(status)),
        });
    }
    match serde_json::from_slice::<std::result::Result<T, String>>(&bytes) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(message)) => Err(Error::Child { pid, message }),
        Err(err) => Err(Error::Child {
            pid,
            message: format!("unreadable answer: {err}"),
        }),
    }
}

/// Waits for `child` to end, retrying on EINTR.
pub fn wait_for(child: Pid) -> Result<WaitStatus> {
    loop {
        match waitpid(child, None) {
            Err(nix::Error::EINTR) => continue,
            Err(e) => {
                return Err(Error::sys_at(
                    "waitpid",
                    crate::error::Target {
                        pid: Some(child.as_raw()),
                        ..Default::default()
                    },
                    e,
                ))
            }
            Ok(status) => return Ok(status),
        }
    }
}

/// A wait status in words: "exit status 3", "killed by SIGKILL".
pub fn describe(status: WaitStatus) -> String {
    match status {
        WaitStatus::Exited(_, code) => format!("exit status {code}"),
        WaitStatus::Signaled(_, signal, _) => format!("killed by {signal}"),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_comes_back() {
        let pid: i32 = run_in_child(|| Ok(nix::unistd::getpid().as_raw())).unwrap();
        assert_ne!(
            pid,
            nix::unistd::getpid().as_raw(),
            "the closure ran in another process"
        );
    }

    #[test]
    fn error_message_reaches_the_parent() {
        let err =
            run_in_child::<(), _>(|| Err(Error::Invalid("inside went wrong".into()))).unwrap_err();
        assert!(err.to_string().contains("inside went wrong"), "{err}");
    }

    #[test]
    fn a_child_that_dies_is_described() {
        let err = run_in_child::<(), _>(|| unsafe { libc::_exit(7) }).unwrap_err();
        assert!(err.to_string().contains("exit status 7"), "{err}");
    }
}
