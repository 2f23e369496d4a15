//! The client of a CRI runtime's streaming server: what `podlab exec -i`/`-t` and `podlab
//! attach` do with the URL that the CRI's Exec or Attach answered, as crictl and kubectl do
//! with client-go's `remotecommand.NewSPDYExecutor`.
//!
//! - The URL is opened with an HTTP/1.1 `POST` that asks to upgrade to `SPDY/3.1` with the
//!   protocol `v4.channel.k8s.io`; the server answers `101 Switching Protocols` (anything else
//!   is an error carrying the server's body, client-go's `unable to upgrade connection`).
//! - The client opens its streams with SYN_STREAMs whose `streamtype` header names them:
//!   `error`, then `stdin` (with `-i`), `stdout`, `stderr` (without a terminal) or `resize`
//!   (with one), and waits for each one's SYN_REPLY, as spdystream's `CreateStream` does.
//! - Then one `poll(2)` loop, in this thread (the CLI stays single-threaded): stdin goes out in
//!   data frames, its end as an empty data frame with FIN (so that `cat` in the container sees
//!   its end of file); output frames go to stdout and stderr; the terminal's size goes on
//!   `resize` as `{"Width":W,"Height":H}` lines, first at once, then on each SIGWINCH; PINGs
//!   are answered. With a terminal this one is in raw mode for the session, restored however it
//!   ends (the runtime crate's `RawMode`).
//! - The session ends when the output streams and `error` have ended (or the server closed the
//!   connection); `error` then holds a `metav1.Status`: nothing or `Success` is exit code 0,
//!   `NonZeroExitCode` carries the code in its `ExitCode` cause, anything else is an error.
//!   SIGTERM, SIGHUP and SIGINT end it early (128 + the signal), and in an `attach` with a
//!   terminal the detach keys Ctrl-P Ctrl-Q do (the container keeps running).
//!
//! The SPDY frames and their compressed header blocks are the CRI server's own
//! (`podlab_cri::streaming::spdy`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use podlab_cri::streaming::spdy::{Decoder, Encoder, Frame};
use podlab_cri::streaming::REMOTECOMMAND_V4;
use podlab_runtime::tty::{self, DetachScanner, RawMode, RelaySignal, RelaySignals, WindowSize};

/// How long the upgrade and the streams' creation may take (client-go's 30 s).
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest data frame sent (what the server sends too).
const CHUNK: usize = 32 * 1024;
/// Input is read only while less than this waits for the socket.
const QUEUE_LIMIT: usize = 256 * 1024;

/// What a session streams.
#[derive(Debug, Clone, Copy)]
pub struct Session {
    /// The user's stdin goes to the process (`-i`).
    pub stdin: bool,
    /// The request has a terminal: one output stream and a `resize` stream.
    pub tty: bool,
    /// This terminal goes in raw mode and its size is sent (stdin is a terminal).
    pub raw: bool,
    /// Ctrl-P Ctrl-Q end the session (an attach with a terminal).
    pub detach_keys: bool,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The server's outcome: the process's exit code (0 for an attach whose output ended).
    Exited(i32),
    /// The user typed the detach keys.
    Detached,
    /// podlab was stopped by this signal.
    Signal(i32),
}

/// The connection: TCP (`http://HOST:PORT/…`) or a unix socket (`unix:///SOCKET/PATH…`).
enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    fn stream(&mut self) -> &mut dyn ReadWrite {
        match self {
            Conn::Tcp(s) => s,
            Conn::Unix(s) => s,
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Conn::Tcp(s) => s.as_fd(),
            Conn::Unix(s) => s.as_fd(),
        }
    }

    fn configure(&self, timeout: Option<Duration>, nonblocking: bool) -> std::io::Result<()> {
        match self {
            Conn::Tcp(s) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)?;
                s.set_nonblocking(nonblocking)
            }
            Conn::Unix(s) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)?;
                s.set_nonblocking(nonblocking)
            }
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Where a URL leads: the connection, the request's path and its `Host`.
fn dial(url: &str) -> Result<(Conn, String, String)> {
    if let Some(rest) = url.strip_prefix("http://") {
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        let stream = TcpStream::connect(authority)
            .with_context(|| format!("connecting to the streaming server at {authority}"))?;
        let _ = stream.set_nodelay(true);
        return Ok((Conn::Tcp(stream), path.to_string(), authority.to_string()));
    }
    if let Some(rest) = url.strip_prefix("unix://") {
        let (socket, path) = unix_socket_of(Path::new(rest))
            .with_context(|| format!("no unix socket in the streaming URL {url:?}"))?;
        let stream = UnixStream::connect(&socket)
            .with_context(|| format!("connecting to the streaming server at {socket:?}"))?;
        return Ok((Conn::Unix(stream), path, "localhost".to_string()));
    }
    bail!("streaming URL {url:?}: only http:// and unix:// are supported (no TLS)")
}

