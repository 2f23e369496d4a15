//! What a container's process does between the shim's `fork` and its `execve`: podlab's twin of
//! `runc init`.
//!
//! A new container ([`run_container`]): join the pod's net/ipc/uts namespaces, make a mount
//! namespace of its own with `/` private, mount the overlay rootfs, `/proc`, `/dev` (with the
//! pod's `/dev/shm`), a read-only `/sys`, the pod's `/etc/hostname`, `/etc/hosts` and
//! `/etc/resolv.conf`, the volumes; `pivot_root`; optionally remount `/` read-only.
//! An exec into a running container ([`run_exec`]): join all of its namespaces, mount included.
//! Both then [`finish`]: drop to containerd's capability set, switch to the container's user,
//! `chdir`, `execve`.
//!
//! In a pod with a user namespace of its own, every mount above is made first, as the node's
//! root in a mount namespace the node's root owns (the container's root cannot undo or change
//! any of them), from layers idmapped to the pod's namespace; [`finish`] then enters the user
//! namespace before it drops to the container's user, whose ids are the pod's.
//!
//! The process is a fork of the single-threaded shim, so it may allocate. The pid namespace was
//! chosen by the shim before the fork (`setns(CLONE_NEWPID)` only affects children). Whatever
//! fails before `execve` is written as an [`InitFailure`] to a close-on-exec pipe: the shim
//! reads end-of-file when `execve` succeeded, the failure otherwise.

use std::convert::Infallible;
use std::ffi::CString;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use nix::sched::CloneFlags;
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal};
use podlab_ns::mnt::detached::{Detached, Source};
use podlab_ns::mnt::DeviceFile;
use podlab_ns::{mnt, NsKind};

use crate::config::Mount;
use crate::error::InitFailure;
use crate::process::{exec_candidates, ProcessSpec};
use crate::report::{ReportLine, Trace};

/// Everything a new container's init needs, computed by the shim before the fork.
#[derive(Debug)]
pub struct ContainerPlan<'a> {
    /// The pod's namespaces to join (net unless hostNetwork, ipc, uts unless hostNetwork).
    pub join: Vec<(BorrowedFd<'a>, NsKind)>,
    pub rootfs: PathBuf,
    pub lowerdirs: Vec<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// The pod's tmpfs for `/dev/shm`.
    pub shm: Option<PathBuf>,
    /// (host file, path in the container): `/etc/hostname`, `/etc/hosts`, `/etc/resolv.conf`.
    pub etc_files: Vec<(PathBuf, &'static str)>,
    pub mounts: Vec<Mount>,
    pub readonly_rootfs: bool,
    /// Made read-only after `pivot_root` ([`crate::masked_paths`]).
    pub readonly_paths: Vec<String>,
    /// Hidden after `pivot_root`.
    pub masked_paths: Vec<String>,
    /// containerd's privileged container: `/sys` writable and every device of the host's
    /// `/dev` (the lists above are then empty).
    pub privileged: bool,
    pub process: ProcessSpec,
    /// The small namespace to make the container's mount namespace from
    /// ([`crate::mount_template`]); None: a copy of the node's.
    pub mount_template: Option<BorrowedFd<'a>>,
    /// Its cgroup and oom_score_adj, taken before anything else.
    pub placement: crate::cgroups::Placement,
    /// The CPU the shim ran on when it forked this process: the process leaves it
    /// (`spawn_cpu::leave_cpu`).
    pub shim_cpu: Option<usize>,
    /// The pod's user namespace, entered once the mounts are made.
    pub user: Option<JoinUser<'a>>,
    /// Forked while pause still starts: the process waits here, its mounts made, until the
    /// shim says the sandbox is up ([`SandboxGate`]).
    pub gate: Option<SandboxGate>,
    /// Forked before pause had made the pod's namespaces (`join` is then empty): they are
    /// joined through pause's pidfd once this gate opens, after the mounts that do not depend
    /// on them and before `/sys`, which shows the network namespace of whoever mounts it.
    pub join_later: Option<JoinLater>,
}

/// The pod's namespaces, joined once pause has made them ([`ContainerPlan::join_later`]).
#[derive(Debug, Clone, Copy)]
pub struct JoinLater {
    /// pause's pidfd: `setns(2)` with it joins several of its namespaces at once.
    pub pause: RawFd,
    /// The namespaces to join (`CLONE_NEWNET` and the like).
    pub flags: CloneFlags,
    pub gate: SandboxGate,
}

impl JoinLater {
    fn join(self) -> Step<()> {
        self.gate
            .wait_for("pause did not make the pod's namespaces (it failed, or the shim died)")?;
        // SAFETY: setns on a pidfd this process inherited, with namespace flags only.
        if unsafe { libc::setns(self.pause, self.flags.bits()) } < 0 {
            return Err(sys_failure(
                "join the pod's namespaces (setns on pause's pidfd)",
                None,
                nix::Error::last(),
            ));
        }
        Ok(())
    }
}

/// The pipe on which the shim lets a container forked while pause still starts go on to its
/// program: one byte once the sandbox is up (pause `execve`d, its namespaces pinned); its end
/// without one, the sandbox failed. The process closes its copy of the writing end first, so
/// that the shim's death ends the wait too.
#[derive(Debug, Clone, Copy)]
pub struct SandboxGate {
    pub read: RawFd,
    pub write: RawFd,
}

impl SandboxGate {
    fn wait(self) -> Step<()> {
        self.wait_for("the pod's sandbox did not start (pause failed, or the shim died)")
    }

    fn wait_for(self, failed: &str) -> Step<()> {
        // SAFETY: the writing end is this process's inherited copy, closed once.
        unsafe { libc::close(self.write) };
        match read_one_byte(self.read) {
            true => Ok(()),
            false => Err(failure("wait for the sandbox", None, None, failed.into())),
        }
    }
}

/// Reads one byte of a gate pipe; false at its end (the writer closed it without writing, or
/// died). Async-signal-safe: pause and containers call it between fork and exec.
pub(crate) fn read_one_byte(fd: RawFd) -> bool {
    let mut byte = [0u8; 1];
    loop {
        // SAFETY: reads one byte into a buffer of this frame.
        let n = unsafe { libc::read(fd, byte.as_mut_ptr().cast(), 1) };
        if n >= 0 || nix::Error::last() != nix::Error::EINTR {
            return n == 1;
        }
    }
}

/// A user namespace to enter last, and its maps (to give the node's ids of the pod's).
#[derive(Debug, Clone, Copy)]
pub struct JoinUser<'a> {
    pub fd: BorrowedFd<'a>,
    pub map: &'a crate::config::UserNamespace,
}

