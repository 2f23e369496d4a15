//! The node agent as a CRI client (kubelet's remote runtime, `k8s.io/cri-client`):
//! [`RemoteRuntime`] drives any CRI v1 runtime on a unix socket, `podlab cri` or containerd's
//! CRI plugin, with the messages compiled from the CRI proto that `podlab-cri` serves.
//!
//! One HTTP/2 connection over the socket carries every call, as kubelet's one gRPC connection
//! does; it is made again when the runtime has gone away and come back. The calls run on a
//! tokio current-thread runtime of the client's own: the agent's threads (pod workers, probes,
//! the PLEG) each block on their call, and whichever is waiting drives the connection. With a
//! remote runtime the agent does no namespace work itself: sandboxes, containers and execs are
//! the runtime's; a probe's socket is made in the agent's own network namespace and dialled to
//! the pod's IP, as kubelet's prober does.
//!
//! Each call has kubelet's runtime request timeout (2 min, `--runtime-request-timeout`);
//! ExecSync has the probe's timeout plus that; PullImage none (kubelet's default too).
//!
//! [`convert`] maps the agent's CRI-shaped configs to the CRI messages the way kubelet's
//! `kuberuntime` fills them, and the statuses back.

pub mod convert;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use podlab_cri::proto;
use podlab_cri::proto::image_service_client::ImageServiceClient;
use podlab_cri::proto::runtime_service_client::RuntimeServiceClient;
use podlab_runtime::config::{ContainerConfig, ContainerResources, PodSandboxConfig};
use podlab_runtime::{
    ContainerFilter, ContainerId, ContainerState, ContainerStatus, Error, ExecResult, Result,
    SandboxId, SandboxStatus,
};
use tonic::body::Body;
use tonic::codegen::http;

use super::runtime_service::RuntimeService;

/// kubelet's `--runtime-request-timeout` default.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// How long connecting to the socket may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a StopContainer in flight asks whether to give up.
const GIVE_UP_POLL: Duration = Duration::from_millis(100);
/// How often the event stream's reader asks whether the agent stops.
const STOP_POLL: Duration = Duration::from_millis(200);

/// `unix:///run/containerd/containerd.sock`, `unix:/x` or a plain absolute path → the path;
/// anything else (`tcp://`, `npipe://`) is refused, since the CRI is spoken here over a unix
/// socket only.
pub fn endpoint_path(endpoint: &str) -> std::result::Result<PathBuf, String> {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(format!(
            "--runtime-endpoint {endpoint:?}: a unix socket is needed (unix:///path/to/socket)"
        ))
    }
}

/// One HTTP/2 connection as a tower service for tonic's generated clients.
#[derive(Clone)]
struct Connection {
    send: SendRequest<Body>,
}

impl tonic::codegen::Service<http::Request<Body>> for Connection {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future =
        Pin<Box<dyn Future<Output = std::result::Result<Self::Response, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), hyper::Error>> {
        self.send.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        Box::pin(self.send.send_request(request))
    }
}

/// The streams of an Exec or Attach request (the CRI's `stdin`, `stdout`, `stderr`, `tty`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// A CRI runtime at the other end of a unix socket.
pub struct RemoteRuntime {
    socket: PathBuf,
    tokio: tokio::runtime::Runtime,
    connection: Mutex<Option<Connection>>,
    /// What `Version` said: the runtime's name and version (`containerd 1.6.20`).
    pub runtime_name: String,
    pub runtime_version: String,
}

/// The origin the requests name (the socket is the real address).
const ORIGIN: &str = "http://localhost";

