//! PortForward sessions (`portforward.k8s.io`, kubelet's `portforward` server): for each
//! connection it forwards, the client opens an `error` and a `data` stream that carry the same
//! `port` and `requestid` headers; once both are there, a TCP connection to `localhost:PORT`
//! is made *inside the pod's network namespace* (the socket made there by a forked child,
//! `podlab_runtime::network::tcp_socket_in_netns`; a host-network pod's port is this node's)
//! and bytes are relayed both ways. A failure to connect is written on `error`, in
//! containerd's words. As containerd does, once one direction has ended the other gets a
//! second to finish; then both streams end.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use podlab_ns::NsKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::conn::{Conn, Out, CHUNK};
use super::spdy::Frame;
use crate::proto;
use crate::service::Cri;

/// How long the other direction may go on once one has ended (containerd's).
const HALF_CLOSED: Duration = Duration::from_secs(1);

/// What the client sends on a data stream.
enum Inbound {
    Data(Vec<u8>),
    /// FIN: the client's side is done.
    End,
    /// RST_STREAM: drop the connection.
    Reset,
}

/// The streams of one request id, as they come.
#[derive(Default)]
struct Pair {
    error: Option<u32>,
    data: Option<u32>,
    port: Option<String>,
}

/// A PortForward session: as many forwarded connections as the client opens, until it closes.
pub async fn serve(cri: Arc<Cri>, mut conn: Conn, request: proto::PortForwardRequest) {
    let target = netns(&cri, &request.pod_sandbox_id);
    let out = conn.out();
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut relays: HashMap<u32, (mpsc::UnboundedSender<Inbound>, JoinHandle<()>)> = HashMap::new();
    while let Some(frame) = conn.next().await {
        match frame {
            Frame::SynStream {
                stream_id, headers, ..
            } => {
                let kind = Frame::header(&headers, "streamtype").unwrap_or_default();
                // kubelet's rule for clients without request ids: the error stream's id, and
                // the data stream's id less two.
                let request_id = Frame::header(&headers, "requestid").unwrap_or_else(|| {
                    match kind.as_str() {
                        "data" => stream_id.saturating_sub(2),
                        _ => stream_id,
                    }
                    .to_string()
                });
                let pair = pairs.entry(request_id.clone()).or_default();
                match kind.as_str() {
                    "error" => pair.error = Some(stream_id),
                    "data" => pair.data = Some(stream_id),
                    _ => {
                        conn.refuse(stream_id).await;
                        continue;
                    }
                }
                if let Some(port) = Frame::header(&headers, "port") {
                    pair.port = Some(port);
                }
                conn.accept(stream_id).await;
                if let Some(Pair {
                    error: Some(error),
                    data: Some(data),
                    port,
                }) = pairs.get(&request_id)
                {
                    let (error, data) = (*error, *data);
                    let port = port.clone().unwrap_or_default();
                    pairs.remove(&request_id);
                    let (tx, rx) = mpsc::unbounded_channel();
                    let task = tokio::spawn(forward(
                        target.clone(),
                        request.pod_sandbox_id.clone(),
                        port,
                        error,
                        data,
                        rx,
                        out.clone(),
                    ));
                    relays.insert(data, (tx, task));
                }
            }
            Frame::Data {
                stream_id,
                data,
                fin,
            } => {
                if let Some((tx, _)) = relays.get(&stream_id) {
                    if !data.is_empty() {
                        let _ = tx.send(Inbound::Data(data));
                    }
                    if fin {
                        let _ = tx.send(Inbound::End);
                    }
                }
            }
            Frame::RstStream { stream_id, .. } => {
                if let Some((tx, _)) = relays.remove(&stream_id) {
                    let _ = tx.send(Inbound::Reset);
                }
            }
            _ => {}
        }
        relays.retain(|_, (_, task)| !task.is_finished());
    }
    // The client has gone: every forwarded connection ends with it.
    for (_, (_, task)) in relays {
        task.abort();
    }
    drop(out);
    conn.close(Duration::ZERO).await;
}