/// The three descriptors the process gets as 0, 1 and 2, or a console made for it.
#[derive(Debug, Clone, Copy)]
pub struct Stdio {
    pub stdin: RawFd,
    pub stdout: RawFd,
    pub stderr: RawFd,
    /// A terminal instead: the process makes a pty in its own mount namespace, takes the slave
    /// as its controlling terminal and 0, 1, 2, and sends the master over this socket
    /// ([`crate::tty::open_console`]); the three descriptors above are then not used.
    pub console: Option<Console>,
}

/// Where a process sends the master of the console it makes, and the size to give it.
#[derive(Debug, Clone, Copy)]
pub struct Console {
    pub socket: RawFd,
    pub size: Option<crate::tty::WindowSize>,
}

pub type Step<T> = Result<T, InitFailure>;

pub fn failure(
    step: &str,
    path: Option<&Path>,
    errno: Option<nix::Error>,
    detail: String,
) -> InitFailure {
    let path_text = path.map(|p| p.display().to_string());
    let message = match &path_text {
        Some(p) => format!("{step} {p}: {detail}"),
        None => format!("{step}: {detail}"),
    };
    InitFailure {
        step: step.to_string(),
        path: path_text,
        errno: errno.map(|e| e as i32),
        message,
    }
}

pub fn ns_failure(step: &str, path: Option<&Path>, err: podlab_ns::Error) -> InitFailure {
    let errno = err.errno();
    failure(step, path, errno, err.to_string())
}

pub fn sys_failure(step: &str, path: Option<&Path>, errno: nix::Error) -> InitFailure {
    failure(step, path, Some(errno), errno.desc().to_string())
}

/// The body of a new container's process. Never returns: it `execve`s or reports and exits.
pub fn run_container(plan: &ContainerPlan<'_>, stdio: Stdio, report: OwnedFd) -> ! {
    run_child(stdio, report, |trace| {
        if let Some(cpu) = plan.shim_cpu {
            crate::spawn_cpu::leave_cpu(cpu);
        }
        plan.placement.enter()?;
        trace.lap("cgroup, oom_score_adj");
        prepare_container(plan, trace)?;
        if let Some(gate) = plan.gate {
            gate.wait()?;
            trace.lap("waited for the sandbox");
        }
        finish(&plan.process, stdio.console, plan.user, trace)
    })
}

