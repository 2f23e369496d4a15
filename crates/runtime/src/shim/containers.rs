//! Containers in the shim: start one, carry its output into its CRI log, record its exit,
//! and exec into it.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use podlab_ns::{ops, NsKind};

use super::sandbox::{fork_in, PidNamespace, PodNamespaces};
use super::{raw, save, Shim};
use crate::cri_log::{LineSplitter, Stream};
use crate::error::InitFailure;
use crate::id::ContainerId;
use crate::init::{self, Console, ContainerPlan, Stdio};
use crate::liveness::{now_ns, ProcessIdentity};
use crate::protocol::Response;
use crate::state::{self, ContainerRecord, PidMode, SandboxPaths};
use crate::status::ContainerState;
use crate::tty::WindowSize;

/// Opens the mount namespace of the container process `pid`, which has just made its `execve`.
///
/// When the last process of a mount namespace exits, the kernel unmounts all of it (rootfs,
/// /proc, /sys, /dev, the masked and read-only paths) in that process's exit, before its
/// parent is told, and waits out an RCU grace period on the way: 0.5–3 ms here between the
/// container's `exit` and the shim's SIGCHLD. Held by the shim, the namespace outlives the
/// process, and the unmounting happens when the shim lets go, after the waiters have the exit
/// status ([`Shim::container_exited`]). `None` when the process has exited already (nothing
/// then to hold: the kernel did it in the exit).
fn hold_mounts(pid: Pid) -> Option<OwnedFd> {
    let path = format!("/proc/{pid}/ns/mnt");
    nix::fcntl::open(
        path.as_str(),
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()
}

/// containerd's exit code and reason for a container whose start failed.
pub(crate) const START_ERROR_EXIT_CODE: i32 = 128;
pub(crate) const START_ERROR_REASON: &str = "StartError";

/// How much of a pipe is read at a time. The buffer is on the stack, and every stack page the
/// shim touches once stays with it for the pod's life: a pipe fuller than this is read in
/// more rounds of the loop instead.
const LOG_READ_SIZE: usize = 8 * 1024;

/// A container the shim has started: what the shim answers from while it lives. The rest of
/// the container (its config, process, image) is in its record on disk, read when needed; a
/// shim lives as long as its pod, and so would every copy it kept.
pub(crate) struct Live {
    /// The container's process, a child of the shim.
    pid: i32,
    state: ContainerState,
    exit_code: Option<i32>,
    finished_at: i64,
    log_path: PathBuf,
    log: Option<File>,
    /// The master of its console (`tty`), for input and resizes; its output is a log pipe.
    console: Option<OwnedFd>,
    /// The writing end of its stdin (`stdin` without `tty`), for attached clients.
    stdin: Option<OwnedFd>,
    /// `stdinOnce`: the first attached client's end of input closes stdin.
    stdin_once: bool,
    /// Its mount namespace, held while it runs: see [`hold_mounts`].
    mounts: Option<OwnedFd>,
}

impl Live {
    /// Whether the container has an input an attached client may write to.
    pub(super) fn takes_input(&self) -> bool {
        self.console.is_some() || self.stdin.is_some()
    }

    /// Where attached clients' input goes.
    pub(super) fn input(&self) -> Option<BorrowedFd<'_>> {
        self.console
            .as_ref()
            .or(self.stdin.as_ref())
            .map(|fd| fd.as_fd())
    }

    pub(super) fn console(&self) -> Option<BorrowedFd<'_>> {
        self.console.as_ref().map(|fd| fd.as_fd())
    }

    /// An attached client's input ended: with `stdinOnce`, the container's stdin ends too
    /// (kubelet's rule; a console stays, as containerd keeps it).
    pub(super) fn input_ended(&mut self) {
        if self.stdin_once {
            self.stdin = None;
        }
    }
}

/// One output pipe of a container, on its way into the container's log.
pub(crate) struct LogPipe {
    container: ContainerId,
    fd: OwnedFd,
    stream: Stream,
    splitter: LineSplitter,
    done: bool,
}

