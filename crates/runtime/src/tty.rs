//! Pseudo-terminals: a container's console and the user's terminal around it.
//!
//! The container side is runc's: the process about to `execve` (an exec'd command, or a
//! container's own process with `tty: true`) opens `/dev/ptmx` *inside the container's mount
//! namespace* — `/dev/ptmx` there is a link to `pts/ptmx`, the container's own devpts instance
//! (`newinstance,ptmxmode=0666`, [`podlab_ns::mnt::mount_dev`]), so its ptys are numbered and
//! seen only there — makes the slave its controlling terminal (`setsid`, `TIOCSCTTY`) and its
//! stdin, stdout and stderr, and sends the master back over a unix socket (`SCM_RIGHTS`), as
//! runc does with `--console-socket`: [`open_console`] and [`receive_fd`].
//!
//! The user's side is kubectl's: [`RawMode`] puts the user's terminal in raw mode (so Ctrl-C is
//! a byte for the container's line discipline, which signals the container's foreground
//! process, and not a SIGINT for podlab) and restores it however podlab ends — on return, on a
//! panic (a hook, since panics abort) and on SIGTERM/SIGHUP (read in the relay's loop);
//! [`relay`] copies bytes both ways in one thread with `poll(2)` and passes window size changes
//! (SIGWINCH) on. The relay never starts a thread: the CLI stays single-threaded, so that its
//! forked namespace helpers may still `setns` into mount namespaces.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{self, ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr};
use nix::sys::termios::{self, SetArg, Termios};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A terminal's size in characters, as `TIOCGWINSZ`/`TIOCSWINSZ` and the CRI's `TerminalSize`
/// carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSize {
    pub rows: u16,
    pub cols: u16,
}

/// The size of the terminal `fd` is, if it is one.
pub fn window_size(fd: BorrowedFd<'_>) -> Option<WindowSize> {
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize into `ws`.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    (rc == 0).then_some(WindowSize {
        rows: ws.ws_row,
        cols: ws.ws_col,
    })
}

/// Sets the size of the terminal `fd` (a pty master or slave); the kernel sends SIGWINCH to
/// the terminal's foreground process group when it changes.
pub fn set_window_size(fd: BorrowedFd<'_>, size: WindowSize) -> Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(Error::sys("ioctl(TIOCSWINSZ)", "pty", nix::Error::last()));
    }
    Ok(())
}

/// Whether `fd` is a terminal.
pub fn is_terminal(fd: BorrowedFd<'_>) -> bool {
    nix::unistd::isatty(fd).unwrap_or(false)
}

/// A pty made in this process's mount namespace (`/dev/ptmx`): the master and its slave.
#[derive(Debug)]
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// Opens a new pty from `/dev/ptmx` as this mount namespace sees it. The slave is opened
/// through the master (`TIOCGPTPEER`), not by its path, so that nothing in a container can
/// swap `/dev/pts/N` under us (runc's console code opens its peer the same way).
pub fn open_pty() -> std::result::Result<Pty, (&'static str, nix::Error)> {
    let master = nix::fcntl::open(
        "/dev/ptmx",
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| ("open /dev/ptmx", e))?;
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int (0: unlock the slave).
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } < 0 {
        return Err(("ioctl(TIOCSPTLCK)", nix::Error::last()));
    }
    // SAFETY: TIOCGPTPEER returns a new descriptor for the slave, or -1.
    let slave = unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if slave < 0 {
        return Err(("ioctl(TIOCGPTPEER)", nix::Error::last()));
    }
    // SAFETY: the kernel just made this descriptor for us.
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    Ok(Pty { master, slave })
}

/// The container side of a console, in the process about to `execve` (inside its mount
/// namespace, before it drops privileges): a new pty, the slave as controlling terminal and
/// stdin/stdout/stderr (owned by `uid`, as runc chowns it), the window size set, and the
/// master sent over `socket`. On error: the step that failed and its errno.
pub fn open_console(
    socket: RawFd,
    uid: u32,
    size: Option<WindowSize>,
) -> std::result::Result<(), (&'static str, nix::Error)> {
    let pty = open_pty()?;
    if let Some(size) = size.filter(|s| s.rows > 0 && s.cols > 0) {
        set_window_size(pty.slave.as_fd(), size)
            .map_err(|_| ("ioctl(TIOCSWINSZ)", nix::Error::last()))?;
    }
    // Leave the shim's session, so that the pty can become our controlling terminal.
    nix::unistd::setsid().map_err(|e| ("setsid", e))?;
    // SAFETY: TIOCSCTTY takes an int argument (0: do not steal it from another session).
    if unsafe { libc::ioctl(pty.slave.as_raw_fd(), libc::TIOCSCTTY, 0) } < 0 {
        return Err(("ioctl(TIOCSCTTY)", nix::Error::last()));
    }
    nix::unistd::fchown(&pty.slave, Some(nix::unistd::Uid::from_raw(uid)), None)
        .map_err(|e| ("fchown the console", e))?;
    for target in 0..=2 {
        // SAFETY: dup2 onto the standard descriptors (the copies are not close-on-exec).
        if unsafe { libc::dup2(pty.slave.as_raw_fd(), target) } < 0 {
            return Err(("dup2 the console", nix::Error::last()));
        }
    }
    send_fd(socket, pty.master.as_fd()).map_err(|e| ("send the console master", e))?;
    Ok(())
}

