//! Exec and Attach sessions (`v4.channel.k8s.io`, kubelet's `remotecommand` server): the
//! client opens its streams (`error`, and `stdin`, `stdout`, `stderr`, `resize` as the request
//! asked), the process starts (an exec) or is joined (an attach), bytes are relayed until its
//! output ends, and the outcome goes on `error` as a `metav1.Status`: `Success`, or `Failure`
//! with reason `NonZeroExitCode` and an `ExitCode` cause, which client-go turns into
//! `command terminated with exit code N`.

use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use podlab_runtime::tty::WindowSize;
use podlab_runtime::{ContainerId, ExecStdio};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::conn::{Conn, Out, CHUNK};
use super::spdy::Frame;
use crate::proto;
use crate::service::Cri;

/// Reads the exit code of a process whose pidfd said it ended.
type ReadExitCode = Box<dyn Fn() -> Result<i32, String> + Send + Sync>;

/// How long the client has to open its streams (kubelet's `streamCreationTimeout`).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long output may still come once an exec'd process has exited (a child of it may
/// hold its output open).
const OUTPUT_GRACE: Duration = Duration::from_secs(1);
/// How long an exec with a terminal waits for the client's first size before it starts.
const FIRST_SIZE_WAIT: Duration = Duration::from_millis(500);
/// How long a closed session reads what the client still sends.
const LINGER: Duration = Duration::from_secs(5);

/// The streams a request asks for.
#[derive(Debug, Clone, Copy)]
struct Want {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

/// The client's streams, by type.
#[derive(Debug, Default)]
struct Ids {
    error: Option<u32>,
    stdin: Option<u32>,
    stdout: Option<u32>,
    stderr: Option<u32>,
    resize: Option<u32>,
}

impl Ids {
    fn complete(&self, want: Want) -> bool {
        self.error.is_some()
            && self.stdin.is_some() == want.stdin
            && self.stdout.is_some() == want.stdout
            && (self.stderr.is_some() == want.stderr || want.tty)
            && (self.resize.is_some() == want.tty)
    }
}

/// A session's connection, with the frames read ahead of their time.
struct Session {
    conn: Conn,
    ids: Ids,
    early: VecDeque<Frame>,
}

impl Session {
    async fn next(&mut self) -> Option<Frame> {
        match self.early.pop_front() {
            Some(frame) => Some(frame),
            None => self.conn.next().await,
        }
    }

    /// Waits for the streams of `want` (accepting each), at most kubelet's 30 s.
    async fn open(conn: Conn, want: Want) -> Result<Session, Conn> {
        let mut session = Session {
            conn,
            ids: Ids::default(),
            early: VecDeque::new(),
        };
        let deadline = Instant::now() + STREAM_CREATION_TIMEOUT;
        while !session.ids.complete(want) {
            let frame = match tokio::time::timeout_at(deadline, session.conn.next()).await {
                Ok(Some(frame)) => frame,
                _ => return Err(session.conn),
            };
            match frame {
                Frame::SynStream {
                    stream_id, headers, ..
                } => {
                    let kind = Frame::header(&headers, "streamtype").unwrap_or_default();
                    let slot = match kind.as_str() {
                        "error" => &mut session.ids.error,
                        "stdin" => &mut session.ids.stdin,
                        "stdout" => &mut session.ids.stdout,
                        "stderr" => &mut session.ids.stderr,
                        "resize" => &mut session.ids.resize,
                        _ => {
                            session.conn.refuse(stream_id).await;
                            continue;
                        }
                    };
                    *slot = Some(stream_id);
                    session.conn.accept(stream_id).await;
                }
                other => session.early.push_back(other),
            }
        }
        Ok(session)
    }

    /// The client's first terminal size, if it sends one soon.
    async fn first_size(&mut self) -> Option<WindowSize> {
        let resize = self.ids.resize?;
        let deadline = Instant::now() + FIRST_SIZE_WAIT;
        let mut held = VecDeque::new();
        let mut found = None;
        let mut sizes = Sizes::default();
        while found.is_none() {
            match tokio::time::timeout_at(deadline, self.conn.next()).await {
                Ok(Some(Frame::Data {
                    stream_id, data, ..
                })) if stream_id == resize => found = sizes.push(&data).pop(),
                Ok(Some(frame)) => held.push_back(frame),
                _ => break,
            }
        }
        self.early.extend(held);
        found
    }