impl Shim {
    pub(super) fn log_pipes(&self) -> impl Iterator<Item = (usize, BorrowedFd<'_>)> {
        self.logs
            .iter()
            .enumerate()
            .filter(|(_, pipe)| !pipe.done)
            .map(|(index, pipe)| (index, pipe.fd.as_fd()))
    }

    /// Reads what is in one pipe (once) and logs it; end of file finishes the stream.
    pub(super) fn read_log(&mut self, index: usize) {
        let mut buffer = [0u8; LOG_READ_SIZE];
        let Some(pipe) = self.logs.get_mut(index) else {
            return;
        };
        let records = match nix::unistd::read(&pipe.fd, &mut buffer) {
            Ok(0) | Err(nix::Error::EIO) => {
                pipe.done = true;
                pipe.splitter.finish(now_ns())
            }
            Ok(n) => {
                let (container, stream) = (pipe.container.clone(), pipe.stream);
                let records = pipe.splitter.push(&buffer[..n], now_ns());
                self.fan_out(&container, stream, &buffer[..n]);
                self.write_log(&container, &records);
                return;
            }
            Err(nix::Error::EAGAIN | nix::Error::EINTR) => return,
            Err(e) => {
                eprintln!("podlab-shim: reading a log pipe: {e}");
                pipe.done = true;
                pipe.splitter.finish(now_ns())
            }
        };
        let container = pipe.container.clone();
        self.write_log(&container, &records);
    }

    fn write_log(&mut self, container: &ContainerId, records: &[u8]) {
        if records.is_empty() {
            return;
        }
        if let Some(file) = self
            .containers
            .get_mut(container)
            .and_then(|l| l.log.as_mut())
        {
            if let Err(e) = file.write_all(records) {
                eprintln!("podlab-shim: writing the log of {container}: {e}");
            }
        }
    }

