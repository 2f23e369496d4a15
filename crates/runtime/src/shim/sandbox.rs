//! The sandbox itself: the pause process in the pod's new namespaces, and their pins.
//!
//! The pause process is forked from the shim into a new pid namespace, whose PID 1 it is (the
//! pod's, which the containers join, with `shareProcessNamespace`; else its own, as containerd
//! gives the sandbox container one). In the child it unshares uts+ipc+net, sets the hostname and
//! domainname, brings `lo` up, writes the pod's sysctls (into those new namespaces), and makes
//! the sandbox container containerd makes of the pause image: a mount namespace of its own whose
//! root is a read-only tmpfs holding nothing but the pause binary (bound read-only on its one
//! file), then no_new_privs, the pod's seccomp profile (`RuntimeDefault` narrowed to the calls
//! pause makes: [`seccomp::pause_default`]), containerd's default capability
//! bounding set and the pause image's user 65535 (which leaves it no effective capability), and
//! `execve`s podlab-pause. Then the shim pins every pod namespace under `ns/`, so they outlive
//! the pause process if it dies, and keeps them open for the containers to join. pause says
//! on its report pipe when the namespaces are made, so that a container forked while pause
//! goes on may join them ([`WhilePauseStarts`], `super::early`).
//!
//! With a network namespace made and attached ahead of time (`--netns`, a warm one: see
//! [`crate::network::PreparedNetwork`]), pause joins that one instead of unsharing a new one;
//! it is the pod's alone from then on, pinned and torn down as a new one would be.
//!
//! A pod with a user namespace of its own (`userns_options`, `hostUsers: false`) has it made
//! first, by a child of the shim's that the shim gives its maps ([`podlab_ns::user::new_mapped`]).
//! Pause and every container make their namespaces and mounts as the node's root, then enter
//! it last (see [`init::finish`]): the pod's root owns none of the pod's other namespaces, so
//! it can change neither the hostname nor the mounts nor the network it was given.

use std::convert::Infallible;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use nix::unistd::{ForkResult, Pid};
use podlab_ns::mnt::{
    self,
    detached::{Detached, Source},
};
use podlab_ns::{ops, NsKind};

use super::ShimArgs;
use crate::config::UserNamespace;
use crate::init::{self, ns_failure, read_one_byte, sys_failure, Stdio, Step};
use crate::liveness::ProcessIdentity;
use crate::process::ProcessSpec;
use crate::report::{ReportPipe, Trace};
use crate::seccomp::{self, SeccompProfile};
use crate::state::{SandboxPaths, ShimRecord};
use crate::status::PinnedNamespace;

/// The pod's namespaces, open for joining, and the shim's own pid namespace to come back to.
#[derive(Debug)]
pub(crate) struct PodNamespaces {
    pub net: Option<OwnedFd>,
    /// None with `hostIPC`: the node's stays.
    pub ipc: Option<OwnedFd>,
    pub uts: Option<OwnedFd>,
    pub pid: Option<OwnedFd>,
    /// The pod's user namespace and its maps, joined last (see [`init::finish`]).
    pub user: Option<(OwnedFd, UserNamespace)>,
    own_pid: OwnedFd,
}

impl PodNamespaces {
    /// What a new container joins: the pod's net, ipc and uts namespaces.
    pub fn for_container(&self) -> Vec<(BorrowedFd<'_>, NsKind)> {
        let mut join = Vec::new();
        if let Some(net) = &self.net {
            join.push((net.as_fd(), NsKind::Net));
        }
        if let Some(ipc) = &self.ipc {
            join.push((ipc.as_fd(), NsKind::Ipc));
        }
        if let Some(uts) = &self.uts {
            join.push((uts.as_fd(), NsKind::Uts));
        }
        join
    }

