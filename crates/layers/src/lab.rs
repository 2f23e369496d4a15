//! The lab: one temporary folder and one pair of private namespaces in which the real peers
//! (containerd, dockerd, podman, runc, crun) run, so that nothing they do reaches the host.
//!
//! * **Network**: every peer runs in a network namespace of the lab's own, which has nothing but
//!   `lo`. A bridge, an iptables rule or an `ip_forward` a daemon might set stays in there and
//!   cannot route anything out; there is no link out to route to. The daemons are also told not
//!   to try (`--iptables=false`, `--network none`, see [`crate::engines`]).
//! * **Mounts**: a mount namespace of the lab's own with private propagation, and fresh tmpfs
//!   over `/run` (containerd's shim sockets, runc's state, netns pins), `/etc/docker` and
//!   `/var/lib/cni`, so files the daemons put in fixed places vanish with the lab. Everything else
//!   (state, sockets, storage) is under the lab folder, by flags and config files. The lab
//!   folder is a tmpfs of its own, for every peer alike: the rows measure the tools, not this
//!   machine's disk. (On a standard host the runtime state is on a tmpfs too, `/run`; here `/`
//!   is ext4 mounted with `discard`, where each rename over a file waits about 4 ms for the
//!   discard of the old file's block, which would dominate every row that writes state files.)
//! * **Processes**: every daemon is started by [`Lab::spawn_daemon`] and stopped by pid; at the
//!   end [`Lab::teardown`] runs the engines' own clean-up (remove every container and pod), stops
//!   the daemons, kills by pid whatever is left in the lab's namespaces or names the lab folder
//!   (shims, conmon, and the containers below them), removes the lab's cgroups, the folder, and
//!   checks that none of it is left. Dropping a `Lab` does the same.
//!
//! Commands enter the lab with `setns(2)` right before `exec` (see [`Lab::command`]), so a
//! measured command pays nothing for the wrapper.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use podlab_ns::ops::Holder;
use podlab_ns::NsKind;

use crate::procs::Table;
use crate::{Error, Result};

/// Paths that peers write to whatever their flags say; the lab covers those that exist with a
/// tmpfs of its own (creating the others would itself change the host).
const COVERED: &[&str] = &["/run", "/etc/docker", "/var/lib/cni", "/etc/cni/net.d"];

/// A teardown step an engine registered: remove its containers while its daemon still runs.
type Cleanup = Box<dyn FnMut(&Lab) + Send + Sync>;

pub struct Lab {
    dir: PathBuf,
    token: String,
    holder: Option<Holder>,
    net: OwnedFd,
    mnt: OwnedFd,
    net_inode: u64,
    mnt_inode: u64,
    cgroup2: Option<(OwnedFd, u64)>,
    started: Vec<Started>,
    cleanups: Vec<(String, Cleanup)>,
    torn_down: bool,
}

struct Started {
    name: String,
    child: Child,
}