/// Where the pod's ports are: its pinned network namespace, or None for a host-network pod
/// (its ports are this node's); an error for a sandbox that is not there or not ready.
fn netns(cri: &Cri, sandbox: &str) -> Result<Option<std::path::PathBuf>, String> {
    let runtime = cri.runtime();
    let id = runtime
        .resolve_sandbox_id(sandbox)
        .map_err(|e| e.to_string())?;
    let status = runtime.pod_sandbox_status(&id).map_err(|e| e.to_string())?;
    if status.state != podlab_runtime::status::SandboxState::Ready {
        return Err(format!("sandbox {id} is not ready"));
    }
    Ok(status
        .namespaces
        .iter()
        .find(|n| n.kind == NsKind::Net)
        .map(|n| n.path.clone()))
}

/// A connection to `localhost:port` where the pod's ports are.
fn connect(
    target: &Result<Option<std::path::PathBuf>, String>,
    port: u16,
) -> Result<TcpStream, String> {
    let netns = target.as_ref().map_err(Clone::clone)?;
    let refused = |e: &dyn std::fmt::Display| {
        match netns {
        Some(path) => format!(
            "failed to connect to localhost:{port} inside namespace {:?}, IPv4: dial tcp4 127.0.0.1:{port}: connect: {e}",
            path.display().to_string()
        ),
        None => format!("failed to connect to localhost:{port} on the host, IPv4: dial tcp4 127.0.0.1:{port}: connect: {e}"),
    }
    };
    let stream = match netns {
        Some(path) => {
            let socket =
                podlab_runtime::network::tcp_socket_in_netns(path).map_err(|e| e.to_string())?;
            let addr = nix::sys::socket::SockaddrIn::new(127, 0, 0, 1, port);
            nix::sys::socket::connect(socket.as_raw_fd(), &addr)
                .map_err(|e| refused(&e.desc().to_lowercase()))?;
            std::net::TcpStream::from(socket)
        }
        None => {
            std::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port)).map_err(|e| {
                refused(&match e.raw_os_error() {
                    Some(errno) => nix::Error::from_raw(errno).desc().to_lowercase(),
                    None => e.to_string(),
                })
            })?
        }
    };
    stream.set_nonblocking(true).map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    TcpStream::from_std(stream).map_err(|e| e.to_string())
}

/// One forwarded connection.
async fn forward(
    target: Result<Option<std::path::PathBuf>, String>,
    sandbox: String,
    port: String,
    error: u32,
    data: u32,
    mut inbound: mpsc::UnboundedReceiver<Inbound>,
    out: Out,
) {
    let connected = match port.parse::<u16>() {
        Ok(p) if p > 0 => connect(&target, p),
        _ => Err(format!("invalid port header {port:?}")),
    };
    let upstream = match connected {
        Ok(upstream) => upstream,
        Err(e) => {
            let message = format!("error forwarding port {port} to pod {sandbox}, uid : {e}");
            Conn::send(&out, error, message.as_bytes(), true).await;
            Conn::send(&out, data, &[], true).await;
            return;
        }
    };
    let (mut read, mut write) = upstream.into_split();
    // Upstream to the client, until upstream's end of file.
    let down_out = out.clone();
    let mut down = tokio::spawn(async move {
        let mut buffer = vec![0u8; CHUNK];
        loop {
            match read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if !Conn::send(&down_out, data, &buffer[..n], false).await {
                        break;
                    }
                }
            }
        }
        Conn::send(&down_out, data, &[], true).await;
    });
    // The client to upstream, until its FIN (or a reset).
    let up = async {
        while let Some(message) = inbound.recv().await {
            match message {
                Inbound::Data(bytes) => {
                    if write.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                Inbound::End => {
                    let _ = write.shutdown().await;
                    return true;
                }
                Inbound::Reset => return false,
            }
        }
        false
    };
    tokio::pin!(up);
    tokio::select! {
        finished = &mut up => {
            if finished {
                let _ = tokio::time::timeout(HALF_CLOSED, &mut down).await;
            }
        }
        _ = &mut down => {
            let _ = tokio::time::timeout(HALF_CLOSED, &mut up).await;
        }
    }
    if !down.is_finished() {
        down.abort();
        Conn::send(&out, data, &[], true).await;
    }
    Conn::send(&out, error, &[], true).await;
}