/// Sends one descriptor over a unix socket (`SCM_RIGHTS`), for [`receive_fd`].
pub fn send_fd(socket: RawFd, fd: BorrowedFd<'_>) -> nix::Result<()> {
    let fds = [fd.as_raw_fd()];
    let iov = [std::io::IoSlice::new(b"console")];
    let cmsgs = [ControlMessage::ScmRights(&fds)];
    loop {
        match socket::sendmsg::<UnixAddr>(socket, &iov, &cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Err(nix::Error::EINTR) => continue,
            other => return other.map(|_| ()),
        }
    }
}

/// Receives a descriptor sent with [`open_console`] (or any one descriptor sent over a unix
/// socket with `SCM_RIGHTS`); None if the other side closed without sending one.
pub fn receive_fd(socket: BorrowedFd<'_>) -> Result<Option<OwnedFd>> {
    let mut buffer = [0u8; 64];
    let mut cmsg_space = nix::cmsg_space!([RawFd; 1]);
    loop {
        let mut iov = [std::io::IoSliceMut::new(&mut buffer)];
        match socket::recvmsg::<UnixAddr>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg_space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let mut received = None;
                for cmsg in msg
                    .cmsgs()
                    .map_err(|e| Error::sys("recvmsg", "console socket", e))?
                {
                    if let ControlMessageOwned::ScmRights(fds) = cmsg {
                        for fd in fds {
                            // SAFETY: the kernel installed these descriptors for us.
                            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                            received.get_or_insert(fd);
                        }
                    }
                }
                return Ok(received);
            }
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(Error::sys("recvmsg", "console socket", e)),
        }
    }
}

/// A socket pair for a console: the first end stays with the receiver, the second is handed
/// to the process that makes the pty.
pub fn console_socket_pair() -> Result<(OwnedFd, OwnedFd)> {
    socket::socketpair(
        socket::AddressFamily::Unix,
        socket::SockType::SeqPacket,
        None,
        socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| Error::sys("socketpair", "console socket", e))
}

/// The terminal settings to put back, for the panic hook (a panic aborts: no drop runs).
static SAVED_TERMINAL: Mutex<Option<(RawFd, Termios)>> = Mutex::new(None);

/// The user's terminal in raw mode, as kubectl's `term.TTY.Safe` puts it; restored on drop, on
/// a panic, and by [`relay`] on SIGTERM/SIGHUP.
pub struct RawMode {
    fd: RawFd,
    saved: Termios,
}

impl RawMode {
    /// Raw mode for the terminal `fd` (kept open by the caller for as long as this lives).
    pub fn enter(fd: BorrowedFd<'_>) -> Result<RawMode> {
        let saved = termios::tcgetattr(fd).map_err(|e| Error::sys("tcgetattr", "stdin", e))?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        install_panic_hook();
        if let Ok(mut slot) = SAVED_TERMINAL.lock() {
            *slot = Some((fd.as_raw_fd(), saved.clone()));
        }
        termios::tcsetattr(fd, SetArg::TCSANOW, &raw)
            .map_err(|e| Error::sys("tcsetattr", "stdin", e))?;
        Ok(RawMode {
            fd: fd.as_raw_fd(),
            saved,
        })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: the caller keeps the terminal open while the guard lives.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        let _ = termios::tcsetattr(fd, SetArg::TCSANOW, &self.saved);
        if let Ok(mut slot) = SAVED_TERMINAL.lock() {
            *slot = None;
        }
    }
}

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(slot) = SAVED_TERMINAL.try_lock() {
                if let Some((fd, saved)) = slot.as_ref() {
                    // SAFETY: the descriptor is the process's stdin, open while it lives.
                    let fd = unsafe { BorrowedFd::borrow_raw(*fd) };
                    let _ = termios::tcsetattr(fd, SetArg::TCSANOW, saved);
                }
            }
            previous(info);
        }));
    });
}