    /// Everything the pipes of `container` hold right now, logged: called when its process
    /// has exited, so that the record of the exit never comes before its last lines.
    fn drain_logs(&mut self, container: &ContainerId) {
        let indexes: Vec<usize> = self
            .logs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.container == *container && !p.done)
            .map(|(i, _)| i)
            .collect();
        for index in indexes {
            while !self.logs[index].done && readable_now(self.logs[index].fd.as_fd()) {
                self.read_log(index);
            }
        }
    }

    pub(super) fn close_finished_logs(&mut self) {
        self.logs.retain(|pipe| !pipe.done);
    }

    pub(super) fn start_container(
        &mut self,
        id: &ContainerId,
        mount_template: Option<OwnedFd>,
        waited: bool,
    ) -> Response {
        match self.try_start(id, mount_template, waited) {
            Ok(response) => response,
            Err(message) => Response::Error { message },
        }
    }

    fn try_start(
        &mut self,
        id: &ContainerId,
        mount_template: Option<OwnedFd>,
        waited: bool,
    ) -> Result<Response, String> {
        if self
            .containers
            .get(id)
            .is_some_and(|l| l.state == ContainerState::Running)
        {
            return Err(format!("container {id} is already running"));
        }
        let context = StartContext {
            paths: &self.paths,
            namespaces: &self.namespaces,
            pod_cgroup: self.pod_cgroup.as_ref(),
            pause_alive: self.pause_alive,
            running: &self.containers,
        };
        let template = mount_template.as_ref().map(|fd| fd.as_fd());
        let forked = fork_container(&context, id, template, waited, None)?;
        drop(mount_template);
        self.complete_start(forked)
    }

    /// Hears how the start of a forked container went (its gate opened first, if it has one)
    /// and, once it has `execve`d, records it Running and logs its output.
    pub(super) fn complete_start(&mut self, mut forked: Forked) -> Result<Response, String> {
        forked.open_gate();
        let (id, pid, mut record) = (forked.id, forked.pid, forked.record);
        let (log, out_r, err_r, stdin) = (forked.log, forked.out_r, forked.err_r, forked.stdin);
        let (console_receiver, unsaved_cgroup) = (forked.console_receiver, forked.unsaved_cgroup);
        let (report_r, forked_at) = (forked.report_r, forked.forked_at);
        let paths = self.paths.container(&id);
        let report = crate::report::read_report(report_r);
        record.start_trace = report.steps(forked_at);
        if let Some(failure) = report.failure {
            let _ = podlab_ns::child::wait_for(pid);
            self.record_start_failure(&mut record, &failure);
            unsaved_cgroup.saved();
            return Ok(Response::StartFailed(failure));
        }
        // The process sent its console's master before its execve.
        let console = match &console_receiver {
            Some(receiver) => match crate::tty::receive_fd(receiver.as_fd()) {
                Ok(Some(master)) => Some(master),
                _ => {
                    let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
                    let _ = podlab_ns::child::wait_for(pid);
                    return Err(format!(
                        "container {id}: no console came back from its process"
                    ));
                }
            },
            None => None,
        };
        podlab_fault::point_reached("shim.container.after-fork");
        let mounts = hold_mounts(pid);
        record.state = ContainerState::Running;
        record.started_at = now_ns();
        record.pid = ProcessIdentity::of(pid.as_raw()).ok();
        // A process that exited at once has no namespaces left to read; that is fine.
        record.namespaces = ops::inspect(pid.as_raw()).unwrap_or_default();
        // Its report pipe closed at its execve, and it is not reaped before this: the kernel
        // still holds its credentials, even if it has exited already.
        record.user = crate::process::LinuxUser::of_process(pid.as_raw())
            .ok()
            .map(|user| match &self.namespaces.user {
                Some((_, map)) => map.inside(user),
                None => user,
            });
        save(&paths.record(), &record);
        unsaved_cgroup.saved();
        let started_at = record.started_at;
        let live = Live {
            pid: pid.as_raw(),
            state: ContainerState::Running,
            exit_code: None,
            finished_at: 0,
            log_path: record.log_path,
            log: Some(log),
            console: None,
            stdin,
            stdin_once: record.config.stdin_once,
            mounts,
        };
        // With a console, all output comes from its master, logged as stdout (containerd's).
        let mut live = live;
        let outputs = match console {
            Some(master) => {
                live.console = Some(master.try_clone().map_err(|e| format!("dup: {e}"))?);
                vec![(master, Stream::Stdout)]
            }
            None => vec![(out_r, Stream::Stdout), (err_r, Stream::Stderr)],
        };
        for (fd, stream) in outputs {
            let _ = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
            self.logs.push(LogPipe {
                container: id.clone(),
                fd,
                stream,
                splitter: LineSplitter::new(stream),
                done: false,
            });
        }
        self.containers.insert(id.clone(), live);
        Ok(Response::Started {
            pid: pid.as_raw(),
            started_at,
        })
    }

    /// As containerd: a container that could not start is exited with code 128, reason
    /// StartError and the error as its message, in runc's words (containerd wraps those in
    /// its own task-creation prefixes, which name nothing podlab has).
    fn record_start_failure(&mut self, record: &mut ContainerRecord, failure: &InitFailure) {
        record.state = ContainerState::Exited;
        record.exit_code = Some(START_ERROR_EXIT_CODE);
        record.reason = Some(START_ERROR_REASON.into());
        record.message = Some(format!("unable to start container process: {failure}"));
        record.finished_at = now_ns();
        save(&self.paths.container(&record.id).record(), record);
    }

    /// A reaped pid that may be one of our containers: log its last output, record its exit,
    /// answer those who wait for it.
    pub(super) fn container_exited(&mut self, pid: i32, code: i32) {
        let Some(id) = self
            .containers
            .iter()
            .find(|(_, l)| l.state == ContainerState::Running && l.pid == pid)
            .map(|(id, _)| id.clone())
        else {
            return;
        };
        crate::trace::process_mark("shim", "exec, run, exit");
        self.drain_logs(&id);
        let finished_at = now_ns();
        if let Some(live) = self.containers.get_mut(&id) {
            live.console = None;
            live.stdin = None;
            live.state = ContainerState::Exited;
            live.exit_code = Some(code);
            live.finished_at = finished_at;
        }
        self.record_exit(&id, code, finished_at);
        // Attached clients see their streams end only now, so that the status they read
        // next already holds the exit.
        self.end_attaches(&id);
        self.notify_agent();
        let waiting: Vec<u64> = self
            .waiters
            .iter()
            .filter(|(_, c)| *c == id)
            .map(|(t, _)| *t)
            .collect();
        self.waiters.retain(|(_, c)| *c != id);
        for token in waiting {
            self.reply(
                token,
                &Response::Exited {
                    exit_code: code,
                    finished_at,
                },
            );
        }
        // The container's mounts go only now, after the waiters have their answer.
        if let Some(live) = self.containers.get_mut(&id) {
            live.mounts = None;
        }
    }

    /// The exit in the container's record (Completed or Error, as containerd has it).
    fn record_exit(&self, id: &ContainerId, code: i32, finished_at: i64) {
        let path = self.paths.container(id).record();
        let mut record: ContainerRecord = match state::read_record(&path) {
            Ok(Some(record)) => record,
            Ok(None) => return eprintln!("podlab-shim: container {id} exited; it has no record"),
            Err(e) => return eprintln!("podlab-shim: recording the exit of {id}: {e}"),
        };
        record.state = ContainerState::Exited;
        record.exit_code = Some(code);
        record.finished_at = finished_at;
        // containerd's rule: an OOM event for the container's cgroup makes it OOMKilled,
        // whatever the exit code.
        let oom = record
            .cgroup
            .as_ref()
            .is_some_and(crate::cgroups::oom_killed);
        record.reason = Some(
            match (oom, code) {
                (true, _) => "OOMKilled",
                (false, 0) => "Completed",
                (false, _) => "Error",
            }
            .into(),
        );
        save(&path, &record);
    }

    pub(super) fn signal_container(&mut self, id: &ContainerId, signal: i32) -> Response {
        let Some(pid) = self.running_pid(id) else {
            return Response::Error {
                message: format!("container {id} is not running"),
            };
        };
        let signal = match Signal::try_from(signal) {
            Ok(s) => s,
            Err(e) => {
                return Response::Error {
                    message: e.to_string(),
                }
            }
        };
        // Safe from pid reuse: the pid is our unreaped child, and only this loop reaps.
        match nix::sys::signal::kill(Pid::from_raw(pid), signal) {
            Ok(()) | Err(nix::Error::ESRCH) => Response::Ok,
            Err(e) => Response::Error {
                message: format!("kill {pid}: {e}"),
            },
        }
    }

    /// A running container's live state.
    pub(super) fn live(&self, id: &ContainerId) -> Option<&Live> {
        self.containers
            .get(id)
            .filter(|l| l.state == ContainerState::Running)
    }

    pub(super) fn live_mut(&mut self, id: &ContainerId) -> Option<&mut Live> {
        self.containers
            .get_mut(id)
            .filter(|l| l.state == ContainerState::Running)
    }

    fn running_pid(&self, id: &ContainerId) -> Option<i32> {
        self.containers
            .get(id)
            .filter(|l| l.state == ContainerState::Running)
            .map(|l| l.pid)
    }

    pub(super) fn wait_container(&mut self, token: u64, id: ContainerId) -> Option<Response> {
        match self.containers.get(&id) {
            Some(live) if live.state == ContainerState::Running => {
                self.waiters.push((token, id));
                None
            }
            Some(live) => Some(Response::Exited {
                exit_code: live.exit_code.unwrap_or(-1),
                finished_at: live.finished_at,
            }),
            None => {
                match state::read_record::<ContainerRecord>(&self.paths.container(&id).record()) {
                    Ok(Some(record)) if record.state == ContainerState::Exited => {
                        Some(Response::Exited {
                            exit_code: record.exit_code.unwrap_or(-1),
                            finished_at: record.finished_at,
                        })
                    }
                    Ok(Some(record)) => Some(Response::Error {
                        message: format!(
                            "container {id} is {}: it has not been started",
                            record.state
                        ),
                    }),
                    _ => Some(Response::Error {
                        message: format!("container {id} not found in this sandbox"),
                    }),
                }
            }
        }
    }

    pub(super) fn reopen_log(&mut self, id: &ContainerId) -> Response {
        let Some(live) = self.containers.get_mut(id) else {
            return Response::Error {
                message: format!("container {id} is not known to the shim"),
            };
        };
        match open_log(&live.log_path) {
            Ok(file) => {
                live.log = Some(file);
                Response::Ok
            }
            Err(message) => Response::Error { message },
        }
    }

    pub(super) fn forget(&mut self, id: &ContainerId) -> Response {
        if self.running_pid(id).is_some() {
            return Response::Error {
                message: format!("container {id} is still running"),
            };
        }
        self.containers.remove(id);
        self.end_attaches(id);
        self.logs.retain(|p| p.container != *id);
        self.waiters.retain(|(_, c)| c != id);
        Response::Ok
    }

    /// SIGKILL for every running container, then wait for each and record its exit.
    pub(super) fn stop_containers(&mut self) {
        let running: Vec<i32> = self
            .containers
            .keys()
            .filter_map(|id| self.running_pid(id))
            .collect();
        for pid in &running {
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        self.reap_until_gone(&running);
    }

    /// Starts `argv` in a running container's namespaces with the caller's three descriptors.
    pub(super) fn exec(
        &mut self,
        token: u64,
        id: &ContainerId,
        argv: Vec<String>,
        terminal: Option<WindowSize>,
        fds: Vec<OwnedFd>,
    ) -> Response {
        match self.try_exec(id, argv, terminal, fds) {
            Ok(Ok(pid)) => {
                self.execs.insert(pid, token);
                Response::ExecStarted { pid }
            }
            Ok(Err(failure)) => Response::StartFailed(failure),
            Err(message) => Response::Error { message },
        }
    }

    fn try_exec(
        &mut self,
        id: &ContainerId,
        argv: Vec<String>,
        terminal: Option<WindowSize>,
        fds: Vec<OwnedFd>,
    ) -> Result<Result<i32, InitFailure>, String> {
        let stdio_fds = match terminal {
            Some(size) => {
                let [socket]: [OwnedFd; 1] = fds.try_into().map_err(|_| {
                    "an Exec request with a terminal carries one descriptor (its console socket)"
                        .to_string()
                })?;
                ExecFds::Console(socket, size)
            }
            None => {
                let [stdin, stdout, stderr]: [OwnedFd; 3] = fds.try_into().map_err(|_| {
                    "an Exec request carries exactly three descriptors (stdin, stdout, stderr)"
                        .to_string()
                })?;
                ExecFds::Stdio(stdin, stdout, stderr)
            }
        };
        let pid = self
            .running_pid(id)
            .ok_or_else(|| format!("container {id} is not running"))?;
        if argv.is_empty() {
            return Err("exec needs a command".into());
        }
        // As the container's process: its user, environment, folder, capabilities, cgroup.
        let record = state::read_record::<ContainerRecord>(&self.paths.container(id).record())
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("container {id} has no record in this sandbox"))?;
        let placement = placement_of(&record);
        let mut process = record.process;
        process.argv = argv;
        let open = |kind| ops::open_pid(pid, kind).map_err(|e| e.to_string());
        let pid_ns = open(NsKind::Pid)?;
        let joined: Vec<(OwnedFd, NsKind)> = [NsKind::Net, NsKind::Ipc, NsKind::Uts, NsKind::Mnt]
            .into_iter()
            .map(|kind| open(kind).map(|fd| (fd, kind)))
            .collect::<Result<_, _>>()?;
        let join: Vec<(BorrowedFd<'_>, NsKind)> = joined
            .iter()
            .map(|(fd, kind)| (fd.as_fd(), *kind))
            .collect();
        let (report_r, report_w) = pipe()?;
        let stdio = match &stdio_fds {
            ExecFds::Stdio(stdin, stdout, stderr) => Stdio {
                stdin: raw(stdin),
                stdout: raw(stdout),
                stderr: raw(stderr),
                console: None,
            },
            ExecFds::Console(socket, size) => Stdio {
                stdin: -1,
                stdout: -1,
                stderr: -1,
                console: Some(Console {
                    socket: raw(socket),
                    size: Some(*size),
                }),
            },
        };
        let user = self.namespaces.user();
        let child = fork_in(
            self.own_pid_ns(),
            PidNamespace::Join(pid_ns.as_fd()),
            || init::run_exec(&placement, &join, user, &process, stdio, report_w),
        )?;
        drop(stdio_fds);
        match crate::report::read_report(report_r).failure {
            None => Ok(Ok(child.as_raw())),
            Some(failure) => {
                let _ = podlab_ns::child::wait_for(child);
                Ok(Err(failure))
            }
        }
    }

    pub(super) fn signal_exec(&mut self, pid: i32, signal: i32) -> Response {
        if !self.execs.contains_key(&pid) {
            return Response::Error {
                message: format!("process {pid} is not an exec of this shim"),
            };
        }
        match Signal::try_from(signal).map(|s| nix::sys::signal::kill(Pid::from_raw(pid), s)) {
            Ok(Ok(())) | Ok(Err(nix::Error::ESRCH)) => Response::Ok,
            Ok(Err(e)) => Response::Error {
                message: e.to_string(),
            },
            Err(e) => Response::Error {
                message: e.to_string(),
            },
        }
    }
}

