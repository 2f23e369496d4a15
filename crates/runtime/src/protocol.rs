//! The shim's request protocol: one JSON message per packet on a `SOCK_SEQPACKET` unix socket
//! (`shim.sock` in the sandbox folder), so messages keep their boundaries and an `Exec` request
//! can carry the caller's stdin/stdout/stderr as file descriptors (`SCM_RIGHTS`): the exec'd
//! process then writes straight into the caller's pipes or terminal.
//!
//! Most requests get one response. `Wait` is answered when the container has exited; `Exec` is
//! answered twice on its connection, `ExecStarted` and later `ExecExited`.

use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    self, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
    UnixAddr,
};
use serde::{Deserialize, Serialize};

use crate::error::InitFailure;
use crate::id::ContainerId;
use crate::{Error, Result};

/// The largest message either side sends.
const MAX_MESSAGE: usize = 256 * 1024;
/// The longest path a `sockaddr_un` holds.
const SUN_PATH_MAX: usize = 107;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Are you there? Answered with `Pong`.
    Ping,
    /// Start a created container (its container.json is in the sandbox folder). A descriptor
    /// sent with it is the mount namespace to make the container from
    /// ([`crate::mount_template`]). `waited`: a Wait for the container follows on the same
    /// connection (its caller is after the exit, as `run --rm`), so the container's process
    /// starts on a CPU other than the shim's (`spawn_cpu::leave_cpu`).
    Start {
        container: ContainerId,
        #[serde(default)]
        waited: bool,
    },
    /// Send a signal to a running container's process.
    Signal { container: ContainerId, signal: i32 },
    /// Answer `Exited` once the container has exited (at once if it has).
    Wait { container: ContainerId },
    /// Reopen the container's log file (after the caller rotated it).
    ReopenLog { container: ContainerId },
    /// Drop a container that is not running from the shim's table (before its folder goes).
    Forget { container: ContainerId },
    /// Run `argv` in a running container's namespaces, as its user, with the three file
    /// descriptors of the message as stdin, stdout and stderr; or, with `terminal`, with a
    /// console it makes, whose master it sends over the one descriptor of the message (a
    /// unix socket: runc's `--console-socket`), at that size.
    Exec {
        container: ContainerId,
        argv: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        terminal: Option<crate::tty::WindowSize>,
    },
    /// Attach the connection to a running container: its output to the first descriptor of
    /// the message (a stream socket; stderr to the second, if there is one and no tty), and
    /// with `stdin` what comes from that socket to the container's stdin.
    Attach { container: ContainerId, stdin: bool },
    /// Set the size of a running container's console.
    Resize {
        container: ContainerId,
        size: crate::tty::WindowSize,
    },
    /// Signal a process started by `Exec` on this shim.
    SignalExec { pid: i32, signal: i32 },
    /// SIGKILL every running container and record their exits.
    StopContainers,
    /// Stop the pause process, unpin the namespaces and exit.
    Shutdown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Ok,
    Pong { pause_alive: bool },
    Started { pid: i32, started_at: i64 },
    StartFailed(InitFailure),
    Exited { exit_code: i32, finished_at: i64 },
    ExecStarted { pid: i32 },
    ExecExited { exit_code: i32 },
    Error { message: String },
}

/// What the shim prints on its stdout once the sandbox is up (or could not be made), as its
/// one and only word to the process that started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShimReady {
    Ready(crate::state::ShimRecord),
    Failed { message: String },
}

/// A socket address for `path` that fits a `sockaddr_un`: the path itself when short enough,
/// else `/proc/self/fd/N/NAME` through an `O_PATH` descriptor of its folder (which must then be
/// kept open while the address is used).
fn socket_address(path: &Path) -> Result<(UnixAddr, Option<OwnedFd>)> {
    if path.as_os_str().len() <= SUN_PATH_MAX {
        let addr = UnixAddr::new(path).map_err(|e| Error::sys("sockaddr_un", path.display(), e))?;
        return Ok((addr, None));
    }
    let dir = path
        .parent()
        .ok_or_else(|| Error::Invalid(format!("socket path {} has no folder", path.display())))?;
    let name = path.file_name().unwrap_or_default();
    let dir_fd = nix::fcntl::open(
        dir,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| Error::sys("open(O_PATH)", dir.display(), e))?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", dir_fd.as_raw_fd())).join(name);
    let addr = UnixAddr::new(&short).map_err(|e| Error::sys("sockaddr_un", path.display(), e))?;
    Ok((addr, Some(dir_fd)))
}

