//! ExecSync and exec: a command in a running container's namespaces (all of them, mount
//! included), as the container's user and with its environment, started by the pod's shim.
//!
//! The caller hands the shim three file descriptors with the request: for [`Runtime::exec_sync`]
//! the write ends of two pipes it reads itself (what exec probes and `podlab exec` capture),
//! for [`Runtime::exec`] whatever it likes, its own terminal for instance.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::container::remaining;
use crate::id::{ContainerId, SandboxId};
use crate::protocol::{Request, Response, ShimClient};
use crate::runtime::Runtime;
use crate::sandbox::unexpected;
use crate::status::{ContainerState, ExecResult};
use crate::tty::WindowSize;
use crate::{Error, Result};

/// How long output may still arrive after the exec'd process has exited (a child of it may
/// hold the pipes open).
const OUTPUT_GRACE: Duration = Duration::from_secs(1);
/// At most this much of each stream is kept.
const MAX_OUTPUT: usize = 16 * 1024 * 1024;

/// The descriptors an exec'd process gets.
#[derive(Debug, Clone, Copy)]
pub struct ExecStdio<'a> {
    pub stdin: BorrowedFd<'a>,
    pub stdout: BorrowedFd<'a>,
    pub stderr: BorrowedFd<'a>,
}

impl Runtime {
    /// ExecSync: runs `cmd` in the container and returns its output and exit code. With a
    /// timeout, a command still running then is killed and [`Error::Timeout`] returned.
    pub fn exec_sync(
        &self,
        id: &ContainerId,
        cmd: &[String],
        timeout: Option<Duration>,
    ) -> Result<ExecResult> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let null =
            std::fs::File::open("/dev/null").map_err(|e| Error::io("opening", "/dev/null", e))?;
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let (sandbox, client, pid) = self.start_exec(
            id,
            cmd,
            ExecStdio {
                stdin: null.as_fd(),
                stdout: out_w.as_fd(),
                stderr: err_w.as_fd(),
            },
        )?;
        // Only the exec'd process may hold the write ends now, so that its exit ends the output.
        drop((out_w, err_w, null));
        let mut streams = [Capture::new(out_r), Capture::new(err_r)];
        let mut exit_code = None;
        let mut exited_at: Option<Instant> = None;
        loop {
            let all_eof = streams.iter().all(|s| s.eof);
            if exit_code.is_some() && all_eof {
                break;
            }
            let output_deadline = exited_at.map(|t| t + OUTPUT_GRACE);
            let wait_until = match (deadline, output_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let left = remaining(wait_until);
            if left.is_some_and(|l| l.is_zero()) {
                if exit_code.is_some() {
                    break;
                }
                self.kill_exec(&sandbox, pid);
                let _ = client.receive(Some(Duration::from_secs(5)));
                return Err(Error::Timeout {
                    what: format!("exec {cmd:?} in container {id}"),
                    seconds: timeout.unwrap_or_default().as_secs_f64(),
                });
            }
            let mut fds: Vec<PollFd> = streams
                .iter()
                .filter(|s| !s.eof)
                .map(|s| PollFd::new(s.fd.as_fd(), PollFlags::POLLIN))
                .collect();
            let watching_shim = exit_code.is_none();
            if watching_shim {
                fds.push(PollFd::new(client.as_fd(), PollFlags::POLLIN));
            }
            let timeout = match left {
                Some(l) => PollTimeout::try_from(l.as_millis().min(i32::MAX as u128) as i32 + 1)
                    .unwrap_or(PollTimeout::MAX),
                None => PollTimeout::NONE,
            };
            match nix::poll::poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(Error::sys("poll", "exec output", e)),
            }
            let ready: Vec<bool> = fds
                .iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect();
            drop(fds);
            let mut index = 0;
            for stream in streams.iter_mut().filter(|s| !s.eof) {
                if ready[index] {
                    stream.read();
                }
                index += 1;
            }
            if watching_shim && ready[index] {
                match client.receive(None)? {
                    Response::ExecExited { exit_code: code } => {
                        exit_code = Some(code);
                        exited_at = Some(Instant::now());
                    }
                    other => return Err(unexpected(&sandbox, Some(id), "Exec", other)),
                }
            }
        }
        let [stdout, stderr] = streams;
        Ok(ExecResult {
            stdout: stdout.bytes,
            stderr: stderr.bytes,
            exit_code: exit_code.unwrap_or(-1),
        })
    }

    /// Runs `cmd` in the container with `stdio` as its descriptors and returns its exit code
    /// (128+N for signal N), for `podlab exec` to stream straight to the terminal.
    pub fn exec(
        &self,
        id: &ContainerId,
        cmd: &[String],
        stdio: ExecStdio<'_>,
        timeout: Option<Duration>,
    ) -> Result<i32> {
        let process = self.exec_start(id, cmd, stdio)?;
        let result = process.wait(timeout);
        if let Err(Error::Timeout { .. }) = result {
            self.kill_exec(&process.sandbox, process.pid);
        }
        result
    }

    /// Runs `cmd` in the container with a terminal of `size` (`exec -it`, the CRI's Exec with
    /// `tty`): the process makes a pty in the container's own devpts and takes it as its
    /// controlling terminal; the master comes back here, for the caller to relay
    /// ([`crate::tty::relay`]) and resize.
    pub fn exec_tty(&self, id: &ContainerId, cmd: &[String], size: WindowSize) -> Result<TtyExec> {
        let (receiver, sender) = crate::tty::console_socket_pair()?;
        let (sandbox, client, pid) =
            self.start_exec(id, cmd, ExecIo::Console(sender.as_fd(), size))?;
        drop(sender);
        // The process sent the master before its execve, and the shim answered after that.
        match crate::tty::receive_fd(receiver.as_fd())? {
            Some(master) => Ok(TtyExec {
                master,
                process: ExecProcess {
                    client,
                    sandbox,
                    pid,
                    what: format!("exec {cmd:?} in container {id}"),
                },
            }),
            None => {
                self.kill_exec(&sandbox, pid);
                Err(Error::Invalid(format!(
                    "exec {cmd:?} in container {id}: no console came back from the process"
                )))
            }
        }
    }

    /// Starts `cmd` in the container with `stdio` as its descriptors and returns at once (the
    /// CRI's streamed Exec without a terminal): the caller keeps the other ends of the
    /// descriptors and learns the exit from the returned process.
    pub fn exec_start(
        &self,
        id: &ContainerId,
        cmd: &[String],
        stdio: ExecStdio<'_>,
    ) -> Result<ExecProcess> {
        let (sandbox, client, pid) = self.start_exec(id, cmd, stdio)?;
        Ok(ExecProcess {
            client,
            sandbox,
            pid,
            what: format!("exec {cmd:?} in container {id}"),
        })
    }

    fn start_exec<'a>(
        &self,
        id: &ContainerId,
        cmd: &[String],
        io: impl Into<ExecIo<'a>>,
    ) -> Result<(SandboxId, ShimClient, i32)> {
        let io = io.into();
        if cmd.is_empty() {
            return Err(Error::Invalid("exec needs a command".into()));
        }
        let status = self.container_status(id)?;
        if status.state != ContainerState::Running {
            return Err(Error::InvalidState {
                id: id.to_string(),
                state: status.state.to_string(),
                message: "exec needs a running container".into(),
            });
        }
        let sandbox = status.sandbox_id;
        let client = self.shim(&sandbox)?;
        let (terminal, fds) = match io {
            ExecIo::Stdio(stdio) => (
                None,
                vec![
                    stdio.stdin.as_raw_fd(),
                    stdio.stdout.as_raw_fd(),
                    stdio.stderr.as_raw_fd(),
                ],
            ),
            ExecIo::Console(socket, size) => (Some(size), vec![socket.as_raw_fd()]),
        };
        client.send(
            &Request::Exec {
                container: id.clone(),
                argv: cmd.to_vec(),
                terminal,
            },
            &fds,
        )?;
        match client.receive(None)? {
            Response::ExecStarted { pid } => Ok((sandbox, client, pid)),
            other => Err(unexpected(&sandbox, Some(id), "Exec", other)),
        }
    }

    fn kill_exec(&self, sandbox: &SandboxId, pid: i32) {
        if let Ok(client) = self.shim(sandbox) {
            let _ = client.call(&Request::SignalExec {
                pid,
                signal: libc::SIGKILL,
            });
        }
    }
}

