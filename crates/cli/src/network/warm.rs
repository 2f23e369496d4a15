//! A warm network namespace: one made and attached by the real CNI plugins ahead of time, for
//! the next pod of a one-shot command to join, so that the plugins' ADD (two Go programs'
//! starts, `bridge` and its `host-local`) is off that command's way.
//!
//! **Who makes it.** After a `podlab run --rm` on the default CNI network has removed its pod,
//! its removal child forks a keeper (named `podlab-warm`, stdio on /dev/null, no descriptor of
//! the command kept, cwd `/`). The keeper binds the abstract unix socket `@podlab-warm-netns`
//! of the node's network namespace (one keeper per node namespace: a second one exits at
//! once), then makes a network namespace (held by its descriptor only, never pinned, `lo` up)
//! and runs the network's ADD on it exactly as a sandbox's would run (same conflist, same
//! plugins, same lock; `CNI_CONTAINERID` is the keeper's own `warm…` id). Its ADD result is
//! cached in `/run/podlab-net/<netns inode>/warm/<id>/`, with the keeper's identity.
//!
//! Both ends check the other's user (`SO_PEERCRED`): any process of the namespace could bind
//! the abstract name or connect to it, and a namespace handed over by another user's process
//! is never joined.
//!
//! **The node agent's** (on unless `PODLAB_NODE_WARM_NETNS=0` or `PODLAB_WARM_NETNS=0`, see
//! [`ENV_AGENT`]). The agent is multi-threaded, so it forks nothing: once one of its
//! pods has taken the warm namespace, or found none, a thread of its own starts `podlab node
//! --warm-keeper AGENT_PID`, which forks the keeper as above, but waits for pods as long as
//! the agent lives (its pidfd: the agent's exit, `kill -9` included, ends it, DEL first), and
//! leaves the bridge to the agent. One is started at a time. It runs at the pods' priority:
//! its ADD holds the network's lock, which a niced keeper on a busy node would hold for
//! seconds while every pod's ADD and DEL waits (measured: at `nice` 10, 1000 pods were not all
//! Ready after 13 minutes; 6 without a keeper). The first pod of a node makes its own
//! namespace; a later one finds one made, whatever the ADD costs on a bridge of many ports
//! (about 30 ms at 1000 pods). An agent's pod never waits for a keeper still in its ADD (it
//! reads the keepers' folders first: a live keeper without a cached result is still adding);
//! it makes its own then, as pods created in a burst do. The agent's stop ends its keeper
//! through `podlab gc`'s path.
//!
//! **Who takes it.** RunPodSandbox asks the network for a prepared namespace before it starts
//! the shim ([`take`]): the command connects to the socket and the keeper sends the namespace's
//! descriptor and its ADD result. The command checks that the result was made with the conflist
//! in force now, moves the cached result into the sandbox's folder and records there the CNI
//! container id (`network-attachment`), and says "taken"; the keeper exits. pause joins that
//! namespace instead of making one; it is pinned, recorded and torn down as any pod's (the DEL
//! runs with the ADD's container id and config, from the sandbox's folder). A keeper still in
//! its ADD answers when the ADD is done; a command finds no keeper in one failed `connect`.
//!
//! **Lifetime: gone within 2 s of the command.** Issue 19 allows a one-shot pod's traces on the
//! node for 2 s after its command returned ("then `podlab get` no longer shows it and `gc`
//! finds nothing"), and a user who runs `podlab gc` or `ip link` a few seconds after a `run --rm`
//! expects to find nothing; a keeper, its veth, its lease and the bridge kept for it are such
//! traces, so the keeper keeps to the same rule. It waits for a pod until [`TTL`] (1.5 s) after
//! the command that left it returned (`PODLAB_WARM_NETNS=SECONDS`, fractions allowed; 0 makes
//! none), then ends: its DEL and the bridge's removal take the rest of the 2 s (measured: see
//! docs/benchmarks.md, issue 19). When the removal before it already took that time, no keeper
//! is made. So the warm path serves what it is for, one-shot commands run one after another
//! (a script, a loop, a benchmark), and a command typed seconds after the last one pays the
//! plugins' ADD, as it would without a keeper. Before that, `podlab gc` (and the node agent's
//! stop, which runs the same collection) asks the keeper to stop, and SIGTERM stops it; a pod
//! that takes the namespace ends it too. At most one warm namespace per node network namespace.
//! Ending, the keeper runs the DEL (its veth and lease go; the namespace goes with its
//! descriptor) and removes the bridge and the network's folder if no pod is left on it, as the
//! last one-shot pod's removal does. A keeper killed with SIGKILL takes its namespace and veth
//! with it; its lease is released by the next `podlab gc` ([`collect_orphans`]), or goes with
//! the network's folder.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    accept4, bind, connect, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
};
use podlab_cni::Attachment;
use podlab_runtime::liveness::ProcessIdentity;
use podlab_runtime::protocol::{receive_message, send_message};
use podlab_runtime::{NetworkAttachment, PodNetwork, PreparedNetwork};
use serde::{Deserialize, Serialize};

