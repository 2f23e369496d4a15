//! Making a socket inside another network namespace without moving the caller.
//!
//! A socket (netlink, TCP, UDP) belongs for life to the network namespace its creating thread
//! was in. So the cheap way to get one elsewhere is what `ip netns exec` and Go's `netns.Do`
//! do: the calling thread steps in with `setns(2)`, makes the socket, and steps back.
//!
//! Stepping back needs `CAP_SYS_ADMIN` over the home namespace's owning user namespace. A
//! rootless podlab (root only inside a user namespace it made) does not have that over the host's
//! network namespace: once out, the thread could never return. So before stepping out the way
//! back is tried (a `setns` into the namespace the thread is already in checks the same rights
//! and changes nothing). When it is closed, [`socket_in`] lets a forked child step in for good,
//! make the socket there and hand it back over a Unix socket (`SCM_RIGHTS`).

use std::fs::File;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::sched::CloneFlags;
use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType, UnixAddr,
};
use nix::unistd::{fork, ForkResult};

use crate::error::Target;
use crate::{Error, NsKind, Result};

const HOME: &str = "/proc/thread-self/ns/net";

/// Runs `f` with the calling thread inside the network namespace `netns`, then moves the thread
/// back (also when `f` panics). Only the calling thread moves, so this is safe in a
/// multi-threaded process. Fails, without moving, when the thread could not come back (see the
/// module doc); [`socket_in`] has a way for that case.
pub fn in_netns<R>(netns: BorrowedFd<'_>, f: impl FnOnce() -> R) -> Result<R> {
    match step_in(netns)? {
        Some(way_back) => {
            let value = f();
            way_back.go()?;
            Ok(value)
        }
        None => Err(Error::sys_at(
            "setns(CLONE_NEWNET) back into the caller's own network namespace (tried before leaving)",
            home_target(),
            nix::Error::EPERM,
        )),
    }
}

