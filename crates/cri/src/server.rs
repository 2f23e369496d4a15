//! The gRPC server on its unix socket: one current-thread tokio runtime, both services, and a
//! clean stop on SIGTERM or SIGINT (the socket file goes with it).

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::StreamExt;

use crate::proto::image_service_server::ImageServiceServer;
use crate::proto::runtime_service_server::RuntimeServiceServer;
use crate::service::{Cri, Images, Runtimes};

/// The default socket, as `/run/containerd/containerd.sock` is containerd's.
pub const DEFAULT_SOCKET: &str = "/run/podlab/cri.sock";

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{what} {path}: {cause}")]
    Socket {
        what: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}: another server is listening there")]
    InUse { path: PathBuf },
    #[error("streaming server on {address}: bind: {cause}")]
    Streaming {
        address: std::net::SocketAddr,
        cause: std::io::Error,
    },
    #[error("starting the tokio runtime: {0}")]
    Runtime(std::io::Error),
    #[error("serving gRPC on {path}: {message}")]
    Serve { path: PathBuf, message: String },
}

/// `unix:///run/podlab/cri.sock`, `unix:/x` or a plain path → the path.
pub fn socket_path(listen: &str) -> PathBuf {
    let path = listen
        .strip_prefix("unix://")
        .or_else(|| listen.strip_prefix("unix:"))
        .unwrap_or(listen);
    PathBuf::from(path)
}

/// Serves `cri` on the unix socket `path` until SIGTERM or SIGINT; `ready` is called once the
/// socket accepts connections. The process stays single-threaded throughout.
///
/// The streaming server (Exec, Attach, PortForward URLs) listens on `stream_address`
/// (`127.0.0.1:0`: loopback, a port the kernel picks, as containerd's default).
pub fn serve(
    cri: Cri,
    path: &Path,
    stream_address: std::net::SocketAddr,
    ready: impl FnOnce(),
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(ServeError::Runtime)?;
    runtime.block_on(serve_async(Arc::new(cri), path, stream_address, ready))
}

async fn serve_async(
    cri: Arc<Cri>,
    path: &Path,
    stream_address: std::net::SocketAddr,
    ready: impl FnOnce(),
) -> Result<(), ServeError> {
    let socket_err = |what, cause| ServeError::Socket {
        what,
        path: path.to_path_buf(),
        cause,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| socket_err("creating the folder of", e))?;
    }
    if path.exists() {
        // A socket left by a server that was killed: nobody answers on it.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(ServeError::InUse {
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_file(path).map_err(|e| socket_err("removing the stale socket", e))?;
    }
    // What else may fail to bind goes first: clients wait for the CRI socket, and a server that
    // cannot start leaves none behind.
    let streaming = tokio::net::TcpListener::bind(stream_address)
        .await
        .map_err(|cause| ServeError::Streaming {
            address: stream_address,
            cause,
        })?;
    let nri_listener = match cri.nri() {
        Some(nri) => Some(
            crate::nri::bind(nri.socket()).map_err(|cause| ServeError::Socket {
                what: "binding the NRI socket",
                path: nri.socket().to_path_buf(),
                cause,
            })?,
        ),
        None => None,
    };
    let listener = UnixListener::bind(path).map_err(|e| {
        if let (Some(nri), Some(_)) = (cri.nri(), &nri_listener) {
            let _ = std::fs::remove_file(nri.socket());
        }
        socket_err("binding", e)
    })?;
    let streaming = tokio::spawn(crate::streaming::serve(streaming, Arc::clone(&cri)));
    let notices = tokio::spawn(crate::events::listen(
        crate::events::bind(&cri),
        Arc::clone(&cri),
    ));
    let nri =
        nri_listener.map(|listener| tokio::spawn(crate::nri::serve(listener, Arc::clone(&cri))));
    let mut terminate = signal(SignalKind::terminate()).map_err(ServeError::Runtime)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(ServeError::Runtime)?;
    ready();
    let events = Arc::clone(&cri);
    let events = move || events.events().close();
    let result = tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::new(Runtimes(Arc::clone(&cri))))
        .add_service(ImageServiceServer::new(Images(Arc::clone(&cri))))
        .serve_with_incoming_shutdown(incoming(listener), async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
            // Event streams would hold the graceful shutdown forever: they end now.
            events();
        })
        .await;
    streaming.abort();
    notices.abort();
    if let Some(nri) = nri {
        nri.abort();
        if let Some(nri) = cri.nri() {
            let _ = std::fs::remove_file(nri.socket());
        }
    }
    let _ = notices.await;
    let _ = std::fs::remove_file(path);
    result.map_err(|e| ServeError::Serve {
        path: path.to_path_buf(),
        message: format!("{e:#}"),
    })
}