use super::{Bridge, PodlabNetwork};

/// `PODLAB_WARM_NETNS`: until how many seconds after the command returned a warm namespace
/// waits for a pod (0: none is made).
pub const ENV_TTL: &str = "PODLAB_WARM_NETNS";
/// The default wait after the command returned: its end (DEL, bridge) fits in the 2 s that
/// follow a one-shot command (see the module doc).
pub const TTL: Duration = Duration::from_millis(1500);
/// The keeper's socket, in the abstract namespace of the node's network namespace.
const SOCKET: &[u8] = b"podlab-warm-netns";
/// The keeper's process name (`/proc/PID/comm`).
pub const KEEPER_NAME: &str = "podlab-warm";
/// In a sandbox's folder: the CNI container id of the warm namespace it took.
const ADOPTED: &str = "network-attachment";
/// In the network's folder: one folder per warm namespace (its ADD result, its keeper).
const WARM_DIR: &str = "warm";
/// In a warm namespace's folder: the keeper's identity (`PID:STARTTIME`).
const KEEPER_FILE: &str = "keeper";
/// How long a command waits for a keeper that is still in its ADD.
const TAKE_WAIT: Duration = Duration::from_secs(5);
/// How long `podlab gc` waits for a keeper's DEL.
const STOP_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Request {
    Take,
    Stop,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Reply {
    /// The namespace (its descriptor comes with the message) and its ADD.
    Offer {
        container_id: String,
        cache_dir: PathBuf,
        ips: Vec<String>,
        result_json: String,
    },
    /// Stopped (the DEL is done), or nothing to offer.
    Done,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    taken: bool,
}

/// How long after the command returned a warm namespace waits, from `PODLAB_WARM_NETNS`
/// (seconds, fractions allowed); None when off.
fn ttl() -> Option<Duration> {
    wait_after_return(ENV_TTL, TTL)
}

/// A keeper's wait after its command returned: the seconds in `variable` (fractions allowed;
/// `default` when unset or not a number), None when 0.
pub(crate) fn wait_after_return(variable: &str, default: Duration) -> Option<Duration> {
    let wait = match std::env::var(variable) {
        Ok(value) => value
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map_or(default, |s| Duration::from_secs_f64(s.min(1e9))),
        Err(_) => default,
    };
    (!wait.is_zero()).then_some(wait)
}

/// `<sandbox>` of the pin `<sandbox>/ns/net`.
pub(super) fn sandbox_dir(netns_pin: &Path) -> &Path {
    netns_pin
        .parent()
        .and_then(Path::parent)
        .unwrap_or(netns_pin)
}

/// The CNI container id of the warm namespace a sandbox took, if it took one.
pub(super) fn adopted_id(sandbox_dir: &Path) -> Option<String> {
    let id = std::fs::read_to_string(sandbox_dir.join(ADOPTED)).ok()?;
    let id = id.trim();
    podlab_cni::args::check_container_id(id).ok()?;
    Some(id.to_owned())
}

fn abstract_address() -> nix::Result<UnixAddr> {
    UnixAddr::new_abstract(SOCKET)
}

/// A unix socket for one message at a time, as the keepers speak.
pub(crate) fn seqpacket() -> nix::Result<OwnedFd> {
    socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
}

/// Whether the process at the other end of `fd` runs as this one's user: an abstract name
/// can be bound by any process of the namespace, so neither side trusts another user's.
pub(crate) fn same_user(fd: BorrowedFd<'_>) -> bool {
    nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::PeerCredentials)
        .is_ok_and(|peer| peer.uid() == nix::unistd::geteuid().as_raw())
}