/// The two sides a [`relay`] joins.
pub struct RelayEnds<'a> {
    /// The user's input (stdin); None without `-i`.
    pub input: Option<BorrowedFd<'a>>,
    /// The user's output (stdout).
    pub output: BorrowedFd<'a>,
    /// Where input goes: the pty master, or a pipe or socket to the shim; None without `-i`.
    pub remote_input: Option<BorrowedFd<'a>>,
    /// Where output comes from: the pty master, or a socket from the shim.
    pub remote_output: BorrowedFd<'a>,
    /// Readable when the remote process has ended (the shim's connection, with its exit
    /// message): the relay then takes what output is left and returns.
    pub ended: Option<BorrowedFd<'a>>,
    /// What the detach keys (Ctrl-P Ctrl-Q) typed into `input` do.
    pub detach: Detach<'a>,
}

/// The detach sequence of `docker attach` and `podman attach` (kubectl's attach session
/// ends the same way: the container keeps running): Ctrl-P, Ctrl-Q.
pub const DETACH_KEYS: &[u8] = &[0x10, 0x11];

/// What the detach keys typed into a relay's input do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detach<'a> {
    /// Nothing: they are input like any other (`exec`).
    Off,
    /// They end the relay ([`RelayEnd::Detached`]) and are not passed on.
    Keys,
    /// There is no tty to detach from: they are not passed on, and `message` is written to
    /// stderr (the relay goes on).
    Refused(&'a str),
}

/// Finds the detach keys in a stream of input read in pieces: a key that may begin the
/// sequence is held back until the next one shows whether it does (as docker's reader does).
#[derive(Debug, Default)]
pub struct DetachScanner {
    held: usize,
}

impl DetachScanner {
    /// Appends to `out` what of `input` is passed on; true when the sequence was completed
    /// (what came after it in `input` is dropped).
    pub fn scan(&mut self, input: &[u8], out: &mut Vec<u8>) -> bool {
        for &byte in input {
            if byte == DETACH_KEYS[self.held] {
                self.held += 1;
                if self.held == DETACH_KEYS.len() {
                    self.held = 0;
                    return true;
                }
                continue;
            }
            out.extend_from_slice(&DETACH_KEYS[..self.held]);
            self.held = 0;
            if byte == DETACH_KEYS[0] {
                self.held = 1;
            } else {
                out.push(byte);
            }
        }
        false
    }
}

/// Why a [`relay`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayEnd {
    /// The remote output ended (end of file, or EIO: every slave of the pty closed).
    OutputClosed,
    /// `ended` became readable.
    Ended,
    /// SIGTERM, SIGHUP or SIGINT came to podlab.
    Signal(i32),
    /// The user typed the detach keys ([`Detach::Keys`]).
    Detached,
}

/// How long output is still taken after `ended` (a child of the process may hold the pty).
const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// Copies the user's input to the remote side and the remote output to the user, in this
/// thread, until the output ends, `ended` is readable or a terminating signal comes. SIGWINCH
/// calls `on_resize` with the new size of the user's terminal (`terminal`), and so does the
/// start, once. Signals are taken with a signalfd for the relay's life and unblocked after.
pub fn relay(
    ends: &RelayEnds<'_>,
    terminal: Option<BorrowedFd<'_>>,
    mut on_resize: impl FnMut(WindowSize),
) -> Result<RelayEnd> {
    let signals = RelaySignals::take()?;
    if let Some(size) = terminal.and_then(window_size) {
        on_resize(size);
    }
    relay_loop(ends, &signals, terminal, &mut on_resize)
}

/// A signal a relay acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelaySignal {
    /// SIGWINCH: the user's terminal changed size.
    Resize,
    /// SIGTERM, SIGHUP or SIGINT: the relay ends.
    Stop(i32),
}

/// The signals a relay answers (SIGWINCH, SIGTERM, SIGHUP, SIGINT), blocked and read from a
/// signalfd (to poll with the relay's descriptors) while this lives. On drop the mask is put
/// back once the ones still pending are taken: delivered with the old mask, a fatal one would
/// end podlab before the caller's raw-mode guard restores the terminal.
pub struct RelaySignals {
    fd: SignalFd,
    old: SigSet,
}