    /// Sends the outcome on `error` and ends the connection.
    async fn finish(self, status: Vec<u8>) {
        let out = self.conn.out();
        if let Some(error) = self.ids.error {
            Conn::send(&out, error, &status, true).await;
        }
        drop(out);
        self.conn.close(LINGER).await;
    }
}

/// Terminal sizes as client-go's JSON encoder writes them, one per line.
#[derive(Default)]
struct Sizes {
    partial: Vec<u8>,
}

#[derive(serde::Deserialize)]
struct TerminalSize {
    #[serde(rename = "Width")]
    width: u16,
    #[serde(rename = "Height")]
    height: u16,
}

impl Sizes {
    fn push(&mut self, data: &[u8]) -> Vec<WindowSize> {
        self.partial.extend_from_slice(data);
        let mut sizes = Vec::new();
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            if let Ok(size) = serde_json::from_slice::<TerminalSize>(&line) {
                sizes.push(WindowSize {
                    rows: size.height,
                    cols: size.width,
                });
            }
        }
        sizes
    }
}

/// `{"metadata":{},"status":"Success"}`.
fn success() -> Vec<u8> {
    serde_json::json!({"metadata": {}, "status": "Success"})
        .to_string()
        .into_bytes()
}

/// A non-zero exit, as kubelet words it.
fn exited(code: i32, cmd: &[String]) -> Vec<u8> {
    serde_json::json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command {cmd:?}, exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
    .to_string()
    .into_bytes()
}

/// An error of the runtime (`apierrors.NewInternalError`).
fn internal(message: &str) -> Vec<u8> {
    serde_json::json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("Internal error occurred: {message}"),
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    })
    .to_string()
    .into_bytes()
}

/// Where input goes.
enum Sink {
    Pipe(pipe::Sender),
    Tty(Arc<AsyncFd<OwnedFd>>),
    Socket(tokio::net::unix::OwnedWriteHalf),
}

impl Sink {
    async fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Pipe(pipe) => pipe.write_all(data).await,
            Sink::Socket(socket) => socket.write_all(data).await,
            Sink::Tty(fd) => {
                let mut data = data;
                while !data.is_empty() {
                    let mut guard = fd.writable().await?;
                    match guard.try_io(|fd| {
                        nix::unistd::write(fd.get_ref(), data).map_err(std::io::Error::from)
                    }) {
                        Ok(Ok(n)) => data = &data[n..],
                        Ok(Err(e)) => return Err(e),
                        Err(_would_block) => {}
                    }
                }
                Ok(())
            }
        }
    }

    /// The end of input. A terminal stays open: its process ends it.
    async fn close(self) {
        match self {
            Sink::Pipe(pipe) => drop(pipe),
            Sink::Socket(mut socket) => {
                let _ = socket.shutdown().await;
            }
            Sink::Tty(_) => {}
        }
    }
}

/// Where output comes from.
enum Source {
    Pipe(pipe::Receiver),
    Tty(Arc<AsyncFd<OwnedFd>>),
    Socket(tokio::net::unix::OwnedReadHalf),
}

impl Source {
    async fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Pipe(pipe) => pipe.read(buffer).await,
            Source::Socket(socket) => socket.read(buffer).await,
            Source::Tty(fd) => loop {
                let mut guard = fd.readable().await?;
                match guard.try_io(|fd| {
                    nix::unistd::read(fd.get_ref(), buffer).map_err(std::io::Error::from)
                }) {
                    Ok(Ok(n)) => return Ok(n),
                    // A pty master reads EIO once no process holds its slave: the end.
                    Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => {}
                }
            },
        }
    }
}

