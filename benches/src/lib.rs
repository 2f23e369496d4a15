//! Shared helpers of podlab's criterion benches.
//!
//! Criterion runs its own threads, and namespace work must happen in a single-threaded process
//! (`setns` into a mount namespace and `unshare(CLONE_NEWUSER)` refuse a multi-threaded caller;
//! `unshare` in one thread changes only that thread). So every measurement here runs in a
//! *forked driver*: [`time_in_child`] forks, the child runs the operation `iters` times on its
//! own clock, and sends the elapsed nanoseconds back over a pipe. Criterion's `iter_custom`
//! takes that duration as the sample.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use nix::sys::wait::waitpid;
use nix::unistd::{fork, ForkResult};

/// Runs `setup` once, then `op` `iters` times, in a forked single-threaded child, and returns
/// the time the `iters` runs of `op` took. Panics (the bench is wrong) if the child fails.
pub fn time_in_child<S>(
    iters: u64,
    setup: impl FnOnce() -> S,
    mut op: impl FnMut(&mut S),
) -> Duration {
    let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
    // SAFETY: the child only runs the measured operation and exits.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            drop(read_end);
            let mut state = setup();
            let start = Instant::now();
            for _ in 0..iters {
                op(&mut state);
            }
            let nanos = start.elapsed().as_nanos() as u64;
            let mut pipe = std::fs::File::from(write_end);
            let code = if pipe.write_all(&nanos.to_le_bytes()).is_ok() {
                0
            } else {
                1
            };
            // SAFETY: leave without running the parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            drop(write_end);
            let mut bytes = [0u8; 8];
            let read = std::fs::File::from(read_end).read_exact(&mut bytes);
            let status = waitpid(child, None).expect("waitpid");
            assert!(read.is_ok(), "bench driver died: {status:?}");
            Duration::from_nanos(u64::from_le_bytes(bytes))
        }
    }
}

/// fork, let the child run `in_child` and `_exit(0)`, wait for it: the unit of most benches.
pub fn fork_wait(in_child: impl FnOnce()) {
    // SAFETY: the child runs `in_child`, which must only make system calls, then exits.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            in_child();
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => {
            let status = waitpid(child, None).expect("waitpid");
            assert!(
                matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)),
                "bench child failed: {status:?}"
            );
        }
    }
}

/// Fails the child (exit 1) when a namespace operation fails, so the bench stops loudly.
pub fn or_die<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    match result {
        Ok(value) => value,
        Err(err) => {
            eprintln!("bench operation failed: {err}");
            unsafe { libc::_exit(1) }
        }
    }
}
