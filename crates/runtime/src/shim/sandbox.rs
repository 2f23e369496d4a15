//! The sandbox itself: the pause process in the pod's new namespaces, and their pins.
//!
//! The pause process is forked from the shim; in the child it unshares uts+ipc+net, sets the
//! hostname and domainname, brings `lo` up, writes the pod's sysctls (into those new namespaces)
//! and `execve`s podlab-pause. With
//! `shareProcessNamespace` the shim first gives its children a new pid namespace, so that pause
//! is its PID 1. Then the shim pins every namespace under `ns/`, so they outlive the pause
//! process if it dies, and keeps them open for the containers to join.

use std::convert::Infallible;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::sched::CloneFlags;
use nix::unistd::{ForkResult, Pid};
use podlab_ns::{ops, NsKind};

use super::ShimArgs;
use crate::init::{self, ns_failure, sys_failure, ExecPlan, Stdio, Step};
use crate::liveness::ProcessIdentity;
use crate::process::ProcessSpec;
use crate::state::{SandboxPaths, ShimRecord};
use crate::status::PinnedNamespace;

/// The pod's namespaces, open for joining, and the shim's own pid namespace to come back to.
#[derive(Debug)]
pub(crate) struct PodNamespaces {
    pub net: Option<OwnedFd>,
    pub ipc: OwnedFd,
    pub uts: Option<OwnedFd>,
    pub pid: Option<OwnedFd>,
    own_pid: OwnedFd,
}

impl PodNamespaces {
    /// What a new container joins: the pod's net, ipc and uts namespaces.
    pub fn for_container(&self) -> Vec<(BorrowedFd<'_>, NsKind)> {
        let mut join = Vec::new();
        if let Some(net) = &self.net {
            join.push((net.as_fd(), NsKind::Net));
        }
        join.push((self.ipc.as_fd(), NsKind::Ipc));
        if let Some(uts) = &self.uts {
            join.push((uts.as_fd(), NsKind::Uts));
        }
        join
    }
}

/// Which pid namespace a forked child is born in.
pub(crate) enum PidNamespace<'a> {
    /// The shim's own (the host's).
    Shim,
    /// A new one, the child its PID 1.
    New,
    /// An existing one (the pod's, or a target container's).
    Join(BorrowedFd<'a>),
}

/// Forks a child born in `pid_ns` that runs `child`. `setns(CLONE_NEWPID)` and
/// `unshare(CLONE_NEWPID)` change only where the caller's *next children* go, so the shim
/// switches, forks, and switches back: no helper process in between.
pub(crate) fn fork_in(
    namespaces_own_pid: BorrowedFd<'_>,
    pid_ns: PidNamespace<'_>,
    child: impl FnOnce(),
) -> Result<Pid, String> {
    match &pid_ns {
        PidNamespace::Shim => {}
        PidNamespace::New => nix::sched::unshare(CloneFlags::CLONE_NEWPID)
            .map_err(|e| format!("unshare(CLONE_NEWPID): {e}"))?,
        PidNamespace::Join(fd) => nix::sched::setns(fd, CloneFlags::CLONE_NEWPID)
            .map_err(|e| format!("setns(CLONE_NEWPID): {e}"))?,
    }
    // SAFETY: the shim is single-threaded, so the child may do anything the shim could.
    let forked = unsafe { nix::unistd::fork() };
    if let Ok(ForkResult::Child) = forked {
        child();
        // SAFETY: the child bodies end in execve or _exit; this is only a backstop.
        unsafe { libc::_exit(127) }
    }
    if !matches!(pid_ns, PidNamespace::Shim) {
        if let Err(e) = nix::sched::setns(namespaces_own_pid, CloneFlags::CLONE_NEWPID) {
            eprintln!("podlab-shim: returning to its own pid namespace: {e}");
        }
    }
    match forked {
        Ok(ForkResult::Parent { child }) => Ok(child),
        Ok(ForkResult::Child) => unreachable!("the child never returns"),
        Err(nix::Error::ENOMEM) if !matches!(pid_ns, PidNamespace::Shim) => Err(
            "fork: ENOMEM: the pid namespace has no PID 1 any more (its process has exited)".into(),
        ),
        Err(e) => Err(format!("fork: {e}")),
    }
}

impl super::Shim {
    pub(crate) fn own_pid_ns(&self) -> BorrowedFd<'_> {
        self.namespaces.own_pid.as_fd()
    }
}

/// Starts pause and pins its namespaces. On failure everything made is undone.
pub(crate) fn start(
    args: &ShimArgs,
    paths: &SandboxPaths,
    shim: ProcessIdentity,
) -> Result<(ProcessIdentity, PodNamespaces, ShimRecord), String> {
    let own_pid =
        ops::open(Path::new("/proc/self/ns/pid"), NsKind::Pid).map_err(|e| e.to_string())?;
    let pause_pid = start_pause(args, own_pid.as_fd())?;
    podlab_fault::point_reached("shim.after-pause");
    let pause = match ProcessIdentity::of(pause_pid.as_raw()) {
        Ok(identity) => identity,
        Err(e) => {
            kill_and_reap(pause_pid);
            return Err(e.to_string());
        }
    };
    let mut record = ShimRecord {
        shim,
        pause: Some(pause),
        namespaces: Vec::new(),
    };
    super::save(&paths.shim_record(), &record);
    match pin_all(args, paths, pause.pid, &mut record.namespaces) {
        Ok(()) => {}
        Err(message) => {
            unpin_all(&record.namespaces);
            kill_and_reap(pause_pid);
            let _ = std::fs::remove_file(paths.shim_record());
            return Err(message);
        }
    }
    super::save(&paths.shim_record(), &record);
    podlab_fault::point_reached("shim.after-pins");
    let open = |kind: NsKind| -> Result<OwnedFd, String> {
        ops::open(&paths.ns(kind), kind).map_err(|e| e.to_string())
    };
    let opened = (|| {
        Ok::<_, String>(PodNamespaces {
            net: (!args.host_network)
                .then(|| open(NsKind::Net))
                .transpose()?,
            ipc: open(NsKind::Ipc)?,
            uts: (!args.host_network)
                .then(|| open(NsKind::Uts))
                .transpose()?,
            pid: args.share_pid.then(|| open(NsKind::Pid)).transpose()?,
            own_pid,
        })
    })();
    match opened {
        Ok(namespaces) => Ok((pause, namespaces, record)),
        Err(message) => {
            unpin_all(&record.namespaces);
            kill_and_reap(pause_pid);
            let _ = std::fs::remove_file(paths.shim_record());
            Err(message)
        }
    }
}