/// What an exec'd process is given: descriptors, or a console socket and the terminal's size.
enum ExecIo<'a> {
    Stdio(ExecStdio<'a>),
    Console(BorrowedFd<'a>, WindowSize),
}

impl<'a> From<ExecStdio<'a>> for ExecIo<'a> {
    fn from(stdio: ExecStdio<'a>) -> ExecIo<'a> {
        ExecIo::Stdio(stdio)
    }
}

/// A process exec'd with a terminal: the pty's master and the process. Dropping it hangs up
/// the shim connection, and the shim then kills the process if it still runs (nobody would be
/// left to hear its exit).
#[derive(Debug)]
pub struct TtyExec {
    /// The pty's master: what the process writes is read here, what is written here is its
    /// input (through the container's line discipline: a Ctrl-C byte signals its foreground
    /// process group).
    pub master: OwnedFd,
    process: ExecProcess,
}

impl TtyExec {
    /// The process's pid (in the shim's pid namespace).
    pub fn pid(&self) -> i32 {
        self.process.pid
    }

    /// Readable once the process has exited (its exit code is then [`TtyExec::wait`]'s).
    pub fn ended(&self) -> BorrowedFd<'_> {
        self.process.ended()
    }

    /// Sets the terminal's size; the process's foreground group gets SIGWINCH.
    pub fn resize(&self, size: WindowSize) -> Result<()> {
        crate::tty::set_window_size(self.master.as_fd(), size)
    }

    /// Waits for the process's exit code (128+N for signal N), at most `timeout`.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<i32> {
        self.process.wait(timeout)
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, runtime: &Runtime, signal: i32) -> Result<()> {
        self.process.signal(runtime, signal)
    }
}