/// The clients' connections, as [`Connection`]s.
fn incoming(
    listener: UnixListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<Connection>> {
    UnixListenerStream::new(listener).map(|accepted| accepted.map(Connection::new))
}

/// Bytes a [`Connection`] holds before it sends them without waiting for a flush.
const HELD_AT_MOST: usize = 64 * 1024;

/// A client's connection that sends what h2 wrote when h2 flushes, in one write, and tells h2
/// it writes no vectors. On a socket that writes vectors, h2 chains a DATA payload of 256 bytes
/// or more instead of copying it into its buffer, and the trailers then go in a write of their
/// own: each status and list answer (a message of 300-900 bytes) went out as a `writev` of the
/// headers and the message and a `writev` of 10 bytes of trailers (`strace`), and the client
/// woke twice. On one that does not, h2 copies a payload under 1024 bytes and the trailers fit
/// behind it: one write an answer, as containerd's Go server flushes an answer once. A longer
/// payload h2 writes apart from its buffer; held here until the flush, it goes out with the
/// headers, and an answer is two writes, as it was with vectors.
struct Connection<T = UnixStream> {
    socket: T,
    /// Written by h2, not sent yet.
    held: Vec<u8>,
}

impl<T: AsyncWrite + Unpin> Connection<T> {
    fn new(socket: T) -> Connection<T> {
        Connection {
            socket,
            held: Vec::new(),
        }
    }

    /// Sends what is held; Pending while the socket is full.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while !self.held.is_empty() {
            let sent = std::task::ready!(Pin::new(&mut self.socket).poll_write(cx, &self.held))?;
            if sent == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.held.drain(..sent);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Connection<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.socket).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Connection<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.held.len() >= HELD_AT_MOST {
            std::task::ready!(self.poll_send(cx))?;
        }
        self.held.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_send(cx))?;
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_send(cx))?;
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

impl tonic::transport::server::Connected for Connection {
    type ConnectInfo = tonic::transport::server::UdsConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.socket.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A socket that counts the writes that reach it.
    struct Counting {
        socket: UnixStream,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncRead for Counting {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.socket).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counting {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let written = Pin::new(&mut self.socket).poll_write(cx, buf);
            if matches!(written, Poll::Ready(Ok(_))) {
                self.writes.fetch_add(1, Ordering::SeqCst);
            }
            written
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let written = Pin::new(&mut self.socket).poll_write_vectored(cx, bufs);
            if matches!(written, Poll::Ready(Ok(_))) {
                self.writes.fetch_add(1, Ordering::SeqCst);
            }
            written
        }

        fn is_write_vectored(&self) -> bool {
            self.socket.is_write_vectored()
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.socket).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.socket).poll_shutdown(cx)
        }
    }

    /// The writes an HTTP/2 server makes for the second of two answers shaped as a gRPC
    /// call's (headers, a message of `size` bytes, trailers), over the socket as `wrap` gives it.
    fn writes_of_an_answer<T>(size: usize, wrap: fn(Counting) -> T) -> usize
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let (server_side, client_side) = UnixStream::pair().unwrap();
            let writes = Arc::new(AtomicUsize::new(0));
            let counted = Arc::clone(&writes);
            tokio::spawn(async move {
                let socket = wrap(Counting {
                    socket: server_side,
                    writes: counted,
                });
                let mut connection = h2::server::handshake(socket).await.unwrap();
                while let Some(request) = connection.accept().await {
                    let (_, mut respond) = request.unwrap();
                    let mut body = respond
                        .send_response(http::Response::new(()), false)
                        .unwrap();
                    body.send_data(bytes::Bytes::from(vec![7u8; size]), false)
                        .unwrap();
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    body.send_trailers(trailers).unwrap();
                }
            });
            let (client, connection) = h2::client::handshake(client_side).await.unwrap();
            tokio::spawn(connection);
            let mut before = 0;
            for _ in 0..2 {
                before = writes.load(Ordering::SeqCst);
                let mut client = client.clone().ready().await.unwrap();
                let request = http::Request::post("http://localhost/a").body(()).unwrap();
                let (response, _) = client.send_request(request, true).unwrap();
                let mut body = response.await.unwrap().into_body();
                while let Some(data) = body.data().await {
                    let _ = body.flow_control().release_capacity(data.unwrap().len());
                }
                assert!(body.trailers().await.unwrap().is_some());
            }
            writes.load(Ordering::SeqCst) - before
        })
    }

    #[test]
    fn regression_a_status_answer_went_to_the_client_in_two_writes() {
        assert_eq!(
            writes_of_an_answer(600, Connection::new),
            1,
            "headers, message and trailers in one write"
        );
        assert_eq!(
            writes_of_an_answer(600, |socket| socket),
            2,
            "h2 now answers in one write on a socket that writes vectors: Connection may go"
        );
    }

    #[test]
    fn a_long_answer_takes_no_more_writes_than_with_vectors() {
        let with_vectors = writes_of_an_answer(3000, |socket| socket);
        assert_eq!(writes_of_an_answer(3000, Connection::new), with_vectors);
    }

    #[test]
    fn listen_addresses_name_the_socket() {
        assert_eq!(
            socket_path("unix:///run/podlab/cri.sock"),
            PathBuf::from("/run/podlab/cri.sock")
        );
        assert_eq!(socket_path("/tmp/x.sock"), PathBuf::from("/tmp/x.sock"));
        assert_eq!(
            socket_path("unix:/tmp/x.sock"),
            PathBuf::from("/tmp/x.sock")
        );
    }
}
