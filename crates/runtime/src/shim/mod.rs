//! `podlab-shim`: one per pod, podlab's twin of `containerd-shim-runc-v2`.
//!
//! The library starts it for RunPodSandbox, with the sandbox's id and folder on its command
//! line; it reads the rest of its arguments from its stdin ([`args_from_stdin`], sent when
//! they are known: [`crate::starting_shim`]). It then detaches (fork, the parent exits,
//! `setsid`), becomes a child subreaper, starts the pause process in the pod's new namespaces,
//! pins them, prints one [`ShimReady`] line on its stdout and then serves requests on
//! `shim.sock` until told to shut down. A Start that comes while pause starts (`run --rm`'s) is
//! taken up at once, the container forked while pause finishes (`early`).
//! Containers and exec'd processes are its children: it holds their stdout/stderr pipes and
//! writes them to their CRI log files, reaps them and records their exit codes, so the kubelet
//! layer or the CLI may come and go (or be killed) without losing either.
//!
//! One shim lives as long as its pod, so it is built to keep little memory: a static binary at
//! a fixed address with the code it runs packed together (`build.rs`, `resident.ld`), an
//! allocator that gives freed pages back (`memory`), no copies of its containers' records.
//!
//! It is single-threaded on purpose: every container is a plain `fork` of it, free to allocate
//! and to `setns` into a mount namespace, which a multi-threaded parent would forbid. Its one
//! loop waits on `poll(2)`: the socket, the clients, the log pipes, and a signalfd for SIGCHLD.

mod attach;
mod containers;
mod early;
mod memory;

pub(crate) use memory::tunables_without_thread_cache;
mod sandbox;
pub(crate) use sandbox::PINNED_KINDS;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::id::{ContainerId, SandboxId};
use crate::liveness::ProcessIdentity;
use crate::protocol::{self, Request, Response, ShimReady};
use crate::state::{self, SandboxPaths, ShimRecord};

use containers::{Live, LogPipe};
use sandbox::PodNamespaces;

/// The shim's command line, built by the library and parsed by the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimArgs {
    pub sandbox_dir: PathBuf,
    pub id: SandboxId,
    pub pause: PathBuf,
    pub hostname: String,
    pub domainname: String,
    pub share_pid: bool,
    pub host_network: bool,
    /// Pause is forked into the shim's own (the node's) pid namespace.
    pub host_pid: bool,
    /// No ipc namespace of the pod's: pause and the containers keep the node's.
    pub host_ipc: bool,
    /// The pause process's cgroup and oom_score_adj.
    pub placement: Option<crate::cgroups::Placement>,
    /// Sysctls written in the pod's namespaces before pause starts.
    pub sysctls: std::collections::BTreeMap<String, String>,
    /// The pause process's seccomp profile, user, groups and privilege.
    pub security: crate::config::SandboxSecurity,
    /// The mount template (`/proc/<caller>/fd/<n>`) to make the pause process's mount namespace
    /// from ([`crate::mount_template`]); None: a copy of the node's.
    pub mount_template: Option<PathBuf>,
    /// The pod's trace file, which a command that traces the pod makes ([`crate::trace`]).
    pub trace: Option<PathBuf>,
    /// A network namespace made ahead that pause joins instead of making its own: one
    /// attached ahead of time (`/proc/<caller>/fd/<n>`, see
    /// [`crate::network::PreparedNetwork`]), or the one the caller pinned at the sandbox's
    /// `ns/net` and attaches while the shim starts (`await_network`).
    pub netns: Option<PathBuf>,
    /// The caller attaches the pod's network (the plugin's ADD) while the shim starts: the shim
    /// pins nothing and answers nothing until a byte on its stdin says the network is attached
    /// (after the cgroups' byte, if any). The end of the pipe without it (the ADD failed, or
    /// the caller died) ends the start: pause is killed.
    pub await_network: bool,
}

