//! The node's cgroup folders, kept for the next one-shot pod.
//!
//! A pod's cgroup is `<podlab's root>/kubepods/<QoS folder>/pod<uid>` in each hierarchy (five
//! here: cpu, cpuacct, memory, pids, devices). kubelet makes the folders above the pod's once
//! and keeps them for the node's life; a `podlab run --rm` with no agent would make them and
//! remove them again at every command: 15 `mkdir` and 15 `rmdir` of cgroups a run (a memory
//! cgroup's `mkdir` alone is about 50 µs here). So the removal child of `run --rm` removes its
//! pod's folder only ([`podlab_runtime::Runtime::keep_node_cgroups`]) and the node's folders
//! stay for the next command, which then makes one folder per hierarchy for its pod.
//!
//! **Gone within 2 s.** Issue 19 allows a one-shot pod's traces on the node for 2 s after its
//! command returned, as the warm network namespace ([`crate::network::warm`]) keeps to. The
//! removal child that finds no *keeper* of the folders becomes it: it binds the abstract unix
//! socket `@podlab-node-cgroups/<cgroup root>` of the node's network namespace (one keeper per
//! podlab root and node namespace), lets go of every descriptor of the command's (stdio on
//! `/dev/null`, cwd `/`), waits until [`TTL`] after its command returned (SIGTERM, SIGINT or
//! SIGHUP end the wait early), then removes the folders no pod uses any more
//! ([`podlab_runtime::Runtime::remove_node_cgroups_if_empty`]) and exits. A removal child that
//! finds a keeper leaves the folders to it.
//!
//! **No folder left by a race.** The keeper lets go of its name before it looks at the
//! folders, and a removal child asks for the name only after its pod's folder is gone. A
//! keeper that finds a folder still in use by a pod let go of its name before that pod's
//! removal asks for it, so that removal becomes the next keeper. A keeper killed with SIGKILL
//! leaves empty folders, which `podlab gc` removes (as it removes any empty folder below
//! podlab's root). A command made while a keeper removes the folders finds a parent gone
//! between two of its `mkdir`s and makes it again (`Cgroup::create` retries).
//!
//! `PODLAB_KEEP_NODE_CGROUPS=SECONDS` sets the wait (fractions allowed; 0: the node's folders go
//! with the pod, before the removal child ends). `run --rm --trace` does not keep them: its
//! command waits for its removal child, to print the removal's phases.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use nix::sys::socket::{bind, socket, AddressFamily, SockFlag, SockType, UnixAddr};
use podlab_runtime::Runtime;

/// `PODLAB_KEEP_NODE_CGROUPS`: until how many seconds after the command returned the node's
/// folders are kept (0: not kept).
pub const ENV_TTL: &str = "PODLAB_KEEP_NODE_CGROUPS";
/// The default wait after the command returned: as the warm network namespace's
/// ([`crate::network::warm::TTL`]), well inside the 2 s issue 19 allows.
pub const TTL: Duration = Duration::from_millis(1500);
/// The keeper's process name (`/proc/PID/comm`).
pub const KEEPER_NAME: &std::ffi::CStr = c"podlab-cgkeep";

/// The wait `PODLAB_KEEP_NODE_CGROUPS` asks for (default [`TTL`]); None when off.
fn ttl() -> Option<Duration> {
    crate::network::warm::wait_after_return(ENV_TTL, TTL)
}

/// Whether a one-shot pod's removal should leave the node's folders to a keeper: the pods
/// get cgroups and the wait is not off.
pub fn wanted(runtime: &Runtime) -> bool {
    runtime
        .cgroups()
        .is_some_and(|node| !node.root.name.is_empty())
        && ttl().is_some()
}

/// The keeper's name: the abstract socket of this podlab root's cgroups.
fn address(runtime: &Runtime) -> nix::Result<UnixAddr> {
    let root = runtime
        .cgroups()
        .map_or(String::new(), |node| node.root.name.clone());
    UnixAddr::new_abstract(format!("podlab-node-cgroups/{root}").as_bytes())
}

/// Binds the keeper's name; None when another process holds it (or no socket can be made,
/// and then the caller removes the folders itself: see [`keep_or_leave`]).
fn claim(runtime: &Runtime) -> Result<Option<OwnedFd>, nix::Error> {
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    match bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &address(runtime)?) {
        Ok(()) => Ok(Some(fd)),
        Err(nix::errno::Errno::EADDRINUSE) => Ok(None),
        Err(e) => Err(e),
    }
}

/// In `run --rm`'s removal child, once its pod is removed (its node folders left,
/// `returned` the moment its command returned): leaves the folders to a live keeper and
/// returns, or becomes the keeper, waits, removes them and exits with `status` without
/// returning. Where no keeper can be made, the folders are removed here and it returns.
pub fn keep_or_leave(runtime: &Runtime, returned: Instant, status: i32) {
    let Some(wait) = ttl() else {
        runtime.remove_node_cgroups_if_empty();
        return;
    };
    let name = match claim(runtime) {
        Ok(Some(name)) => name,
        Ok(None) => return,
        Err(_) => {
            runtime.remove_node_cgroups_if_empty();
            return;
        }
    };
    let stop_signals = stop_signals();
    // Named before its command's stderr closes: who read that to its end finds the keeper.
    let _ = nix::sys::prctl::set_name(KEEPER_NAME);
    // From here on nothing of the command's is held: a caller reading its stderr to the end,
    // or unmounting where it ran, does not wait for the keeper.
    detach(std::os::fd::AsRawFd::as_raw_fd(&name));
    let left = (returned + wait).saturating_duration_since(Instant::now());
    wait_for_signal(&stop_signals, left);
    // Let go of the name first (see the module doc): a pod whose folder is still there when
    // they are looked at below has its removal ask for the name after this.
    drop(name);
    runtime.remove_node_cgroups_if_empty();
    // SAFETY: the end of this process; nothing of it is to be dropped or flushed.
    unsafe { libc::_exit(status) }
}

/// Blocks SIGTERM, SIGINT and SIGHUP, so that one sent to the keeper ends its wait instead of
/// the process (the folders are removed either way).
fn stop_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal};
    let mut set = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(signal);
    }
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
    set
}

/// Waits until one of `signals` (blocked) arrives, or `wait` has passed.
fn wait_for_signal(signals: &nix::sys::signal::SigSet, wait: Duration) {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let timeout = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: a valid signal set and timespec; no siginfo asked for.
        let got = unsafe { libc::sigtimedwait(signals.as_ref(), std::ptr::null_mut(), &timeout) };
        if got > 0 || nix::errno::Errno::last() != nix::errno::Errno::EINTR {
            return;
        }
    }
}

/// Stdio on `/dev/null`, every other descriptor but `keep` closed, cwd `/`.
fn detach(keep: std::os::fd::RawFd) {
    // SAFETY: plain descriptor calls in this single-threaded child; what the closed
    // descriptors belonged to is never used again (the process ends in `_exit`).
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        if keep > 3 {
            libc::close_range(3, (keep - 1) as libc::c_uint, 0);
        }
        libc::close_range((keep.max(2) + 1) as libc::c_uint, libc::c_uint::MAX, 0);
        libc::chdir(c"/".as_ptr());
    }
}
