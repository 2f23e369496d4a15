//! What a one-shot pod leaves ready for the next one: the node's cgroup folders and, without a
//! pod network, an empty network namespace.
//!
//! **The node's cgroup folders.** A pod's cgroup is `<podlab's root>/kubepods/<QoS
//! folder>/pod<uid>` in each hierarchy (five here: cpu, cpuacct, memory, pids, devices).
//! kubelet makes the folders above the pod's once and keeps them for the node's life; a
//! `podlab run --rm` with no agent made them and removed them again at every command: 15
//! `mkdir` and 15 `rmdir` of cgroups a run (a memory cgroup's `mkdir` alone is about 50 µs
//! here). So the removal child of `run --rm` removes its pod's folder only
//! ([`podlab_runtime::Runtime::keep_node_cgroups`]) and the node's stay for the next command,
//! which then makes one folder per hierarchy for its pod.
//!
//! **An empty network namespace** (`PODLAB_NETWORK=none`). A pod without a network still gets
//! a network namespace of its own with `lo` up: pause's `unshare(CLONE_NEWNET)` and the `lo`
//! it brings up take 0.5–0.9 ms here, on the way of the pod's first container, which joins
//! that namespace. The keeper makes one ahead ([`podlab_ns::net::new_held`]) and hands it to
//! the next command's RunPodSandbox
//! ([`podlab_runtime::Runtime::set_empty_netns_source`]), as the warm namespace of the CNI
//! network is handed over ([`crate::network::warm`]); pause joins it, and from there it is
//! pinned and removed as any pod's. Each command's removal child asks the keeper for the next
//! one (a namespace is made between commands, not while one starts). `PODLAB_WARM_NETNS=0`
//! makes none, as it makes no warm namespace for the CNI network.
//!
//! **One keeper, gone within 2 s.** Issue 19 allows a one-shot pod's traces on the node for
//! 2 s after its command returned. The removal child that finds no keeper of its podlab root
//! becomes it (`podlab-oneshot`): it binds the abstract unix socket
//! `@podlab-oneshot/<hash of the root>` of the node's network namespace, lets go of every
//! descriptor of the command's (stdio on `/dev/null`, cwd `/`), and serves until [`TTL`] after
//! its command returned (SIGTERM, SIGINT or SIGHUP end it early, and so does `podlab gc`, which
//! waits for its end before it collects). Then it closes its socket, lets the namespace it
//! still holds go with its descriptor, removes the node's folders that no pod uses any more
//! ([`podlab_runtime::Runtime::remove_node_cgroups_if_empty`]) and exits.
//!
//! **No folder left by a race.** The keeper closes its socket before it looks at the folders,
//! and a removal child asks for the socket only after its pod's folder is gone: so a keeper
//! that finds a folder still in use closed its socket before that pod's removal asks, and that
//! removal becomes the next keeper. A keeper killed with SIGKILL leaves empty folders, which
//! `podlab gc` removes (as any empty folder below podlab's root); its namespace goes with it.
//! A command made while a keeper removes the folders finds a parent gone between two of its
//! `mkdir`s and makes it again (`Cgroup::create` retries).
//!
//! `PODLAB_ONESHOT_KEEPER=SECONDS` sets the wait (fractions allowed; 0: no keeper, the node's
//! folders go with the pod). `run --rm --trace` keeps too: its command waits for its removal
//! child's phases until the child, ready as the keeper, lets go of the command's descriptors.

use std::hash::{Hash, Hasher};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::socket::{accept4, bind, listen, Backlog, SockFlag, UnixAddr};
use podlab_runtime::protocol::{receive_message, send_message};
use podlab_runtime::Runtime;
use serde::{Deserialize, Serialize};

use crate::network::warm::{
    detach_from_command, handle_stop_signals, readable, readable_while, same_user, seqpacket,
    stopping,
};