/// The body of an exec'd process: join `join` (the container's mnt, net, ipc and uts
/// namespaces, mnt last), then [`finish`].
pub fn run_exec(
    placement: &crate::cgroups::Placement,
    join: &[(BorrowedFd<'_>, NsKind)],
    user: Option<JoinUser<'_>>,
    process: &ProcessSpec,
    stdio: Stdio,
    report: OwnedFd,
) -> ! {
    run_child(stdio, report, |trace| {
        placement.enter()?;
        join_all(join)?;
        trace.lap("join the container's namespaces");
        finish(process, stdio.console, user, trace)
    })
}

/// Runs the body of a forked child with `stdio` as its 0, 1, 2. The body ends in `execve`; if
/// it returns, its failure goes to `report` and the child exits.
pub fn run_child(
    stdio: Stdio,
    report: OwnedFd,
    body: impl FnOnce(&mut Trace) -> Step<Infallible>,
) -> ! {
    let mut trace = Trace::new(report);
    let result = seal_from_container()
        .and_then(|()| set_stdio(stdio))
        .and_then(|()| {
            crate::trace::hold_open();
            body(&mut trace)
        });
    let failure = match result {
        Err(failure) => failure,
        Ok(never) => match never {},
    };
    trace.send(&ReportLine::Failed(failure));
    // SAFETY: leave without running the shim's atexit handlers or flushing its buffers.
    unsafe { libc::_exit(127) }
}

/// Makes this process non-dumpable until its `execve`, as runc's init is: it is a copy of the
/// shim, and once in the container's pid namespace a process there could otherwise open
/// `/proc/PID/exe` (the shim's binary on the host: CVE-2019-5736's way in), its memory or its
/// descriptors. A non-dumpable process's /proc files belong to root of the initial user
/// namespace and need CAP_SYS_PTRACE there, which no unprivileged container has. `execve`
/// makes the new program dumpable again (its credentials stay those it was started with).
fn seal_from_container() -> Step<()> {
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| sys_failure("prctl(PR_SET_DUMPABLE, 0)", None, e))
}

fn set_stdio(stdio: Stdio) -> Step<()> {
    if stdio.console.is_some() {
        // 0, 1 and 2 become the console's slave once the process is in its mount namespace.
        return Ok(());
    }
    for (from, to) in [(stdio.stdin, 0), (stdio.stdout, 1), (stdio.stderr, 2)] {
        if from == to {
            continue;
        }
        // SAFETY: dup2 onto the standard descriptors; `from` is open in this process.
        if unsafe { libc::dup2(from, to) } < 0 {
            return Err(sys_failure("dup2", None, nix::Error::last()));
        }
    }
    Ok(())
}

fn join_all(join: &[(BorrowedFd<'_>, NsKind)]) -> Step<()> {
    for (fd, kind) in join {
        podlab_ns::ops::join(*fd, *kind)
            .map_err(|e| ns_failure(&format!("join the {kind} namespace"), None, e))?;
    }
    Ok(())
}

fn prepare_container(plan: &ContainerPlan<'_>, trace: &mut Trace) -> Step<()> {
    join_all(&plan.join)?;
    if plan.join_later.is_none() {
        trace.lap("join the pod's namespaces");
    }
    // A template made in the initial user namespace cannot be entered from another one.
    let template = plan
        .mount_template
        .filter(|_| !plan.join.iter().any(|(_, kind)| *kind == NsKind::User));
    let (rootfs, sources) = match template {
        Some(template) => enter_template(plan, template, trace)?,
        None => copy_node_namespace(plan, trace)?,
    };
    let rootfs = rootfs.as_path();

    let proc = target_in(rootfs, Path::new("/proc"), true)?;
    mnt::mount_proc(&proc).map_err(|e| ns_failure("mount /proc", Some(&proc), e))?;
    trace.lap("/proc");
    target_in(rootfs, Path::new("/dev"), true)?;
    let dev_owner = plan.user.map(|user| user.map.host_root());
    mnt::mount_dev_from(rootfs, sources.devices, dev_owner)
        .map_err(|e| ns_failure("mount /dev", Some(&rootfs.join("dev")), e))?;
    for (relative, source) in sources.host_devices {
        // What the container's /dev has of its own (ptmx, its devpts) stays.
        if std::fs::symlink_metadata(rootfs.join("dev").join(&relative)).is_ok() {
            continue;
        }
        let target = target_in(rootfs, &Path::new("/dev").join(&relative), false)?;
        source
            .place(&target, false)
            .map_err(|e| ns_failure("bind a host device", Some(&target), e))?;
    }
    if let Some(shm) = sources.shm {
        let dev_shm = rootfs.join("dev/shm");
        shm.place(&dev_shm, false)
            .map_err(|e| ns_failure("bind the pod's /dev/shm", Some(&dev_shm), e))?;
    }
    trace.lap("/dev");
    if let Some(later) = plan.join_later {
        later.join()?;
        trace.lap("join the pod's namespaces, once pause made them");
    }
    let sys = target_in(rootfs, Path::new("/sys"), true)?;
    mnt::mount_sysfs(&sys, !plan.privileged)
        .map_err(|e| ns_failure("mount /sys", Some(&sys), e))?;
    trace.lap("/sys");

    for (source, inside) in sources.etc_files {
        let target = etc_target(rootfs, Path::new(inside))?;
        source
            .place(&target, false)
            .map_err(|e| ns_failure("bind-mount", Some(&target), e))?;
    }
    trace.lap("the pod's /etc files");
    let any_volume = !sources.volumes.is_empty();
    if any_volume && template.is_some() {
        // Detached copies stay peers of the node's mounts they copy: what is in the root so
        // far (the /etc files, /dev/shm, devices) is cut off before the volumes come.
        mnt::make_rprivate(rootfs)
            .map_err(|e| ns_failure("make the rootfs rprivate", Some(rootfs), e))?;
    }
    for (source, mount, is_dir) in sources.volumes {
        let target = target_in(rootfs, &mount.container_path, is_dir)?;
        source
            .place(&target, mount.readonly)
            .map_err(|e| ns_failure("bind-mount volume", Some(&target), e))?;
        // runc's per-mount propagation: rprivate cuts the volume off the host's mount, rslave
        // makes it receive what is mounted there, rshared leaves it a peer both ways.
        mnt::set_rpropagation(&target, mount.propagation).map_err(|e| {
            ns_failure(
                &format!("make volume {}", mount.propagation.as_str()),
                Some(&target),
                e,
            )
        })?;
        if mount.recursive_readonly {
            mnt::make_readonly_recursive(&target)
                .map_err(|e| ns_failure("make volume recursively read-only", Some(&target), e))?;
        }
    }
    if any_volume {
        trace.lap("volumes");
    }
    // runc makes a missing working directory; do it while the rootfs is still writable.
    target_in(rootfs, Path::new(&plan.process.cwd), true)?;

    mnt::pivot_root(rootfs).map_err(|e| ns_failure("pivot_root", Some(rootfs), e))?;
    trace.lap("pivot_root");
    protect_paths(plan)?;
    trace.lap("read-only and masked paths");
    if plan.readonly_rootfs {
        remount_root_readonly()?;
        trace.lap("read-only rootfs");
    }
    crate::trace::process_mark("init", "mounts (fork, joins, rootfs)");
    Ok(())
}

/// What the container's mounts are made of: paths to bind, or mounts made detached.
struct Sources<'p> {
    devices: Vec<(&'static str, DeviceFile)>,
    /// A privileged container's: every other device of the host's `/dev`, by relative path.
    host_devices: Vec<(PathBuf, Source)>,
    shm: Option<Source>,
    etc_files: Vec<(Source, &'static str)>,
    /// With whether the host path is a folder (seen from the node's namespace).
    volumes: Vec<(Source, &'p Mount, bool)>,
}

/// The classic way: a copy of the node's mount namespace (every mount of the node, which the
/// copy, making it private and `pivot_root` each walk), the overlay mounted in it, and the
/// other mounts bound by path.
fn copy_node_namespace<'p>(
    plan: &'p ContainerPlan<'_>,
    trace: &mut Trace,
) -> Step<(PathBuf, Sources<'p>)> {
    // A volume whose host mounts must reach it (rslave, rshared) is copied here, in the node's
    // namespace, where the copy is a peer of the host's mount; a bind in the private copy of
    // the namespace below would be private, as runc's would under an `rprivate` root.
    let mut volumes = Vec::new();
    for mount in &plan.mounts {
        let (source, is_dir) = match &mount.image {
            Some(image) => image_volume(image, plan.user)?,
            None if mount.propagation.is_private() && plan.user.is_none() => (
                Source::Tree(mount.host_path.clone()),
                mount.host_path.is_dir(),
            ),
            None => (detached_volume(mount, plan.user)?, mount.host_path.is_dir()),
        };
        volumes.push((source, mount, is_dir));
    }
    // Idmapped layers are made detached, here, before the copy of the namespace.
    let idmapped_rootfs = plan
        .user
        .map(|user| idmapped_overlay(plan, user))
        .transpose()?;
    nix::sched::unshare(CloneFlags::CLONE_NEWNS)
        .map_err(|e| sys_failure("unshare the mount namespace", None, e))?;
    let root = Path::new("/");
    mnt::make_rprivate(root).map_err(|e| ns_failure("make / rprivate", Some(root), e))?;
    trace.lap("own mount namespace, / private");
    let rootfs = &plan.rootfs;
    match idmapped_rootfs {
        Some(overlay) => overlay
            .attach(rootfs)
            .map_err(|e| ns_failure("attach the overlay rootfs", Some(rootfs), e))?,
        None => mnt::mount_overlay(&plan.lowerdirs, &plan.upper, &plan.work, rootfs)
            .map_err(|e| ns_failure("mount the overlay rootfs", Some(rootfs), e))?,
    }
    trace.lap("overlay rootfs");
    let sources = Sources {
        devices: default_devices(plan, |host| Ok(Source::Path(host.to_path_buf())))?,
        host_devices: privileged_devices(plan)
            .into_iter()
            .map(|(relative, host)| (relative, Source::Path(host)))
            .collect(),
        shm: plan.shm.clone().map(Source::Path),
        etc_files: plan
            .etc_files
            .iter()
            .map(|(host, inside)| (Source::Path(host.clone()), *inside))
            .collect(),
        volumes,
    };
    Ok((rootfs.clone(), sources))
}

/// The way that does not grow with the node's mounts: every mount made detached here, in the
/// node's namespace (where the paths are), then a copy of the one-mount template entered and
/// the overlay attached on its `/rootfs`.
fn enter_template<'p>(
    plan: &'p ContainerPlan<'_>,
    template: BorrowedFd<'_>,
    trace: &mut Trace,
) -> Step<(PathBuf, Sources<'p>)> {
    let detached = |path: &Path, readonly: bool| {
        Detached::bind(path, readonly)
            .map(Source::Detached)
            .map_err(|e| ns_failure("open_tree (a detached bind mount)", Some(path), e))
    };
    let rootfs = match plan.user {
        Some(user) => idmapped_overlay(plan, user)?,
        None => Detached::overlay(&plan.lowerdirs, &plan.upper, &plan.work)
            .map_err(|e| ns_failure("make the overlay rootfs", Some(&plan.rootfs), e))?,
    };
    let devices = default_devices(plan, |host| detached(host, false))?;
    let mut host_devices = Vec::new();
    for (relative, host) in privileged_devices(plan) {
        host_devices.push((relative, detached(&host, false)?));
    }
    let shm = plan
        .shm
        .as_deref()
        .map(|p| detached(p, false))
        .transpose()?;
    let mut etc_files = Vec::new();
    for (host, inside) in &plan.etc_files {
        etc_files.push((detached(host, false)?, *inside));
    }
    let mut volumes = Vec::new();
    for mount in &plan.mounts {
        let (source, is_dir) = match &mount.image {
            Some(image) => image_volume(image, plan.user)?,
            None => (detached_volume(mount, plan.user)?, mount.host_path.is_dir()),
        };
        volumes.push((source, mount, is_dir));
    }
    trace.lap("detached mounts");
    podlab_ns::ops::join(template, NsKind::Mnt)
        .map_err(|e| ns_failure("enter the mount template", None, e))?;
    nix::sched::unshare(CloneFlags::CLONE_NEWNS)
        .map_err(|e| sys_failure("unshare the mount namespace", None, e))?;
    let at = PathBuf::from(crate::mount_template::ROOTFS);
    rootfs
        .attach(&at)
        .map_err(|e| ns_failure("attach the overlay rootfs", Some(&at), e))?;
    trace.lap("own mount namespace from the template, overlay rootfs");
    let sources = Sources {
        devices,
        host_devices,
        shm,
        etc_files,
        volumes,
    };
    Ok((at, sources))
}

/// The default device files of the container's `/dev`: made with `mknod`, as runc makes them,
/// or, in a user namespace (the container's own, or one podlab itself runs in) where the kernel
/// refuses `mknod` of a device, the host's mounted by `mount`, as runc mounts them there.
fn default_devices(
    plan: &ContainerPlan<'_>,
    mount: impl Fn(&Path) -> Step<Source>,
) -> Step<Vec<(&'static str, DeviceFile)>> {
    if plan.user.is_none() && podlab_ns::user::in_initial_userns() {
        let made = mnt::host_device_numbers().into_iter();
        return Ok(made
            .map(|(name, rdev)| (name, DeviceFile::Made(rdev)))
            .collect());
    }
    mnt::host_devices()
        .into_iter()
        .map(|(name, host)| Ok((name, DeviceFile::Mounted(mount(&host)?))))
        .collect()
}

/// A volume made detached in the caller's namespace: a copy of the host path with the mounts
/// below it (kubelet's and containerd's rbind), read-only on its own mount only, each mount a
/// peer of the one it copies until its propagation is set where it is placed.
///
/// In a pod with a user namespace, the volume is idmapped to it, as containerd gives such a
/// pod its volumes: a file the node's root owns is the pod's root's inside.
fn detached_volume(mount: &Mount, user: Option<JoinUser<'_>>) -> Step<Source> {
    let path = Some(mount.host_path.as_path());
    let volume = Detached::rbind(&mount.host_path, mount.readonly)
        .map_err(|e| ns_failure("open_tree (a detached bind mount)", path, e))?;
    if let Some(user) = user {
        volume
            .set_idmap(user.fd)
            .map_err(|e| ns_failure("idmap the volume to the pod's user namespace", path, e))?;
    }
    Ok(Source::Detached(volume))
}

/// The overlay rootfs from layers idmapped to the pod's user namespace.
fn idmapped_overlay(plan: &ContainerPlan<'_>, user: JoinUser<'_>) -> Step<Detached> {
    Detached::overlay_idmapped(&plan.lowerdirs, &plan.upper, &plan.work, user.fd).map_err(|e| {
        ns_failure(
            "make the overlay rootfs of idmapped layers",
            Some(&plan.rootfs),
            e,
        )
    })
}

/// An image volume made detached: the image's layers merged read-only, or the folder (or
/// file) of them at its sub path; and whether that is a folder.
fn image_volume(
    volume: &crate::config::ImageVolume,
    user: Option<JoinUser<'_>>,
) -> Step<(Source, bool)> {
    let at = Path::new(&volume.image);
    let merged = Detached::image(&volume.lowerdirs, user.map(|u| u.fd))
        .map_err(|e| ns_failure("make the image volume", Some(at), e))?;
    let mount = if volume.sub_path.is_empty() {
        merged
    } else {
        let sub = Path::new(&volume.sub_path);
        merged
            .sub_tree(sub)
            .map_err(|e| ns_failure("open the image volume's sub path", Some(sub), e))?
    };
    let is_dir = mount.is_dir();
    Ok((Source::Detached(mount), is_dir))
}

/// runc's order: the read-only paths, then the masked ones (a masked path below a read-only
/// one is still hidden).
fn protect_paths(plan: &ContainerPlan<'_>) -> Step<()> {
    use crate::masked_paths::{make_readonly, mask, Failure};
    type Protect = fn(&Path) -> Result<(), Failure>;
    let lists: [(&[String], Protect, &str); 2] = [
        (&plan.readonly_paths, make_readonly, "make read-only"),
        (&plan.masked_paths, mask, "mask"),
    ];
    for (paths, protect, what) in lists {
        for path in paths {
            let path = Path::new(path);
            protect(path).map_err(|f| {
                failure(
                    &format!("{what} ({})", f.step),
                    Some(path),
                    Some(f.errno),
                    f.errno.desc().to_string(),
                )
            })?;
        }
    }
    Ok(())
}

/// The host's device files beyond the default ones, for a privileged container (containerd's
/// `WithHostDevices`): every character and block device below `/dev`, by path relative to it,
/// outside the folders a container gets its own of (`pts`, `shm`, `mqueue`).
fn privileged_devices(plan: &ContainerPlan<'_>) -> Vec<(PathBuf, PathBuf)> {
    use std::os::unix::fs::FileTypeExt;
    fn walk(dir: &Path, relative: &Path, out: &mut Vec<(PathBuf, PathBuf)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let inside = relative.join(&name);
            if kind.is_dir() && !["pts", "shm", "mqueue"].contains(&name.to_str().unwrap_or("")) {
                walk(&entry.path(), &inside, out);
            } else if kind.is_char_device() || kind.is_block_device() {
                out.push((inside, entry.path()));
            }
        }
    }
    let mut out = Vec::new();
    if plan.privileged {
        walk(Path::new("/dev"), Path::new(""), &mut out);
        let defaults: Vec<&str> = mnt::host_devices().iter().map(|(n, _)| *n).collect();
        out.retain(|(relative, _)| !defaults.iter().any(|d| relative == Path::new(d)));
    }
    out
}

fn remount_root_readonly() -> Step<()> {
    let flags = nix::mount::MsFlags::MS_REMOUNT
        | nix::mount::MsFlags::MS_BIND
        | nix::mount::MsFlags::MS_RDONLY;
    nix::mount::mount(None::<&str>, "/", None::<&str>, flags, None::<&str>)
        .map_err(|e| sys_failure("remount the rootfs read-only", Some(Path::new("/")), e))
}

/// `rootfs` + `inside`, made to exist (folders, and a file as the last part unless `is_dir`)
/// without ever following a symlink of the image: a link there could point anywhere on the
/// host, since the rootfs is not yet `/`.
fn target_in(rootfs: &Path, inside: &Path, is_dir: bool) -> Step<PathBuf> {
    let parts: Vec<&std::ffi::OsStr> = inside
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part),
            _ => None,
        })
        .collect();
    if inside.components().any(|c| c == Component::ParentDir) {
        return Err(failure(
            "mount target",
            Some(inside),
            None,
            "must not contain \"..\"".into(),
        ));
    }
    let mut path = rootfs.to_path_buf();
    for (index, part) in parts.iter().enumerate() {
        path.push(part);
        let last = index + 1 == parts.len();
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(failure(
                    "mount target",
                    Some(inside),
                    Some(nix::Error::ELOOP),
                    format!(
                        "{} is a symlink in the image; podlab does not follow it",
                        path.display()
                    ),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let made = if last && !is_dir {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o644)
                        .open(&path)
                        .map(drop)
                } else {
                    std::fs::create_dir(&path)
                };
                made.map_err(|e| io_failure("create mount target", &path, e))?;
            }
            Err(e) => return Err(io_failure("inspect mount target", &path, e)),
        }
    }
    Ok(path)
}

