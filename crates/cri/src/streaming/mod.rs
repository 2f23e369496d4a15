//! The CRI streaming server: Exec, Attach and PortForward answer a URL of this server (as
//! containerd's CRI plugin does with kubelet's `pkg/cri/streaming`), and the client — `crictl
//! exec -it`, `crictl attach`, `crictl port-forward`, critest, a kubelet proxying `kubectl
//! exec` — opens it with an HTTP/1.1 upgrade to SPDY/3.1, then speaks Kubernetes'
//! `v4.channel.k8s.io` (exec and attach: the streams `error`, `stdin`, `stdout`, `stderr` and
//! `resize`, the exit as a `metav1.Status` on `error`) or `portforward.k8s.io` (a `data` and an
//! `error` stream per forwarded connection).
//!
//! - The URL is `http://127.0.0.1:PORT/{exec,attach,portforward}/TOKEN`: the token is random,
//!   names the request the RPC checked, is good for one use and for one minute (kubelet's
//!   request cache), and at most 1000 wait at a time.
//! - The server is a task on the CRI server's one tokio thread. Each session's relays are
//!   tasks there too; the exec'd process is started by the pod's shim, and a port-forward's
//!   upstream socket is made in the pod's network namespace by a forked child of this
//!   single-threaded process (`podlab_runtime::network::tcp_socket_in_netns`), so the server
//!   itself never changes namespace.
//! - WebSocket (`v5.channel.k8s.io`, crictl's `--transport=websocket`) is refused with a 400
//!   that says so; SPDY is crictl's and critest's default.
//!
//! | module | what |
//! |---|---|
//! | [`spdy`] | SPDY/3.1 frames and their compressed header blocks |
//! | `remotecommand` | Exec and Attach sessions |
//! | `portforward` | PortForward sessions |

mod conn;
mod portforward;
mod remotecommand;
pub mod spdy;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::Status;

use crate::proto;
use crate::service::Cri;

/// How long a URL stays good (kubelet's streaming request cache TTL).
const TOKEN_TTL: Duration = Duration::from_secs(60);
/// How many URLs may wait at once (kubelet's `maxInFlight`).
const MAX_PENDING: usize = 1000;
/// The longest HTTP request head read.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client has to send its request once connected (a connection that sends
/// nothing is closed, not kept for ever).
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The protocol of exec and attach sessions.
pub const REMOTECOMMAND_V4: &str = "v4.channel.k8s.io";
/// The protocol of port-forward sessions.
pub const PORTFORWARD_V1: &str = "portforward.k8s.io";

/// A request an RPC checked, waiting for its client to open the URL.
#[derive(Debug, Clone)]
pub enum Pending {
    Exec(proto::ExecRequest),
    Attach(proto::AttachRequest),
    PortForward(proto::PortForwardRequest),
}

impl Pending {
    fn path(&self) -> &'static str {
        match self {
            Pending::Exec(_) => "exec",
            Pending::Attach(_) => "attach",
            Pending::PortForward(_) => "portforward",
        }
    }
}

/// The URLs handed out and not used yet.
#[derive(Debug, Default)]
pub struct Streams {
    base: OnceLock<String>,
    pending: Mutex<HashMap<String, (Instant, Pending)>>,
}

impl Streams {
    /// A new URL for `request`, good once for a minute.
    pub fn url(&self, request: Pending) -> Result<String, Status> {
        let base = self
            .base
            .get()
            .ok_or_else(|| Status::unavailable("the streaming server is not serving"))?;
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        pending.retain(|_, (made, _)| now.duration_since(*made) < TOKEN_TTL);
        if pending.len() >= MAX_PENDING {
            return Err(Status::resource_exhausted(
                "maximum number of in-flight requests exceeded",
            ));
        }
        let token = token()?;
        let url = format!("{base}/{}/{token}", request.path());
        pending.insert(token, (now, request));
        Ok(url)
    }

    /// The request of `token`, taken (a URL is good once), if it is still good.
    fn take(&self, token: &str) -> Option<Pending> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let (made, request) = pending.remove(token)?;
        (made.elapsed() < TOKEN_TTL).then_some(request)
    }
}

