//! Change notices from the shims to the node agent, as containerd's shims publish task events
//! (`/tasks/exit`) and the CRI streams them to kubelet's evented PLEG: right after a shim
//! records a change that nobody asked it for (a container exited, or could not start), it sends
//! the sandbox's id as one datagram to `<root>/events.sock`, where the agent listens, and to
//! `<root>/cri-events.sock`, where `podlab cri` listens (for GetContainerEvents): the two may
//! serve one root side by side.
//!
//! A notice only says "look now": it carries no state, so losing one loses nothing. With no
//! listener, or a full queue, it is dropped, and the agent's periodic relist sees the change.
//! Sending never blocks a shim.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::id::SandboxId;
use crate::{Error, Result};

/// `<root>/events.sock`.
pub fn socket_path(root: &Path) -> PathBuf {
    root.join("events.sock")
}

/// `<root>/cri-events.sock`: `podlab cri`'s end.
pub fn cri_socket_path(root: &Path) -> PathBuf {
    root.join("cri-events.sock")
}

/// Tells whoever listens at `<root>/events.sock` and `<root>/cri-events.sock` that `sandbox`
/// changed. Best effort: a socket nobody listens at costs one failed `sendto`.
pub fn notify(root: &Path, sandbox: &SandboxId) {
    let Ok(socket) = UnixDatagram::unbound() else {
        return;
    };
    if socket.set_nonblocking(true).is_ok() {
        for path in [socket_path(root), cri_socket_path(root)] {
            let _ = socket.send_to(sandbox.as_str().as_bytes(), path);
        }
    }
}

/// Whether a datagram socket at `path` has a live listener: a socket file left by a process
/// that was killed refuses a `connect` (ECONNREFUSED).
pub fn listened(path: &Path) -> bool {
    UnixDatagram::unbound().is_ok_and(|socket| socket.connect(path).is_ok())
}

/// The agent's end: a datagram socket bound at `<root>/events.sock`, removed on drop.
pub struct Listener {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Listener {
    /// Binds `<root>/events.sock`, replacing the file a killed agent left (the caller holds the
    /// root's agent lock, so no other listener is there).
    pub fn bind(root: &Path) -> Result<Listener> {
        let path = socket_path(root);
        let _ = std::fs::remove_file(&path);
        let socket =
            UnixDatagram::bind(&path).map_err(|e| Error::io("binding", path.clone(), e))?;
        Ok(Listener { socket, path })
    }

    /// The next notice, waiting at most `timeout`; None when none came. A datagram that is not
    /// a sandbox id is skipped.
    pub fn next(&self, timeout: Duration) -> Option<SandboxId> {
        let timeout = timeout.max(Duration::from_millis(1));
        self.socket.set_read_timeout(Some(timeout)).ok()?;
        let mut buffer = [0u8; 128];
        let length = self.socket.recv(&mut buffer).ok()?;
        let text = std::str::from_utf8(&buffer[..length]).ok()?;
        SandboxId::parse(text).ok()
    }
}

/// The socket, for a caller that waits on it with other descriptors (the PLEG's epoll set).
impl std::os::fd::AsFd for Listener {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_reaches_the_listener_and_none_is_lost_silently_without_one() {
        let dir = std::env::temp_dir().join(format!("podlab-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let id = SandboxId::generate();
        notify(&dir, &id); // nobody listens: dropped, no error, no file
        assert!(!socket_path(&dir).exists());
        let listener = Listener::bind(&dir).unwrap();
        assert_eq!(listener.next(Duration::from_millis(1)), None);
        notify(&dir, &id);
        assert_eq!(listener.next(Duration::from_secs(5)), Some(id));
        drop(listener);
        assert!(
            !socket_path(&dir).exists(),
            "the socket goes with the listener"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