impl Lab {
    /// Makes `/tmp/podlab-peers.XXXXXX` and the lab's network and mount namespaces.
    pub fn new() -> Result<Lab> {
        let template = std::env::temp_dir().join("podlab-peers.XXXXXX");
        let dir = nix::unistd::mkdtemp(&template).map_err(|e| {
            Error::io(
                "creating",
                &template,
                std::io::Error::from_raw_os_error(e as i32),
            )
        })?;
        if let Err(err) = podlab_ns::mnt::mount_tmpfs(&dir, "mode=700") {
            let _ = std::fs::remove_dir(&dir);
            return Err(err.into());
        }
        let token = format!(
            "podlab-peers-{}",
            dir.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit('.').next())
                .unwrap_or("lab")
        );
        let holder = Holder::spawn(&[NsKind::Net, NsKind::Mnt], || {
            podlab_ns::mnt::make_rprivate(Path::new("/"))?;
            for path in COVERED.iter().map(Path::new).filter(|p| p.is_dir()) {
                podlab_ns::mnt::mount_tmpfs(path, "mode=755")?;
            }
            podlab_ns::net::Netlink::open()?.loopback_up()
        });
        let holder = match holder {
            Ok(h) => h,
            Err(err) => {
                let _ = remove_tree(&dir);
                return Err(err.into());
            }
        };
        let net = holder.open(NsKind::Net)?;
        let mnt = holder.open(NsKind::Mnt)?;
        let net_inode = holder.inode(NsKind::Net)?;
        let mnt_inode = holder.inode(NsKind::Mnt)?;
        for sub in ["home", "tmp", "logs"] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path).map_err(|e| Error::io("creating", &path, e))?;
        }
        Ok(Lab {
            dir,
            token,
            holder: Some(holder),
            net,
            mnt,
            net_inode,
            mnt_inode,
            cgroup2: None,
            started: Vec::new(),
            cleanups: Vec::new(),
            torn_down: false,
        })
    }

    /// The lab folder; everything the peers keep is below it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `DIR/rel`, its parent folder created.
    pub fn path(&self, rel: &str) -> Result<PathBuf> {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("creating", parent, e))?;
        }
        Ok(path)
    }

    /// `DIR/rel` as a folder, created.
    pub fn subdir(&self, rel: &str) -> Result<PathBuf> {
        let path = self.dir.join(rel);
        std::fs::create_dir_all(&path).map_err(|e| Error::io("creating", &path, e))?;
        Ok(path)
    }

    /// The lab's name (`podlab-peers-XXXXXX`), also the cgroup every peer is told to put its
    /// containers under, so that teardown can find and remove them.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// `/podlab-peers-XXXXXX/<what>`: a cgroup parent for one peer.
    pub fn cgroup_parent(&self, what: &str) -> String {
        format!("/{}/{what}", self.token)
    }

    pub fn net_inode(&self) -> u64 {
        self.net_inode
    }

    pub fn mnt_inode(&self) -> u64 {
        self.mnt_inode
    }

    /// The pid of the process that holds the lab's namespaces.
    pub fn holder_pid(&self) -> Option<i32> {
        self.holder.as_ref().map(|h| h.pid.as_raw())
    }

    /// A command that runs inside the lab: it joins the lab's network and mount namespaces just
    /// before `exec`, with `HOME` and `TMPDIR` in the lab folder (the docker CLI and podman write
    /// below `HOME`).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        self.command_with_mnt(program, self.mnt.as_raw_fd())
    }

    /// Like [`Lab::command`], in the lab's cgroup2-only view (see [`Lab::enable_cgroup2_view`]).
    pub fn command_cgroup2(&self, program: impl AsRef<OsStr>) -> Result<Command> {
        let (fd, _) = self.cgroup2.as_ref().ok_or_else(|| {
            Error::evidence(
                "the cgroup2 view exists",
                "enable_cgroup2_view was not called",
            )
        })?;
        Ok(self.command_with_mnt(program, fd.as_raw_fd()))
    }

    fn command_with_mnt(&self, program: impl AsRef<OsStr>, mnt: i32) -> Command {
        let net = self.net.as_raw_fd();
        let mut cmd = Command::new(program);
        cmd.env("HOME", self.dir.join("home"))
            .env("TMPDIR", self.dir.join("tmp"))
            .stdin(Stdio::null());
        // SAFETY: only setns(2) between fork and exec; the fds stay open in the parent.
        unsafe {
            cmd.pre_exec(move || enter(net, mnt));
        }
        cmd
    }

    /// Starts a mount namespace inside the lab where `/sys/fs/cgroup` is a plain cgroup2 mount
    /// (held by a sleeping process). crun 1.8 refuses this host's hybrid cgroup layout; in here
    /// it runs, and runc is measured in here too so that the two compare.
    pub fn enable_cgroup2_view(&mut self) -> Result<u64> {
        if let Some((_, inode)) = &self.cgroup2 {
            return Ok(*inode);
        }
        let (net, mnt) = (self.net.as_raw_fd(), self.mnt.as_raw_fd());
        let paths = [c"/", c"/sys/fs/cgroup", c"none", c"cgroup2"].map(CString::from);
        let mut cmd = Command::new("sleep");
        cmd.arg("infinity")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // SAFETY: only system calls on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                detach_from_caller()?;
                enter(net, mnt)?;
                cgroup2_only(&paths)
            });
        }
        let child = cmd.spawn().map_err(|cause| Error::Spawn {
            program: "the cgroup2 view holder (sleep infinity)".into(),
            cause,
        })?;
        let pid = child.id() as i32;
        self.started.push(Started {
            name: "cgroup2 view".into(),
            child,
        });
        wait_until(
            "the cgroup2 view holder to exec",
            Duration::from_secs(5),
            || crate::procs::read(pid).is_some_and(|p| p.comm == "sleep"),
        )?;
        let fd = podlab_ns::ops::open_pid(pid, NsKind::Mnt)?;
        let inode = podlab_ns::ops::ns_inode(pid, NsKind::Mnt)?;
        self.cgroup2 = Some((fd, inode));
        Ok(inode)
    }

    /// Starts a daemon in the lab, in a session of its own (Ctrl-C on the terminal does not reach
    /// it: teardown stops it in order) and with `SIGTERM` as its parent-death signal; its output
    /// goes to `logs/<name>.log`. Returns its pid.
    pub fn spawn_daemon(&mut self, name: &str, mut cmd: Command) -> Result<i32> {
        let log_path = self.path(&format!("logs/{name}.log"))?;
        let log =
            std::fs::File::create(&log_path).map_err(|e| Error::io("creating", &log_path, e))?;
        let err = log
            .try_clone()
            .map_err(|e| Error::io("duplicating", &log_path, e))?;
        cmd.stdout(log).stderr(err);
        // SAFETY: setsid and prctl only.
        unsafe {
            cmd.pre_exec(detach_from_caller);
        }
        let child = cmd.spawn().map_err(|cause| Error::Spawn {
            program: name.into(),
            cause,
        })?;
        let pid = child.id() as i32;
        self.started.push(Started {
            name: name.into(),
            child,
        });
        Ok(pid)
    }

    /// The last lines of a daemon's log, for error messages.
    pub fn log_tail(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("logs/{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// Registers a teardown step that runs, newest first, before the daemons are stopped.
    pub fn on_teardown(&mut self, what: &str, step: impl FnMut(&Lab) + Send + Sync + 'static) {
        self.cleanups.push((what.into(), Box::new(step)));
    }

    /// Stops one daemon started with [`Lab::spawn_daemon`]: SIGTERM, up to `grace`, SIGKILL.
    pub fn stop_daemon(&mut self, pid: i32, grace: Duration) {
        if let Some(at) = self.started.iter().position(|s| s.child.id() as i32 == pid) {
            let mut started = self.started.remove(at);
            stop_child(&mut started.child, grace);
        }
    }

    /// Takes everything down (see the module doc) and checks that the host kept nothing of it.
    pub fn teardown(&mut self) -> Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut cleanups = std::mem::take(&mut self.cleanups);
        while let Some((_what, mut step)) = cleanups.pop() {
            step(self);
        }
        // Daemons newest first: dockerd before the containerd it uses.
        while let Some(mut started) = self.started.pop() {
            let grace = if started.name.starts_with("cgroup2") {
                Duration::ZERO
            } else {
                Duration::from_secs(15)
            };
            stop_child(&mut started.child, grace);
        }
        let swept = self.sweep_processes();
        self.remove_cgroups();
        if let Some(holder) = self.holder.take() {
            holder.kill();
        }
        let removed = remove_tree(&self.dir);
        let mut left = self.leftovers();
        if let Err(err) = removed {
            left.push(err.to_string());
        }
        if !swept.is_empty() {
            // Not a failure: these were killed by pid; say so, since the engines should have
            // removed them themselves.
            eprintln!(
                "podlab lab: killed what the engines left running: {}",
                swept.join(", ")
            );
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(Error::LeftBehind { changes: left })
        }
    }

    /// Reaps the zombie children of this process that the lab did not start itself: the shims
    /// and conmons that were re-parented to a child subreaper (`peers-bench`) and have ended.
    /// Left alone they would pile up by the thousand in a scale run, each holding a pid.
    /// Reads `/proc/self/task/*/children`, so it costs no scan of all of /proc.
    pub fn reap_orphans(&self) {
        let mine: Vec<i32> = self
            .started
            .iter()
            .map(|s| s.child.id() as i32)
            .chain(self.holder_pid())
            .collect();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
        for task in tasks.flatten() {
            let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for pid in text
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                if !mine.contains(&pid) && crate::procs::read(pid).is_some_and(|p| p.state == 'Z') {
                    reap_if_ours(pid);
                }
            }
        }
    }

    /// The processes that belong to the lab: in one of its namespaces, or naming its folder in
    /// their command line, and everything below those (the containers under the shims).
    pub fn lab_processes(&self) -> Vec<i32> {
        let me = std::process::id() as i32;
        let holder = self.holder_pid();
        let dir = self.dir.to_string_lossy().into_owned();
        let mnt_inodes: Vec<u64> = [Some(self.mnt_inode), self.cgroup2.as_ref().map(|c| c.1)]
            .into_iter()
            .flatten()
            .collect();
        let table = Table::read();
        let mut roots: Vec<i32> = table
            .procs
            .values()
            .filter(|p| p.pid != me && Some(p.pid) != holder && p.state != 'Z')
            .filter(|p| {
                let ns = |kind| podlab_ns::ops::ns_inode(p.pid, kind).ok();
                ns(NsKind::Net) == Some(self.net_inode)
                    || ns(NsKind::Mnt).is_some_and(|i| mnt_inodes.contains(&i))
                    || p.cmdline.iter().any(|a| a.contains(&dir))
            })
            .map(|p| p.pid)
            .collect();
        let below: Vec<i32> = roots
            .iter()
            .flat_map(|r| table.descendants(*r))
            .map(|p| p.pid)
            .collect();
        roots.extend(below);
        roots.sort_unstable();
        roots.dedup();
        roots
    }

    fn sweep_processes(&self) -> Vec<String> {
        let mut killed = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = self.lab_processes();
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in pids {
                if let Some(p) = crate::procs::read(pid) {
                    killed.push(format!("{} {}", p.pid, p.comm));
                }
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                reap_if_ours(pid);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        killed.sort();
        killed.dedup();
        killed
    }

    /// Removes `/sys/fs/cgroup/<hierarchy>/podlab-peers-XXXXXX` with everything below it, in
    /// every hierarchy (cgroup folders go with rmdir, deepest first, once their processes are
    /// gone; the kernel may need a moment after the last one exits).
    fn remove_cgroups(&self) {
        for dir in self.cgroup_dirs() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while dir.exists() && Instant::now() < deadline {
                rmdir_tree(&dir);
                if dir.exists() {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let root = Path::new("/sys/fs/cgroup");
        let mut dirs = vec![root.join(&self.token)];
        if let Ok(entries) = std::fs::read_dir(root) {
            dirs.extend(entries.flatten().map(|e| e.path().join(&self.token)));
        }
        dirs.into_iter().filter(|d| d.is_dir()).collect()
    }

    /// What of the lab the host still has: processes, cgroups, mounts below the folder, the folder.
    pub fn leftovers(&self) -> Vec<String> {
        let mut left: Vec<String> = self
            .lab_processes()
            .into_iter()
            .filter_map(crate::procs::read)
            .filter(|p| p.state != 'Z')
            .map(|p| format!("process {} ({}) still runs", p.pid, p.comm))
            .collect();
        left.extend(
            self.cgroup_dirs()
                .into_iter()
                .map(|d| format!("cgroup {} still exists", d.display())),
        );
        let dir = self.dir.to_string_lossy().into_owned();
        if let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") {
            left.extend(
                text.lines()
                    .filter(|l| l.contains(&dir))
                    .map(|l| format!("mount still there: {l}")),
            );
        }
        if self.dir.exists() {
            left.push(format!("{} still exists", self.dir.display()));
        }
        left
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Err(err) = self.teardown() {
            eprintln!("podlab lab teardown: {err}");
        }
    }
}

/// Runs `cmd`, returns its output, and fails with the end of its stderr when it fails.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd.output().map_err(|cause| Error::Spawn {
        program: describe(cmd),
        cause,
    })?;
    if !out.status.success() {
        return Err(command_failed(cmd, &out));
    }
    Ok(out)
}