/// The mount point of one of the pod's /etc files. An image's symlink there (a resolv.conf
/// pointing at systemd-resolved's, say) is replaced by a plain file in the container's upper
/// layer; the image itself is untouched.
fn etc_target(rootfs: &Path, inside: &Path) -> Step<PathBuf> {
    let path = rootfs.join(inside.strip_prefix("/").unwrap_or(inside));
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(&path).map_err(|e| io_failure("replace symlink", &path, e))?;
    }
    target_in(rootfs, inside, false)
}

fn io_failure(step: &str, path: &Path, err: std::io::Error) -> InitFailure {
    failure(
        step,
        Some(path),
        err.raw_os_error().map(nix::Error::from_raw),
        err.to_string(),
    )
}

/// The console (when asked for), capabilities, user, signals, working directory, `execve`.
pub fn finish(
    process: &ProcessSpec,
    console: Option<Console>,
    user: Option<JoinUser<'_>>,
    trace: &mut Trace,
) -> Step<Infallible> {
    let exec = ExecPlan::new(process)?;
    if let Some(console) = console {
        // In the container's mount namespace already: /dev/ptmx is its own devpts's. Its
        // owner is given as the node numbers the user: this process is still the node's root.
        let owner = match user {
            Some(user) => user
                .map
                .host_uid(process.uid)
                .ok_or_else(|| unmapped(process))?,
            None => process.uid,
        };
        crate::tty::open_console(console.socket, owner, console.size)
            .map_err(|(step, errno)| sys_failure(step, None, errno))?;
        trace.lap("console");
    }
    if let Some(user) = user {
        // Last, with every mount made: from here on this process is root of the pod's user
        // namespace only, and its ids are the pod's. (setns is refused to a process sharing
        // its fs_struct or with other threads: a fork of the shim has neither.)
        podlab_ns::ops::join(user.fd, NsKind::User)
            .map_err(|e| ns_failure("join the pod's user namespace", None, e))?;
        if user.map.host_uid(process.uid).is_none() || user.map.host_gid(process.gid).is_none() {
            return Err(unmapped(process));
        }
        trace.lap("the pod's user namespace");
    }
    let keep = crate::capabilities::keep_set(process.capabilities.as_deref());
    let filters = match &process.seccomp {
        Some(profile) => crate::seccomp::compile_cached(profile)
            .map_err(|e| failure("compile the seccomp profile", None, None, e))?,
        None => Vec::new(),
    };
    if process.no_new_privs {
        nix::sys::prctl::set_no_new_privs()
            .map_err(|e| sys_failure("prctl(PR_SET_NO_NEW_PRIVS)", None, e))?;
    }
    // As runc without no_new_privs: while CAP_SYS_ADMIN is still held (the kernel demands it
    // or no_new_privs), so what follows (capset, setgroups, setuid, chdir, execve) must be
    // allowed by the profile, as containerd's is.
    crate::seccomp::install(&filters)
        .map_err(|e| sys_failure("install the seccomp filter", None, e))?;
    if !filters.is_empty() {
        trace.lap("seccomp");
    }
    crate::capabilities::drop_bounding(&keep)
        .map_err(|e| failure("drop capabilities", None, None, e))?;
    let groups: Vec<nix::unistd::Gid> = process
        .additional_gids
        .iter()
        .map(|g| nix::unistd::Gid::from_raw(*g))
        .collect();
    nix::unistd::setgroups(&groups).map_err(|e| sys_failure("setgroups", None, e))?;
    nix::unistd::setresgid(
        nix::unistd::Gid::from_raw(process.gid),
        nix::unistd::Gid::from_raw(process.gid),
        nix::unistd::Gid::from_raw(process.gid),
    )
    .map_err(|e| sys_failure(&format!("setgid {}", process.gid), None, e))?;
    if process.uid == 0 {
        if user.is_some() {
            // Still the node's root, which the pod's namespace does not map: its root now
            // (the kernel keeps the capabilities on this switch, as it leads to the
            // namespace's root).
            let root = nix::unistd::Uid::from_raw(0);
            nix::unistd::setresuid(root, root, root)
                .map_err(|e| sys_failure("setuid 0", None, e))?;
        }
        crate::capabilities::limit_root_sets(&keep)
            .map_err(|e| failure("set capabilities", None, None, e))?;
    } else {
        crate::capabilities::clear_ambient()
            .map_err(|e| failure("set capabilities", None, None, e))?;
        // Without PR_SET_KEEPCAPS the kernel empties permitted and effective on this switch.
        let uid = nix::unistd::Uid::from_raw(process.uid);
        nix::unistd::setresuid(uid, uid, uid)
            .map_err(|e| sys_failure(&format!("setuid {}", process.uid), None, e))?;
    }
    reset_signals();
    // runc's default, whatever umask the process that started the shim had.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let cwd = Path::new(&process.cwd);
    nix::unistd::chdir(cwd).map_err(|e| {
        let mut f = sys_failure("chdir", Some(cwd), e);
        f.message = format!(
            "chdir to cwd ({:?}) set in config.json failed: {}",
            process.cwd,
            e.desc()
        );
        f
    })?;
    trace.lap("capabilities, user, cwd");
    crate::trace::process_mark("init", "seccomp, caps, user");
    trace.send_marks();
    // SAFETY: marks every descriptor above stderr close-on-exec; the report pipe already is.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    Err(exec.exec())
}