/// What a container's start needs of the shim: the sandbox's folder and namespaces, the pod's
/// cgroup, and the containers started already (a target's pid namespace).
pub(super) struct StartContext<'a> {
    pub paths: &'a SandboxPaths,
    pub namespaces: &'a PodNamespaces,
    pub pod_cgroup: Option<&'a podlab_cgroups::Cgroup>,
    pub pause_alive: bool,
    pub running: &'a HashMap<ContainerId, Live>,
}

/// How a container forked while pause still starts reaches the pod's namespaces: those pause
/// has made already, or pause's own once it has made them (joined through its pidfd).
#[derive(Clone, Copy)]
pub(super) enum ForkedEarly<'a> {
    IntoMade,
    BeforeMade {
        pause: BorrowedFd<'a>,
        flags: nix::sched::CloneFlags,
    },
}

/// A container's process forked, its start not heard yet ([`Shim::complete_start`]).
pub(super) struct Forked {
    id: ContainerId,
    pid: Pid,
    record: ContainerRecord,
    log: File,
    out_r: OwnedFd,
    err_r: OwnedFd,
    report_r: OwnedFd,
    stdin: Option<OwnedFd>,
    console_receiver: Option<OwnedFd>,
    unsaved_cgroup: UnsavedCgroup,
    forked_at: u64,
    /// The writing end of its [`init::SandboxGate`], when forked while pause still starts.
    gate: Option<OwnedFd>,
    /// The writing end of its [`init::JoinLater`]'s gate, when forked before pause had made the
    /// pod's namespaces.
    namespaces_gate: Option<OwnedFd>,
}