/// [`run`], returning stdout as text, trimmed.
pub fn run_text(cmd: &mut Command) -> Result<String> {
    let out = run(cmd)?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub fn command_failed(cmd: &Command, out: &Output) -> Error {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    let lines: Vec<&str> = said.trim().lines().collect();
    Error::Command {
        command: describe(cmd),
        status: out.status.to_string(),
        stderr: lines[lines.len().saturating_sub(4)..].join(" | "),
    }
}

/// `program arg arg ...` of a command, for messages.
pub fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Polls `ready` every 10 ms until it holds or `timeout` passes.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: what.into(),
                seconds: timeout.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn enter(net: i32, mnt: i32) -> std::io::Result<()> {
    // SAFETY: setns on fds the parent keeps open.
    for (fd, flag) in [(net, libc::CLONE_NEWNET), (mnt, libc::CLONE_NEWNS)] {
        if unsafe { libc::setns(fd, flag) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A session of its own (no SIGINT from the terminal) and SIGTERM when its parent dies.
fn detach_from_caller() -> std::io::Result<()> {
    // SAFETY: setsid and prctl take no pointers.
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// In a new mount namespace: private propagation, and `/sys/fs/cgroup` replaced by cgroup2.
fn cgroup2_only(paths: &[CString; 4]) -> std::io::Result<()> {
    let [root, cgroup, none, cgroup2] = paths;
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: system calls on NUL-terminated strings made before the fork.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNS))?;
        check(libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check(libc::umount2(cgroup.as_ptr(), libc::MNT_DETACH))?;
        check(libc::mount(
            none.as_ptr(),
            cgroup.as_ptr(),
            cgroup2.as_ptr(),
            0,
            std::ptr::null(),
        ))
    }
}

fn stop_child(child: &mut Child, grace: Duration) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    if !grace.is_zero() {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Reaps `pid` if it became our child (we may be a child subreaper) and has ended.
fn reap_if_ours(pid: i32) {
    let _ = nix::sys::wait::waitpid(
        nix::unistd::Pid::from_raw(pid),
        Some(nix::sys::wait::WaitPidFlag::WNOHANG),
    );
}

fn rmdir_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Removes the lab folder: its tmpfs, then the folder. Mounts below it exist only in the lab's
/// mount namespace, which is gone by now; the host's view is checked by [`Lab::leftovers`].
fn remove_tree(dir: &Path) -> Result<()> {
    podlab_ns::mnt::unmount(dir)?;
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("removing", dir, e)),
        _ => Ok(()),
    }
}