/// A new network namespace with `lo` up, held only by the returned descriptor (never pinned):
/// it goes when that closes, unless a process joined it or a pin holds it by then. A thread of
/// its own makes it and ends in it (`unshare(2)` moves only the calling thread), so the caller
/// never moves and a multi-threaded process may call this.
pub fn new_held() -> Result<OwnedFd> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::unshare(CloneFlags::CLONE_NEWNET)
                    .map_err(|e| Error::sys("unshare(CLONE_NEWNET)", e))?;
                let made = File::open(HOME)
                    .map_err(|e| Error::io("open the new network namespace", HOME, e))?;
                super::Netlink::open()?.loopback_up()?;
                Ok(OwnedFd::from(made))
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A new network namespace, pinned at `path` (which must not exist yet; its folder must), with
/// nothing in it but a `lo` that is still down: a pod's, made by its starter so that the
/// network's ADD can run while the pod's first process starts and joins it. Made by a thread
/// of its own, like [`new_held`], so the caller never moves.
pub fn new_pinned(path: &std::path::Path) -> Result<()> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::unshare(CloneFlags::CLONE_NEWNET)
                    .map_err(|e| Error::sys("unshare(CLONE_NEWNET)", e))?;
                crate::ops::pin_self(NsKind::Net, path)
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A stream socket bound to the abstract unix name `name` of the calling thread's network
/// namespace. One socket of a namespace can hold a name at a time (the next bind fails with
/// `EADDRINUSE`) and the kernel lets it go when the socket closes, even at a `kill -9`: a lock
/// per network namespace that needs no file. In another namespace: inside [`socket_in`].
pub fn bind_abstract(name: &[u8]) -> std::io::Result<OwnedFd> {
    use nix::sys::socket::{bind, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let address = UnixAddr::new_abstract(name)?;
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    bind(fd.as_raw_fd(), &address)?;
    Ok(fd)
}

/// Makes a socket (`make`, e.g. a bind or a connect) inside the network namespace `netns` and
/// returns it; the caller does not move. `call` names what `make` does, for its error.
pub fn socket_in(
    netns: BorrowedFd<'_>,
    call: &'static str,
    make: impl FnOnce() -> std::io::Result<OwnedFd>,
) -> Result<OwnedFd> {
    match step_in(netns)? {
        Some(way_back) => {
            let made = make();
            way_back.go()?;
            made.map_err(|err| Error::sys_on(call, NsKind::Net, errno_of(&err)))
        }
        None => made_by_child(netns, call, make),
    }
}

/// Steps the calling thread into `netns`; `None` (and no move) when it could not come back.
fn step_in(netns: BorrowedFd<'_>) -> Result<Option<WayBack>> {
    let home = File::open(HOME).map_err(|e| Error::io("open own network namespace", HOME, e))?;
    match nix::sched::setns(&home, CloneFlags::CLONE_NEWNET) {
        Err(nix::Error::EPERM) => return Ok(None),
        Err(e) => return Err(Error::sys_at("setns(CLONE_NEWNET)", home_target(), e)),
        Ok(()) => {}
    }
    nix::sched::setns(netns, CloneFlags::CLONE_NEWNET).map_err(|e| {
        Error::sys_on(
            "setns(CLONE_NEWNET) into the target network namespace",
            NsKind::Net,
            e,
        )
    })?;
    Ok(Some(WayBack(Some(home))))
}

/// Moves the thread back into its own network namespace, on the normal path or while unwinding.
struct WayBack(Option<File>);

impl WayBack {
    fn go(mut self) -> Result<()> {
        let home = self.0.take().expect("the way back is taken once");
        nix::sched::setns(&home, CloneFlags::CLONE_NEWNET).map_err(|e| {
            Error::sys_at(
                "setns(CLONE_NEWNET) back into the caller's network namespace",
                home_target(),
                e,
            )
        })
    }
}

impl Drop for WayBack {
    fn drop(&mut self) {
        if let Some(home) = self.0.take() {
            // Only reached while unwinding: there is no one to report a failure to.
            let _ = nix::sched::setns(&home, CloneFlags::CLONE_NEWNET);
        }
    }
}

/// A forked child joins `netns` for good, runs `make`, and sends back the socket (or the errno).
fn made_by_child(
    netns: BorrowedFd<'_>,
    call: &'static str,
    make: impl FnOnce() -> std::io::Result<OwnedFd>,
) -> Result<OwnedFd> {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| Error::sys("socketpair", e))?;
    // SAFETY: the child only joins, makes one socket, sends it and _exits.
    match unsafe { fork() }.map_err(|e| Error::sys("fork", e))? {
        ForkResult::Child => {
            drop(ours);
            let outcome = nix::sched::setns(netns, CloneFlags::CLONE_NEWNET)
                .map_err(|e| (e, "setns(CLONE_NEWNET) into the target network namespace"))
                .and_then(|()| make().map_err(|err| (errno_of(&err), call)));
            let sent = match &outcome {
                Ok(fd) => send(&theirs, 0, &[fd.as_raw_fd()]),
                Err((errno, _)) => send(&theirs, *errno as i32, &[]),
            };
            // SAFETY: leave without the parent's atexit handlers and buffers.
            unsafe { libc::_exit(if sent.is_ok() { 0 } else { 1 }) }
        }
        ForkResult::Parent { child } => {
            drop(theirs);
            let received = receive(&ours);
            let status = crate::child::wait_for(child)?;
            match received {
                Ok((0, Some(fd))) => Ok(fd),
                Ok((errno, _)) if errno != 0 => Err(Error::sys_on(
                    call,
                    NsKind::Net,
                    nix::Error::from_raw(errno),
                )),
                _ => Err(Error::Child {
                    pid: child.as_raw(),
                    message: format!(
                        "making a socket in another network namespace: no answer ({})",
                        crate::child::describe(status)
                    ),
                }),
            }
        }
    }
}

fn send(channel: &OwnedFd, errno: i32, fds: &[i32]) -> nix::Result<usize> {
    let bytes = errno.to_ne_bytes();
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    sendmsg::<UnixAddr>(
        channel.as_raw_fd(),
        &[IoSlice::new(&bytes)],
        cmsgs,
        MsgFlags::empty(),
        None,
    )
}

/// The errno and the socket the child sent; `Err` when it sent nothing.
fn receive(channel: &OwnedFd) -> nix::Result<(i32, Option<OwnedFd>)> {
    let mut bytes = [0u8; 4];
    let mut space = nix::cmsg_space!([i32; 1]);
    let mut iov = [IoSliceMut::new(&mut bytes)];
    let message = recvmsg::<UnixAddr>(
        channel.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    if message.bytes != 4 {
        return Err(nix::Error::EPIPE);
    }
    let mut socket = None;
    for cmsg in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for fd in fds {
                // SAFETY: SCM_RIGHTS gave this process a new descriptor that nothing else owns.
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                socket.get_or_insert(owned);
            }
        }
    }
    Ok((i32::from_ne_bytes(bytes), socket))
}

fn errno_of(err: &std::io::Error) -> nix::Error {
    match err.raw_os_error() {
        Some(code) => nix::Error::from_raw(code),
        None if err.kind() == std::io::ErrorKind::TimedOut => nix::Error::ETIMEDOUT,
        None => nix::Error::EIO,
    }
}

fn home_target() -> Target {
    Target {
        kind: Some(NsKind::Net),
        path: Some(HOME.into()),
        pid: None,
    }
}