impl ShimArgs {
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--id".into(),
            self.id.as_str().into(),
            "--sandbox-dir".into(),
            self.sandbox_dir.clone().into(),
            "--pause".into(),
            self.pause.clone().into(),
            "--hostname".into(),
            self.hostname.clone().into(),
            "--domainname".into(),
            self.domainname.clone().into(),
        ];
        if self.share_pid {
            args.push("--share-pid".into());
        }
        if self.host_network {
            args.push("--host-network".into());
        }
        if self.host_pid {
            args.push("--host-pid".into());
        }
        if self.host_ipc {
            args.push("--host-ipc".into());
        }
        if let Some(placement) = &self.placement {
            args.push("--placement".into());
            args.push(serde_json::to_string(placement).unwrap_or_default().into());
        }
        if !self.sysctls.is_empty() {
            args.push("--sysctls".into());
            args.push(
                serde_json::to_string(&self.sysctls)
                    .unwrap_or_default()
                    .into(),
            );
        }
        args.push("--security".into());
        args.push(
            serde_json::to_string(&self.security)
                .unwrap_or_default()
                .into(),
        );
        if let Some(template) = &self.mount_template {
            args.push("--template-ns".into());
            args.push(template.clone().into());
        }
        if let Some(trace) = &self.trace {
            args.push("--trace".into());
            args.push(trace.clone().into());
        }
        if let Some(netns) = &self.netns {
            args.push("--netns".into());
            args.push(netns.clone().into());
        }
        if self.await_network {
            args.push("--await-network".into());
        }
        args
    }

    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<ShimArgs, String> {
        let mut id = None;
        let mut sandbox_dir = None;
        let mut pause = None;
        let mut hostname = String::new();
        let mut domainname = String::new();
        let mut share_pid = false;
        let mut host_network = false;
        let mut host_pid = false;
        let mut host_ipc = false;
        let mut placement = None;
        let mut sysctls = Default::default();
        let mut security = Default::default();
        let mut mount_template = None;
        let mut trace = None;
        let mut netns = None;
        let mut await_network = false;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let arg = arg.to_string_lossy().into_owned();
            let mut value = || {
                args.next()
                    .ok_or_else(|| format!("{arg} needs a value"))
                    .map(|v| v.to_string_lossy().into_owned())
            };
            match arg.as_str() {
                "--id" => id = Some(SandboxId::parse(&value()?).map_err(|e| e.to_string())?),
                "--sandbox-dir" => sandbox_dir = Some(PathBuf::from(value()?)),
                "--pause" => pause = Some(PathBuf::from(value()?)),
                "--hostname" => hostname = value()?,
                "--domainname" => domainname = value()?,
                "--share-pid" => share_pid = true,
                "--host-network" => host_network = true,
                "--host-pid" => host_pid = true,
                "--host-ipc" => host_ipc = true,
                "--placement" => {
                    placement = Some(
                        serde_json::from_str(&value()?).map_err(|e| format!("--placement: {e}"))?,
                    )
                }
                "--sysctls" => {
                    sysctls =
                        serde_json::from_str(&value()?).map_err(|e| format!("--sysctls: {e}"))?
                }
                "--security" => {
                    security =
                        serde_json::from_str(&value()?).map_err(|e| format!("--security: {e}"))?
                }
                "--template-ns" => mount_template = Some(PathBuf::from(value()?)),
                "--trace" => trace = Some(PathBuf::from(value()?)),
                "--netns" => netns = Some(PathBuf::from(value()?)),
                "--await-network" => await_network = true,
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(ShimArgs {
            id: id.ok_or("--id is required")?,
            sandbox_dir: sandbox_dir.ok_or("--sandbox-dir is required")?,
            pause: pause.ok_or("--pause is required")?,
            hostname,
            domainname,
            share_pid,
            host_network,
            host_pid,
            host_ipc,
            placement,
            sysctls,
            security,
            mount_template,
            trace,
            netns,
            await_network,
        })
    }
}