/// The socket a `unix://` URL's path begins with (its longest leading part that is a socket),
/// and the rest of the path, which is the request's.
fn unix_socket_of(path: &Path) -> Option<(PathBuf, String)> {
    let socket = path.ancestors().find(|p| {
        std::fs::metadata(p)
            .map(|m| m.file_type().is_socket())
            .unwrap_or(false)
    })?;
    let rest = path.strip_prefix(socket).ok()?.to_string_lossy();
    Some((socket.to_path_buf(), format!("/{rest}")))
}

/// The upgrade: request, `101`, and what the server sent after its answer's head.
fn upgrade(conn: &mut Conn, path: &str, host: &str) -> Result<Vec<u8>> {
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: podlab\r\nContent-Length: 0\r\n\
         Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {REMOTECOMMAND_V4}\r\n\r\n"
    );
    let stream = conn.stream();
    stream.write_all(request.as_bytes())?;
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    let end = loop {
        if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if head.len() > 64 * 1024 {
            bail!("the streaming server's answer has no end of its head");
        }
        let n = stream.read(&mut buffer)?;
        if n == 0 {
            bail!("the streaming server closed the connection before it answered");
        }
        head.extend_from_slice(&buffer[..n]);
    };
    let rest = head.split_off(end);
    let text = String::from_utf8_lossy(&head).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let header = |name: &str| {
        text.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    if status != "101" {
        // The body says why (at most what a short read brings, as client-go reads it).
        let mut body = rest;
        let length = header("content-length").and_then(|l| l.parse::<usize>().ok());
        while length.is_some_and(|l| body.len() < l.min(64 * 1024)) {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&buffer[..n]),
            }
        }
        let body = String::from_utf8_lossy(&body).trim().to_string();
        let line = text.lines().next().unwrap_or_default();
        bail!("unable to upgrade connection: {line}: {body}");
    }
    let protocol = header("x-stream-protocol-version").unwrap_or_default();
    if protocol != REMOTECOMMAND_V4 {
        bail!("the streaming server chose protocol {protocol:?}; podlab speaks {REMOTECOMMAND_V4}");
    }
    Ok(rest)
}

/// The streams the client opened, by id.
#[derive(Debug, Default)]
struct Ids {
    error: u32,
    stdin: Option<u32>,
    stdout: u32,
    stderr: Option<u32>,
    resize: Option<u32>,
}

/// Runs a session on `url`.
pub fn run(url: &str, session: Session) -> Result<End> {
    let (mut conn, path, host) = dial(url)?;
    conn.configure(Some(SETUP_TIMEOUT), false)?;
    let rest = upgrade(&mut conn, &path, &host)?;
    let mut decoder = Decoder::new();
    decoder.push(&rest);
    let mut encoder = Encoder::new();
    // client-go's order: error, stdin, stdout, stderr, resize; ids odd and rising.
    let mut kinds = vec!["error"];
    kinds.extend(session.stdin.then_some("stdin"));
    kinds.push("stdout");
    kinds.push(if session.tty { "resize" } else { "stderr" });
    let mut ids = Ids::default();
    let mut opened = Vec::new();
    for (n, kind) in kinds.iter().enumerate() {
        let id = 2 * n as u32 + 1;
        match *kind {
            "error" => ids.error = id,
            "stdin" => ids.stdin = Some(id),
            "stdout" => ids.stdout = id,
            "stderr" => ids.stderr = Some(id),
            _ => ids.resize = Some(id),
        }
        conn.stream()
            .write_all(&encoder.syn_stream(id, &[("streamtype", kind)]))?;
        opened.push(id);
    }
    // Each stream's SYN_REPLY; frames that come with them are kept for the loop.
    let mut early = Vec::new();
    let mut buffer = vec![0u8; CHUNK];
    while !opened.is_empty() {
        match decoder.next_frame()? {
            Some(Frame::SynReply { stream_id, .. }) => opened.retain(|id| *id != stream_id),
            Some(Frame::RstStream { stream_id, status }) if opened.contains(&stream_id) => {
                bail!("the streaming server refused stream {stream_id} (status {status})")
            }
            Some(frame) => early.push(frame),
            None => {
                let n = conn
                    .stream()
                    .read(&mut buffer)
                    .context("waiting for the streaming server to accept the streams")?;
                if n == 0 {
                    bail!(
                        "the streaming server closed the connection before it accepted the streams"
                    );
                }
                decoder.push(&buffer[..n]);
            }
        }
    }
    conn.configure(None, true)?;
    let mut relay = Relay {
        session,
        ids,
        out: Vec::new(),
        error: Vec::new(),
        stdout_open: true,
        stderr_open: !session.tty,
        error_open: true,
        input_open: session.stdin,
        scanner: DetachScanner::default(),
    };
    let signals = RelaySignals::take()?;
    let stdin = std::io::stdin();
    let _raw = match session.raw {
        true => Some(RawMode::enter(stdin.as_fd())?),
        false => None,
    };
    if session.raw {
        relay.send_size();
    }
    for frame in early {
        if let Some(end) = relay.frame(frame)? {
            return Ok(end);
        }
    }
    let end = relay.run(&mut conn, &mut decoder, &signals)?;
    // spdystream's Close: GOAWAY, then the socket goes.
    let _ = conn.stream().write_all(&Encoder::go_away(0));
    Ok(end)
}

