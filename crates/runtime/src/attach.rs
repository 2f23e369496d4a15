//! Attach: a running container's output as it comes and, for a container started with
//! `stdin` or `tty`, its input (the CRI's Attach), served by the pod's shim; and the size of a
//! container's console (the CRI's resize channel).

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::id::ContainerId;
use crate::protocol::{Request, Response, ShimClient};
use crate::runtime::Runtime;
use crate::sandbox::unexpected;
use crate::status::ContainerState;
use crate::tty::WindowSize;
use crate::{Error, Result};

/// A client attached to a container. The container's output arrives on the stream given to
/// [`Runtime::attach`] until the container exits (the stream then reads end of file);
/// dropping this detaches (and, for a container with `stdinOnce`, closes its stdin).
#[derive(Debug)]
pub struct Attached {
    _client: ShimClient,
}

impl Runtime {
    /// Attaches to a running container. `stream` (a unix stream socket, whose other end the
    /// caller keeps) receives its output — all of it with a tty, its stdout without (and its
    /// stderr too unless `stderr` is given) — and with `stdin`, what the caller writes to its
    /// end goes to the container's stdin; shutting down its writing side is the end of input.
    pub fn attach(
        &self,
        id: &ContainerId,
        stdin: bool,
        stream: BorrowedFd<'_>,
        stderr: Option<BorrowedFd<'_>>,
    ) -> Result<Attached> {
        let status = self.container_status(id)?;
        if status.state != ContainerState::Running {
            return Err(Error::InvalidState {
                id: id.to_string(),
                state: status.state.to_string(),
                message: "attach needs a running container".into(),
            });
        }
        let client = self.shim(&status.sandbox_id)?;
        let mut fds = vec![stream.as_raw_fd()];
        fds.extend(stderr.map(|fd| fd.as_raw_fd()));
        client.send(
            &Request::Attach {
                container: id.clone(),
                stdin,
            },
            &fds,
        )?;
        match client.receive(None)? {
            Response::Ok => Ok(Attached { _client: client }),
            other => Err(unexpected(&status.sandbox_id, Some(id), "Attach", other)),
        }
    }

    /// Sets the size of a running container's console (it was started with `tty`).
    pub fn resize_container_tty(&self, id: &ContainerId, size: WindowSize) -> Result<()> {
        let status = self.container_status(id)?;
        let client = self.shim(&status.sandbox_id)?;
        match client.call(&Request::Resize {
            container: id.clone(),
            size,
        })? {
            Response::Ok => Ok(()),
            other => Err(unexpected(&status.sandbox_id, Some(id), "Resize", other)),
        }
    }
}