/// The arguments of a shim started as `podlab-shim --args-on-stdin --id ID --sandbox-dir DIR`
/// ([`crate::starting_shim`]), read from its stdin: their length (4 bytes, little-endian), then
/// a JSON array of them; and the listening `shim.sock` of that folder. None when the pipe ends
/// first: the caller gave the sandbox up. The arguments must name the sandbox of the command
/// line, which `ps` and `podlab gc` read.
///
/// The socket is bound before the arguments are read, so that a request sent while the shim
/// starts (`run --rm`'s Start) finds it and waits in its backlog, whenever the shim gets there
/// (`early`); it is removed again when no sandbox comes.
pub fn args_from_stdin(
    named: impl IntoIterator<Item = OsString>,
) -> Result<Option<(ShimArgs, OwnedFd)>, String> {
    let named: Vec<OsString> = named.into_iter().collect();
    let (id, dir) = match named.as_slice() {
        [id_flag, id, dir_flag, dir] if id_flag == "--id" && dir_flag == "--sandbox-dir" => {
            (id.clone(), PathBuf::from(dir))
        }
        _ => {
            return Err(format!(
                "{} takes --id ID --sandbox-dir DIR, got {named:?}",
                crate::starting_shim::ARGS_ON_STDIN
            ))
        }
    };
    let socket = SandboxPaths::new(dir.clone()).socket();
    let listener = protocol::listen(&socket).map_err(|e| e.to_string())?;
    match read_args(&id, &dir) {
        Ok(Some(args)) => Ok(Some((args, listener))),
        other => {
            let _ = std::fs::remove_file(&socket);
            other.map(|_| None)
        }
    }
}

fn read_args(id: &OsString, dir: &std::path::Path) -> Result<Option<ShimArgs>, String> {
    // SAFETY: descriptor 0 is open; ManuallyDrop leaves it so (the gate may still be read).
    let mut stdin = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    let mut length = [0u8; 4];
    let first = stdin
        .read(&mut length)
        .map_err(|e| format!("reading the arguments: {e}"))?;
    if first == 0 {
        return Ok(None);
    }
    stdin
        .read_exact(&mut length[first..])
        .map_err(|e| format!("reading the arguments' length: {e}"))?;
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_ARGS_ON_STDIN {
        return Err(format!(
            "{length} bytes of arguments (at most {MAX_ARGS_ON_STDIN})"
        ));
    }
    let mut json = vec![0u8; length];
    stdin
        .read_exact(&mut json)
        .map_err(|e| format!("reading {length} bytes of arguments: {e}"))?;
    let words: Vec<String> =
        serde_json::from_slice(&json).map_err(|e| format!("the arguments on stdin: {e}"))?;
    let args = ShimArgs::parse(words.into_iter().map(OsString::from))?;
    if args.id.as_str() != id || args.sandbox_dir != dir {
        return Err(format!(
            "the arguments on stdin are for sandbox {} in {}; the command line names {} in {}",
            args.id,
            args.sandbox_dir.display(),
            id.to_string_lossy(),
            dir.display()
        ));
    }
    if args.placement.is_none() && !args.await_network {
        // No gate follows: pause and the containers get /dev/null, as a shim spawned without
        // a gate does.
        if let Ok(null) = std::fs::File::open("/dev/null") {
            // SAFETY: dup2 onto stdin, which nothing else reads.
            unsafe { libc::dup2(null.as_raw_fd(), 0) };
        }
    }
    Ok(Some(args))
}

/// More than a sandbox's arguments ever take (a few hundred bytes, a few kB with sysctls).
const MAX_ARGS_ON_STDIN: usize = 1 << 20;

/// The whole life of a shim. Returns only in the process that started it (at once, after the
/// detaching fork); the daemon exits from within.
pub fn run(args: ShimArgs, listener: OwnedFd) -> anyhow::Result<()> {
    memory::without_thread_cache();
    // SAFETY: the shim is single-threaded here; the parent only exits.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { .. } => return Ok(()),
        nix::unistd::ForkResult::Child => {}
    }
    let _ = nix::unistd::setsid();
    if let Some(trace) = &args.trace {
        crate::trace::set_process_trace(trace.clone());
    }
    memory::tune_allocator();
    // A daemon keeps no folder of its caller busy (it could not be unmounted while we live).
    let _ = nix::unistd::chdir("/");
    let code = match Shim::start(args, listener) {
        Ok(mut shim) => {
            shim.serve();
            0
        }
        Err(message) => {
            eprintln!("podlab-shim: {message}");
            announce(&ShimReady::Failed { message });
            1
        }
    };
    std::process::exit(code)
}