impl RelaySignals {
    pub fn take() -> Result<RelaySignals> {
        let mut mask = SigSet::empty();
        for signal in [
            Signal::SIGWINCH,
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGINT,
        ] {
            mask.add(signal);
        }
        let mut old = SigSet::empty();
        nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), Some(&mut old))
            .map_err(|e| Error::sys("sigprocmask", "relay", e))?;
        match SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) {
            Ok(fd) => Ok(RelaySignals { fd, old }),
            Err(e) => {
                let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
                Err(Error::sys("signalfd", "relay", e))
            }
        }
    }

    /// The next signal that came, if any (never blocks).
    pub fn next(&self) -> Option<RelaySignal> {
        let info = self.fd.read_signal().ok()??;
        Some(match info.ssi_signo as i32 {
            libc::SIGWINCH => RelaySignal::Resize,
            signo => RelaySignal::Stop(signo),
        })
    }
}

impl AsFd for RelaySignals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for RelaySignals {
    fn drop(&mut self) {
        while let Ok(Some(_)) = self.fd.read_signal() {}
        let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&self.old), None);
    }
}

fn relay_loop(
    ends: &RelayEnds<'_>,
    signals: &RelaySignals,
    terminal: Option<BorrowedFd<'_>>,
    on_resize: &mut impl FnMut(WindowSize),
) -> Result<RelayEnd> {
    let mut input_open = ends.input.is_some() && ends.remote_input.is_some();
    let mut pending: Vec<u8> = Vec::new();
    let mut buffer = vec![0u8; 32 * 1024];
    let mut drain_until: Option<Instant> = None;
    let mut scanner = DetachScanner::default();
    loop {
        // Slots: 0 signals, 1 remote output, then input or remote input, then ended.
        let mut fds = vec![
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(ends.remote_output, PollFlags::POLLIN),
        ];
        let input_slot = match (input_open, pending.is_empty()) {
            (true, true) => ends.input.map(|fd| {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
                fds.len() - 1
            }),
            _ => None,
        };
        let remote_input_slot = (!pending.is_empty())
            .then_some(ends.remote_input)
            .flatten()
            .map(|fd| {
                fds.push(PollFd::new(fd, PollFlags::POLLOUT));
                fds.len() - 1
            });
        let ended_slot = match (drain_until, ends.ended) {
            (None, Some(fd)) => {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
                Some(fds.len() - 1)
            }
            _ => None,
        };
        let timeout = match drain_until {
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(RelayEnd::Ended);
                }
                PollTimeout::try_from(left.as_millis() as i32 + 1).unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        match nix::poll::poll(&mut fds, timeout) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(Error::sys("poll", "terminal relay", e)),
        }
        let ready = |fds: &[PollFd], slot: Option<usize>| {
            slot.and_then(|s| fds.get(s))
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        let signal_ready = ready(&fds, Some(0));
        let output_ready = ready(&fds, Some(1));
        let input_ready = ready(&fds, input_slot);
        let remote_input_ready = ready(&fds, remote_input_slot);
        let ended_ready = ready(&fds, ended_slot);
        drop(fds);
        if signal_ready {
            while let Some(signal) = signals.next() {
                match signal {
                    RelaySignal::Resize => {
                        if let Some(size) = terminal.and_then(window_size) {
                            on_resize(size);
                        }
                    }
                    RelaySignal::Stop(signo) => return Ok(RelayEnd::Signal(signo)),
                }
            }
        }
        if output_ready {
            match nix::unistd::read(ends.remote_output, &mut buffer) {
                Ok(0) | Err(nix::Error::EIO) => return Ok(RelayEnd::OutputClosed),
                Ok(n) => write_all(ends.output, &buffer[..n])?,
                Err(nix::Error::EINTR | nix::Error::EAGAIN) => {}
                Err(e) => return Err(Error::sys("read", "the remote output", e)),
            }
        }
        if input_ready {
            if let Some(input) = ends.input {
                match nix::unistd::read(input, &mut buffer) {
                    Ok(0) | Err(nix::Error::EIO) => {
                        input_open = false;
                        // A socket to the shim carries the end of input on (stdinOnce);
                        // a pty master is no socket and has none to carry.
                        if let Some(remote) = ends.remote_input.filter(|_| pending.is_empty()) {
                            let _ = socket::shutdown(remote.as_raw_fd(), socket::Shutdown::Write);
                        }
                    }
                    Ok(n) => match ends.detach {
                        Detach::Off => pending.extend_from_slice(&buffer[..n]),
                        Detach::Keys => {
                            if scanner.scan(&buffer[..n], &mut pending) {
                                return Ok(RelayEnd::Detached);
                            }
                        }
                        Detach::Refused(message) => {
                            if scanner.scan(&buffer[..n], &mut pending) {
                                let stderr = std::io::stderr();
                                write_all(stderr.as_fd(), format!("{message}\n").as_bytes())?;
                            }
                        }
                    },
                    Err(nix::Error::EINTR | nix::Error::EAGAIN) => {}
                    Err(e) => return Err(Error::sys("read", "stdin", e)),
                }
            }
        }
        if remote_input_ready {
            if let Some(remote) = ends.remote_input {
                match nix::unistd::write(remote, &pending) {
                    Ok(n) => {
                        pending.drain(..n);
                        if pending.is_empty() && !input_open && ends.input.is_some() {
                            let _ = socket::shutdown(remote.as_raw_fd(), socket::Shutdown::Write);
                        }
                    }
                    Err(nix::Error::EINTR | nix::Error::EAGAIN) => {}
                    // The remote side closed its input: what the user types goes nowhere.
                    Err(_) => {
                        pending.clear();
                        input_open = false;
                    }
                }
            }
        }
        if ended_ready {
            drain_until = Some(Instant::now() + DRAIN_GRACE);
        }
    }
}