/// 16 random bytes as hex, from the kernel's generator.
fn token() -> Result<String, Status> {
    let mut bytes = [0u8; 16];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        return Err(Status::internal(format!(
            "getrandom for a streaming token: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Serves the streaming URLs on `listener` for as long as the task runs.
pub async fn serve(listener: TcpListener, cri: Arc<Cri>) {
    if let Ok(addr) = listener.local_addr() {
        let _ = cri.streams().base.set(format!("http://{addr}"));
    }
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let cri = Arc::clone(&cri);
        tokio::spawn(async move {
            if let Err(e) = connection(stream, &cri).await {
                if cri.tracing() {
                    eprintln!("cri: streaming: {e}");
                }
            }
        });
    }
}

/// One client: the HTTP request, the upgrade, the session.
async fn connection(mut stream: TcpStream, cri: &Arc<Cri>) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
    let end = loop {
        if let Some(at) = find(&head, b"\r\n\r\n") {
            break at + 4;
        }
        if head.len() > MAX_HEAD {
            return reply(&mut stream, "431 Request Header Fields Too Large", "").await;
        }
        let n = match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(read) => read?,
            Err(_) => return reply(&mut stream, "408 Request Timeout", "").await,
        };
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buffer[..n]);
    };
    let rest = head.split_off(end);
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    if request.parse(&head).map(|s| s.is_partial()).unwrap_or(true) {
        return reply(&mut stream, "400 Bad Request", "malformed HTTP request\n").await;
    }
    let path = request.path.unwrap_or_default().to_string();
    let values = |name: &str| -> Vec<String> {
        request
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .flat_map(|h| {
                String::from_utf8_lossy(h.value)
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let upgrade = values("upgrade");
    let protocols = values("x-stream-protocol-version");
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (kind, token) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let token = token.split('?').next().unwrap_or_default();
    let pending = match cri.streams().take(token) {
        Some(p) if p.path() == kind => p,
        _ => return reply(&mut stream, "404 Not Found", "404 page not found\n").await,
    };
    if upgrade.iter().any(|u| u.eq_ignore_ascii_case("websocket")) {
        return reply(
            &mut stream,
            "400 Bad Request",
            "podlab's streaming server speaks SPDY/3.1 only (crictl's default --transport=spdy); WebSocket is not implemented\n",
        )
        .await;
    }
    if !upgrade.iter().any(|u| u.eq_ignore_ascii_case("SPDY/3.1")) {
        return reply(
            &mut stream,
            "400 Bad Request",
            "unable to upgrade: missing upgrade headers in request: the streaming server needs Connection: Upgrade, Upgrade: SPDY/3.1\n",
        )
        .await;
    }
    let wanted = match pending {
        Pending::PortForward(_) => PORTFORWARD_V1,
        _ => REMOTECOMMAND_V4,
    };
    // An old client that names no protocol gets port-forward's only one; exec needs v4.
    let fits =
        protocols.iter().any(|p| p == wanted) || (protocols.is_empty() && wanted == PORTFORWARD_V1);
    if !fits {
        let message = format!(
            "unable to upgrade: unable to negotiate protocol: client supports {protocols:?}, server supports [{wanted:?}]\n"
        );
        return reply(&mut stream, "403 Forbidden", &message).await;
    }
    stream
        .write_all(
            format!(
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {wanted}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    let conn = conn::Conn::new(stream, &rest);
    match pending {
        Pending::Exec(request) => {
            remotecommand::serve(Arc::clone(cri), conn, remotecommand::Request::Exec(request)).await
        }
        Pending::Attach(request) => {
            remotecommand::serve(
                Arc::clone(cri),
                conn,
                remotecommand::Request::Attach(request),
            )
            .await
        }
        Pending::PortForward(request) => portforward::serve(Arc::clone(cri), conn, request).await,
    }
    Ok(())
}

/// A plain HTTP answer, and the connection's end.
async fn reply(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(text.as_bytes()).await?;
    stream.shutdown().await
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_good_once_and_name_their_kind() {
        let streams = Streams::default();
        assert!(streams
            .url(Pending::PortForward(Default::default()))
            .is_err());
        streams.base.set("http://127.0.0.1:1".into()).unwrap();
        let url = streams
            .url(Pending::Exec(proto::ExecRequest::default()))
            .unwrap();
        let token = url.strip_prefix("http://127.0.0.1:1/exec/").unwrap();
        assert_eq!(token.len(), 32);
        assert!(matches!(streams.take(token), Some(Pending::Exec(_))));
        assert!(streams.take(token).is_none());
    }
}