/// The pipe on the shim's stdin over which the caller says it has made the pod's and the
/// pause's cgroups (one byte; the end of the pipe without it: they could not be made), which
/// it does while the shim starts and the pause makes the pod's namespaces; then, with
/// `--await-network`, that it has attached the pod's network (one more byte). Taken off stdin
/// (which becomes /dev/null) for the pause child and the shim to read ([`sandbox::start`]).
fn take_gate_pipe() -> Result<OwnedFd, String> {
    // SAFETY: duplicates descriptor 0 to a new close-on-exec one, owned below.
    let fd = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        return Err(format!("the gate pipe on stdin: {}", nix::Error::last()));
    }
    if let Ok(null) = std::fs::File::open("/dev/null") {
        // SAFETY: dup2 onto stdin, which nothing else reads.
        unsafe { libc::dup2(null.as_raw_fd(), 0) };
    }
    // SAFETY: fcntl returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Writes the one line for the starter on stdout and points stdout at /dev/null, so that the
/// starter's read ends with it.
fn announce(ready: &ShimReady) {
    let mut line = serde_json::to_vec(ready).unwrap_or_default();
    line.push(b'\n');
    // Straight to the descriptor: std's stdout would keep a buffer for the shim's whole life.
    // SAFETY: descriptor 1 is open; ManuallyDrop leaves it so (it is replaced just below).
    let mut stdout = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
    let _ = stdout.write_all(&line);
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto stdout.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
}

/// How long the shim waits without an event before it gives its free memory back.
const IDLE_BEFORE_RELEASE_MS: u16 = 500;

/// A connected client.
struct Client {
    fd: OwnedFd,
}

/// What a poll slot is for.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Signals,
    Listener,
    Client(u64),
    Log(usize),
    AttachInput(u64),
}

pub(crate) struct Shim {
    paths: SandboxPaths,
    listener: OwnedFd,
    signals: SignalFd,
    clients: BTreeMap<u64, Client>,
    next_client: u64,
    /// Clients waiting for a container's exit.
    waiters: Vec<(u64, ContainerId)>,
    /// Exec'd processes and the client that waits for each.
    execs: HashMap<i32, u64>,
    containers: HashMap<ContainerId, Live>,
    logs: Vec<LogPipe>,
    /// Clients attached to containers ([`attach`]).
    attaches: BTreeMap<u64, attach::Attach>,
    next_attach: u64,
    pause: ProcessIdentity,
    pause_alive: bool,
    namespaces: PodNamespaces,
    /// The pod's cgroup (pause's parent), in which a container gets its own at its start
    /// (None when cgroups are off).
    pod_cgroup: Option<podlab_cgroups::Cgroup>,
    record: ShimRecord,
    /// The main stack, whose pages below the idle loop go back after each burst of work.
    stack: Option<memory::StackTop>,
    /// A client's first request read while pause started and not taken up then
    /// ([`early`]): handled first.
    first_request: Option<(u64, Request, Vec<OwnedFd>)>,
}