/// The relay tasks of a session; dropping them stops them.
#[derive(Default)]
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Copies `source` to the client's stream `stream` (or drops it, without one) and ends the
/// stream; says so on `done`.
async fn pump(
    mut source: Source,
    stream: Option<u32>,
    out: Out,
    done: mpsc::UnboundedSender<Option<u32>>,
) {
    let mut buffer = vec![0u8; CHUNK];
    loop {
        match source.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(id) = stream {
                    if !Conn::send(&out, id, &buffer[..n], false).await {
                        break;
                    }
                }
            }
        }
    }
    if let Some(id) = stream {
        Conn::send(&out, id, &[], true).await;
    }
    let _ = done.send(stream);
}

/// Writes what arrives on `input` to `sink`, until it closes (then the sink closes too).
async fn feed(mut sink: Sink, mut input: mpsc::UnboundedReceiver<Vec<u8>>) {
    while let Some(data) = input.recv().await {
        if sink.write_all(&data).await.is_err() {
            break;
        }
    }
    sink.close().await;
}

/// The process side of a session.
struct Relay {
    tasks: Tasks,
    outputs: Vec<u32>,
    pumps: usize,
    done: mpsc::UnboundedReceiver<Option<u32>>,
    done_tx: mpsc::UnboundedSender<Option<u32>>,
    input: Option<mpsc::UnboundedSender<Vec<u8>>>,
}

impl Relay {
    fn new(sink: Option<Sink>) -> Relay {
        let (done_tx, done) = mpsc::unbounded_channel();
        let mut tasks = Tasks::default();
        let input = sink.map(|sink| {
            let (tx, rx) = mpsc::unbounded_channel();
            tasks.0.push(tokio::spawn(feed(sink, rx)));
            tx
        });
        Relay {
            tasks,
            outputs: Vec::new(),
            pumps: 0,
            done,
            done_tx,
            input,
        }
    }

    fn output(&mut self, source: Source, stream: Option<u32>, out: &Out) {
        self.outputs.extend(stream);
        self.pumps += 1;
        self.tasks.0.push(tokio::spawn(pump(
            source,
            stream,
            out.clone(),
            self.done_tx.clone(),
        )));
    }

    /// What the client sent: input, the end of input, sizes. False once the client has gone.
    fn client_frame(
        &mut self,
        frame: Option<Frame>,
        ids: &Ids,
        sizes: &mut Sizes,
        resize: &(dyn Fn(WindowSize) + Sync),
    ) -> bool {
        match frame {
            None => false,
            Some(Frame::Data {
                stream_id,
                data,
                fin,
            }) => {
                if Some(stream_id) == ids.stdin {
                    if let Some(input) = &self.input {
                        if !data.is_empty() {
                            let _ = input.send(data);
                        }
                    }
                    if fin {
                        self.input = None;
                    }
                } else if Some(stream_id) == ids.resize {
                    for size in sizes.push(&data) {
                        resize(size);
                    }
                }
                true
            }
            Some(Frame::RstStream { stream_id, .. }) => {
                if Some(stream_id) == ids.stdin {
                    self.input = None;
                }
                true
            }
            Some(_) => true,
        }
    }