/// The loop's state.
struct Relay {
    session: Session,
    ids: Ids,
    /// Encoded frames not yet written to the socket.
    out: Vec<u8>,
    /// What came on `error`.
    error: Vec<u8>,
    stdout_open: bool,
    stderr_open: bool,
    error_open: bool,
    input_open: bool,
    scanner: DetachScanner,
}

impl Relay {
    fn run(
        &mut self,
        conn: &mut Conn,
        decoder: &mut Decoder,
        signals: &RelaySignals,
    ) -> Result<End> {
        let stdin = std::io::stdin();
        let mut buffer = vec![0u8; CHUNK];
        loop {
            if !self.stdout_open && !self.stderr_open && !self.error_open {
                return self.outcome();
            }
            let mut socket_events = PollFlags::POLLIN;
            if !self.out.is_empty() {
                socket_events |= PollFlags::POLLOUT;
            }
            let mut fds = vec![
                PollFd::new(signals.as_fd(), PollFlags::POLLIN),
                PollFd::new(conn.fd(), socket_events),
            ];
            let reading_input = self.input_open && self.out.len() < QUEUE_LIMIT;
            if reading_input {
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
            }
            match nix::poll::poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::Error::EINTR) => {}
                Err(e) => return Err(e).context("poll in the streaming session"),
            }
            let ready = |slot: usize| {
                fds.get(slot)
                    .and_then(|f| f.revents())
                    .is_some_and(|r| !r.is_empty())
            };
            let (signal_ready, socket_ready, input_ready) = (ready(0), ready(1), ready(2));
            let writable = fds[1]
                .revents()
                .is_some_and(|r| r.contains(PollFlags::POLLOUT));
            drop(fds);
            if signal_ready {
                while let Some(signal) = signals.next() {
                    match signal {
                        RelaySignal::Resize => self.send_size(),
                        RelaySignal::Stop(signo) => return Ok(End::Signal(signo)),
                    }
                }
            }
            if input_ready {
                match nix::unistd::read(stdin.as_fd(), &mut buffer) {
                    Ok(0) | Err(nix::Error::EIO) => {
                        self.input_open = false;
                        if let Some(id) = self.ids.stdin {
                            self.out.extend(Encoder::data(id, &[], true));
                        }
                    }
                    Ok(n) => {
                        if self.input(&buffer[..n]) {
                            return Ok(End::Detached);
                        }
                    }
                    Err(nix::Error::EINTR | nix::Error::EAGAIN) => {}
                    Err(e) => return Err(e).context("reading stdin"),
                }
            }
            if writable && !self.out.is_empty() {
                match conn.stream().write(&self.out) {
                    Ok(n) => {
                        self.out.drain(..n);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    // The server has gone; what it sent is still read below.
                    Err(_) => {
                        self.out.clear();
                        self.input_open = false;
                    }
                }
            }
            if socket_ready {
                match conn.stream().read(&mut buffer) {
                    Ok(0) => return self.outcome(),
                    Ok(n) => {
                        decoder.push(&buffer[..n]);
                        while let Some(frame) = decoder.next_frame()? {
                            if let Some(end) = self.frame(frame)? {
                                return Ok(end);
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                        return self.outcome()
                    }
                    Err(e) => return Err(e).context("reading from the streaming server"),
                }
            }
        }
    }

    /// Input read from stdin: queued for the `stdin` stream; true when it held the detach keys.
    fn input(&mut self, bytes: &[u8]) -> bool {
        let Some(id) = self.ids.stdin else {
            return false;
        };
        let mut passed = Vec::with_capacity(bytes.len());
        let detached = match self.session.detach_keys {
            true => self.scanner.scan(bytes, &mut passed),
            false => {
                passed.extend_from_slice(bytes);
                false
            }
        };
        if !passed.is_empty() {
            self.out.extend(Encoder::data(id, &passed, false));
        }
        detached
    }

    /// The terminal's size on `resize`, as client-go's JSON encoder writes it.
    fn send_size(&mut self) {
        let (Some(id), true) = (self.ids.resize, self.session.raw) else {
            return;
        };
        if let Some(WindowSize { rows, cols }) = crate::terminal::size() {
            let line = format!("{{\"Width\":{cols},\"Height\":{rows}}}\n");
            self.out.extend(Encoder::data(id, line.as_bytes(), false));
        }
    }

    /// One frame from the server; Some when the session has ended.
    fn frame(&mut self, frame: Frame) -> Result<Option<End>> {
        match frame {
            Frame::Data {
                stream_id,
                data,
                fin,
            } => {
                if stream_id == self.ids.stdout {
                    let stdout = std::io::stdout();
                    tty::write_all(stdout.as_fd(), &data)?;
                    self.stdout_open &= !fin;
                } else if Some(stream_id) == self.ids.stderr {
                    let stderr = std::io::stderr();
                    tty::write_all(stderr.as_fd(), &data)?;
                    self.stderr_open &= !fin;
                } else if stream_id == self.ids.error {
                    self.error.extend_from_slice(&data);
                    self.error_open &= !fin;
                }
            }
            Frame::RstStream { stream_id, .. } => {
                if stream_id == self.ids.stdout {
                    self.stdout_open = false;
                } else if Some(stream_id) == self.ids.stderr {
                    self.stderr_open = false;
                } else if stream_id == self.ids.error {
                    self.error_open = false;
                } else if Some(stream_id) == self.ids.stdin {
                    self.input_open = false;
                }
            }
            Frame::Ping { id } => self.out.extend(Encoder::ping(id)),
            // GOAWAY: no new streams; the open ones still end with their frames or the
            // connection's end.
            Frame::GoAway | Frame::SynStream { .. } | Frame::SynReply { .. } | Frame::Ignored => {}
        }
        if !self.stdout_open && !self.stderr_open && !self.error_open {
            return self.outcome().map(Some);
        }
        Ok(None)
    }

    /// What `error` said.
    fn outcome(&self) -> Result<End> {
        exit_code(&self.error).map(End::Exited)
    }
}

/// The exit code a `metav1.Status` on the `error` stream carries (client-go's `errorDecoderV4`).
fn exit_code(status: &[u8]) -> Result<i32> {
    if status.iter().all(u8::is_ascii_whitespace) {
        return Ok(0);
    }
    let value: serde_json::Value = serde_json::from_slice(status).with_context(|| {
        format!(
            "error stream protocol error: {:?}",
            String::from_utf8_lossy(status)
        )
    })?;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    if text(&value["status"]) == "Success" {
        return Ok(0);
    }
    if text(&value["reason"]) == "NonZeroExitCode" {
        let causes = value["details"]["causes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for cause in causes {
            if text(&cause["reason"]) == "ExitCode" {
                return text(&cause["message"]).parse::<i32>().with_context(|| {
                    format!("error stream protocol error: invalid exit code value {cause}")
                });
            }
        }
        bail!("error stream protocol error: no exit code in {value}");
    }
    bail!(
        "error executing remote command: {}",
        text(&value["message"])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_comes_from_the_status() {
        assert_eq!(exit_code(b"").unwrap(), 0);
        assert_eq!(
            exit_code(br#"{"metadata":{},"status":"Success"}"#).unwrap(),
            0
        );
        let failure = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"7"}]}}"#;
        assert_eq!(exit_code(failure).unwrap(), 7);
        let internal = br#"{"status":"Failure","message":"Internal error occurred: no such container","reason":"InternalError"}"#;
        let error = exit_code(internal).unwrap_err().to_string();
        assert!(error.contains("no such container"), "{error}");
        assert!(exit_code(b"not json").is_err());
    }

    #[test]
    fn a_unix_url_names_its_socket_then_the_path() {
        let dir = std::env::temp_dir().join(format!("podlab-streaming-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("stream.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let (found, path) = unix_socket_of(&socket.join("exec/abc")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, socket);
        assert_eq!(path, "/exec/abc");
    }
}