/// Connected to the keeper of this network namespace, if one listens (as this user).
fn connect_keeper() -> Option<OwnedFd> {
    connect_same_user(&abstract_address().ok()?)
}

/// Connected to the keeper listening at `address`, if one does, as this user.
pub(crate) fn connect_same_user(address: &UnixAddr) -> Option<OwnedFd> {
    let fd = seqpacket().ok()?;
    connect(fd.as_raw_fd(), address).ok()?;
    same_user(fd.as_fd()).then_some(fd)
}

/// Set by SIGTERM, SIGINT or SIGHUP in a keeper: it ends as at its deadline (DEL first).
static KEEPER_STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop(_signal: libc::c_int) {
    KEEPER_STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether a stop signal came ([`handle_stop_signals`]).
pub(crate) fn stopping() -> bool {
    KEEPER_STOPPING.load(std::sync::atomic::Ordering::SeqCst)
}

/// A keeper's signal mask while it waits: the stop signals, blocked the rest of the time, are
/// let in only inside `ppoll`, so one that comes between the check of [`stopping`] and the
/// wait interrupts the wait instead of going unseen until the deadline.
static WAITING_MASK: std::sync::OnceLock<nix::sys::signal::SigSet> = std::sync::OnceLock::new();

const STOP_SIGNALS: [nix::sys::signal::Signal; 3] = [
    nix::sys::signal::Signal::SIGTERM,
    nix::sys::signal::Signal::SIGINT,
    nix::sys::signal::Signal::SIGHUP,
];

/// Blocks the stop signals in this (single-threaded) keeper and handles them with
/// [`on_stop`]; the mask it had is the one it waits with. Children it spawns (the CNI
/// plugins) start with an empty mask, as `std::process::Command` gives them.
pub(crate) fn handle_stop_signals() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, SigmaskHow};
    let action = SigAction::new(
        SigHandler::Handler(on_stop),
        SaFlags::empty(),
        SigSet::empty(),
    );
    let mut stops = SigSet::empty();
    for signal in STOP_SIGNALS {
        stops.add(signal);
        // SAFETY: the handler only stores to an atomic.
        let _ = unsafe { sigaction(signal, &action) };
    }
    let mut before = SigSet::empty();
    if nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stops), Some(&mut before))
        .is_ok()
    {
        for signal in STOP_SIGNALS {
            before.remove(signal);
        }
        let _ = WAITING_MASK.set(before);
    }
}

/// Waits until `fd` is readable, at most `wait` (a keeper asked to stop waits no more).
pub(crate) fn readable(fd: BorrowedFd<'_>, wait: Duration) -> bool {
    readable_while(fd, wait, None)
}