/// A process started by exec and the shim connection that reports its exit. Dropping it hangs
/// up that connection, and the shim then kills the process if it still runs.
#[derive(Debug)]
pub struct ExecProcess {
    client: ShimClient,
    sandbox: SandboxId,
    pid: i32,
    what: String,
}

impl ExecProcess {
    /// The process's pid (in the shim's pid namespace).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Readable once the process has exited (its exit code is then [`ExecProcess::wait`]'s).
    pub fn ended(&self) -> BorrowedFd<'_> {
        self.client.as_fd()
    }

    /// Waits for the process's exit code (128+N for signal N), at most `timeout`.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<i32> {
        match self.client.receive(timeout) {
            Ok(Response::ExecExited { exit_code }) => Ok(exit_code),
            Ok(other) => Err(unexpected(&self.sandbox, None, "Exec", other)),
            Err(Error::Timeout { .. }) => Err(Error::Timeout {
                what: self.what.clone(),
                seconds: timeout.unwrap_or_default().as_secs_f64(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, runtime: &Runtime, signal: i32) -> Result<()> {
        let client = runtime.shim(&self.sandbox)?;
        match client.call(&Request::SignalExec {
            pid: self.pid,
            signal,
        })? {
            Response::Ok => Ok(()),
            other => Err(unexpected(&self.sandbox, None, "SignalExec", other)),
        }
    }
}

struct Capture {
    fd: OwnedFd,
    bytes: Vec<u8>,
    eof: bool,
}

impl Capture {
    fn new(fd: OwnedFd) -> Capture {
        Capture {
            fd,
            bytes: Vec::new(),
            eof: false,
        }
    }

    fn read(&mut self) {
        let mut buffer = [0u8; 64 * 1024];
        match nix::unistd::read(&self.fd, &mut buffer) {
            Ok(0) => self.eof = true,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(self.bytes.len());
                self.bytes.extend_from_slice(&buffer[..n.min(room)]);
            }
            Err(nix::Error::EINTR | nix::Error::EAGAIN) => {}
            Err(_) => self.eof = true,
        }
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| Error::sys("pipe2", "exec output", e))
}