    /// Runs until the output has ended (and, with `ended`, the process has exited: its exit
    /// code is returned); None if the client went away first.
    async fn run(
        &mut self,
        session: &mut Session,
        mut ended: Option<(AsyncFd<OwnedFd>, ReadExitCode)>,
        resize: &(dyn Fn(WindowSize) + Sync),
    ) -> Option<Result<Option<i32>, String>> {
        let mut finished = HashSet::new();
        let mut pumps_done = 0;
        let mut outcome: Option<Result<Option<i32>, String>> = None;
        let mut grace: Option<Instant> = None;
        let mut sizes = Sizes::default();
        loop {
            let outputs_done = pumps_done == self.pumps;
            match (&outcome, ended.is_some()) {
                (Some(_), _) if outputs_done => break,
                (None, false) if outputs_done => {
                    outcome = Some(Ok(None));
                    break;
                }
                _ => {}
            }
            let grace_at = grace.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                frame = session.next() => {
                    if !self.client_frame(frame, &session.ids, &mut sizes, resize) {
                        return None;
                    }
                }
                Some(stream) = self.done.recv() => {
                    pumps_done += 1;
                    finished.extend(stream);
                }
                readable = async {
                    match ended.as_ref() {
                        Some((fd, _)) => fd.readable().await.map(|_| ()),
                        None => std::future::pending().await,
                    }
                },
                    if ended.is_some() && outcome.is_none() => {
                    let (_, wait) = ended.take().unwrap_or_else(|| unreachable!());
                    outcome = Some(match readable {
                        Ok(_) => wait().map(Some),
                        Err(e) => Err(e.to_string()),
                    });
                    grace = Some(Instant::now() + OUTPUT_GRACE);
                }
                _ = tokio::time::sleep_until(grace_at), if grace.is_some() => break,
            }
        }
        // Output still open after the grace (a child holds it): its streams end here.
        for task in &self.tasks.0 {
            task.abort();
        }
        let out = session.conn.out();
        for stream in &self.outputs {
            if !finished.contains(stream) {
                Conn::send(&out, *stream, &[], true).await;
            }
        }
        self.input = None;
        outcome
    }
}

/// `fd` registered with the tokio reactor.
fn async_fd(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd keeps its descriptor open, and the same, for as long as it lives, and
    // the AsyncFd owns it.
    unsafe { AsyncFd::register(fd) }.map_err(std::io::Error::from)
}

fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

fn dev_null() -> std::io::Result<OwnedFd> {
    Ok(std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?
        .into())
}

fn container(cri: &Cri, id: &str) -> Result<ContainerId, String> {
    cri.runtime()
        .resolve_container_id(id)
        .map_err(|e| e.to_string())
}

/// What a session runs: an exec'd command, or an attach to the container's own process.
pub enum Request {
    Exec(proto::ExecRequest),
    Attach(proto::AttachRequest),
}

/// An Exec or Attach session.
pub async fn serve(cri: Arc<Cri>, conn: Conn, request: Request) {
    let (tty, stdin, stdout, stderr) = match &request {
        Request::Exec(r) => (r.tty, r.stdin, r.stdout, r.stderr),
        Request::Attach(r) => (r.tty, r.stdin, r.stdout, r.stderr),
    };
    let want = Want {
        stdin,
        stdout,
        stderr: stderr && !tty,
        tty,
    };
    let mut session = match Session::open(conn, want).await {
        Ok(session) => session,
        Err(conn) => return conn.close(LINGER).await,
    };
    let (outcome, cmd, doing) = match &request {
        Request::Exec(r) => (
            exec_session(&cri, &mut session, r).await,
            r.cmd.as_slice(),
            "executing command in container",
        ),
        Request::Attach(r) => (
            attach_session(&cri, &mut session, r).await,
            &[][..],
            "attaching to container",
        ),
    };
    let status = match outcome {
        Some(Ok(Some(code))) if code != 0 => exited(code, cmd),
        Some(Ok(_)) => success(),
        Some(Err(message)) => internal(&format!("error {doing}: {message}")),
        // The client went away: dropping the process hung up its shim connection (and the
        // shim kills an exec'd process then), or detached.
        None => return session.conn.close(Duration::ZERO).await,
    };
    session.finish(status).await;
}