impl RemoteRuntime {
    /// Connects to the CRI runtime at `endpoint` and asks its `Version`, as kubelet does when
    /// it starts (a runtime that does not answer is an error here, not later).
    pub fn connect(endpoint: &str) -> Result<RemoteRuntime> {
        let socket = endpoint_path(endpoint).map_err(Error::Invalid)?;
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::io("starting the CRI client's tokio runtime for", &socket, e))?;
        let mut remote = RemoteRuntime {
            socket,
            tokio,
            connection: Mutex::new(None),
            runtime_name: String::new(),
            runtime_version: String::new(),
        };
        let version = remote.call("Version", "", |mut rt, _| async move {
            rt.version(proto::VersionRequest {
                version: "v1".into(),
            })
            .await
        })?;
        remote.runtime_name = version.runtime_name;
        remote.runtime_version = version.runtime_version;
        Ok(remote)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The connection, made if there is none or the last one closed.
    fn connection(&self) -> Result<Connection> {
        let mut slot = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(connection) = slot.as_ref().filter(|c| !c.send.is_closed()) {
            return Ok(connection.clone());
        }
        let socket = self.socket.clone();
        let made = self.tokio.block_on(async {
            let stream =
                tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::UnixStream::connect(&socket))
                    .await
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
            let (send, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                    .await
                    .map_err(std::io::Error::other)?;
            // The connection's task runs whenever a caller is blocked on this runtime.
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok::<_, std::io::Error>(send)
        });
        let send = made.map_err(|e| Error::io("connecting to the CRI runtime at", &socket, e))?;
        let connection = Connection { send };
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// One RPC: `rpc` is its name for errors, `target` the id it is about.
    fn call<T, F, Fut>(&self, rpc: &str, target: &str, f: F) -> Result<T>
    where
        F: FnOnce(RuntimeServiceClient<Connection>, ImageServiceClient<Connection>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call_for(rpc, target, Some(REQUEST_TIMEOUT), f)
    }

    fn call_for<T, F, Fut>(
        &self,
        rpc: &str,
        target: &str,
        timeout: Option<Duration>,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(RuntimeServiceClient<Connection>, ImageServiceClient<Connection>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let connection = self.connection()?;
        let origin = http::Uri::from_static(ORIGIN);
        let runtime = RuntimeServiceClient::with_origin(connection.clone(), origin.clone());
        let images = ImageServiceClient::with_origin(connection, origin);
        let outcome = self.tokio.block_on(async {
            let future = f(runtime, images);
            match timeout {
                Some(t) => tokio::time::timeout(t, future).await.map_err(|_| {
                    tonic::Status::deadline_exceeded(format!("{rpc}: no answer within {t:?}"))
                })?,
                None => future.await,
            }
        });
        match outcome {
            Ok(response) => Ok(response.into_inner()),
            Err(status) => {
                if status.code() == tonic::Code::Unavailable
                    || status.code() == tonic::Code::Unknown
                {
                    // The connection may be gone: the next call makes a new one.
                    let mut slot = self.connection.lock().unwrap_or_else(|e| e.into_inner());
                    if slot.as_ref().is_some_and(|c| c.send.is_closed()) {
                        *slot = None;
                    }
                }
                Err(convert::rpc_error(rpc, target, &status))
            }
        }
    }

    /// Exec: the runtime checks the request and answers the URL of its streaming server where
    /// the client then runs `cmd` (kubelet's `GetExec`, crictl's `exec -i`/`-t`). Which of
    /// stdin, stdout and stderr stream, and whether in a terminal, are `streams`' (stderr is
    /// none with a terminal: the CRI joins it to stdout).
    pub fn exec(&self, id: &ContainerId, cmd: &[String], streams: Streams) -> Result<String> {
        let request = proto::ExecRequest {
            container_id: id.to_string(),
            cmd: cmd.to_vec(),
            tty: streams.tty,
            stdin: streams.stdin,
            stdout: streams.stdout,
            stderr: streams.stderr && !streams.tty,
        };
        let response = self.call("Exec", id.as_str(), |mut rt, _| async move {
            rt.exec(request).await
        })?;
        Ok(response.url)
    }

    /// Attach: the URL where the client joins the container's own process (kubelet's
    /// `GetAttach`, crictl's `attach`); `streams.tty` must be the container's `tty`.
    pub fn attach(&self, id: &ContainerId, streams: Streams) -> Result<String> {
        let request = proto::AttachRequest {
            container_id: id.to_string(),
            stdin: streams.stdin,
            tty: streams.tty,
            stdout: streams.stdout,
            stderr: streams.stderr && !streams.tty,
        };
        let response = self.call("Attach", id.as_str(), |mut rt, _| async move {
            rt.attach(request).await
        })?;
        Ok(response.url)
    }

    /// ImageStatus: the image, if the runtime has it.
    pub fn image_status(&self, image: &str) -> Result<Option<proto::Image>> {
        let spec = convert::image_spec(image);
        let response = self.call("ImageStatus", image, |_, mut images| async move {
            images
                .image_status(proto::ImageStatusRequest {
                    image: Some(spec),
                    verbose: false,
                })
                .await
        })?;
        Ok(response.image)
    }

    /// PullImage with the pod's credentials for the image's registry, if any; the answer is
    /// the image's reference (its id, for containerd and podlab).
    pub fn pull_image(
        &self,
        image: &str,
        credentials: Option<&podlab_image::credentials::Credentials>,
        sandbox: Option<&PodSandboxConfig>,
    ) -> Result<String> {
        let request = proto::PullImageRequest {
            image: Some(convert::image_spec(image)),
            auth: credentials.map(convert::auth_config),
            sandbox_config: sandbox.map(convert::sandbox_config),
        };
        let response = self.call_for("PullImage", image, None, |_, mut images| async move {
            images.pull_image(request).await
        })?;
        Ok(response.image_ref)
    }

    /// ImageFsInfo: where the runtime keeps its images (kubelet reads the capacity and the
    /// free bytes of that mount point, as cadvisor reports them).
    pub fn image_fs_mountpoint(&self) -> Result<Option<PathBuf>> {
        let response = self.call("ImageFsInfo", "", |_, mut images| async move {
            images.image_fs_info(proto::ImageFsInfoRequest {}).await
        })?;
        Ok(response
            .image_filesystems
            .into_iter()
            .filter_map(|fs| fs.fs_id)
            .map(|id| PathBuf::from(id.mountpoint))
            .find(|path| !path.as_os_str().is_empty()))
    }

    /// ListImages: every image of the runtime.
    pub fn list_images(&self) -> Result<Vec<proto::Image>> {
        let response = self.call("ListImages", "", |_, mut images| async move {
            images
                .list_images(proto::ListImagesRequest { filter: None })
                .await
        })?;
        Ok(response.images)
    }

    /// RemoveImage of `image` (kubelet's GC names the image by its id).
    pub fn remove_image(&self, image: &str) -> Result<()> {
        let spec = convert::image_spec(image);
        self.call("RemoveImage", image, |_, mut images| async move {
            images
                .remove_image(proto::RemoveImageRequest { image: Some(spec) })
                .await
        })?;
        Ok(())
    }

    /// GetContainerEvents (kubelet's evented PLEG): `changed` is told the sandbox of each event
    /// until `stop` is set or the runtime ends the stream. Ok(false) when the runtime does not
    /// serve it (`Unimplemented`, containerd 1.6): the relist alone then finds every change, as
    /// kubelet falls back to its generic PLEG.
    pub fn watch_events(
        &self,
        stop: &AtomicBool,
        mut changed: impl FnMut(&SandboxId),
    ) -> Result<bool> {
        let connection = self.connection()?;
        let mut client =
            RuntimeServiceClient::with_origin(connection, http::Uri::from_static(ORIGIN));
        let failed = |status: &tonic::Status| convert::rpc_error("GetContainerEvents", "", status);
        self.tokio.block_on(async {
            let mut stream = match client
                .get_container_events(proto::GetEventsRequest {})
                .await
            {
                Ok(response) => response.into_inner(),
                Err(status) if status.code() == tonic::Code::Unimplemented => return Ok(false),
                Err(status) => return Err(failed(&status)),
            };
            while !stop.load(Ordering::SeqCst) {
                tokio::select! {
                    message = stream.message() => match message {
                        Ok(Some(event)) => {
                            let sandbox = event
                                .pod_sandbox_status
                                .as_ref()
                                .and_then(|s| SandboxId::parse(&s.id).ok());
                            if let Some(sandbox) = sandbox {
                                changed(&sandbox);
                            }
                        }
                        Ok(None) => break,
                        Err(status) => return Err(failed(&status)),
                    },
                    _ = tokio::time::sleep(STOP_POLL) => {}
                }
            }
            Ok(true)
        })
    }

    /// ListContainers with `filter`, without the statuses.
    fn list_container_messages(&self, filter: &ContainerFilter) -> Result<Vec<proto::Container>> {
        let filter = convert::container_filter(filter);
        let response = self.call("ListContainers", "", |mut rt, _| async move {
            rt.list_containers(proto::ListContainersRequest {
                filter: Some(filter),
            })
            .await
        })?;
        Ok(response.containers)
    }
}

impl RuntimeService for RemoteRuntime {
    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<SandboxId> {
        let message = convert::sandbox_config(config);
        let target = config.metadata.name.clone();
        let response = self.call("RunPodSandbox", &target, |mut rt, _| async move {
            rt.run_pod_sandbox(proto::RunPodSandboxRequest {
                config: Some(message),
                runtime_handler: String::new(),
            })
            .await
        })?;
        convert::sandbox_id(&response.pod_sandbox_id)
    }

    fn stop_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        let pod_sandbox_id = id.to_string();
        self.call("StopPodSandbox", id.as_str(), |mut rt, _| async move {
            rt.stop_pod_sandbox(proto::StopPodSandboxRequest { pod_sandbox_id })
                .await
        })
        .map(drop)
    }

    fn remove_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        let pod_sandbox_id = id.to_string();
        self.call("RemovePodSandbox", id.as_str(), |mut rt, _| async move {
            rt.remove_pod_sandbox(proto::RemovePodSandboxRequest { pod_sandbox_id })
                .await
        })
        .map(drop)
    }