/// Writes all of `bytes` to a (blocking or not) descriptor.
pub fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8]) -> Result<()> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(nix::Error::EINTR) => {}
            Err(nix::Error::EAGAIN) => {
                let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
                let _ = nix::poll::poll(&mut fds, PollTimeout::NONE);
            }
            Err(e) => return Err(Error::sys("write", "terminal output", e)),
        }
    }
    Ok(())
}

/// Makes `fd` non-blocking (a pty master the relay writes to must never block it).
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> Result<()> {
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL)
        .map_err(|e| Error::sys("fcntl(F_GETFL)", "pty", e))?;
    nix::fcntl::fcntl(
        fd,
        nix::fcntl::FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .map_err(|e| Error::sys("fcntl(F_SETFL)", "pty", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pty_carries_bytes_and_its_size() {
        let pty = open_pty().unwrap();
        set_window_size(
            pty.master.as_fd(),
            WindowSize {
                rows: 33,
                cols: 101,
            },
        )
        .unwrap();
        assert_eq!(
            window_size(pty.slave.as_fd()),
            Some(WindowSize {
                rows: 33,
                cols: 101
            })
        );
        assert!(is_terminal(pty.slave.as_fd()));
        nix::unistd::write(&pty.master, b"hi\n").unwrap();
        let mut buf = [0u8; 16];
        let n = nix::unistd::read(&pty.slave, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hi\n");
    }

    #[test]
    fn a_descriptor_crosses_a_console_socket() {
        let (receiver, sender) = console_socket_pair().unwrap();
        let pty = open_pty().unwrap();
        send_fd(sender.as_raw_fd(), pty.master.as_fd()).unwrap();
        let got = receive_fd(receiver.as_fd()).unwrap().unwrap();
        set_window_size(got.as_fd(), WindowSize { rows: 7, cols: 9 }).unwrap();
        assert_eq!(
            window_size(pty.slave.as_fd()),
            Some(WindowSize { rows: 7, cols: 9 })
        );
        drop(sender);
        assert!(receive_fd(receiver.as_fd()).unwrap().is_none());
    }

    #[test]
    fn the_detach_keys_are_found_across_reads_and_held_back_only_while_they_may_begin() {
        let mut scanner = DetachScanner::default();
        let mut out = Vec::new();
        assert!(!scanner.scan(b"ab\x10", &mut out));
        assert_eq!(out, b"ab", "a Ctrl-P waits for the next key");
        assert!(!scanner.scan(b"c", &mut out));
        assert_eq!(out, b"ab\x10c", "it was no detach: both go on");
        assert!(!scanner.scan(b"\x10\x10", &mut out));
        assert_eq!(out, b"ab\x10c\x10");
        assert!(scanner.scan(b"\x11rest", &mut out));
        assert_eq!(
            out, b"ab\x10c\x10",
            "the keys and what follows are not passed on"
        );
        let mut out = Vec::new();
        assert!(!DetachScanner::default().scan(b"\x11\x03", &mut out));
        assert_eq!(out, b"\x11\x03");
    }

    #[test]
    fn raw_mode_is_restored_on_drop() {
        let pty = open_pty().unwrap();
        let before = termios::tcgetattr(pty.slave.as_fd()).unwrap();
        {
            let _raw = RawMode::enter(pty.slave.as_fd()).unwrap();
            let during = termios::tcgetattr(pty.slave.as_fd()).unwrap();
            assert!(!during.local_flags.contains(termios::LocalFlags::ICANON));
        }
        let after = termios::tcgetattr(pty.slave.as_fd()).unwrap();
        assert_eq!(before.local_flags, after.local_flags);
        assert_eq!(before.input_flags, after.input_flags);
        assert_eq!(before.output_flags, after.output_flags);
    }
}