async fn exec_session(
    cri: &Arc<Cri>,
    session: &mut Session,
    request: &proto::ExecRequest,
) -> Option<Result<Option<i32>, String>> {
    let id = match container(cri, &request.container_id) {
        Ok(id) => id,
        Err(e) => return Some(Err(e)),
    };
    let out = session.conn.out();
    let runtime = cri.runtime();
    if request.tty {
        let size = session
            .first_size()
            .await
            .unwrap_or(WindowSize { rows: 0, cols: 0 });
        let exec = match runtime.exec_tty(&id, &request.cmd, size) {
            Ok(exec) => Arc::new(exec),
            Err(e) => return Some(start_failed(e, session.ids.stdout, &out).await),
        };
        let master = match tty_fd(&exec.master) {
            Ok(fd) => fd,
            Err(e) => return Some(Err(e.to_string())),
        };
        let ended = match exec.ended().try_clone_to_owned().and_then(async_fd) {
            Ok(fd) => fd,
            Err(e) => return Some(Err(e.to_string())),
        };
        let mut relay = Relay::new(Some(Sink::Tty(Arc::clone(&master))));
        relay.output(Source::Tty(master), session.ids.stdout, &out);
        let waiter = Arc::clone(&exec);
        let wait: ReadExitCode = Box::new(move || {
            waiter
                .wait(Some(Duration::from_secs(5)))
                .map_err(|e| e.to_string())
        });
        let resizer = Arc::clone(&exec);
        let resize = move |size: WindowSize| {
            let _ = resizer.resize(size);
        };
        relay.run(session, Some((ended, wait)), &resize).await
    } else {
        let made = (|| -> std::io::Result<_> {
            let null = dev_null()?;
            let stdin = session.ids.stdin.map(|_| cloexec_pipe()).transpose()?;
            let stdout = request.stdout.then(cloexec_pipe).transpose()?;
            let stderr = request.stderr.then(cloexec_pipe).transpose()?;
            Ok((null, stdin, stdout, stderr))
        })();
        let (null, stdin, stdout, stderr) = match made {
            Ok(made) => made,
            Err(e) => return Some(Err(format!("making the exec's pipes: {e}"))),
        };
        let stdio = ExecStdio {
            stdin: stdin.as_ref().map_or(null.as_fd(), |(r, _)| r.as_fd()),
            stdout: stdout.as_ref().map_or(null.as_fd(), |(_, w)| w.as_fd()),
            stderr: stderr.as_ref().map_or(null.as_fd(), |(_, w)| w.as_fd()),
        };
        let process = match runtime.exec_start(&id, &request.cmd, stdio) {
            Ok(process) => Arc::new(process),
            Err(e) => return Some(start_failed(e, session.ids.stderr, &out).await),
        };
        // Only the process holds the other ends now, so that its exit ends the output.
        let stdin = stdin.map(|(_, w)| w);
        let stdout = stdout.map(|(r, _)| r);
        let stderr = stderr.map(|(r, _)| r);
        drop(null);
        let sink = match stdin.map(pipe::Sender::from_owned_fd).transpose() {
            Ok(sink) => sink.map(Sink::Pipe),
            Err(e) => return Some(Err(e.to_string())),
        };
        let mut relay = Relay::new(sink);
        for (fd, stream) in [(stdout, session.ids.stdout), (stderr, session.ids.stderr)] {
            if let Some(fd) = fd {
                match pipe::Receiver::from_owned_fd(fd) {
                    Ok(source) => relay.output(Source::Pipe(source), stream, &out),
                    Err(e) => return Some(Err(e.to_string())),
                }
            }
        }
        let ended = match process.ended().try_clone_to_owned().and_then(async_fd) {
            Ok(fd) => fd,
            Err(e) => return Some(Err(e.to_string())),
        };
        let waiter = Arc::clone(&process);
        let wait: ReadExitCode = Box::new(move || {
            waiter
                .wait(Some(Duration::from_secs(5)))
                .map_err(|e| e.to_string())
        });
        relay.run(session, Some((ended, wait)), &|_| {}).await
    }
}

/// A command that could not start: runc's words on the client's stderr (or stdout with a
/// terminal) and the shell's status, 127 or 126, as `crictl exec` ends with containerd.
async fn start_failed(
    e: podlab_runtime::Error,
    stream: Option<u32>,
    out: &Out,
) -> Result<Option<i32>, String> {
    match e {
        podlab_runtime::Error::StartFailed { failure, .. } => {
            let message = format!("exec failed: unable to start container process: {failure}");
            match failure.exit_status() {
                Some(code) => {
                    if let Some(stream) = stream {
                        Conn::send(out, stream, format!("{message}\r\n").as_bytes(), false).await;
                    }
                    Ok(Some(code))
                }
                None => Err(message),
            }
        }
        other => Err(other.to_string()),
    }
}

