//! The network namespace cookie: the identity of one network namespace for the life of the
//! machine.
//!
//! A namespace's inode number is its identity only while it lives: once the namespace is gone
//! the kernel hands the number out again (to the next namespace of any kind, lowest free number
//! first). The cookie is a 64-bit number the kernel gives each network namespace when it is made,
//! from a counter that only goes up, so two namespaces never share one. Any socket reports the
//! cookie of the namespace it belongs to: `getsockopt(SOL_SOCKET, SO_NETNS_COOKIE)`, Linux 5.14.
//! (An nsfs file handle would name any kind of namespace for good, but `name_to_handle_at` on
//! nsfs fails with EOPNOTSUPP on the kernels podlab runs on.)

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

use crate::{Error, NsKind, Result};

/// The cookie of the calling thread's network namespace; `None` on a kernel older than 5.14.
pub fn self_cookie() -> Result<Option<u64>> {
    cookie_of_socket(&unix_socket().map_err(|e| Error::sys_on("socket(AF_UNIX)", NsKind::Net, e))?)
}

/// The cookie of the network namespace behind `netns` (a `/proc/PID/ns/net` or a pin, opened);
/// `None` on a kernel older than 5.14. The caller does not move: a socket is made in there (see
/// [`super::socket_in`]).
pub fn cookie_of(netns: BorrowedFd<'_>) -> Result<Option<u64>> {
    let socket = super::socket_in(netns, "socket(AF_UNIX)", || {
        unix_socket().map_err(std::io::Error::from)
    })?;
    cookie_of_socket(&socket)
}

/// The smallest socket there is: no protocol module, no port, no address.
fn unix_socket() -> nix::Result<OwnedFd> {
    socket(
        AddressFamily::Unix,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
}

fn cookie_of_socket(socket: &OwnedFd) -> Result<Option<u64>> {
    let mut cookie = 0u64;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cookie`, a u64 that lives across the
    // call.
    let done = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    match nix::errno::Errno::result(done) {
        Ok(_) => Ok(Some(cookie)),
        // Before 5.14 the option does not exist.
        Err(nix::Error::ENOPROTOOPT) => Ok(None),
        Err(e) => Err(Error::sys_on("getsockopt(SO_NETNS_COOKIE)", NsKind::Net, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cookie is the namespace's: the same through a socket made here and through the
    /// namespace's file, and a fresh namespace has another one.
    #[test]
    fn a_namespace_has_one_cookie_and_a_new_one_another() {
        let Some(mine) = self_cookie().unwrap() else {
            eprintln!("skipped: this kernel lacks SO_NETNS_COOKIE (Linux 5.14)");
            return;
        };
        let own = std::fs::File::open("/proc/thread-self/ns/net").unwrap();
        use std::os::fd::AsFd;
        assert_eq!(cookie_of(own.as_fd()).unwrap(), Some(mine));
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let fresh = crate::child::run_in_child(|| {
            crate::ops::create(&[NsKind::Net])?;
            self_cookie()
        })
        .unwrap();
        assert!(fresh.is_some_and(|c| c != mine), "{fresh:?} vs {mine}");
    }
}