impl Forked {
    /// Lets the process join the pod's namespaces: pause has made them.
    pub(super) fn namespaces_made(&mut self) {
        open(self.namespaces_gate.take());
    }

    /// Lets the process go on to its program: the sandbox is up.
    pub(super) fn open_gate(&mut self) {
        open(self.gate.take());
    }

    /// The sandbox did not start: the process, still at its gate, is killed and reaped, and a
    /// cgroup the start made goes. Its record stays Created, for the sandbox's undo.
    pub(super) fn abandon(self) {
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        let _ = podlab_ns::child::wait_for(self.pid);
    }
}

/// Writes a gate's one byte (a process that died meanwhile is heard in its report).
fn open(gate: Option<OwnedFd>) {
    if let Some(gate) = gate {
        let _ = nix::unistd::write(&gate, &[1]);
    }
}

/// Reads container `id`'s record, makes what its start makes (its layer's folders and cgroup
/// when CreateContainer left them), and forks its process. `early`: forked while pause still
/// starts, the process waits, its mounts made, for [`Forked`]'s gate to open, and joins the
/// pod's namespaces as [`ForkedEarly`] says.
pub(super) fn fork_container(
    context: &StartContext<'_>,
    id: &ContainerId,
    mount_template: Option<BorrowedFd<'_>>,
    waited: bool,
    early: Option<ForkedEarly<'_>>,
) -> Result<Forked, String> {
    let paths = context.paths.container(id);
    let mut record: ContainerRecord = state::read_record(&paths.record())
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("container {id} has no record in this sandbox"))?;
    if record.state != ContainerState::Created {
        return Err(format!("container {id} is {}, not created", record.state));
    }
    if !context.pause_alive {
        return Err("the sandbox's pause process has exited".into());
    }
    let namespaces = context.namespaces;
    // A container made by CreateContainer gets its layer's folders and its cgroup now
    // (`container::StartParts::AtStart`).
    if !paths.rootfs().is_dir() {
        let owner = namespaces.user.as_ref().map(|(_, map)| map.host_root());
        crate::container::make_layer_dirs(&paths, owner).map_err(|e| e.to_string())?;
    }
    let mut unsaved_cgroup = UnsavedCgroup(None);
    if let (None, Some(pod)) = (&record.cgroup, context.pod_cgroup) {
        let cgroup = crate::cgroups::make_container(
            pod,
            id.as_str(),
            &record.config.resources.cgroup,
            record.config.security.privileged,
        )
        .map_err(|e| e.to_string())?;
        record.cgroup = Some(cgroup.clone());
        unsaved_cgroup = UnsavedCgroup(Some(cgroup));
    }
    let log = open_log(&record.log_path)?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (report_r, report_w) = pipe()?;
    let gate = early.map(|_| pipe()).transpose()?;
    let later = match early {
        Some(ForkedEarly::BeforeMade { pause, flags }) => Some((pause, flags, pipe()?)),
        _ => None,
    };
    let null = File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
    // `tty`: a console made by the container's process, its master sent back here.
    let console_socket = match record.config.tty {
        true => Some(crate::tty::console_socket_pair().map_err(|e| e.to_string())?),
        false => None,
    };
    // `stdin` without `tty`: a pipe whose writing end stays here, for attach.
    let stdin_pipe = match record.config.stdin && !record.config.tty {
        true => Some(pipe()?),
        false => None,
    };
    let target_pid_ns = match &record.pid_mode {
        PidMode::Target(target) => Some(target_pid_ns(context.running, target)?),
        _ => None,
    };
    let pid_ns = match &record.pid_mode {
        PidMode::Container => PidNamespace::New,
        PidMode::Node => PidNamespace::Same,
        PidMode::Pod => PidNamespace::Join(
            namespaces
                .pid
                .as_ref()
                .map(|fd| fd.as_fd())
                .ok_or("the pod has no pid namespace of its own")?,
        ),
        PidMode::Target(_) => PidNamespace::Join(
            target_pid_ns
                .as_ref()
                .map(|fd| fd.as_fd())
                .expect("opened above"),
        ),
    };
    let mut security = record.config.security.clone();
    if security.privileged {
        // containerd: a privileged container has neither list.
        security.masked_paths = Some(Vec::new());
        security.readonly_paths = Some(Vec::new());
    }
    let plan = ContainerPlan {
        join: match later {
            Some(_) => Vec::new(),
            None => namespaces.for_container(),
        },
        rootfs: paths.rootfs(),
        lowerdirs: record.image.lowerdirs.clone(),
        upper: paths.upper(),
        work: paths.work(),
        shm: Some(context.paths.shm()).filter(|p| p.is_dir()),
        etc_files: vec![
            (context.paths.hostname(), "/etc/hostname"),
            (context.paths.hosts(), "/etc/hosts"),
            (context.paths.resolv_conf(), "/etc/resolv.conf"),
        ],
        mounts: record.config.mounts.clone(),
        readonly_rootfs: record.config.readonly_rootfs,
        readonly_paths: security.readonly(),
        masked_paths: security.masked(),
        privileged: security.privileged,
        process: record.process.clone(),
        mount_template,
        placement: placement_of(&record),
        // Only when the caller waits for the exit: a CRI Start's caller does not, and there
        // the wake-ups across CPUs cost more than the overlap gains (critest's
        // StartContainer 3.19-3.58 ms against 3.76-3.83 with the move).
        shim_cpu: if waited {
            crate::spawn_cpu::this_cpu()
        } else {
            None
        },
        user: namespaces.user(),
        gate: gate.as_ref().map(|(read, write)| init::SandboxGate {
            read: raw(read),
            write: raw(write),
        }),
        join_later: later
            .as_ref()
            .map(|(pause, flags, (read, write))| init::JoinLater {
                pause: pause.as_raw_fd(),
                flags: *flags,
                gate: init::SandboxGate {
                    read: raw(read),
                    write: raw(write),
                },
            }),
    };
    let stdio = Stdio {
        stdin: stdin_pipe
            .as_ref()
            .map(|(r, _)| raw(r))
            .unwrap_or(raw(&null)),
        stdout: raw(&out_w),
        stderr: raw(&err_w),
        console: console_socket.as_ref().map(|(_, sender)| Console {
            socket: raw(sender),
            size: None,
        }),
    };
    let forked_at = crate::report::monotonic_ns();
    let pid = fork_in(namespaces.own_pid_ns(), pid_ns, || {
        init::run_container(&plan, stdio, report_w)
    })?;
    drop((out_w, err_w, null));
    let stdin = stdin_pipe.map(|(r, w)| {
        drop(r);
        let _ = crate::tty::set_nonblocking(w.as_fd());
        w
    });
    let console_receiver = console_socket.map(|(receiver, sender)| {
        drop(sender);
        receiver
    });
    Ok(Forked {
        id: id.clone(),
        pid,
        record,
        log,
        out_r,
        err_r,
        report_r,
        stdin,
        console_receiver,
        unsaved_cgroup,
        forked_at,
        gate: gate.map(|(read, write)| {
            drop(read);
            write
        }),
        namespaces_gate: later.map(|(_, _, (read, write))| {
            drop(read);
            write
        }),
    })
}