    /// The shim's own pid namespace, to come back to after a fork into another.
    pub fn own_pid_ns(&self) -> BorrowedFd<'_> {
        self.own_pid.as_fd()
    }

    /// The namespaces pause has just made, opened through `/proc` before they are pinned: for
    /// a container forked while pause goes on (never for a pod with a user namespace of its
    /// own, which pause enters only at its end).
    pub(crate) fn of_pause(
        args: &ShimArgs,
        pause: Pid,
        own_pid: BorrowedFd<'_>,
    ) -> Result<PodNamespaces, String> {
        let own_pid = own_pid.try_clone_to_owned().map_err(|e| e.to_string())?;
        PodNamespaces::open(args, own_pid, |kind| {
            ops::open_pid(pause.as_raw(), kind).map_err(|e| e.to_string())
        })
    }

    /// None of the pod's namespaces yet, only the shim's own pid namespace: for a container
    /// forked before pause has made them, which joins them itself
    /// ([`init::ContainerPlan::join_later`]).
    pub(crate) fn not_made_yet(own_pid: BorrowedFd<'_>) -> Result<PodNamespaces, String> {
        Ok(PodNamespaces {
            net: None,
            ipc: None,
            uts: None,
            pid: None,
            user: None,
            own_pid: own_pid.try_clone_to_owned().map_err(|e| e.to_string())?,
        })
    }

    /// The pod's namespaces of `args`, each opened with `open`.
    fn open(
        args: &ShimArgs,
        own_pid: OwnedFd,
        open: impl Fn(NsKind) -> Result<OwnedFd, String>,
    ) -> Result<PodNamespaces, String> {
        Ok(PodNamespaces {
            net: (!args.host_network)
                .then(|| open(NsKind::Net))
                .transpose()?,
            ipc: (!args.host_ipc).then(|| open(NsKind::Ipc)).transpose()?,
            uts: (!args.host_network)
                .then(|| open(NsKind::Uts))
                .transpose()?,
            pid: args.share_pid.then(|| open(NsKind::Pid)).transpose()?,
            user: match &args.security.user_namespace {
                Some(map) => Some((open(NsKind::User)?, map.clone())),
                None => None,
            },
            own_pid,
        })
    }

    /// The pod's user namespace, for a process to enter once its mounts are made.
    pub fn user(&self) -> Option<init::JoinUser<'_>> {
        self.user.as_ref().map(|(fd, map)| init::JoinUser {
            fd: fd.as_fd(),
            map,
        })
    }
}

/// Every kind of namespace a sandbox may pin under `ns/`.
pub(crate) const PINNED_KINDS: [NsKind; 5] = [
    NsKind::Uts,
    NsKind::Ipc,
    NsKind::Net,
    NsKind::Pid,
    NsKind::User,
];

/// Which pid namespace a forked child is born in.
pub(crate) enum PidNamespace<'a> {
    /// A new one, the child its PID 1.
    New,
    /// An existing one (the pod's, or a target container's).
    Join(BorrowedFd<'a>),
    /// The shim's own, which is the node's (`hostPID`).
    Same,
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
        PidNamespace::New => nix::sched::unshare(CloneFlags::CLONE_NEWPID)
            .map_err(|e| format!("unshare(CLONE_NEWPID): {e}"))?,
        PidNamespace::Join(fd) => nix::sched::setns(fd, CloneFlags::CLONE_NEWPID)
            .map_err(|e| format!("setns(CLONE_NEWPID): {e}"))?,
        PidNamespace::Same => {}
    }
    // SAFETY: the shim is single-threaded, so the child may do anything the shim could.
    let forked = unsafe { nix::unistd::fork() };
    if let Ok(ForkResult::Child) = forked {
        child();
        // SAFETY: the child bodies end in execve or _exit; this is only a backstop.
        unsafe { libc::_exit(127) }
    }
    if !matches!(pid_ns, PidNamespace::Same) {
        if let Err(e) = nix::sched::setns(namespaces_own_pid, CloneFlags::CLONE_NEWPID) {
            eprintln!("podlab-shim: returning to its own pid namespace: {e}");
        }
    }
    match forked {
        Ok(ForkResult::Parent { child }) => Ok(child),
        Ok(ForkResult::Child) => unreachable!("the child never returns"),
        Err(nix::Error::ENOMEM) => Err(
            "fork: ENOMEM: the pid namespace has no PID 1 any more (its process has exited)".into(),
        ),
        Err(e) => Err(format!("fork: {e}")),
    }
}

