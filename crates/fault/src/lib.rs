//! Named fault points: `PODLAB_FAULT=NAME` makes the podlab process that reaches the step NAME
//! kill itself with SIGKILL there, as a `kill -9` or the OOM killer would at the worst moment.
//! The reliability tests crash pod creation and deletion at each point in turn, then check that
//! `podlab gc` leaves nothing behind and that a restarted agent loses no pod.
//!
//! Every point is listed once, in [`POINTS`]: where it is, which process reaches it, and what
//! exists at that moment. A call with a name not in the list is a bug the tests catch.
//!
//! The points are always compiled in, not behind a cargo feature: the tests must crash the same
//! binaries that ship (a feature would be unified on in every workspace build anyway, and
//! would make `cargo build --workspace --bins` and the tests disagree on what was built). Unset,
//! a point costs one load of an initialised `OnceLock` and a compare against `None`. Setting
//! the variable only lets a process kill itself, which whoever sets its environment could do.
//!
//! `PODLAB_FAULT_LOG=FILE` appends `NAME PID` to FILE before the kill, so a test knows the
//! point was reached (a point never reached would make its test prove nothing).

use std::io::Write;
use std::sync::OnceLock;

/// The variable naming the point to crash at.
pub const ENV: &str = "PODLAB_FAULT";
/// The variable naming a file that records each point crashed at.
pub const LOG_ENV: &str = "PODLAB_FAULT_LOG";

/// Which part of a pod's life a point is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Create,
    Delete,
}

/// Which process reaches a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// The node agent (or a one-shot `podlab run`), running the runtime in-process.
    Agent,
    /// The pod's shim, `podlab-shim`.
    Shim,
}

/// A fault point: its name, where it is, and what exists when the process dies there.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub name: &'static str,
    pub phase: Phase,
    pub process: Process,
    /// Only reached with the built-in network (`PODLAB_NETWORK=builtin`).
    pub builtin_network: bool,
    pub what_exists: &'static str,
}

const fn point(
    name: &'static str,
    phase: Phase,
    process: Process,
    what_exists: &'static str,
) -> Point {
    Point {
        name,
        phase,
        process,
        builtin_network: false,
        what_exists,
    }
}

const fn builtin(name: &'static str, what_exists: &'static str) -> Point {
    Point {
        name,
        phase: Phase::Create,
        process: Process::Agent,
        builtin_network: true,
        what_exists,
    }
}

use Phase::{Create, Delete};
use Process::{Agent, Shim};

/// Every fault point, in the order a pod's creation and deletion reach them (a pod whose
/// network namespace was not made ahead: its ADD runs while the shim starts).
pub const POINTS: &[Point] = &[
    point(
        "sandbox.after-folder",
        Create,
        Agent,
        "the sandbox folder and its lock",
    ),
    point(
        "sandbox.after-shm",
        Create,
        Agent,
        "+ the pod's /dev/shm tmpfs mount",
    ),
    point(
        "sandbox.after-cgroups",
        Create,
        Agent,
        "+ the pod's network namespace pinned, the shim starting, the pod's and the pause's \
         cgroups made, the pause not yet told",
    ),
    point(
        "shim.after-pause",
        Create,
        Shim,
        "+ the shim, pause in the pod's new namespaces (not pinned), the network's ADD under way",
    ),
    builtin(
        "network.after-lease",
        "+ the pod's address leased (built-in IPAM), no veth",
    ),
    builtin(
        "network.after-veth",
        "+ the veth pair, host end on the bridge",
    ),
    point(
        "sandbox.after-network",
        Create,
        Agent,
        "+ the network attached (veth, lease, CNI cache); the shim not yet told, nothing else \
         pinned, no sandbox record",
    ),
    point(
        "shim.after-pins",
        Create,
        Shim,
        "+ the namespaces pinned under ns/, the shim record",
    ),
    point(
        "sandbox.after-shim",
        Create,
        Agent,
        "+ the shim ready, its socket; no sandbox record",
    ),
    point(
        "sandbox.after-record",
        Create,
        Agent,
        "+ sandbox.json: the sandbox is Ready",
    ),
    point(
        "container.after-create",
        Create,
        Agent,
        "+ a container record (Created) with its rootfs folders",
    ),
    point(
        "shim.container.after-fork",
        Create,
        Shim,
        "+ the container's init process forked, not yet recorded Running",
    ),
    point(
        "container.after-start",
        Create,
        Agent,
        "+ the container Running",
    ),
    point(
        "sandbox.stop.after-containers",
        Delete,
        Agent,
        "containers stopped; network, pause and pins still there",
    ),
    point(
        "sandbox.stop.after-network",
        Delete,
        Agent,
        "network torn down; pause, pins and shim still there",
    ),
    point(
        "shim.shutdown.after-kill",
        Delete,
        Shim,
        "pause killed; pins, socket and shim record still there",
    ),
    point(
        "sandbox.remove.before-folder",
        Delete,
        Agent,
        "the sandbox stopped; its folder and records still there",
    ),
    point(
        "pod.terminate.before-store-delete",
        Delete,
        Agent,
        "everything removed on the node; the pod still in the store",
    ),
];

static ARMED: OnceLock<Option<String>> = OnceLock::new();

/// The fault point `name`: kills this process with SIGKILL if `PODLAB_FAULT` names it, else
/// does nothing.
pub fn point_reached(name: &'static str) {
    debug_assert!(
        POINTS.iter().any(|p| p.name == name),
        "fault point {name:?} is not listed in podlab_fault::POINTS"
    );
    let armed = ARMED.get_or_init(|| std::env::var(ENV).ok().filter(|v| !v.is_empty()));
    if armed.as_deref() == Some(name) {
        crash(name);
    }
}

#[cold]
fn crash(name: &str) -> ! {
    if let Some(log) = std::env::var_os(LOG_ENV) {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            // One write of a whole line: concurrent crashers do not interleave.
            let _ = file.write_all(format!("{name} {}\n", std::process::id()).as_bytes());
        }
    }
    // SAFETY: kill(2) on our own pid with a valid signal; SIGKILL cannot be caught.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // SIGKILL is delivered before kill(2) returns to a single-threaded caller, and to some
    // thread of this process before any other runs on; this is the backstop.
    loop {
        std::thread::park();
    }
}

/// The point named `name`, if it is one.
pub fn find(name: &str) -> Option<&'static Point> {
    POINTS.iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_names_are_unique_and_dotted() {
        for (i, p) in POINTS.iter().enumerate() {
            assert!(p.name.contains('.'), "{}", p.name);
            assert!(
                POINTS[i + 1..].iter().all(|q| q.name != p.name),
                "{} listed twice",
                p.name
            );
        }
    }

    #[test]
    fn an_unarmed_point_does_nothing() {
        // The test process has no PODLAB_FAULT (cargo test does not set it).
        assert!(std::env::var_os(ENV).is_none());
        point_reached("sandbox.after-folder");
        assert_eq!(find("sandbox.after-folder").unwrap().phase, Phase::Create);
        assert!(find("nosuch.point").is_none());
    }
}