/// [`readable`], giving up too when the `owner` process (its pidfd) has exited.
pub(crate) fn readable_while(
    fd: BorrowedFd<'_>,
    wait: Duration,
    owner: Option<BorrowedFd<'_>>,
) -> bool {
    use nix::poll::{ppoll, PollFd, PollFlags};
    let deadline = Instant::now() + wait;
    loop {
        if stopping() {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = nix::sys::time::TimeSpec::from_duration(left.min(Duration::from_secs(60)));
        let mut fds = vec![PollFd::new(fd, PollFlags::POLLIN)];
        fds.extend(owner.map(|owner| PollFd::new(owner, PollFlags::POLLIN)));
        match ppoll(&mut fds, Some(timeout), WAITING_MASK.get().copied()) {
            Ok(_) if fds.get(1).is_some_and(|o| o.any().unwrap_or(true)) => return false,
            Ok(n) if n > 0 => return true,
            Ok(_) if Instant::now() >= deadline => return false,
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// RunPodSandbox's question ([`podlab_runtime::NetworkPlugin::take_prepared`]): the warm
/// namespace of this node's keeper, if there is one made with the conflist in force, adopted
/// by the sandbox whose namespace pin is `pod.netns`.
pub(super) fn take(network: &PodlabNetwork, pod: &PodNetwork<'_>) -> Option<PreparedNetwork> {
    // A warm namespace's ADD ran without port mappings: a pod with host ports gets its own,
    // whose ADD makes them (portmap's chain named by the pod's CNI container id).
    if network.kind != "cni" || ttl().is_none() || !pod.port_mappings.is_empty() {
        return None;
    }
    // The node agent's pods never wait for a keeper still in its ADD (on a busy node that can
    // take seconds): they make their own then. Its next pod finds one made after this one
    // started ([`REFILL_AFTER`]), if none is being made.
    let _refill = if REFILL.load(std::sync::atomic::Ordering::SeqCst) {
        match warmth(&network.net_root) {
            Warmth::Ready => Some(Refill),
            Warmth::Making => return None,
            Warmth::Cold => {
                drop(Refill);
                return None;
            }
        }
    } else {
        None
    };
    let keeper = connect_keeper()?;
    send_message(keeper.as_fd(), &Request::Take, &[]).ok()?;
    if !readable(keeper.as_fd(), TAKE_WAIT) {
        return None;
    }
    let (reply, mut fds) = receive_message::<Reply>(keeper.as_fd()).ok()??;
    let Reply::Offer {
        container_id,
        cache_dir,
        ips,
        result_json,
    } = reply
    else {
        return None;
    };
    let netns = fds.pop()?;
    let adopted = adopt(network, pod, &container_id, &cache_dir);
    let answer = Answer {
        taken: adopted.is_ok(),
    };
    if send_message(keeper.as_fd(), &answer, &[]).is_err() && adopted.is_ok() {
        // The keeper is gone: the namespace is ours all the same (this descriptor holds it).
    }
    if adopted.is_err() {
        // Not made with the conflist in force (or not adoptable): the keeper DELs it.
        let _ = std::fs::remove_file(sandbox_dir(pod.netns).join(ADOPTED));
        return None;
    }
    let _ = std::fs::remove_dir_all(&cache_dir);
    Some(PreparedNetwork {
        netns,
        attachment: NetworkAttachment {
            ips,
            result: serde_json::from_str(&result_json).ok(),
        },
    })
}

/// Whether a warm namespace waits in this network namespace, from the keepers' folders.
enum Warmth {
    /// A live keeper's ADD is done (its result is cached).
    Ready,
    /// A live keeper is in its ADD.
    Making,
    /// No live keeper.
    Cold,
}

fn warmth(net_root: &Path) -> Warmth {
    let mut making = false;
    for folder in live_keeper_folders(net_root) {
        if cached_results(&folder).next().is_some() {
            return Warmth::Ready;
        }
        making = true;
    }
    if making {
        Warmth::Making
    } else {
        Warmth::Cold
    }
}

/// The warm folders under `net_root` whose keeper still runs.
fn live_keeper_folders(net_root: &Path) -> impl Iterator<Item = PathBuf> {
    let folders = std::fs::read_dir(net_root.join(WARM_DIR))
        .into_iter()
        .flatten();
    folders
        .flatten()
        .map(|f| f.path())
        .filter(|f| keeper_alive(f))
}

/// The files in `folder` that cache an ADD result on `eth0` (`<network>-<id>-eth0`).
fn cached_results(folder: &Path) -> impl Iterator<Item = PathBuf> {
    let files = std::fs::read_dir(folder).into_iter().flatten().flatten();
    files
        .filter(|f| f.file_name().to_string_lossy().ends_with("-eth0"))
        .map(|f| f.path())
}

/// The node-side links (the veth on the bridge) of the warm namespaces that live keepers hold
/// in this network namespace: `podlab demo cni` tells them from its pods'.
pub fn kept_node_links() -> Vec<String> {
    let Ok(net_root) = super::network_root() else {
        return Vec::new();
    };
    live_keeper_folders(&net_root)
        .flat_map(|folder| node_links_cached_in(&folder))
        .collect()
}

/// The node-side links named by the ADD results cached in `folder` (a sandbox's, or a warm
/// namespace's): CNI's result lists the bridge, the node's end of the veth, then `eth0` with
/// its `sandbox`.
pub fn node_links_cached_in(folder: &Path) -> Vec<String> {
    cached_results(folder)
        .filter_map(|path| podlab_cni::cache::load(&path).ok().flatten())
        .flat_map(|cached| cached.result["interfaces"].as_array().cloned())
        .flatten()
        .filter_map(|i| {
            let name = i["name"].as_str()?;
            (i.get("sandbox").is_none() && name.starts_with("veth")).then(|| name.to_owned())
        })
        .collect()
}

/// Whether the keeper a warm folder names still runs.
fn keeper_alive(folder: &Path) -> bool {
    std::fs::read_to_string(folder.join(KEEPER_FILE))
        .ok()
        .and_then(|text| {
            let (pid, start) = text.trim().split_once(':')?;
            Some(ProcessIdentity {
                pid: pid.parse().ok()?,
                start_time: start.parse().ok()?,
            })
        })
        .is_some_and(|keeper| keeper.is_alive())
}

/// Moves the warm namespace's cached ADD into the sandbox's folder and records its container
/// id there, when the ADD ran with the conflist in force now.
fn adopt(
    network: &PodlabNetwork,
    pod: &PodNetwork<'_>,
    container_id: &str,
    cache_dir: &Path,
) -> Result<(), String> {
    let podlab_cni::NetworkKind::Cni(config) = &network.network else {
        return Err("not a CNI network".into());
    };
    let list = podlab_cni::CniNetwork::new(config.clone())
        .and_then(|n| n.conflist())
        .map_err(|e| e.to_string())?;
    let from = podlab_cni::cache::cache_path(cache_dir, &list.name, container_id, "eth0");
    let record = podlab_cni::cache::load(&from)
        .map_err(|e| e.to_string())?
        .ok_or("no cached result")?;
    if record.config != list.raw {
        return Err("made with another conflist".into());
    }
    let sandbox = sandbox_dir(pod.netns);
    let to = podlab_cni::cache::cache_path(sandbox, &list.name, container_id, "eth0");
    podlab_cni::cache::store(&to, &record).map_err(|e| e.to_string())?;
    std::fs::write(sandbox.join(ADOPTED), container_id).map_err(|e| e.to_string())
}

/// In a `run --rm`'s removal child, before the removal: a keeper will follow, so the removal
/// keeps the bridge for it. False when no warm namespace is wanted.
pub fn will_follow(root: &Path) -> bool {
    let wanted = ttl().is_some()
        && matches!(
            super::podlab_network(root, Bridge::RemoveWhenUnused),
            Ok(Some(n)) if n.kind == "cni"
        );
    if wanted {
        super::WARM_KEEPER_FOLLOWS.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    wanted
}

/// In a `run --rm`'s removal child, after the removal: forks the keeper of a warm namespace
/// (see the module doc), which waits until `ttl()` after `returned` (when the command
/// returned), and returns once it holds the socket, or found another keeper there. None is
/// made when that time has passed already. Single-threaded callers only.
pub fn start_keeper(root: &Path, returned: Instant) {
    let (Some(ttl), Ok(Some(network))) =
        (ttl(), super::podlab_network(root, Bridge::RemoveWhenUnused))
    else {
        return;
    };
    let Some(deadline) = returned.checked_add(ttl).filter(|d| *d > Instant::now()) else {
        // Too late for a keeper: the bridge was kept for it, and goes now if unused.
        let _ = network.del_nothing();
        return;
    };
    let until = Until {
        deadline,
        owner: None,
    };
    if !fork_keeper(&network, until) {
        // No keeper: the bridge was kept for it, and goes now if no pod is left on it.
        let _ = super::gc();
    }
}

/// `PODLAB_NODE_WARM_NETNS=0` (or `false`, `off`): the node agent keeps no warm namespace for
/// its next pod. `PODLAB_WARM_NETNS=0` turns off every warm namespace, the agent's included.
pub const ENV_AGENT: &str = "PODLAB_NODE_WARM_NETNS";

/// Whether the node agent is to keep a warm namespace ([`ENV_AGENT`]).
pub fn agent_keeper_wanted() -> bool {
    let off = std::env::var(ENV_AGENT).is_ok_and(|v| matches!(v.trim(), "0" | "false" | "off"));
    !off && ttl().is_some()
}

/// Set by the node agent ([`refill_for_this_agent`]).
static REFILL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// In the node agent: a pod that took the warm namespace, or found none, starts the keeper of
/// the next one (`podlab node --warm-keeper`), which lives as long as the agent.
/// The agent's pods then find their namespace made and attached, whatever the bridge's size
/// and the leases' count make the ADD cost, and the first pod of a node pays its own.
pub fn refill_for_this_agent() {
    REFILL.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// How long after a pod took the warm namespace (or found none) its refill starts. The
/// keeper's start and its ADD (the program's exec and three plugins', about 10 ms of CPU)
/// would otherwise run beside the rest of that pod's start on a 2-core node: a pod of two
/// containers was Ready in 22.7 ms with the refill at once, 16.4 ms with it 200 ms later
/// (medians of 12, `apply --trace`). A pod that comes sooner makes its own namespace, as it
/// does while a keeper is in its ADD.
const REFILL_AFTER: Duration = Duration::from_millis(250);

/// Set while this agent starts a keeper: pods created in a burst start one, not one each.
static REFILLING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Dropped at the end of a pod's question: starts the next keeper [`REFILL_AFTER`] later, off
/// the pod's way, unless one is being started. The agent is multi-threaded, so the keeper is a
/// program of its own (an exec, not a fork).
struct Refill;

impl Drop for Refill {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        if REFILLING.swap(true, Ordering::SeqCst) {
            return;
        }
        let started = std::thread::Builder::new()
            .name("warm-refill".into())
            .spawn(|| {
                std::thread::sleep(REFILL_AFTER);
                // The program as it was started, even if replaced on disk since.
                let started = std::process::Command::new("/proc/self/exe")
                    .args(["node", "--warm-keeper", &std::process::id().to_string()])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn();
                if let Ok(mut child) = started {
                    // It returns once its keeper holds the socket (or found another there).
                    let _ = child.wait();
                }
                REFILLING.store(false, Ordering::SeqCst);
            });
        if started.is_err() {
            REFILLING.store(false, Ordering::SeqCst);
        }
    }
}

/// `podlab node --warm-keeper AGENT_PID`, started by the node agent ([`Refill`]): forks a
/// keeper whose life ends with the agent's (its pidfd) instead of a deadline, and returns once
/// that holds the socket.
/// Nothing when the agent is no longer this process's parent (it died meanwhile).
pub fn keep_for_agent(agent: i32) {
    let (Some(_), Ok(Some(network))) = (ttl(), super::podlab_network(Path::new("/"), Bridge::Keep))
    else {
        return;
    };
    if network.kind != "cni" {
        return;
    }
    let Ok(owner) = ProcessIdentity::of(agent) else {
        return;
    };
    // Read after its identity: still the parent, so that identity is the agent's.
    if nix::unistd::getppid().as_raw() != agent {
        return;
    }
    let until = Until {
        deadline: Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600),
        owner: Some(owner),
    };
    fork_keeper(&network, until);
}

/// What ends a keeper that no pod took: its deadline, or its owner's exit.
struct Until {
    deadline: Instant,
    /// The node agent it keeps a namespace for.
    owner: Option<ProcessIdentity>,
}

/// Forks the keeper and waits until it holds the socket, or found another keeper there.
/// False when the fork failed. Single-threaded callers only.
fn fork_keeper(network: &PodlabNetwork, until: Until) -> bool {
    let Ok((ready_r, ready_w)) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) else {
        return false;
    };
    // SAFETY: the caller is single-threaded; the child runs the keeper and exits.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            drop(ready_r);
            let code = keeper(network, until, ready_w);
            // SAFETY: no destructor of the command's must run in this copy of it.
            unsafe { libc::_exit(code) }
        }
        Ok(nix::unistd::ForkResult::Parent { .. }) => {
            drop(ready_w);
            // One byte, or end of file when it exits (another keeper holds the socket).
            let mut byte = [0u8; 1];
            let _ = nix::unistd::read(&ready_r, &mut byte);
            true
        }
        Err(_) => false,
    }
}

/// The keeper's life: the socket, the namespace, its ADD, then one taker, the stop, the
/// deadline or the owner's exit. Returns the exit code.
fn keeper(network: &PodlabNetwork, until: Until, ready: OwnedFd) -> i32 {
    detach_from_command(&[ready.as_raw_fd()]);
    let _ = nix::unistd::setsid();
    let _ = nix::sys::prctl::set_name(c"podlab-warm");
    // Not the command's handlers: a stop signal ends the keeper, after its DEL.
    handle_stop_signals();
    let Ok(listener) = seqpacket() else { return 1 };
    let Ok(address) = abstract_address() else {
        return 1;
    };
    // Opened after the descriptors were closed, and checked against the start time read
    // before the fork: the agent, not a process that took its pid.
    let owner = match &until.owner {
        Some(agent) => match podlab_runtime::liveness::Pidfd::open(agent.pid) {
            Ok(pidfd) if agent.is_alive() => Some(pidfd),
            _ => return 0,
        },
        None => None,
    };
    let owner = owner.as_ref().map(|o| o.as_fd());
    let mut bound = bind(listener.as_raw_fd(), &address);
    // The agent's keeper follows one that a pod has just taken, and may find it not yet gone.
    let give_up = Instant::now() + Duration::from_millis(200);
    while bound.is_err() && owner.is_some() && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(5));
        bound = bind(listener.as_raw_fd(), &address);
    }
    if bound.is_err() || listen(&listener, Backlog::new(8).unwrap_or(Backlog::MAXCONN)).is_err() {
        return 0; // another keeper holds it
    }
    let _ = nix::unistd::write(&ready, &[1]);
    drop(ready);
    if owner.is_some_and(|agent| readable(agent, Duration::ZERO)) {
        return 0; // the agent died while this keeper started: no ADD for no one
    }
    let Some(warm) = Warm::make(network) else {
        // The bridge was kept for a one-shot command's keeper; it goes if no pod is left on it.
        if !network.keep_bridge {
            let _ = network.del_nothing();
        }
        return 1;
    };
    loop {
        let left = until.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stopping() || !readable_while(listener.as_fd(), left, owner) {
            warm.end(network);
            answer_waiting_stops(listener.as_fd());
            return 0;
        }
        let Ok(client) = accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC) else {
            continue;
        };
        // SAFETY: accept4 returned a new descriptor that nothing else owns.
        let client = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(client) };
        if !same_user(client.as_fd()) || !readable(client.as_fd(), Duration::from_secs(5)) {
            continue;
        }
        match receive_message::<Request>(client.as_fd()) {
            Ok(Some((Request::Take, _))) => {
                let offer = warm.offer();
                if send_message(client.as_fd(), &offer, &[warm.netns.as_raw_fd()]).is_err() {
                    continue;
                }
                let taken = readable(client.as_fd(), Duration::from_secs(5))
                    && matches!(
                        receive_message::<Answer>(client.as_fd()),
                        Ok(Some((Answer { taken: true }, _)))
                    );
                if taken {
                    return 0; // the pod's now: nothing to tear down here
                }
                // Refused (another conflist) or the taker died: not offered again.
                warm.end(network);
                return 0;
            }
            Ok(Some((Request::Stop, _))) => {
                warm.end(network);
                let _ = send_message(client.as_fd(), &Reply::Done, &[]);
                return 0;
            }
            _ => continue,
        }
    }
}