impl super::Shim {
    pub(crate) fn own_pid_ns(&self) -> BorrowedFd<'_> {
        self.namespaces.own_pid_ns()
    }
}

/// What the shim does while pause starts, besides waiting for it.
pub(crate) trait WhilePauseStarts {
    /// From pause's fork until it returns: it may read `report` up to pause's
    /// [`crate::report::ReportLine::Namespaces`] ([`ReportPipe::namespaces_made`]); what it
    /// leaves of the report is read to its end after. `own_pid` is the shim's own pid
    /// namespace.
    fn until_started(&mut self, pause: Pid, report: &mut ReportPipe, own_pid: BorrowedFd<'_>);
}

/// Starts pause and pins its namespaces. On failure everything made is undone (but a network
/// namespace the caller pinned, which is the caller's to unpin then).
///
/// `gate` is the caller's pipe (see `take_gate_pipe`): pause reads the cgroups' byte from it
/// before entering its cgroup, and with `--await-network` the shim reads the network's byte
/// before pinning anything.
pub(crate) fn start(
    args: &ShimArgs,
    paths: &SandboxPaths,
    shim: ProcessIdentity,
    gate: Option<OwnedFd>,
    while_pause_starts: &mut dyn WhilePauseStarts,
) -> Result<(ProcessIdentity, PodNamespaces, ShimRecord), String> {
    let own_pid =
        ops::open(Path::new("/proc/self/ns/pid"), NsKind::Pid).map_err(|e| e.to_string())?;
    // The pod's user namespace, made first: pause enters it once its mounts are made.
    let userns = match &args.security.user_namespace {
        Some(map) => Some(
            podlab_ns::user::new_mapped(&map.uids, &map.gids)
                .map_err(|e| format!("making the pod's user namespace: {e}"))?,
        ),
        None => None,
    };
    let cgroups_made = gate.as_ref().filter(|_| args.placement.is_some());
    let pause_pid = start_pause(
        args,
        own_pid.as_fd(),
        cgroups_made.map(|fd| fd.as_fd()),
        userns.as_ref().map(|fd| fd.as_fd()),
        while_pause_starts,
    )?;
    drop(userns);
    podlab_fault::point_reached("shim.after-pause");
    if let (true, Some(gate)) = (args.await_network, &gate) {
        crate::trace::process_mark("shim", "pause started, waits for the network");
        if !read_one_byte(gate.as_raw_fd()) {
            kill_and_reap(pause_pid);
            return Err(
                "the caller did not attach the pod's network (its ADD failed, or it died)".into(),
            );
        }
    }
    drop(gate);
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
    let opened = PodNamespaces::open(args, own_pid, |kind| {
        ops::open(&paths.ns(kind), kind).map_err(|e| e.to_string())
    });
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
/// comes with the node's network, as kubelet and containerd have it), ipc unless hostIPC,
/// pid when shared.
pub(crate) fn pod_kinds(host_network: bool, host_ipc: bool, share_pid: bool) -> Vec<NsKind> {
    let mut kinds = Vec::new();
    if !host_network {
        kinds.push(NsKind::Uts);
    }
    if !host_ipc {
        kinds.push(NsKind::Ipc);
    }
    if !host_network {
        kinds.push(NsKind::Net);
    }
    if share_pid {
        kinds.push(NsKind::Pid);
    }
    kinds
}

/// The pause image's user and group (`USER 65535:65535`).
const PAUSE_USER: u32 = 65535;
/// The pause binary in the sandbox's root, and its argv[0].
const PAUSE_IN_ROOT: &str = "/podlab-pause";
/// The sandbox's root: a tmpfs with room for its one (empty) file, read-only once the binary
/// is bound on that file.
const PAUSE_ROOT_OPTIONS: &str = "nosuid,nodev,mode=0755,size=4k,nr_inodes=4";

/// The pause process as containerd's sandbox container spec has it: the default capability
/// set, no_new_privs, the pod's user (else the pause image's) and groups, the pod's seccomp
/// profile; every capability and no filter when a container of the pod is privileged.
fn pause_process(args: &ShimArgs) -> Result<ProcessSpec, String> {
    let security = &args.security;
    let capabilities = crate::capabilities::resolve(security.privileged, &[], &[])?;
    let seccomp = match &security.seccomp {
        _ if security.privileged => None,
        SeccompProfile::Unconfined => None,
        SeccompProfile::RuntimeDefault => Some(seccomp::SeccompSpec::Named {
            named: seccomp::NamedProfile::PauseDefault,
            bounding: capabilities.clone(),
        }),
        SeccompProfile::Localhost(path) => {
            Some(seccomp::SeccompSpec::Profile(seccomp::load(path)?))
        }
    };
    // containerd's user string: "uid:gid", or "uid" (gid 0 where the image has no
    // /etc/passwd, as the pause image has none), or the image's USER.
    let (uid, gid) = match (security.run_as_user, security.run_as_group) {
        (Some(uid), group) => (uid, group.unwrap_or(0)),
        (None, group) => (PAUSE_USER, group.unwrap_or(PAUSE_USER)),
    };
    Ok(ProcessSpec {
        argv: vec![
            PAUSE_IN_ROOT.to_string(),
            format!("sandbox={}", args.sandbox_dir.display()),
        ],
        cwd: "/".into(),
        uid,
        gid,
        additional_gids: security.supplemental_groups.clone(),
        capabilities: Some(capabilities),
        no_new_privs: true,
        seccomp,
        ..ProcessSpec::default()
    })
}

fn start_pause(
    args: &ShimArgs,
    own_pid: BorrowedFd<'_>,
    cgroups_made: Option<BorrowedFd<'_>>,
    userns: Option<BorrowedFd<'_>>,
    while_pause_starts: &mut dyn WhilePauseStarts,
) -> Result<Pid, String> {
    let process = pause_process(args)?;
    let template = match &args.mount_template {
        Some(path) => match ops::open(path, NsKind::Mnt) {
            Ok(fd) => Some(fd),
            Err(e) => {
                // Only slower without it: a copy of the node's mount table.
                eprintln!("podlab-shim: the mount template: {e}; the pause process's mount namespace is a copy of the node's");
                None
            }
        },
        None => None,
    };
    // Opened before the fork: the path is the caller's descriptor, valid while it waits.
    let netns = match &args.netns {
        Some(path) => Some(
            ops::open(path, NsKind::Net)
                .map_err(|e| format!("the pod's network namespace made ahead: {e}"))?,
        ),
        None => None,
    };
    let (report_r, report_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe2: {e}"))?;
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
    // The pod's pid namespace when shared, else one of pause's own; the node's (the shim's)
    // with hostPID, as containerd leaves the sandbox container's pid namespace out then.
    let pid_ns = if args.host_pid {
        PidNamespace::Same
    } else {
        PidNamespace::New
    };
    // stdout must not be the starter's pipe (the shim's stdout until it is ready), or the
    // starter would wait for pause to exit: both of pause's output streams go to the shim log.
    let stdio = Stdio {
        stdin: super::raw(&null),
        stdout: 2,
        stderr: 2,
        console: None,
    };
    let template = template.as_ref().map(|fd| fd.as_fd());
    let netns = netns.as_ref().map(|fd| fd.as_fd());
    let cgroups_made_fd = cgroups_made.as_ref().map(|fd| fd.as_raw_fd());
    let pid = fork_in(own_pid, pid_ns, || {
        init::run_child(stdio, report_w, |trace| {
            let user = userns
                .zip(args.security.user_namespace.as_ref())
                .map(|(fd, map)| init::JoinUser { fd, map });
            pause_child(
                args,
                &process,
                template,
                netns,
                cgroups_made_fd,
                user,
                trace,
            )
        })
    })?;
    drop(null);
    // pause makes its namespaces, waits for its cgroups and makes its root meanwhile.
    let mut report = ReportPipe::new(report_r);
    while_pause_starts.until_started(pid, &mut report, own_pid);
    match report.finish().failure {
        None => Ok(pid),
        Some(failure) => {
            let _ = podlab_ns::child::wait_for(pid);
            Err(format!("starting the pause process: {}", failure.message))
        }
    }
}

/// In the pause child: the pod's namespaces, named, with `lo` up; its own mount namespace
/// and root; then [`init::finish`] (seccomp, capabilities, user) and `execve` pause.
fn pause_child(
    args: &ShimArgs,
    process: &ProcessSpec,
    template: Option<BorrowedFd<'_>>,
    netns: Option<BorrowedFd<'_>>,
    cgroups_made: Option<RawFd>,
    user: Option<init::JoinUser<'_>>,
    trace: &mut Trace,
) -> Step<Infallible> {
    if let Some(placement) = &args.placement {
        placement.set_oom_score_adj()?;
    }
    let mut kinds = pod_kinds(args.host_network, args.host_ipc, false);
    kinds.retain(|k| *k != NsKind::Pid);
    if let (Some(netns), false) = (netns, args.host_network) {
        ops::join(netns, NsKind::Net)
            .map_err(|e| ns_failure("join the network namespace made ahead", None, e))?;
        kinds.retain(|k| *k != NsKind::Net);
    }
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
    trace.lap("the pod's namespaces");
    // A container the shim forked early may join them now, while this goes on.
    trace.send(&crate::report::ReportLine::Namespaces);
    // The caller has made the cgroups meanwhile (containerd's pinned network namespace is
    // likewise made outside the sandbox's cgroup); entered before the mount namespace hides
    // /sys/fs/cgroup and before anything of the sandbox container's runs.
    if let Some(placement) = &args.placement {
        wait_until_made(cgroups_made)?;
        placement.enter_cgroup()?;
    }
    enter_pause_root(args, template)?;
    trace.lap("own mount namespace, read-only root");
    init::finish(process, None, user, trace)
}

/// In the pause child: waits for the caller's byte saying the cgroups are made (see
/// `take_gate_pipe` in the shim); the end of the pipe without it fails the start.
fn wait_until_made(cgroups_made: Option<RawFd>) -> Step<()> {
    let Some(fd) = cgroups_made else {
        return Ok(());
    };
    if read_one_byte(fd) {
        return Ok(());
    }
    Err(init::failure(
        "enter the cgroup",
        None,
        None,
        "the caller did not make the pod's cgroups".into(),
    ))
}

/// A mount namespace of pause's own whose `/` holds only the pause binary, both read-only.
///
/// From the mount template when there is one (the node agent's): a copy of its one mount, the
/// root mounted on its `/rootfs`, the template's own tmpfs made read-only in the copy, and
/// `chroot` (what is left outside the root is that empty, read-only tmpfs). `pivot_root` would
/// have to detach the template's mount after, and a detach waits for an RCU grace period:
/// 2.5 to 5 ms on this machine, more than the rest of the sandbox's start. Without a template
/// (one-shot commands) the copy is of the node's mount table, which must not stay reachable
/// behind the root: there it is `pivot_root` and the node's mounts detached, as runc does.
fn enter_pause_root(args: &ShimArgs, template: Option<BorrowedFd<'_>>) -> Step<()> {
    let unshare = || {
        nix::sched::unshare(CloneFlags::CLONE_NEWNS)
            .map_err(|e| sys_failure("unshare the mount namespace", None, e))
    };
    let slash = Path::new("/");
    let (binary, root) = match template {
        Some(template) => {
            // The binary's path is the node's: bound now, attached once in the copy.
            let binary = Detached::bind(&args.pause, true).map_err(|e| {
                ns_failure("open_tree (a detached bind mount)", Some(&args.pause), e)
            })?;
            ops::join(template, NsKind::Mnt)
                .map_err(|e| ns_failure("enter the mount template", None, e))?;
            unshare()?;
            remount_readonly(slash, MsFlags::empty())?;
            (
                Source::Detached(binary),
                PathBuf::from(crate::mount_template::ROOTFS),
            )
        }
        None => {
            unshare()?;
            mnt::make_rprivate(slash).map_err(|e| ns_failure("make / rprivate", Some(slash), e))?;
            // Any folder of the node's serves as the mount point in this copy.
            (Source::Path(args.pause.clone()), args.sandbox_dir.clone())
        }
    };
    mnt::mount_tmpfs(&root, PAUSE_ROOT_OPTIONS)
        .map_err(|e| ns_failure("mount the sandbox's root", Some(&root), e))?;
    let file = root.join(PAUSE_IN_ROOT.trim_start_matches('/'));
    std::fs::File::create(&file).map_err(|e| {
        init::failure(
            "create the pause binary's mount point",
            Some(&file),
            e.raw_os_error().map(nix::Error::from_raw),
            e.to_string(),
        )
    })?;
    binary
        .place(&file, true)
        .map_err(|e| ns_failure("bind the pause binary", Some(&file), e))?;
    remount_readonly(&root, MsFlags::MS_NOSUID | MsFlags::MS_NODEV)?;
    if template.is_some() {
        nix::unistd::chroot(&root).map_err(|e| sys_failure("chroot", Some(&root), e))?;
        nix::unistd::chdir(slash).map_err(|e| sys_failure("chdir", Some(slash), e))
    } else {
        mnt::pivot_root(&root).map_err(|e| ns_failure("pivot_root", Some(&root), e))
    }
}

/// Makes the mount on `path` read-only with `flags` (a bind remount sets exactly the flags it
/// is given).
fn remount_readonly(path: &Path, flags: MsFlags) -> Step<()> {
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | flags;
    nix::mount::mount(None::<&str>, path, None::<&str>, flags, None::<&str>)
        .map_err(|e| sys_failure("remount read-only", Some(path), e))
}

fn pin_all(
    args: &ShimArgs,
    paths: &SandboxPaths,
    pause: i32,
    pinned: &mut Vec<PinnedNamespace>,
) -> Result<(), String> {
    std::fs::create_dir_all(paths.ns_dir())
        .map_err(|e| format!("creating {}: {e}", paths.ns_dir().display()))?;
    let mut kinds = pod_kinds(args.host_network, args.host_ipc, args.share_pid);
    if args.security.user_namespace.is_some() {
        kinds.push(NsKind::User);
    }
    for kind in kinds {
        let path = paths.ns(kind);
        let inode = ops::ns_inode(pause, kind).map_err(|e| e.to_string())?;
        // The network namespace the caller made and pinned (`--await-network`) is pause's:
        // the shim owns that pin from now on, as if it had made it.
        let pinned_by_caller = kind == NsKind::Net
            && args.await_network
            && std::fs::metadata(&path).is_ok_and(|m| {
                std::os::unix::fs::MetadataExt::ino(&m) == inode && ops::is_pinned(&path)
            });
        if !pinned_by_caller {
            ops::pin(pause, kind, &path).map_err(|e| e.to_string())?;
        }
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
