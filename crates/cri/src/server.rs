//! The gRPC server on its unix socket: one current-thread tokio runtime, both services, and a
//! clean stop on SIGTERM or SIGINT (the socket file goes with it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio_stream::wrappers::UnixListenerStream;

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
    let listener = UnixListener::bind(path).map_err(|e| socket_err("binding", e))?;
    let streaming = tokio::net::TcpListener::bind(stream_address)
        .await
        .map_err(|cause| ServeError::Streaming {
            address: stream_address,
            cause,
        })?;
    let streaming = tokio::spawn(crate::streaming::serve(streaming, Arc::clone(&cri)));
    let notices = tokio::spawn(crate::events::listen(
        crate::events::bind(&cri),
        Arc::clone(&cri),
    ));
    let mut terminate = signal(SignalKind::terminate()).map_err(ServeError::Runtime)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(ServeError::Runtime)?;
    ready();
    let events = Arc::clone(&cri);
    let events = move || events.events().close();
    let result = tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::new(Runtimes(Arc::clone(&cri))))
        .add_service(ImageServiceServer::new(Images(Arc::clone(&cri))))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
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
    let _ = notices.await;
    let _ = std::fs::remove_file(path);
    result.map_err(|e| ServeError::Serve {
        path: path.to_path_buf(),
        message: format!("{e:#}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