/// In a keeper (single-threaded, forked or cloned from its command): nothing of the
/// command's is held any more, not its output streams (a caller reading them to their end
/// would wait for the keeper; they go to `/dev/null`), not its descriptors (locks; every one
/// above 2 but `keep` is closed), not its folder (cwd `/`).
pub(crate) fn detach_from_command(keep: &[std::os::fd::RawFd]) {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        // SAFETY: dup2 onto the standard streams of this single-threaded process.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
    let mut kept = keep.to_vec();
    kept.sort_unstable();
    let mut from = 3;
    for fd in kept.into_iter().filter(|fd| *fd >= 3) {
        // SAFETY: closes descriptors this process no longer uses (none of `keep`).
        unsafe {
            if fd > from {
                libc::syscall(libc::SYS_close_range, from as u32, (fd - 1) as u32, 0u32);
            }
        }
        from = from.max(fd + 1);
    }
    // SAFETY: as above, every descriptor above the last kept one.
    unsafe { libc::syscall(libc::SYS_close_range, from as u32, u32::MAX, 0u32) };
    let _ = nix::unistd::chdir("/");
}

/// A `podlab gc` (or an agent's stop) that asked while the keeper was ending on its own hears
/// "done" once its DEL is over, instead of waiting for an answer that never comes.
fn answer_waiting_stops(listener: BorrowedFd<'_>) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    // Only the connections already waiting: an empty queue ends the loop.
    if fcntl(listener, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).is_err() {
        return;
    }
    while let Ok(client) = accept4(
        listener.as_raw_fd(),
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    ) {
        // SAFETY: accept4 returned a new descriptor that nothing else owns.
        let client = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(client) };
        if readable(client.as_fd(), Duration::from_millis(100))
            && matches!(
                receive_message::<Request>(client.as_fd()),
                Ok(Some((Request::Stop, _)))
            )
        {
            let _ = send_message(client.as_fd(), &Reply::Done, &[]);
        }
    }
}