/// The process's user or group is outside the pod's user namespace's maps.
fn unmapped(process: &ProcessSpec) -> InitFailure {
    failure(
        "switch to the container's user",
        None,
        Some(nix::Error::EINVAL),
        format!(
            "user {} or group {} is not mapped in the pod's user namespace",
            process.uid, process.gid
        ),
    )
}

/// The shim blocks the signals it reads from a signalfd, and Rust ignores SIGPIPE: neither may
/// reach the container's program.
pub fn reset_signals() {
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    for signal in [
        Signal::SIGPIPE,
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        // SAFETY: restoring the default disposition installs no handler code.
        let _ = unsafe { nix::sys::signal::signal(signal, SigHandler::SigDfl) };
    }
}

/// argv, envp and the paths to try, as C strings, ready before anything is changed.
#[derive(Debug)]
pub struct ExecPlan {
    program: String,
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

impl ExecPlan {
    pub fn new(process: &ProcessSpec) -> Step<ExecPlan> {
        let program = process
            .argv
            .first()
            .cloned()
            .ok_or_else(|| failure("exec", None, None, "no command given".into()))?;
        let cstring = |s: &str| {
            CString::new(s)
                .map_err(|_| failure("exec", None, None, format!("{s:?} holds a NUL byte")))
        };
        let candidates = exec_candidates(&program, process.env_value("PATH"))
            .iter()
            .map(|c| cstring(c))
            .collect::<Step<_>>()?;
        Ok(ExecPlan {
            candidates,
            argv: process
                .argv
                .iter()
                .map(|a| cstring(a))
                .collect::<Step<_>>()?,
            envp: process
                .env
                .iter()
                .map(|e| cstring(e))
                .collect::<Step<_>>()?,
            program,
        })
    }