/// The namespaces the pod gets of its own: uts and net unless hostNetwork (the node's uts
/// comes with the node's network, as kubelet and containerd have it), always ipc, pid when shared.
pub(crate) fn pod_kinds(host_network: bool, share_pid: bool) -> Vec<NsKind> {
    let mut kinds = Vec::new();
    if !host_network {
        kinds.push(NsKind::Uts);
    }
    kinds.push(NsKind::Ipc);
    if !host_network {
        kinds.push(NsKind::Net);
    }
    if share_pid {
        kinds.push(NsKind::Pid);
    }
    kinds
}

fn start_pause(args: &ShimArgs, own_pid: BorrowedFd<'_>) -> Result<Pid, String> {
    let (report_r, report_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe2: {e}"))?;
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
    let process = ProcessSpec {
        argv: vec![
            args.pause.display().to_string(),
            format!("sandbox={}", args.sandbox_dir.display()),
        ],
        cwd: "/".into(),
        ..ProcessSpec::default()
    };
    let exec = ExecPlan::new(&process).map_err(|f| f.message)?;
    let pid_ns = if args.share_pid {
        PidNamespace::New
    } else {
        PidNamespace::Shim
    };
    // stdout must not be the starter's pipe (the shim's stdout until it is ready), or the
    // starter would wait for pause to exit: both of pause's output streams go to the shim log.
    let stdio = Stdio {
        stdin: super::raw(&null),
        stdout: 2,
        stderr: 2,
        console: None,
    };
    let pid = fork_in(own_pid, pid_ns, || {
        init::run_child(stdio, report_w, |_| pause_child(args, &exec))
    })?;
    drop(null);
    match crate::report::read_report(report_r).failure {
        None => Ok(pid),
        Some(failure) => {
            let _ = podlab_ns::child::wait_for(pid);
            Err(format!("starting the pause process: {}", failure.message))
        }
    }
}

/// In the pause child: the pod's namespaces, named, with `lo` up; then `execve` pause.
fn pause_child(args: &ShimArgs, exec: &ExecPlan) -> Step<Infallible> {
    if let Some(placement) = &args.placement {
        placement.enter()?;
    }
    let mut kinds = pod_kinds(args.host_network, false);
    kinds.retain(|k| *k != NsKind::Pid);
    ops::create(&kinds).map_err(|e| ns_failure("unshare the pod namespaces", None, e))?;
    if !args.host_network {
        podlab_ns::uts::set_hostname(&args.hostname)
            .map_err(|e| ns_failure("set the hostname", None, e))?;
        if !args.domainname.is_empty() {
            podlab_ns::uts::set_domainname(&args.domainname)
                .map_err(|e| ns_failure("set the domainname", None, e))?;
        }
        podlab_ns::net::Netlink::open()
            .and_then(|mut netlink| netlink.loopback_up())
            .map_err(|e| ns_failure("bring lo up", None, e))?;
    }
    // As runc sets the sandbox container's sysctls: from inside its namespaces, so that the
    // kernel applies each to the pod's net or ipc namespace and never to the host's.
    for (name, value) in &args.sysctls {
        podlab_ns::sysctl::write(name, value, !args.host_network)
            .map_err(|e| ns_failure(&format!("write sysctl key {name}"), None, e))?;
    }
    init::reset_signals();
    nix::unistd::chdir("/").map_err(|e| sys_failure("chdir", Some(Path::new("/")), e))?;
    Err(exec.exec())
}

fn pin_all(
    args: &ShimArgs,
    paths: &SandboxPaths,
    pause: i32,
    pinned: &mut Vec<PinnedNamespace>,
) -> Result<(), String> {
    std::fs::create_dir_all(paths.ns_dir())
        .map_err(|e| format!("creating {}: {e}", paths.ns_dir().display()))?;
    for kind in pod_kinds(args.host_network, args.share_pid) {
        let path = paths.ns(kind);
        ops::pin(pause, kind, &path).map_err(|e| e.to_string())?;
        let inode = ops::ns_inode(pause, kind).map_err(|e| e.to_string())?;
        pinned.push(PinnedNamespace { kind, path, inode });
    }
    Ok(())
}

pub(crate) fn unpin_all(pinned: &[PinnedNamespace]) {
    for ns in pinned {
        if let Err(e) = ops::unpin(&ns.path) {
            eprintln!("podlab-shim: {e}");
        }
    }
}

fn kill_and_reap(pid: Pid) {
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = podlab_ns::child::wait_for(pid);
}