/// The keeper's namespace and its attachment.
struct Warm {
    netns: OwnedFd,
    attachment: Attachment,
    status: podlab_cni::NetworkStatus,
}

impl Warm {
    /// A new network namespace with `lo` up, attached by the network's ADD; its folder records
    /// the keeper first, so that a keeper killed midway is found by `podlab gc`.
    fn make(network: &PodlabNetwork) -> Option<Warm> {
        let netns = podlab_ns::net::new_held().ok()?;
        let id = format!("warm{}", podlab_runtime::SandboxId::generate().as_str());
        let folder = network.net_root.join(WARM_DIR).join(&id);
        std::fs::create_dir_all(&folder).ok()?;
        let me = ProcessIdentity::of(std::process::id() as i32).ok()?;
        std::fs::write(
            folder.join(KEEPER_FILE),
            format!("{}:{}", me.pid, me.start_time),
        )
        .ok()?;
        let path = PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            netns.as_raw_fd()
        ));
        let attachment = Attachment::new(&id, &path, &folder).for_pod("", KEEPER_NAME, "");
        match network.add(&attachment) {
            Ok(status) => Some(Warm {
                netns,
                attachment,
                status,
            }),
            Err(_) => {
                let _ = std::fs::remove_dir_all(&folder);
                None
            }
        }
    }

    fn offer(&self) -> Reply {
        Reply::Offer {
            container_id: self.attachment.container_id.clone(),
            cache_dir: self.attachment.cache_dir.clone(),
            ips: self.status.ips.iter().map(|ip| ip.to_string()).collect(),
            result_json: self.status.result_json.clone(),
        }
    }

    /// The DEL, the folder, and the bridge if no pod is left on it, unless the node agent
    /// keeps it (its stop, or `podlab gc` after its `kill -9`, removes it then).
    fn end(self, network: &PodlabNetwork) {
        let _ = network.del(&self.attachment, network.keep_bridge);
        let _ = std::fs::remove_dir_all(&self.attachment.cache_dir);
        let _ = std::fs::remove_dir(self.attachment.cache_dir.parent().unwrap_or(Path::new("/")));
    }
}