/// A nonblocking copy of a pty master for the relays.
fn tty_fd(master: &OwnedFd) -> std::io::Result<Arc<AsyncFd<OwnedFd>>> {
    let fd = master.try_clone()?;
    podlab_runtime::tty::set_nonblocking(fd.as_fd()).map_err(std::io::Error::other)?;
    Ok(Arc::new(async_fd(fd)?))
}

async fn attach_session(
    cri: &Arc<Cri>,
    session: &mut Session,
    request: &proto::AttachRequest,
) -> Option<Result<Option<i32>, String>> {
    let id = match container(cri, &request.container_id) {
        Ok(id) => id,
        Err(e) => return Some(Err(e)),
    };
    let runtime = cri.runtime();
    let tty = runtime
        .container_record(&id)
        .map(|r| r.config.tty)
        .unwrap_or(false);
    let made = (|| -> std::io::Result<_> {
        let (local, remote) = std::os::unix::net::UnixStream::pair()?;
        local.set_nonblocking(true)?;
        // Without a tty, stderr comes apart: to its stream, or nowhere if none was asked for.
        let stderr = match (tty, session.ids.stderr) {
            (true, _) => None,
            (false, Some(_)) => Some(cloexec_pipe().map(|(r, w)| (Some(r), w))?),
            (false, None) => Some((None, dev_null()?)),
        };
        Ok((local, remote, stderr))
    })();
    let (local, remote, stderr) = match made {
        Ok(made) => made,
        Err(e) => return Some(Err(format!("making the attach's sockets: {e}"))),
    };
    let attached = match runtime.attach(
        &id,
        request.stdin,
        remote.as_fd(),
        stderr.as_ref().map(|(_, w)| w.as_fd()),
    ) {
        Ok(attached) => attached,
        Err(e) => return Some(Err(e.to_string())),
    };
    drop(remote);
    let stderr = stderr.and_then(|(r, _)| r);
    let local = match tokio::net::UnixStream::from_std(local) {
        Ok(local) => local,
        Err(e) => return Some(Err(e.to_string())),
    };
    let (read, write) = local.into_split();
    let out = session.conn.out();
    // Without stdin the socket's writing side stays open (closing it would end the
    // container's stdin for a stdinOnce container).
    let (sink, _kept) = if request.stdin {
        (Some(Sink::Socket(write)), None)
    } else {
        (None, Some(write))
    };
    let mut relay = Relay::new(sink);
    relay.output(Source::Socket(read), session.ids.stdout, &out);
    if let Some(fd) = stderr {
        match pipe::Receiver::from_owned_fd(fd) {
            Ok(source) => relay.output(Source::Pipe(source), session.ids.stderr, &out),
            Err(e) => return Some(Err(e.to_string())),
        }
    }
    let resize_cri = Arc::clone(cri);
    let resize_id = id.clone();
    let resize = move |size: WindowSize| {
        let _ = resize_cri.runtime().resize_container_tty(&resize_id, size);
    };
    let outcome = relay.run(session, None, &resize).await;
    drop(attached);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_come_one_per_line_and_may_be_split() {
        let mut sizes = Sizes::default();
        assert!(sizes.push(b"{\"Width\":100,").is_empty());
        assert_eq!(
            sizes.push(b"\"Height\":30}\n{\"Width\":80,\"Height\":24}\n"),
            vec![
                WindowSize {
                    rows: 30,
                    cols: 100
                },
                WindowSize { rows: 24, cols: 80 }
            ]
        );
    }

    #[test]
    fn a_non_zero_exit_is_a_status_client_go_reads() {
        let status: serde_json::Value =
            serde_json::from_slice(&exited(3, &["sh".into(), "-c".into(), "exit 3".into()]))
                .unwrap();
        assert_eq!(status["status"], "Failure");
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(status["details"]["causes"][0]["message"], "3");
        let ok: serde_json::Value = serde_json::from_slice(&success()).unwrap();
        assert_eq!(ok["status"], "Success");
    }
}