    fn pod_sandbox_status(&self, id: &SandboxId) -> Result<SandboxStatus> {
        let pod_sandbox_id = id.to_string();
        let response = self.call("PodSandboxStatus", id.as_str(), |mut rt, _| async move {
            rt.pod_sandbox_status(proto::PodSandboxStatusRequest {
                pod_sandbox_id,
                verbose: false,
            })
            .await
        })?;
        let status = response.status.ok_or_else(|| {
            Error::Invalid(format!("PodSandboxStatus {id}: no status in the answer"))
        })?;
        convert::sandbox_status(&status)
    }

    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxStatus>> {
        let response = self.call("ListPodSandbox", "", |mut rt, _| async move {
            rt.list_pod_sandbox(proto::ListPodSandboxRequest { filter: None })
                .await
        })?;
        response.items.iter().map(convert::listed_sandbox).collect()
    }

    fn create_container(
        &self,
        sandbox: &SandboxId,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<ContainerId> {
        let message = convert::container_config(config, sandbox_config)?;
        let request = proto::CreateContainerRequest {
            pod_sandbox_id: sandbox.to_string(),
            config: Some(message),
            sandbox_config: Some(convert::sandbox_config(sandbox_config)),
        };
        let response = self.call(
            "CreateContainer",
            &config.metadata.name,
            |mut rt, _| async move { rt.create_container(request).await },
        )?;
        convert::container_id(&response.container_id)
    }

    fn start_container(&self, id: &ContainerId) -> Result<()> {
        let container_id = id.to_string();
        self.call("StartContainer", id.as_str(), |mut rt, _| async move {
            rt.start_container(proto::StartContainerRequest { container_id })
                .await
        })
        .map(drop)
    }

    fn stop_container_unless(
        &self,
        id: &ContainerId,
        grace: Duration,
        give_up: &dyn Fn() -> bool,
    ) -> Result<bool> {
        let container_id = id.to_string();
        let timeout = grace.as_secs() as i64;
        // The runtime waits out the grace period; the call is left (the container keeps its
        // SIGTERM, the runtime goes on) when the agent is asked to stop.
        let given_up = std::cell::Cell::new(false);
        let result = self.call_for(
            "StopContainer",
            id.as_str(),
            Some(grace + REQUEST_TIMEOUT),
            |mut rt, _| {
                let given_up = &given_up;
                async move {
                    let stop = rt.stop_container(proto::StopContainerRequest {
                        container_id,
                        timeout,
                    });
                    tokio::pin!(stop);
                    loop {
                        tokio::select! {
                            done = &mut stop => return done,
                            _ = tokio::time::sleep(GIVE_UP_POLL) => {
                                if give_up() {
                                    given_up.set(true);
                                    return Ok(tonic::Response::new(proto::StopContainerResponse {}));
                                }
                            }
                        }
                    }
                }
            },
        );
        result.map(|_| !given_up.get())
    }

    fn update_container_resources(
        &self,
        id: &ContainerId,
        resources: &podlab_cgroups::Resources,
    ) -> Result<()> {
        let container_id = id.to_string();
        let linux = podlab_cri::convert::resources_out(&ContainerResources {
            cgroup: resources.clone(),
            ..ContainerResources::default()
        });
        self.call(
            "UpdateContainerResources",
            id.as_str(),
            |mut rt, _| async move {
                rt.update_container_resources(proto::UpdateContainerResourcesRequest {
                    container_id,
                    linux: Some(linux),
                    ..Default::default()
                })
                .await
            },
        )
        .map(drop)
    }

    fn remove_container(&self, id: &ContainerId) -> Result<()> {
        let container_id = id.to_string();
        self.call("RemoveContainer", id.as_str(), |mut rt, _| async move {
            rt.remove_container(proto::RemoveContainerRequest { container_id })
                .await
        })
        .map(drop)
    }

    fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<ContainerStatus>> {
        // kubelet's getPodContainerStatuses: ListContainers, then ContainerStatus of each.
        let mut out = Vec::new();
        for container in self.list_container_messages(filter)? {
            let container_id = container.id.clone();
            let status = self.call("ContainerStatus", &container.id, |mut rt, _| async move {
                rt.container_status(proto::ContainerStatusRequest {
                    container_id,
                    verbose: false,
                })
                .await
            });
            let status = match status {
                Ok(response) => response.status,
                // Removed between the two calls.
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            out.push(convert::container_status(&container, status.as_ref())?);
        }
        Ok(out)
    }

    fn list_container_states(&self) -> Result<Vec<(SandboxId, ContainerId, ContainerState)>> {
        self.list_container_messages(&ContainerFilter::default())?
            .iter()
            .map(|c| {
                Ok((
                    convert::sandbox_id(&c.pod_sandbox_id)?,
                    convert::container_id(&c.id)?,
                    convert::container_state(c.state),
                ))
            })
            .collect()
    }

    fn exec_sync(
        &self,
        id: &ContainerId,
        cmd: &[String],
        timeout: Option<Duration>,
    ) -> Result<ExecResult> {
        let request = proto::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.to_vec(),
            // Whole seconds, at least one when there is a timeout (0 is none).
            timeout: timeout.map_or(0, |t| t.as_secs().max(1) as i64),
        };
        let response = self.call_for(
            "ExecSync",
            id.as_str(),
            Some(timeout.unwrap_or_default() + REQUEST_TIMEOUT),
            |mut rt, _| async move { rt.exec_sync(request).await },
        );
        match response {
            Ok(response) => Ok(ExecResult {
                stdout: response.stdout,
                stderr: response.stderr,
                exit_code: response.exit_code,
            }),
            Err(Error::Timeout { .. }) => Err(Error::Timeout {
                what: format!("command {cmd:?} in container {id}"),
                seconds: timeout.unwrap_or_default().as_secs_f64(),
            }),
            Err(e) => Err(e),
        }
    }

    fn image_user(&self, image: &str) -> Result<String> {
        match self.image_status(image)? {
            Some(image) => Ok(convert::image_user(&image)),
            None => Err(Error::ImageNotFound {
                name: image.to_string(),
                message: format!("image {image:?} not found"),
            }),
        }
    }
}