impl PodlabNetwork {
    /// The bridge and the network's folder, if no pod is left on the bridge.
    fn del_nothing(&self) -> Result<(), podlab_runtime::network::PluginError> {
        self.locked(|| super::remove_if_unused(&self.bridge, &self.net_root))?
            .map(|_| ())
            .map_err(|e| format!("{e:#}").into())
    }
}

/// `podlab gc`'s part (and the node agent's stop): asks this network namespace's keeper to end
/// (it runs the DEL first) and waits for it. True when there was one.
pub fn stop_keeper() -> bool {
    let Some(keeper) = connect_keeper() else {
        return false;
    };
    if send_message(keeper.as_fd(), &Request::Stop, &[]).is_err() {
        return false;
    }
    // A keeper still in its ADD answers when its DEL is done.
    if readable(keeper.as_fd(), STOP_WAIT) {
        let _ = receive_message::<Reply>(keeper.as_fd());
    }
    let _ = std::io::stdout().flush();
    true
}

/// With the network's lock held: the warm namespaces whose keeper is gone (killed): their
/// namespace went with it; the DEL releases the lease (no namespace to enter) and the folder
/// goes.
pub(super) fn collect_orphans(net_root: &Path) {
    let Ok(entries) = std::fs::read_dir(net_root.join(WARM_DIR)) else {
        return;
    };
    let Ok(Some(network)) = super::podlab_network(Path::new("/"), Bridge::Keep) else {
        return;
    };
    for entry in entries.flatten() {
        let folder = entry.path();
        if keeper_alive(&folder) {
            continue;
        }
        let id = entry.file_name().to_string_lossy().into_owned();
        let attachment = Attachment::new(&id, Path::new("/nonexistent"), &folder);
        let _ =
            podlab_cni::open_network(network.network.clone()).and_then(|n| n.teardown(&attachment));
        let _ = std::fs::remove_dir_all(&folder);
    }
    let _ = std::fs::remove_dir(net_root.join(WARM_DIR));
}