fn target_pid_ns(
    running: &HashMap<ContainerId, Live>,
    target: &ContainerId,
) -> Result<OwnedFd, String> {
    let pid = running
        .get(target)
        .filter(|l| l.state == ContainerState::Running)
        .map(|l| l.pid)
        .ok_or_else(|| format!("target container {target} is not running in this pod"))?;
    ops::open_pid(pid, NsKind::Pid).map_err(|e| e.to_string())
}

/// What an exec'd process gets: the caller's three descriptors, or a console socket.
enum ExecFds {
    Stdio(OwnedFd, OwnedFd, OwnedFd),
    Console(OwnedFd, WindowSize),
}

/// A cgroup made by a start, removed (with what runs in it) when the start ends before its
/// record names it.
struct UnsavedCgroup(Option<podlab_cgroups::Cgroup>);

impl UnsavedCgroup {
    fn saved(mut self) {
        self.0 = None;
    }
}

impl Drop for UnsavedCgroup {
    fn drop(&mut self) {
        if let Some(cgroup) = self.0.take() {
            let _ = cgroup.remove();
        }
    }
}

/// Where a container's processes (its own and those exec'd into it) go first.
fn placement_of(record: &ContainerRecord) -> crate::cgroups::Placement {
    crate::cgroups::Placement {
        cgroup: record.cgroup.clone(),
        oom_score_adj: record.config.resources.oom_score_adj,
    }
}

fn readable_now(fd: BorrowedFd<'_>) -> bool {
    let mut probe = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
    nix::poll::poll(&mut probe, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0)
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("pipe2: {e}"))
}

/// The CRI log file, 0640 as containerd opens it, in a 0750 folder: a container's output is
/// for root and the node's log readers, never for other host users.
fn open_log(path: &Path) -> Result<File, String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
        .map_err(|e| format!("opening the log {}: {e}", path.display()))
}