fn seqpacket_socket(path: &Path) -> Result<OwnedFd> {
    socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| Error::sys("socket(AF_UNIX, SOCK_SEQPACKET)", path.display(), e))
}

/// The shim's listening socket at `path` (an old socket file there is replaced).
pub fn listen(path: &Path) -> Result<OwnedFd> {
    let _ = std::fs::remove_file(path);
    let fd = seqpacket_socket(path)?;
    let (addr, _dir) = socket_address(path)?;
    socket::bind(fd.as_raw_fd(), &addr).map_err(|e| Error::sys("bind", path.display(), e))?;
    socket::listen(
        &fd,
        socket::Backlog::new(64).unwrap_or(socket::Backlog::MAXCONN),
    )
    .map_err(|e| Error::sys("listen", path.display(), e))?;
    Ok(fd)
}

/// Sends one message with optional file descriptors.
pub fn send_message(fd: BorrowedFd<'_>, message: &impl Serialize, fds: &[RawFd]) -> Result<()> {
    let bytes = serde_json::to_vec(message).map_err(|e| Error::Invalid(e.to_string()))?;
    let iov = [IoSlice::new(&bytes)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    loop {
        match socket::sendmsg::<UnixAddr>(fd.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
        {
            Ok(_) => return Ok(()),
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(Error::sys("sendmsg", "shim socket", e)),
        }
    }
}

/// Receives one message and the file descriptors that came with it; None at end of stream.
pub fn receive_message<T: for<'de> Deserialize<'de>>(
    fd: BorrowedFd<'_>,
) -> Result<Option<(T, Vec<OwnedFd>)>> {
    // A packet's length, asked first (MSG_PEEK | MSG_TRUNC gives it whole): most messages
    // are a few hundred bytes, and a zeroed MAX_MESSAGE buffer for each cost 64 page faults.
    let size = loop {
        match socket::recv(
            fd.as_raw_fd(),
            &mut [0u8; 1],
            MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC,
        ) {
            Ok(size) => break size.clamp(1, MAX_MESSAGE),
            Err(nix::Error::EINTR) => continue,
            Err(nix::Error::ECONNRESET) => return Ok(None),
            Err(e) => return Err(Error::sys("recv(MSG_PEEK)", "shim socket", e)),
        }
    };
    let mut buffer = vec![0u8; size];
    let mut cmsg_space = nix::cmsg_space!([RawFd; 4]);
    let (len, fds) = loop {
        let mut iov = [std::io::IoSliceMut::new(&mut buffer)];
        match socket::recvmsg::<UnixAddr>(
            fd.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg_space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let mut fds = Vec::new();
                for cmsg in msg.cmsgs().map_err(|e| Error::sys("recvmsg", "cmsgs", e))? {
                    if let ControlMessageOwned::ScmRights(received) = cmsg {
                        // SAFETY: the kernel installed these descriptors for us.
                        fds.extend(
                            received
                                .into_iter()
                                .map(|f| unsafe { OwnedFd::from_raw_fd(f) }),
                        );
                    }
                }
                break (msg.bytes, fds);
            }
            Err(nix::Error::EINTR) => continue,
            Err(nix::Error::ECONNRESET) => return Ok(None),
            Err(e) => return Err(Error::sys("recvmsg", "shim socket", e)),
        }
    };
    if len == 0 {
        return Ok(None);
    }
    let message = serde_json::from_slice(&buffer[..len])
        .map_err(|e| Error::Invalid(format!("unreadable message on the shim socket: {e}")))?;
    Ok(Some((message, fds)))
}

/// A connection to one sandbox's shim.
#[derive(Debug)]
pub struct ShimClient {
    fd: OwnedFd,
    sandbox: String,
}

impl ShimClient {
    pub fn connect(socket_path: &Path, sandbox: &str) -> Result<ShimClient> {
        let fd = seqpacket_socket(socket_path)?;
        let (addr, _dir) = socket_address(socket_path)?;
        loop {
            match socket::connect(fd.as_raw_fd(), &addr) {
                Ok(()) => break,
                Err(nix::Error::EINTR) => continue,
                Err(e) => {
                    return Err(Error::Shim {
                        id: sandbox.to_string(),
                        message: format!("connecting to {}: {e}", socket_path.display()),
                    })
                }
            }
        }
        Ok(ShimClient {
            fd,
            sandbox: sandbox.to_string(),
        })
    }

    pub fn send(&self, request: &Request, fds: &[RawFd]) -> Result<()> {
        send_message(self.fd.as_fd(), request, fds).map_err(|e| self.shim_error(e.to_string()))
    }

    /// The next response; waits at most `timeout` (None: for as long as it takes).
    pub fn receive(&self, timeout: Option<Duration>) -> Result<Response> {
        if let Some(timeout) = timeout {
            if !self.wait_readable(timeout)? {
                return Err(Error::Timeout {
                    what: format!("waiting for the shim of pod sandbox {}", self.sandbox),
                    seconds: timeout.as_secs_f64(),
                });
            }
        }
        match receive_message::<Response>(self.fd.as_fd()) {
            Ok(Some((response, _))) => Ok(response),
            Ok(None) => Err(self.shim_error("closed the connection without answering".into())),
            Err(e) => Err(self.shim_error(e.to_string())),
        }
    }

    /// Sends a request and returns its (first) response.
    pub fn call(&self, request: &Request) -> Result<Response> {
        self.send(request, &[])?;
        self.receive(None)
    }

    /// Whether a response is waiting, after at most `timeout`.
    pub fn wait_readable(&self, timeout: Duration) -> Result<bool> {
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        let millis = timeout.as_millis().min(i32::MAX as u128) as i32;
        loop {
            match nix::poll::poll(
                &mut fds,
                PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX),
            ) {
                Ok(n) => return Ok(n > 0),
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(Error::sys("poll", "shim socket", e)),
            }
        }
    }

    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn shim_error(&self, message: String) -> Error {
        Error::Shim {
            id: self.sandbox.clone(),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_descriptors_cross_a_socket_pair() {
        let (a, b) = socket::socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let (pipe_r, pipe_w) = nix::unistd::pipe().unwrap();
        let request = Request::Exec {
            container: ContainerId::generate(),
            argv: vec!["echo".into(), "hi".into()],
            terminal: None,
        };
        send_message(a.as_fd(), &request, &[pipe_w.as_raw_fd()]).unwrap();
        drop(pipe_w);
        let (got, fds): (Request, _) = receive_message(b.as_fd()).unwrap().unwrap();
        assert_eq!(got, request);
        assert_eq!(fds.len(), 1);
        nix::unistd::write(&fds[0], b"through").unwrap();
        drop(fds);
        let mut buf = [0u8; 16];
        let n = nix::unistd::read(&pipe_r, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"through");
        drop(a);
        assert!(receive_message::<Request>(b.as_fd()).unwrap().is_none());
    }

    #[test]
    fn long_socket_paths_go_through_proc_self_fd() {
        let dir = std::env::temp_dir().join(format!(
            "podlab-protocol-{}-{}",
            std::process::id(),
            "x".repeat(90)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shim.sock");
        assert!(path.as_os_str().len() > SUN_PATH_MAX);
        let listener = listen(&path).unwrap();
        assert!(path.exists());
        let client = ShimClient::connect(&path, "test").unwrap();
        let conn = socket::accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC).unwrap();
        // SAFETY: accept4 returned a new descriptor.
        let conn = unsafe { OwnedFd::from_raw_fd(conn) };
        client.send(&Request::Ping, &[]).unwrap();
        let (got, _): (Request, _) = receive_message(conn.as_fd()).unwrap().unwrap();
        assert_eq!(got, Request::Ping);
        send_message(conn.as_fd(), &Response::Pong { pause_alive: true }, &[]).unwrap();
        assert_eq!(
            client.receive(Some(Duration::from_secs(5))).unwrap(),
            Response::Pong { pause_alive: true }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