    /// Tries each candidate; returns only on failure, worded like runc.
    pub fn exec(&self) -> InitFailure {
        let mut worst = nix::Error::ENOENT;
        for candidate in &self.candidates {
            let Err(errno) = nix::unistd::execve(candidate, &self.argv, &self.envp);
            match errno {
                nix::Error::ENOENT | nix::Error::ENOTDIR => {}
                nix::Error::EACCES => worst = errno,
                other => {
                    worst = other;
                    break;
                }
            }
        }
        let message = if worst == nix::Error::ENOENT && !self.program.contains('/') {
            format!(
                "exec: {:?}: executable file not found in $PATH",
                self.program
            )
        } else {
            format!("exec: {:?}: {}", self.program, worst.desc().to_lowercase())
        };
        InitFailure {
            step: "exec".into(),
            path: Some(self.program.clone()),
            errno: Some(worst as i32),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_failures_read_like_runc() {
        let process = ProcessSpec {
            argv: vec!["no-such-program-podlab".into()],
            env: vec!["PATH=/nonexistent-a:/nonexistent-b".into()],
            ..ProcessSpec::default()
        };
        let failure = ExecPlan::new(&process).unwrap().exec();
        assert_eq!(
            failure.message,
            "exec: \"no-such-program-podlab\": executable file not found in $PATH"
        );
        let process = ProcessSpec {
            argv: vec!["/nonexistent/prog".into()],
            ..ProcessSpec::default()
        };
        let failure = ExecPlan::new(&process).unwrap().exec();
        assert_eq!(
            failure.message,
            "exec: \"/nonexistent/prog\": no such file or directory"
        );
        assert_eq!(failure.errno, Some(libc::ENOENT));
    }

    #[test]
    fn mount_targets_are_made_and_symlinks_refused() {
        let dir = std::env::temp_dir().join(format!("podlab-init-targets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        std::os::unix::fs::symlink("/etc", dir.join("evil")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join("etc/resolv.conf")).unwrap();
        assert_eq!(
            target_in(&dir, Path::new("/a/b"), true).unwrap(),
            dir.join("a/b")
        );
        assert!(dir.join("a/b").is_dir());
        assert!(target_in(&dir, Path::new("/a/f"), false).unwrap().is_file());
        let err = target_in(&dir, Path::new("/evil/x"), true).unwrap_err();
        assert!(err.message.contains("symlink"), "{}", err.message);
        assert!(target_in(&dir, Path::new("/a/../x"), true).is_err());
        let resolv = etc_target(&dir, Path::new("/etc/resolv.conf")).unwrap();
        assert!(
            std::fs::symlink_metadata(&resolv).unwrap().is_file(),
            "the link became a file"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
