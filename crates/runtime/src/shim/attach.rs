//! Attach in the shim: clients that see a running container's output as it comes and, with
//! stdin, write to the container's input — its console when it has `tty`, else the pipe the
//! shim keeps open for `stdin: true` — as containerd's shim serves CRI Attach.
//!
//! The shim is the one reader of a container's output (it must log all of it), so it copies
//! each chunk it reads to every attached client as well. Writes to clients and to the
//! container never block the shim: a client that does not read loses output (its socket
//! buffer is large), and input the container does not take is dropped, rather than one slow
//! party stopping every other container of the pod.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::Shim;
use crate::cri_log::Stream;
use crate::id::ContainerId;
use crate::protocol::Response;
use crate::tty::WindowSize;

/// One attached client of one container.
pub(crate) struct Attach {
    container: ContainerId,
    /// The client connection that made it: its hang-up ends the attach.
    token: u64,
    /// The container's output goes here (all of it with a tty, stdout without), and, when
    /// `input`, what the client writes here goes to the container's stdin.
    stream: OwnedFd,
    /// Stderr without a tty, when the client sent a descriptor for it.
    stderr: Option<OwnedFd>,
    input: bool,
}

impl Shim {
    /// Attaches the client `token` to a running container: `fds` are its stream (and
    /// optionally a descriptor for stderr); with `stdin`, what it writes goes to the
    /// container's stdin, which the container must have (`stdin` or `tty`).
    pub(super) fn attach(
        &mut self,
        token: u64,
        container: &ContainerId,
        stdin: bool,
        fds: Vec<OwnedFd>,
    ) -> Response {
        let Some(live) = self.live(container) else {
            return Response::Error {
                message: format!("container {container} is not running"),
            };
        };
        if stdin && !live.takes_input() {
            return Response::Error {
                message: format!(
                    "container {container} was not started with stdin or tty: there is no \
                     input to attach to"
                ),
            };
        }
        let mut fds = fds.into_iter();
        let Some(stream) = fds.next() else {
            return Response::Error {
                message: "an Attach request carries its stream as a descriptor".into(),
            };
        };
        let stderr = fds.next();
        for fd in std::iter::once(&stream).chain(stderr.as_ref()) {
            let _ = crate::tty::set_nonblocking(fd.as_fd());
        }
        self.next_attach += 1;
        self.attaches.insert(
            self.next_attach,
            Attach {
                container: container.clone(),
                token,
                stream,
                stderr,
                input: stdin,
            },
        );
        Response::Ok
    }

    /// The attach streams to read input from.
    pub(super) fn attach_inputs(&self) -> impl Iterator<Item = (u64, BorrowedFd<'_>)> {
        self.attaches
            .iter()
            .filter(|(_, a)| a.input)
            .map(|(id, a)| (*id, a.stream.as_fd()))
    }

    /// Reads what a client typed and gives it to the container; its end of input (it closed
    /// its side, or went) ends its input, and with `stdinOnce` the container's stdin.
    // Not inlined: its buffer would otherwise sit in the idle loop's frame, a stack page that
    // every shim keeps dirty for its life ([`super::memory`]).
    #[inline(never)]
    pub(super) fn read_attach_input(&mut self, id: u64) {
        let mut buffer = [0u8; 4096];
        let Some(attach) = self.attaches.get_mut(&id) else {
            return;
        };
        let read = nix::unistd::read(&attach.stream, &mut buffer);
        let container = attach.container.clone();
        match read {
            Ok(0) | Err(nix::Error::ECONNRESET) => {
                attach.input = false;
                self.input_ended(&container);
            }
            Ok(n) => {
                if let Some(target) = self.live(&container).and_then(|l| l.input()) {
                    // Non-blocking: what the container does not take now is dropped.
                    let _ = nix::unistd::write(target, &buffer[..n]);
                }
            }
            Err(nix::Error::EAGAIN | nix::Error::EINTR) => {}
            Err(_) => {
                attach.input = false;
                self.input_ended(&container);
            }
        }
    }

    fn input_ended(&mut self, container: &ContainerId) {
        if let Some(live) = self.live_mut(container) {
            live.input_ended();
        }
    }

    /// A chunk of a container's output, for its attached clients.
    pub(super) fn fan_out(&mut self, container: &ContainerId, stream: Stream, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        for attach in self.attaches.values().filter(|a| a.container == *container) {
            let target = match (stream, &attach.stderr) {
                (Stream::Stderr, Some(stderr)) => stderr.as_fd(),
                _ => attach.stream.as_fd(),
            };
            let _ = nix::sys::socket::send(
                target.as_raw_fd(),
                bytes,
                nix::sys::socket::MsgFlags::MSG_NOSIGNAL | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            )
            .or_else(|_| nix::unistd::write(target, bytes));
        }
    }

    /// The container ended (its output drained): its clients see their streams close.
    pub(super) fn end_attaches(&mut self, container: &ContainerId) {
        self.attaches.retain(|_, a| a.container != *container);
    }

    /// A client went: its attaches end, and end their input.
    pub(super) fn detach_client(&mut self, token: u64) {
        let ended: Vec<ContainerId> = self
            .attaches
            .values()
            .filter(|a| a.token == token && a.input)
            .map(|a| a.container.clone())
            .collect();
        self.attaches.retain(|_, a| a.token != token);
        for container in ended {
            self.input_ended(&container);
        }
    }

    /// The container's console gets a new size (its foreground process gets SIGWINCH).
    pub(super) fn resize(&mut self, container: &ContainerId, size: WindowSize) -> Response {
        match self.live(container).and_then(|l| l.console()) {
            Some(console) => match crate::tty::set_window_size(console, size) {
                Ok(()) => Response::Ok,
                Err(e) => Response::Error {
                    message: e.to_string(),
                },
            },
            None => Response::Error {
                message: format!("container {container} has no tty (or is not running)"),
            },
        }
    }
}