impl Shim {
    fn start(args: ShimArgs, listener: OwnedFd) -> Result<Shim, String> {
        podlab_ns::pid::set_child_subreaper().map_err(|e| e.to_string())?;
        let mut mask = SigSet::empty();
        for signal in [
            Signal::SIGCHLD,
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
        ] {
            mask.add(signal);
        }
        nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)
            .map_err(|e| format!("sigprocmask: {e}"))?;
        let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .map_err(|e| format!("signalfd: {e}"))?;
        let paths = SandboxPaths::new(args.sandbox_dir.clone());
        let me = ProcessIdentity::of(std::process::id() as i32).map_err(|e| e.to_string())?;
        std::fs::write(paths.shim_pid(), format!("{}\n", me.pid))
            .map_err(|e| format!("writing {}: {e}", paths.shim_pid().display()))?;
        let gate = (args.placement.is_some() || args.await_network)
            .then(take_gate_pipe)
            .transpose()?;
        let pod_cgroup = args
            .placement
            .as_ref()
            .and_then(|p| p.cgroup.as_ref())
            .and_then(|pause| pause.parent());
        let mut early = early::Early::new(&args, &paths, listener.as_fd(), pod_cgroup.as_ref());
        let started = sandbox::start(&args, &paths, me, gate, &mut early);
        let (pause, namespaces, record) = match started {
            Ok(started) => started,
            Err(message) => {
                early.abandon();
                let _ = std::fs::remove_file(paths.socket());
                let _ = std::fs::remove_file(paths.shim_pid());
                return Err(message);
            }
        };
        crate::trace::process_mark("shim", "namespaces (shim, pause, pins, lo)");
        // The sandbox is up: a container forked while pause started goes on to its program.
        if let Some(forked) = &mut early.forked {
            forked.open_gate();
        }
        announce(&ShimReady::Ready(record.clone()));
        let (client, pending, forked) = (early.client, early.pending, early.forked);
        let mut shim = Shim {
            paths,
            listener,
            signals,
            clients: BTreeMap::new(),
            next_client: 0,
            waiters: Vec::new(),
            execs: HashMap::new(),
            containers: HashMap::new(),
            logs: Vec::new(),
            attaches: BTreeMap::new(),
            next_attach: 0,
            pause,
            pause_alive: true,
            namespaces,
            pod_cgroup,
            record,
            stack: memory::StackTop::find(),
            first_request: None,
        };
        if let Some(fd) = client {
            shim.next_client += 1;
            let token = shim.next_client;
            shim.clients.insert(token, Client { fd });
            if let Some(forked) = forked {
                let response = shim
                    .complete_start(forked)
                    .unwrap_or_else(|message| Response::Error { message });
                shim.reply(token, &response);
            }
            shim.first_request = pending.map(|(request, fds)| (token, request, fds));
        }
        Ok(shim)
    }

    fn serve(&mut self) {
        if let Some((token, request, fds)) = self.first_request.take() {
            if self.handle(token, request, fds) == Flow::Exit {
                return;
            }
        }
        // Memory goes back once the shim has been idle for a while, off every request's way.
        let mut worked = true;
        loop {
            let (mut fds, slots) = self.poll_set();
            let wait = if worked {
                PollTimeout::from(IDLE_BEFORE_RELEASE_MS)
            } else {
                PollTimeout::NONE
            };
            match nix::poll::poll(&mut fds, wait) {
                Ok(0) => {
                    drop(fds);
                    self.release_memory();
                    worked = false;
                    continue;
                }
                Ok(_) => worked = true,
                Err(nix::Error::EINTR) => continue,
                Err(e) => {
                    eprintln!("podlab-shim: poll: {e}");
                    continue;
                }
            }
            let ready: Vec<(Slot, PollFlags)> = fds
                .iter()
                .zip(slots)
                .filter_map(|(fd, slot)| {
                    let revents = fd.revents().unwrap_or(PollFlags::empty());
                    (!revents.is_empty()).then_some((slot, revents))
                })
                .collect();
            drop(fds);
            // Output first, so that an exit seen in the same round finds its last lines logged.
            for (slot, _) in &ready {
                if let Slot::Log(index) = slot {
                    self.read_log(*index);
                }
            }
            for (slot, revents) in ready {
                match slot {
                    Slot::Signals => self.on_signals(),
                    Slot::Listener => self.accept(),
                    Slot::Client(token) => {
                        if self.on_client(token, revents) == Flow::Exit {
                            return;
                        }
                    }
                    Slot::Log(_) => {}
                    Slot::AttachInput(id) => self.read_attach_input(id),
                }
            }
            self.close_finished_logs();
        }
    }

    /// Hands the heap's free pages and the stack's unused ones back, once a burst is over.
    /// The filters compiled ahead for the first container go too, once one has started: the
    /// pod's other containers came in the same burst, and a restart compiles its own.
    fn release_memory(&self) {
        if !self.containers.is_empty() {
            crate::seccomp::forget_precompiled();
        }
        memory::release_free_pages();
        if let Some(stack) = &self.stack {
            stack.release_below();
        }
    }

    fn poll_set(&self) -> (Vec<PollFd<'_>>, Vec<Slot>) {
        let mut fds = vec![
            PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.listener.as_fd(), PollFlags::POLLIN),
        ];
        let mut slots = vec![Slot::Signals, Slot::Listener];
        for (token, client) in &self.clients {
            fds.push(PollFd::new(client.fd.as_fd(), PollFlags::POLLIN));
            slots.push(Slot::Client(*token));
        }
        for (index, pipe) in self.log_pipes() {
            fds.push(PollFd::new(pipe, PollFlags::POLLIN));
            slots.push(Slot::Log(index));
        }
        for (id, input) in self.attach_inputs() {
            fds.push(PollFd::new(input, PollFlags::POLLIN));
            slots.push(Slot::AttachInput(id));
        }
        (fds, slots)
    }

    fn accept(&mut self) {
        match nix::sys::socket::accept4(
            self.listener.as_raw_fd(),
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        ) {
            Ok(fd) => {
                // SAFETY: accept4 returned a new descriptor.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                self.next_client += 1;
                self.clients.insert(self.next_client, Client { fd });
            }
            Err(e) => eprintln!("podlab-shim: accept: {e}"),
        }
    }

    fn on_client(&mut self, token: u64, revents: PollFlags) -> Flow {
        let Some(client) = self.clients.get(&token) else {
            return Flow::Continue;
        };
        let received = if revents.contains(PollFlags::POLLIN) {
            protocol::receive_message::<Request>(client.fd.as_fd())
        } else {
            Ok(None)
        };
        match received {
            Ok(Some((request, fds))) => self.handle(token, request, fds),
            Ok(None) | Err(_) => {
                self.drop_client(token);
                Flow::Continue
            }
        }
    }

    /// Forgets a client that hung up. A process it exec'd and still waits for has nobody to
    /// report to any more (a `podlab exec` interrupted, a prober killed): it is killed rather
    /// than left running in the container.
    fn drop_client(&mut self, token: u64) {
        self.clients.remove(&token);
        self.waiters.retain(|(t, _)| *t != token);
        self.detach_client(token);
        for (pid, _) in self.execs.iter().filter(|(_, t)| **t == token) {
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
    }

    pub(crate) fn reply(&mut self, token: u64, response: &Response) {
        let sent = match self.clients.get(&token) {
            Some(client) => protocol::send_message(client.fd.as_fd(), response, &[]),
            None => return,
        };
        if sent.is_err() {
            self.drop_client(token);
        }
    }

    fn handle(&mut self, token: u64, request: Request, fds: Vec<OwnedFd>) -> Flow {
        let response = match request {
            Request::Ping => Some(Response::Pong {
                pause_alive: self.pause_alive,
            }),
            Request::Start { container, waited } => {
                Some(self.start_container(&container, fds.into_iter().next(), waited))
            }
            Request::Signal { container, signal } => {
                Some(self.signal_container(&container, signal))
            }
            Request::Wait { container } => self.wait_container(token, container),
            Request::ReopenLog { container } => Some(self.reopen_log(&container)),
            Request::Forget { container } => Some(self.forget(&container)),
            Request::Exec {
                container,
                argv,
                terminal,
            } => Some(self.exec(token, &container, argv, terminal, fds)),
            Request::SignalExec { pid, signal } => Some(self.signal_exec(pid, signal)),
            Request::Attach { container, stdin } => {
                Some(self.attach(token, &container, stdin, fds))
            }
            Request::Resize { container, size } => Some(self.resize(&container, size)),
            Request::StopContainers => {
                self.stop_containers();
                Some(Response::Ok)
            }
            Request::Shutdown => {
                self.shutdown();
                self.reply(token, &Response::Ok);
                return Flow::Exit;
            }
        };
        if let Some(response) = response {
            self.reply(token, &response);
        }
        Flow::Continue
    }

    fn on_signals(&mut self) {
        while let Ok(Some(info)) = self.signals.read_signal() {
            if info.ssi_signo != Signal::SIGCHLD as u32 {
                eprintln!(
                    "podlab-shim: ignoring signal {} (the shim ends only by a Shutdown request)",
                    info.ssi_signo
                );
            }
        }
        self.reap();
    }

    /// Reaps every child that has exited: the pause process, containers, exec'd processes, and
    /// orphans re-parented to this subreaper.
    fn reap(&mut self) {
        loop {
            match nix::sys::wait::waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(status) => {
                    if let Some(pid) = status.pid() {
                        self.on_exit(pid.as_raw(), exit_code(status));
                    }
                }
            }
        }
    }

    /// Reaps children, whichever ends first, until every one of `pids` has been reaped. Waiting
    /// for one pid alone could deadlock: a dying PID 1 of a pid namespace waits in the kernel
    /// until every other process of its namespace is reaped, and those are children of the shim.
    pub(crate) fn reap_until_gone(&mut self, pids: &[i32]) {
        let mut left: Vec<i32> = pids.to_vec();
        while !left.is_empty() {
            match nix::sys::wait::waitpid(Pid::from_raw(-1), None) {
                Ok(status) => {
                    if let Some(pid) = status.pid() {
                        left.retain(|p| *p != pid.as_raw());
                        self.on_exit(pid.as_raw(), exit_code(status));
                    }
                }
                Err(nix::Error::EINTR) => continue,
                Err(_) => return,
            }
        }
    }

    pub(crate) fn on_exit(&mut self, pid: i32, code: i32) {
        if pid == self.pause.pid {
            self.pause_alive = false;
            eprintln!("podlab-shim: the pause process {pid} exited ({code})");
            self.notify_agent();
        } else if let Some(token) = self.execs.remove(&pid) {
            self.reply(token, &Response::ExecExited { exit_code: code });
        } else {
            self.container_exited(pid, code);
        }
    }

    /// Tells the node agent, if one listens, that this sandbox changed on its own (see
    /// [`crate::events`]): `<root>/sandboxes/<id>` is the sandbox's folder.
    pub(crate) fn notify_agent(&self) {
        let dir = &self.paths.dir;
        let id = dir.file_name().and_then(|n| n.to_str());
        let root = dir.parent().and_then(std::path::Path::parent);
        if let (Some(Ok(id)), Some(root)) = (id.map(SandboxId::parse), root) {
            crate::events::notify(root, &id);
        }
    }

    /// Kills the pause process and every remaining child, unpins, and removes the shim's files.
    fn shutdown(&mut self) {
        self.stop_containers();
        for pid in self.execs.keys() {
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        if self.pause_alive {
            let _ = nix::sys::signal::kill(Pid::from_raw(self.pause.pid), Signal::SIGKILL);
        }
        let mut children: Vec<i32> = self.execs.keys().copied().collect();
        if self.pause_alive {
            children.push(self.pause.pid);
        }
        self.reap_until_gone(&children);
        self.reap();
        podlab_fault::point_reached("shim.shutdown.after-kill");
        crate::trace::process_mark("shim", "pause killed");
        sandbox::unpin_all(&self.record.namespaces);
        crate::trace::process_mark("shim", "netns teardown (unpin)");
        let _ = std::fs::remove_file(self.paths.socket());
        let _ = std::fs::remove_file(self.paths.shim_record());
        let _ = std::fs::remove_file(self.paths.shim_pid());
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Exit,
}

/// A wait status as the CRI reports it: the exit code, or 128 + the signal.
pub(crate) fn exit_code(status: WaitStatus) -> i32 {
    match status {
        WaitStatus::Exited(_, code) => code,
        WaitStatus::Signaled(_, signal, _) => 128 + signal as i32,
        _ => 255,
    }
}

/// Writes a record, saying so on the shim's log when it fails (there is nobody else to tell).
pub(crate) fn save<T: serde::Serialize>(path: &std::path::Path, record: &T) {
    if let Err(e) = state::write_record(path, record) {
        eprintln!("podlab-shim: {e}");
    }
}

pub(crate) fn raw(fd: &impl AsRawFd) -> RawFd {
    fd.as_raw_fd()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip() {
        let args = ShimArgs {
            sandbox_dir: "/run/podlab/sandboxes/x".into(),
            id: SandboxId::generate(),
            pause: "/usr/bin/podlab-pause".into(),
            hostname: "web".into(),
            domainname: String::new(),
            share_pid: true,
            host_network: false,
            host_pid: false,
            host_ipc: true,
            placement: Some(crate::cgroups::Placement {
                cgroup: None,
                oom_score_adj: Some(-998),
            }),
            sysctls: [("net.ipv4.tcp_syncookies".into(), "0".into())].into(),
            security: crate::config::SandboxSecurity {
                seccomp: crate::seccomp::SeccompProfile::RuntimeDefault,
                run_as_user: Some(1000),
                ..Default::default()
            },
            mount_template: Some("/proc/1/fd/7".into()),
            trace: Some("/run/podlab/traces/default_web".into()),
            netns: Some("/proc/1/fd/9".into()),
            await_network: true,
        };
        assert_eq!(ShimArgs::parse(args.to_args()).unwrap(), args);
        assert!(ShimArgs::parse(vec![OsString::from("--bogus")]).is_err());
    }
}