/// `PODLAB_ONESHOT_KEEPER`: until how many seconds after its command returned the keeper
/// serves (0: no keeper).
pub const ENV_TTL: &str = "PODLAB_ONESHOT_KEEPER";
/// The default wait after the command returned: as the warm network namespace's
/// ([`crate::network::warm::TTL`]), well inside the 2 s issue 19 allows.
pub const TTL: Duration = Duration::from_millis(1500);
/// The keeper's process name (`/proc/PID/comm`).
pub const KEEPER_NAME: &std::ffi::CStr = c"podlab-oneshot";
/// How long a command waits for the keeper's answer.
const ANSWER_WAIT: Duration = Duration::from_millis(500);
/// How long `podlab gc` waits for the keeper's end.
const STOP_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Request {
    /// A command's RunPodSandbox: the empty namespace, if one is ready.
    Take,
    /// A command's removal child, its pod gone: make the next empty namespace.
    Refill,
    /// `podlab gc`: end now (the folders removed first, then the connection closed).
    Stop,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Reply {
    /// The namespace comes with the message.
    Namespace,
    /// None ready.
    Nothing,
}

/// The wait `PODLAB_ONESHOT_KEEPER` asks for (default [`TTL`]); None when off.
fn ttl() -> Option<Duration> {
    crate::network::warm::wait_after_return(ENV_TTL, TTL)
}

/// Whether the keeper should hold an empty network namespace for the next pod: the pods have
/// no network (`PODLAB_NETWORK=none`) and warm namespaces are not switched off.
fn empty_netns_wanted() -> bool {
    std::env::var(crate::network::ENV_NETWORK).is_ok_and(|n| n == "none")
        && crate::network::warm::wait_after_return(
            crate::network::warm::ENV_TTL,
            crate::network::warm::TTL,
        )
        .is_some()
}

/// Whether a one-shot pod's removal should leave what it can to a keeper: podlab runs as root
/// (cgroups, namespaces) and the keeper is not switched off.
pub fn wanted(runtime: &Runtime) -> bool {
    nix::unistd::geteuid().is_root()
        && runtime
            .cgroups()
            .is_none_or(|node| !node.root.name.is_empty())
        && ttl().is_some()
}

/// The keeper's name for this podlab root: an abstract socket of the node's network namespace.
fn address(root: &Path) -> nix::Result<UnixAddr> {
    let mut hash = std::hash::DefaultHasher::new();
    root.hash(&mut hash);
    UnixAddr::new_abstract(format!("podlab-oneshot/{:016x}", hash.finish()).as_bytes())
}

/// Connected to this root's keeper, if one serves (as this user).
fn connect_keeper(root: &Path) -> Option<OwnedFd> {
    crate::network::warm::connect_same_user(&address(root).ok()?)
}

/// RunPodSandbox's source of empty namespaces in a command of `root`
/// ([`podlab_runtime::Runtime::set_empty_netns_source`]): the keeper's, if it has one ready.
pub fn take_empty_netns(root: &Path) -> Option<OwnedFd> {
    if !empty_netns_wanted() {
        return None;
    }
    let keeper = connect_keeper(root)?;
    send_message(keeper.as_fd(), &Request::Take, &[]).ok()?;
    if !readable(keeper.as_fd(), ANSWER_WAIT) {
        return None;
    }
    match receive_message::<Reply>(keeper.as_fd()).ok()?? {
        (Reply::Namespace, mut fds) => fds.pop(),
        (Reply::Nothing, _) => None,
    }
}

/// `podlab gc`'s part: asks the keeper of `root`, if one serves, to end now, and waits (at
/// most [`STOP_WAIT`]) until it has removed the node's folders. True when there was one.
pub fn stop(root: &Path) -> bool {
    let Some(keeper) = connect_keeper(root) else {
        return false;
    };
    if send_message(keeper.as_fd(), &Request::Stop, &[]).is_err() {
        return false;
    }
    // Its end closes the connection: readable, at end of file.
    readable(keeper.as_fd(), STOP_WAIT);
    true
}

/// In `run --rm`'s removal child, once its pod is removed (its node folders left,
/// `returned` the moment its command returned): asks a live keeper for the next namespace
/// and returns, or becomes the keeper, serves until its wait is over, removes the node's
/// folders and exits with `status` without returning. Where no keeper can be made, the
/// folders are removed here and it returns.
pub fn keep_or_leave(runtime: &Runtime, returned: Instant, status: i32) {
    let Some(wait) = ttl() else {
        runtime.remove_node_cgroups_if_empty();
        return;
    };
    let root = runtime.config().root.clone();
    let listener = match claim(&root) {
        Ok(Some(listener)) => listener,
        Ok(None) => {
            match connect_keeper(&root) {
                Some(keeper) if empty_netns_wanted() => {
                    let _ = send_message(keeper.as_fd(), &Request::Refill, &[]);
                }
                Some(_) => {}
                // The name is held, but not by a keeper of this user's that listens (another
                // user's process took it, or a keeper is between its bind and its listen):
                // nothing may be left to it.
                None => runtime.remove_node_cgroups_if_empty(),
            }
            return;
        }
        Err(_) => {
            runtime.remove_node_cgroups_if_empty();
            return;
        }
    };
    // A stop signal ends the service instead of the process (the folders are removed
    // either way).
    handle_stop_signals();
    // Named, and its first namespace made, before its command's stderr closes: who read that
    // to its end finds the keeper ready.
    let _ = nix::sys::prctl::set_name(KEEPER_NAME);
    let home = match empty_netns_wanted() {
        true => std::fs::File::open("/proc/thread-self/ns/net")
            .ok()
            .map(OwnedFd::from),
        false => None,
    };
    let ready = home.as_ref().and_then(|home| empty_netns(home.as_fd()));
    // From here on nothing of the command's is held: a caller reading its stderr to the end,
    // or unmounting where it ran, does not wait for the keeper.
    let kept = [Some(&listener), home.as_ref(), ready.as_ref()];
    detach_from_command(
        &kept
            .into_iter()
            .flatten()
            .map(|fd| fd.as_raw_fd())
            .collect::<Vec<_>>(),
    );
    let stopped_by = serve(
        listener.as_fd(),
        home.as_ref().map(|home| home.as_fd()),
        ready,
        returned + wait,
    );
    // Closed before the folders are looked at (see the module doc); a namespace not taken
    // goes with the process, and a `podlab gc` that asked hears the end with the process's.
    drop(listener);
    runtime.remove_node_cgroups_if_empty();
    drop(stopped_by);
    // SAFETY: the end of this process; nothing of it is to be dropped or flushed.
    unsafe { libc::_exit(status) }
}

/// Binds and listens on the keeper's name; None when another process holds it.
fn claim(root: &Path) -> Result<Option<OwnedFd>, nix::Error> {
    let fd = seqpacket()?;
    match bind(fd.as_raw_fd(), &address(root)?) {
        Ok(()) => {}
        Err(nix::errno::Errno::EADDRINUSE) => return Ok(None),
        Err(e) => return Err(e),
    }
    listen(&fd, Backlog::new(8).unwrap_or(Backlog::MAXCONN))?;
    Ok(Some(fd))
}

/// Answers Take (with `ready`, the namespace made for the next pod) and Refill (a new one
/// made from `home`, when namespaces are made) until `deadline`, a stop signal or a Stop,
/// whose connection it returns.
fn serve(
    listener: BorrowedFd<'_>,
    home: Option<BorrowedFd<'_>>,
    mut ready: Option<OwnedFd>,
    deadline: Instant,
) -> Option<OwnedFd> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stopping() || !readable_while(listener, left, None) {
            return None;
        }
        let Ok(client) = accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC) else {
            continue;
        };
        // SAFETY: accept4 returned a new descriptor that nothing else owns.
        let client = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(client) };
        if !same_user(client.as_fd()) || !readable(client.as_fd(), ANSWER_WAIT) {
            continue;
        }
        match receive_message::<Request>(client.as_fd()) {
            Ok(Some((Request::Take, _))) => match ready.take() {
                Some(netns) => {
                    let _ = send_message(client.as_fd(), &Reply::Namespace, &[netns.as_raw_fd()]);
                }
                None => {
                    let _ = send_message(client.as_fd(), &Reply::Nothing, &[]);
                }
            },
            Ok(Some((Request::Refill, _))) if ready.is_none() => {
                ready = home.and_then(empty_netns);
            }
            Ok(Some((Request::Stop, _))) => return Some(client),
            _ => {}
        }
    }
}

/// A new network namespace with `lo` up, held by the returned descriptor only, as
/// [`podlab_ns::net::new_held`] makes one, but without its thread: this keeper is its command's
/// continuation in the command's memory ([`crate::handover`]), where no thread is started; it
/// unshares itself and goes back to `home` (its own) after.
fn empty_netns(home: BorrowedFd<'_>) -> Option<OwnedFd> {
    use nix::sched::CloneFlags;
    nix::sched::unshare(CloneFlags::CLONE_NEWNET).ok()?;
    let made = std::fs::File::open("/proc/thread-self/ns/net")
        .ok()
        .map(OwnedFd::from);
    let up = podlab_ns::net::Netlink::open().and_then(|mut netlink| netlink.loopback_up());
    // Back whatever happened: the next namespace is made from the node's.
    let _ = nix::sched::setns(home, CloneFlags::CLONE_NEWNET);
    made.filter(|_| up.is_ok())
}
