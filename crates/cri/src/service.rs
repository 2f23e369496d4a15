//! The two gRPC services over one [`Cri`]: each RPC runs to its end on the server's one thread
//! (podlab-runtime's calls are synchronous and fork their own single-threaded helpers), so that
//! the process never has a second thread to break a fork's namespace work.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use podlab_runtime::{
    ContainerFilter, ContainerId, ContainerStatus, Runtime, SandboxFilter, SandboxId,
    SandboxStatus, StoreImages,
};
use tonic::{Request, Response, Status};

use crate::convert::{self, ContainerContext};
use crate::images;
use crate::proto;
use crate::proto::image_service_server::ImageService;
use crate::proto::runtime_service_server::RuntimeService;
use crate::status::{container_not_found, from_runtime, invalid, sandbox_not_found};

mod nri_hooks;

/// The CRI's version of this API.
pub const CRI_API_VERSION: &str = "v1";

/// podlab's runtime and image store as a CRI runtime.
pub struct Cri {
    runtime: Runtime,
    images: Arc<StoreImages>,
    /// The store's images as CRI sees them, kept between calls (see [`images::ImageCache`]).
    image_cache: images::ImageCache,
    /// What ImageFsInfo counted of each snapshot (see [`images::SnapshotsUsage`]).
    snapshots_usage: images::SnapshotsUsage,
    trace: bool,
    network_ready: bool,
    streams: crate::streaming::Streams,
    events: crate::events::Hub,
    /// Whether pods may have user namespaces here, probed once (see
    /// [`Cri::user_namespaces_supported`]).
    user_namespaces: std::sync::OnceLock<bool>,
    /// NRI plugins, when `--nri-socket` asked for them (see [`crate::nri`]).
    nri: Option<crate::nri::Nri>,
}

type Reply<T> = Result<Response<T>, Status>;

/// kubelet's streaming server's checks of a request's streams.
fn stream_flags(tty: bool, stdin: bool, stdout: bool, stderr: bool) -> Result<(), Status> {
    if tty && stderr {
        return Err(invalid("stderr", "tty and stderr cannot both be true"));
    }
    if !stdin && !stdout && !stderr {
        return Err(invalid(
            "stdout",
            "one of stdin, stdout, or stderr must be set",
        ));
    }
    Ok(())
}

impl Cri {
    /// `runtime` must have been opened on `images` (`Runtime::with_images`), so that what
    /// ImageService lists is what containers are made from.
    pub fn new(runtime: Runtime, images: Arc<StoreImages>, network_ready: bool) -> Cri {
        Cri {
            runtime,
            images,
            image_cache: Default::default(),
            snapshots_usage: Default::default(),
            trace: false,
            network_ready,
            streams: Default::default(),
            events: Default::default(),
            user_namespaces: Default::default(),
            nri: None,
        }
    }

    /// Serves NRI plugins on the socket `path` (see [`crate::nri`]); with `--trace`, each call
    /// to a plugin is printed below its RPC.
    pub fn with_nri(mut self, path: &std::path::Path) -> Cri {
        self.nri = Some(crate::nri::Nri::new(path, self.trace));
        self
    }

    /// NRI's side of the server, when it serves NRI.
    pub fn nri(&self) -> Option<&crate::nri::Nri> {
        self.nri.as_ref()
    }

    /// Whether a pod or container is not shown yet: its NRI hook is under way.
    fn hidden(&self, id: &str) -> bool {
        self.nri.as_ref().is_some_and(|nri| nri.hides(id))
    }

    /// The runtime handler's `user_namespaces` feature: the kernel makes user namespaces and
    /// idmaps mounts of the filesystem the image layers are on (a pod's rootfs is made of
    /// idmapped layers), tried once with a namespace made for the probe.
    fn user_namespaces_supported(&self) -> bool {
        *self
            .user_namespaces
            .get_or_init(|| podlab_ns::mnt::detached::idmap_supported(self.store().root()))
    }

    /// Prints each RPC, its outcome and its time on stderr.
    pub fn with_trace(mut self, trace: bool) -> Cri {
        self.trace = trace;
        if let Some(nri) = &mut self.nri {
            nri.trace = trace;
        }
        self
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The streaming server's pending URLs.
    pub fn streams(&self) -> &crate::streaming::Streams {
        &self.streams
    }

    /// GetContainerEvents' subscribers.
    pub fn events(&self) -> &crate::events::Hub {
        &self.events
    }

    /// Whether RPCs (and streaming sessions' errors) are printed.
    pub fn tracing(&self) -> bool {
        self.trace
    }

    fn store(&self) -> &podlab_image::Store {
        self.images.store()
    }

    /// Runs one RPC's body, traced.
    fn call<T>(&self, rpc: &str, what: &str, body: impl FnOnce() -> Result<T, Status>) -> Reply<T> {
        let started = Instant::now();
        let result = body();
        if self.trace {
            let ms = started.elapsed().as_secs_f64() * 1e3;
            match &result {
                Ok(_) => eprintln!("cri: {rpc} {what} ok {ms:.2} ms"),
                Err(s) => eprintln!(
                    "cri: {rpc} {what} {:?}: {} {ms:.2} ms",
                    s.code(),
                    s.message()
                ),
            }
        }
        result.map(Response::new)
    }

    /// [`Cri::call`] of an RPC on one pod: with `--trace`, the pod's phases that the runtime,
    /// the shim and the container's init mark during the call (`podlab_runtime::trace`: CNI
    /// ADD/DEL, shim, init steps, removal) are printed below the RPC's line, each with its time.
    /// `pod` names the pod (None: unknown, nothing more is printed); it is only asked for when
    /// tracing.
    fn call_on_pod<T>(
        &self,
        rpc: &str,
        what: &str,
        pod: impl FnOnce() -> Option<podlab_runtime::config::PodSandboxMetadata>,
        body: impl FnOnce() -> Result<T, Status>,
    ) -> Reply<T> {
        let root = self.runtime.layout().root();
        let pod = if self.trace { pod() } else { None };
        let traced = pod.as_ref().and_then(|pod| {
            podlab_runtime::trace::PodTrace::begin(root, &pod.namespace, &pod.name)
                .ok()
                .map(|_| podlab_runtime::trace::path(root, &pod.namespace, &pod.name))
        });
        let reply = self.call(rpc, what, body);
        if let Some(path) = traced {
            let marks = podlab_runtime::trace::read(&path).unwrap_or_default();
            let _ = std::fs::remove_file(&path);
            for pair in marks.windows(2) {
                let ms = pair[1].at.saturating_sub(pair[0].at) as f64 / 1e6;
                print_step(&pair[1].phase, &pair[1].process, ms);
            }
        }
        reply
    }

    /// The metadata of the pod a sandbox id (or prefix) names, for [`Cri::call_on_pod`].
    fn pod_of_sandbox(&self, id: &str) -> Option<podlab_runtime::config::PodSandboxMetadata> {
        let id = self.runtime.resolve_sandbox_id(id).ok()?;
        self.runtime
            .pod_sandbox_status(&id)
            .ok()
            .map(|status| status.metadata)
    }

    /// The metadata of the pod of a container id (or prefix).
    fn pod_of_container(&self, id: &str) -> Option<podlab_runtime::config::PodSandboxMetadata> {
        let id = self.runtime.resolve_container_id(id).ok()?;
        let sandbox = self.runtime.container_status(&id).ok()?.sandbox_id;
        self.pod_of_sandbox(sandbox.as_str())
    }

    /// The full id of a sandbox given by id or unique prefix.
    fn sandbox_id(&self, field: &str, id: &str) -> Result<SandboxId, Status> {
        if id.is_empty() {
            return Err(invalid(field, "a pod sandbox id is required"));
        }
        let resolved = self.runtime.resolve_sandbox_id(id).map_err(|e| match e {
            podlab_runtime::Error::SandboxNotFound { .. } => sandbox_not_found(id),
            other => from_runtime(other),
        })?;
        if self.hidden(resolved.as_str()) {
            return Err(sandbox_not_found(id));
        }
        Ok(resolved)
    }

    fn container_id(&self, field: &str, id: &str) -> Result<ContainerId, Status> {
        if id.is_empty() {
            return Err(invalid(field, "a container id is required"));
        }
        let resolved = self.runtime.resolve_container_id(id).map_err(|e| match e {
            podlab_runtime::Error::ContainerNotFound { .. } => container_not_found(id),
            other => from_runtime(other),
        })?;
        if self.hidden(resolved.as_str()) {
            return Err(container_not_found(id));
        }
        Ok(resolved)
    }

    /// A container that Exec or Attach may stream to: known and running.
    fn running_container(&self, id: &str) -> Result<ContainerId, Status> {
        let id = self.container_id("container_id", id)?;
        let status = self.runtime.container_status(&id).map_err(from_runtime)?;
        if status.state != podlab_runtime::status::ContainerState::Running {
            let state = proto::ContainerState::try_from(convert::container_state(status.state))
                .map(|s| s.as_str_name())
                .unwrap_or("CONTAINER_UNKNOWN");
            return Err(Status::failed_precondition(format!(
                "container {:?} is in {state} state",
                id.as_str()
            )));
        }
        Ok(id)
    }

    fn run_pod_sandbox(&self, req: proto::RunPodSandboxRequest) -> Result<String, Status> {
        if !req.runtime_handler.is_empty() {
            return Err(invalid(
                "runtime_handler",
                format!(
                    "no runtime for {:?} is configured (podlab has the default handler only)",
                    req.runtime_handler
                ),
            ));
        }
        let config = convert::sandbox_config(req.config.as_ref())?;
        let name = convert::sandbox_name(&config.metadata);
        let existing = self.runtime.list_pod_sandboxes().map_err(from_runtime)?;
        if let Some(other) = existing
            .iter()
            .find(|s| convert::sandbox_name(&s.metadata) == name)
        {
            return Err(Status::already_exists(format!(
                "failed to reserve sandbox name {name:?}: name {name:?} is reserved for {:?}",
                other.id.as_str()
            )));
        }
        let id = self
            .runtime
            .run_pod_sandbox(&config)
            .map_err(from_runtime)?;
        match &self.nri {
            // Out of sight until the plugins have had their say (nri_run_pod_sandbox).
            Some(nri) => nri.hide(id.as_str()),
            None => self.sandbox_started(id.as_str()),
        }
        Ok(id.to_string())
    }

    fn stop_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        // Idempotent, as the CRI asks: an unknown sandbox is already stopped.
        match self.sandbox_id("pod_sandbox_id", id) {
            Ok(id) => {
                let ready = self.events.subscribed()
                    && self
                        .runtime
                        .pod_sandbox_status(&id)
                        .is_ok_and(|s| s.state == podlab_runtime::status::SandboxState::Ready);
                match self.runtime.stop_pod_sandbox(&id) {
                    Ok(()) => {
                        self.observe_sandbox(&id, ready);
                        Ok(())
                    }
                    Err(podlab_runtime::Error::SandboxNotFound { .. }) => Ok(()),
                    Err(e) => Err(from_runtime(e)),
                }
            }
            Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
            Err(s) => Err(s),
        }
    }

    fn remove_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        match self.sandbox_id("pod_sandbox_id", id) {
            Ok(id) => {
                let removal = self.before_sandbox_removal(&id);
                if removal.stops_something() {
                    // Stopped first, so that its STOPPED events carry the statuses of then.
                    self.stop_pod_sandbox(id.as_str())?;
                }
                // With subscribers, its containers go one by one first, as containerd removes
                // them, so that each DELETED carries the sandbox's status.
                self.remove_containers_of(&removal)?;
                self.runtime.remove_pod_sandbox(&id).map_err(from_runtime)?;
                self.sandbox_removed(&id, &removal);
                Ok(())
            }
            Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
            Err(s) => Err(s),
        }
    }

    pub(crate) fn sandbox_status(&self, status: &SandboxStatus) -> proto::PodSandboxStatus {
        let config = self.runtime.pod_sandbox_record(&status.id).ok();
        let pod_config = config.map(|r| r.config).unwrap_or_default();
        proto::PodSandboxStatus {
            id: status.id.to_string(),
            metadata: Some(convert::sandbox_metadata(&status.metadata)),
            state: convert::sandbox_state(status.state),
            created_at: status.created_at,
            network: Some(proto::PodSandboxNetworkStatus {
                ip: status.ip.clone().unwrap_or_default(),
                additional_ips: status
                    .additional_ips
                    .iter()
                    .map(|ip| proto::PodIp { ip: ip.clone() })
                    .collect(),
            }),
            linux: Some(proto::LinuxPodSandboxStatus {
                namespaces: Some(proto::Namespace {
                    options: Some(convert::namespace_options(&pod_config, status.network_mode)),
                }),
            }),
            labels: convert::hash(&status.labels),
            annotations: convert::hash(&status.annotations),
            runtime_handler: String::new(),
        }
    }

    fn pod_sandbox_status(
        &self,
        req: proto::PodSandboxStatusRequest,
    ) -> Result<proto::PodSandboxStatusResponse, Status> {
        let id = self.sandbox_id("pod_sandbox_id", &req.pod_sandbox_id)?;
        let status = self.runtime.pod_sandbox_status(&id).map_err(from_runtime)?;
        let mut info = std::collections::HashMap::new();
        if req.verbose {
            let detail = serde_json::json!({
                "pid": status.pause_pid.unwrap_or(0),
                "shimPid": status.shim_pid.unwrap_or(0),
                "hostname": status.hostname,
                "namespaces": status.namespaces.iter().map(|ns| serde_json::json!({
                    "type": ns.kind.proc_name(), "path": ns.path, "inode": ns.inode,
                })).collect::<Vec<_>>(),
                "reason": status.reason,
            });
            info.insert("info".to_string(), detail.to_string());
        }
        Ok(proto::PodSandboxStatusResponse {
            status: Some(self.sandbox_status(&status)),
            info,
            containers_statuses: Vec::new(),
            timestamp: 0,
        })
    }

    fn list_pod_sandbox(
        &self,
        req: proto::ListPodSandboxRequest,
    ) -> Result<proto::ListPodSandboxResponse, Status> {
        let mut filter = SandboxFilter::default();
        if let Some(f) = &req.filter {
            if !f.id.is_empty() {
                match self.runtime.resolve_sandbox_id(&f.id) {
                    Ok(id) => filter.id = Some(id),
                    Err(_) => return Ok(proto::ListPodSandboxResponse { items: Vec::new() }),
                }
            }
            filter.state = f.state.as_ref().map(|s| convert::sandbox_state_in(s.state));
            filter.labels = convert::btree(&f.label_selector);
        }
        let items = self
            .runtime
            .list_pod_sandboxes_filtered(&filter)
            .map_err(from_runtime)?
            .into_iter()
            .filter(|s| !self.hidden(s.id.as_str()))
            .map(|s| proto::PodSandbox {
                id: s.id.to_string(),
                metadata: Some(convert::sandbox_metadata(&s.metadata)),
                state: convert::sandbox_state(s.state),
                created_at: s.created_at,
                labels: convert::hash(&s.labels),
                annotations: convert::hash(&s.annotations),
                runtime_handler: String::new(),
            })
            .collect();
        Ok(proto::ListPodSandboxResponse { items })
    }

    fn create_container(&self, req: proto::CreateContainerRequest) -> Result<String, Status> {
        let sandbox_id = self.sandbox_id("pod_sandbox_id", &req.pod_sandbox_id)?;
        let config = req
            .config
            .as_ref()
            .ok_or_else(|| invalid("config", "a container config is required"))?;
        let reference = config
            .image
            .as_ref()
            .map(|i| i.image.as_str())
            .unwrap_or_default();
        if reference.is_empty() {
            return Err(invalid("config.image.image", "an image is required"));
        }
        let image = self.image_cache.find(self.store(), reference)?.ok_or_else(|| {
            Status::not_found(format!(
                "failed to resolve image {reference:?}: no such image in podlab's store (pull it first)"
            ))
        })?;
        let sandbox = match self.runtime.pod_sandbox_record(&sandbox_id) {
            Err(podlab_runtime::Error::SandboxNotFound { .. }) => {
                return Err(sandbox_not_found(sandbox_id.as_str()))
            }
            other => other.map_err(from_runtime)?,
        };
        // Only run_as_username needs the image's passwd (the image resolved and its layers
        // searched, as the runtime does again for the container).
        let by_username = config
            .linux
            .as_ref()
            .and_then(|linux| linux.security_context.as_ref())
            .is_some_and(|security| !security.run_as_username.is_empty());
        let passwd = by_username
            .then(|| self.store().resolve(&image.name).ok())
            .flatten()
            .and_then(|resolved| {
                podlab_runtime::image::read_from_layers(
                    &self.store().lowerdirs(&resolved),
                    "etc/passwd",
                )
            });
        let context = ContainerContext {
            sandbox: &sandbox.config,
            image_name: image.name.clone(),
            passwd,
        };
        let mut container = convert::container_config(config, &context)?;
        for (index, mount) in container.mounts.iter_mut().enumerate() {
            // An image volume names its image as the container's image is named (kubelet
            // gives PullImage's image_ref): the store's name for it goes to the runtime.
            if let Some(volume) = &mut mount.image {
                let found = self.image_cache.find(self.store(), &volume.image)?;
                let found = found.ok_or_else(|| {
                    Status::not_found(format!(
                        "failed to resolve the image of volume config.mounts[{index}] ({}): {:?} is not in podlab's store (pull it first)",
                        mount.container_path.display(),
                        volume.image
                    ))
                })?;
                volume.image = found.name;
            }
        }
        if let Some(target) = convert::pid_target(config) {
            let id = self.container_id(
                "config.linux.security_context.namespace_options.target_id",
                target,
            )?;
            container.target_container = Some(id);
        }
        let name = convert::container_name(&container.metadata, &sandbox.config.metadata);
        let filter = ContainerFilter {
            sandbox_id: Some(sandbox_id.clone()),
            ..Default::default()
        };
        let existing = self
            .runtime
            .list_containers(&filter)
            .map_err(from_runtime)?;
        if let Some(other) = existing.iter().find(|c| c.metadata == container.metadata) {
            return Err(Status::already_exists(format!(
                "failed to reserve container name {name:?}: name {name:?} is reserved for {:?}",
                other.id.as_str()
            )));
        }
        let id = self
            .runtime
            .create_container(&sandbox_id, &container)
            .map_err(from_runtime)?;
        match &self.nri {
            // Out of sight until the plugins have had their say (nri_create_container).
            Some(nri) => nri.hide(id.as_str()),
            None => self.container_event(
                id.as_str(),
                proto::ContainerEventType::ContainerCreatedEvent,
            ),
        }
        Ok(id.to_string())
    }

    pub(crate) fn container_status_proto(
        &self,
        status: &ContainerStatus,
    ) -> proto::ContainerStatus {
        let record = self.runtime.container_record(&status.id).ok();
        self.container_status_proto_of(status, record.as_ref())
    }

    /// [`Self::container_status_proto`] with the record the status was read from.
    pub(crate) fn container_status_proto_of(
        &self,
        status: &ContainerStatus,
        record: Option<&podlab_runtime::state::ContainerRecord>,
    ) -> proto::ContainerStatus {
        let image = self
            .image_cache
            .find(self.store(), &status.image_id)
            .ok()
            .flatten();
        let (image_spec, image_ref) = match &image {
            Some(image) => (
                image
                    .repo_tags
                    .first()
                    .cloned()
                    .unwrap_or(status.image.clone()),
                image
                    .repo_digests
                    .first()
                    .cloned()
                    .unwrap_or(status.image_id.clone()),
            ),
            None => (status.image.clone(), status.image_id.clone()),
        };
        let mounts = record
            .map(|r| {
                r.config
                    .mounts
                    .iter()
                    .map(|m| {
                        let (image, image_sub_path) = convert::image_volume_out(m);
                        proto::Mount {
                            container_path: m.container_path.display().to_string(),
                            host_path: m.host_path.display().to_string(),
                            readonly: m.readonly,
                            propagation: convert::propagation_out(m.propagation),
                            recursive_read_only: m.recursive_readonly,
                            image,
                            image_sub_path,
                            ..Default::default()
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let resources = record.map(|r| proto::ContainerResources {
            linux: Some(convert::resources_out(&r.config.resources)),
            windows: None,
        });
        // What the kernel gave its process once it started; before that, what it will get
        // (containerd reports the spec's user, whose additional gids hold the primary one).
        let user = status
            .user
            .clone()
            .or_else(|| {
                record.map(|r| podlab_runtime::process::LinuxUser {
                    uid: r.process.uid,
                    gid: r.process.gid,
                    supplemental_groups: r.process.additional_gids.clone(),
                })
            })
            .map(|user| proto::ContainerUser {
                linux: Some(proto::LinuxContainerUser {
                    uid: user.uid.into(),
                    gid: user.gid.into(),
                    supplemental_groups: user
                        .supplemental_groups
                        .into_iter()
                        .map(i64::from)
                        .collect(),
                }),
            });
        proto::ContainerStatus {
            id: status.id.to_string(),
            metadata: Some(convert::container_metadata(&status.metadata)),
            state: convert::container_state(status.state),
            created_at: status.created_at,
            started_at: status.started_at,
            finished_at: status.finished_at,
            exit_code: status.exit_code.unwrap_or(0),
            image: Some(proto::ImageSpec {
                image: image_spec,
                ..Default::default()
            }),
            image_ref,
            reason: status.reason.clone().unwrap_or_default(),
            message: status.message.clone().unwrap_or_default(),
            labels: convert::hash(&status.labels),
            annotations: convert::hash(&status.annotations),
            mounts,
            log_path: status.log_path.display().to_string(),
            resources,
            image_id: status.image_id.clone(),
            user,
        }
    }

    fn list_containers(
        &self,
        req: proto::ListContainersRequest,
    ) -> Result<proto::ListContainersResponse, Status> {
        let mut filter = ContainerFilter::default();
        let empty = proto::ListContainersResponse {
            containers: Vec::new(),
        };
        if let Some(f) = &req.filter {
            if !f.id.is_empty() {
                match self.runtime.resolve_container_id(&f.id) {
                    Ok(id) => filter.id = Some(id),
                    Err(_) => return Ok(empty),
                }
            }
            if !f.pod_sandbox_id.is_empty() {
                match self.runtime.resolve_sandbox_id(&f.pod_sandbox_id) {
                    Ok(id) => filter.sandbox_id = Some(id),
                    Err(_) => return Ok(empty),
                }
            }
            filter.state = f
                .state
                .as_ref()
                .map(|s| convert::container_state_in(s.state));
            filter.labels = convert::btree(&f.label_selector);
        }
        let containers = self
            .runtime
            .list_containers(&filter)
            .map_err(from_runtime)?
            .into_iter()
            .filter(|c| !self.hidden(c.id.as_str()))
            .map(|c| proto::Container {
                id: c.id.to_string(),
                pod_sandbox_id: c.sandbox_id.to_string(),
                metadata: Some(convert::container_metadata(&c.metadata)),
                image: Some(proto::ImageSpec {
                    image: c.image.clone(),
                    ..Default::default()
                }),
                image_ref: c.image_id.clone(),
                state: convert::container_state(c.state),
                created_at: c.created_at,
                labels: convert::hash(&c.labels),
                annotations: convert::hash(&c.annotations),
                image_id: c.image_id.clone(),
            })
            .collect();
        Ok(proto::ListContainersResponse { containers })
    }

    /// One container's stats: CPU time and working set from its cgroup (none without one:
    /// the values are left out, the timestamps say when they were looked for), and the bytes
    /// and inodes of its overlay's upper folder (its writable layer).
    fn container_stats(&self, container: &ContainerStatus) -> proto::ContainerStats {
        let now = podlab_runtime::liveness::now_ns();
        let cgroup = self
            .runtime
            .container_record(&container.id)
            .ok()
            .and_then(|r| r.cgroup);
        let (cpu, memory) = cgroup_usage(cgroup.as_ref(), now);
        let upper = self
            .runtime
            .layout()
            .sandbox(&container.sandbox_id)
            .container(&container.id)
            .upper();
        let (bytes, inodes) = images::usage(&upper);
        proto::ContainerStats {
            attributes: Some(proto::ContainerAttributes {
                id: container.id.to_string(),
                metadata: Some(convert::container_metadata(&container.metadata)),
                labels: convert::hash(&container.labels),
                annotations: convert::hash(&container.annotations),
            }),
            cpu: Some(cpu),
            memory: Some(memory),
            writable_layer: Some(proto::FilesystemUsage {
                timestamp: now,
                fs_id: Some(proto::FilesystemIdentifier {
                    mountpoint: upper.display().to_string(),
                }),
                used_bytes: Some(proto::UInt64Value { value: bytes }),
                inodes_used: Some(proto::UInt64Value { value: inodes }),
            }),
            swap: None,
        }
    }

    fn list_container_stats(
        &self,
        req: proto::ListContainerStatsRequest,
    ) -> Result<proto::ListContainerStatsResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let listed = self.list_containers(proto::ListContainersRequest {
            filter: Some(proto::ContainerFilter {
                id: filter.id,
                pod_sandbox_id: filter.pod_sandbox_id,
                label_selector: filter.label_selector,
                state: None,
            }),
        })?;
        let mut stats = Vec::new();
        for container in listed.containers {
            let Ok(id) = self.runtime.resolve_container_id(&container.id) else {
                continue;
            };
            // One removed meanwhile is left out, as containerd leaves it.
            if let Ok(status) = self.runtime.container_status(&id) {
                stats.push(self.container_stats(&status));
            }
        }
        Ok(proto::ListContainerStatsResponse { stats })
    }

    /// A sandbox's stats: its pod cgroup's CPU time and working set, and its containers'.
    fn pod_sandbox_stats(&self, id: &SandboxId) -> Result<proto::PodSandboxStats, Status> {
        let status = self.runtime.pod_sandbox_status(id).map_err(from_runtime)?;
        let now = podlab_runtime::liveness::now_ns();
        let cgroup = self.runtime.pod_sandbox_cgroup(id).ok().flatten();
        let (cpu, memory) = cgroup_usage(cgroup.as_ref(), now);
        let containers = self
            .runtime
            .list_containers(&ContainerFilter {
                sandbox_id: Some(id.clone()),
                ..Default::default()
            })
            .map_err(from_runtime)?
            .iter()
            .map(|c| self.container_stats(c))
            .collect();
        Ok(proto::PodSandboxStats {
            attributes: Some(proto::PodSandboxAttributes {
                id: status.id.to_string(),
                metadata: Some(convert::sandbox_metadata(&status.metadata)),
                labels: convert::hash(&status.labels),
                annotations: convert::hash(&status.annotations),
            }),
            linux: Some(proto::LinuxPodSandboxStats {
                cpu: Some(cpu),
                memory: Some(memory),
                network: None,
                process: None,
                containers,
            }),
            windows: None,
        })
    }

    fn exec_sync(&self, req: proto::ExecSyncRequest) -> Result<proto::ExecSyncResponse, Status> {
        let id = self.container_id("container_id", &req.container_id)?;
        if req.cmd.is_empty() {
            return Err(invalid("cmd", "a command is required"));
        }
        let timeout =
            u64::try_from(req.timeout).map_err(|_| invalid("timeout", "must not be negative"))?;
        let timeout = (timeout > 0).then(|| Duration::from_secs(timeout));
        let result = self
            .runtime
            .exec_sync(&id, &req.cmd, timeout)
            .map_err(from_runtime)?;
        Ok(proto::ExecSyncResponse {
            stdout: result.stdout,
            stderr: result.stderr,
            exit_code: result.exit_code,
        })
    }

    fn image_status(
        &self,
        req: proto::ImageStatusRequest,
    ) -> Result<proto::ImageStatusResponse, Status> {
        let reference = req
            .image
            .as_ref()
            .map(|i| i.image.as_str())
            .unwrap_or_default();
        if reference.is_empty() {
            return Err(invalid("image.image", "an image reference is required"));
        }
        // An image that is not there is no error: the answer has no image.
        let image = self.image_cache.find(self.store(), reference)?;
        let mut info = std::collections::HashMap::new();
        if req.verbose {
            if let Some(image) = &image {
                if let Ok(config) = self.store().config(&image.name) {
                    let detail = serde_json::json!({
                        "imageSpec": { "config": {
                            "User": config.user, "Env": config.env, "Entrypoint": config.entrypoint,
                            "Cmd": config.cmd, "WorkingDir": config.working_dir,
                            "Labels": config.labels,
                        }},
                    });
                    info.insert("info".to_string(), detail.to_string());
                }
            }
        }
        Ok(proto::ImageStatusResponse {
            image: image.map(|i| i.to_proto()),
            info,
        })
    }

    fn list_images(
        &self,
        req: proto::ListImagesRequest,
    ) -> Result<proto::ListImagesResponse, Status> {
        let wanted = req
            .filter
            .as_ref()
            .and_then(|f| f.image.as_ref())
            .map(|i| i.image.as_str())
            .unwrap_or_default();
        let images = if wanted.is_empty() {
            self.image_cache.list(self.store())?.to_vec()
        } else {
            self.image_cache
                .find(self.store(), wanted)?
                .into_iter()
                .collect()
        };
        Ok(proto::ListImagesResponse {
            images: images.iter().map(|i| i.to_proto()).collect(),
        })
    }

    /// `trace`: `--trace`'s record of the pull's steps.
    fn pull_image(
        &self,
        req: proto::PullImageRequest,
        trace: Option<Arc<images::PullTrace>>,
    ) -> Result<String, Status> {
        let reference = req
            .image
            .as_ref()
            .map(|i| i.image.as_str())
            .unwrap_or_default();
        if reference.is_empty() {
            return Err(invalid("image.image", "an image reference is required"));
        }
        let parsed = podlab_image::reference::Reference::parse(reference)
            .map_err(|e| invalid("image.image", e))?;
        let options = podlab_image::pull::PullOptions {
            credentials: req.auth.as_ref().and_then(credentials),
            progress: trace.map(|t| t as Arc<dyn podlab_image::pull::Progress>),
            ..Default::default()
        };
        let store = self.store();
        // The pull runs its own runtime in a thread of its own, while this one waits for it:
        // no RPC (and no fork) runs meanwhile, and the thread is gone before the next one.
        #[allow(clippy::result_large_err)] // the error is passed on, not kept
        let pulled = std::thread::scope(|scope| {
            scope
                .spawn(|| podlab_image::pull::pull(store, &parsed, &options))
                .join()
        })
        .map_err(|_| Status::internal(format!("pulling {reference:?}: the pull panicked")))?;
        // podlab's built-in busybox stands in when no registry has busybox (offline).
        if pulled.is_err() && self.store().ensure_builtin_if_named(reference).is_ok() {
            if let Some(image) = self.image_cache.find(self.store(), reference)? {
                return Ok(image.id);
            }
        }
        let pulled = pulled.map_err(|e| {
            let code = if e.is_not_found() {
                tonic::Code::NotFound
            } else {
                tonic::Code::Unknown
            };
            Status::new(
                code,
                format!("failed to pull and unpack image {reference:?}: {e}"),
            )
        })?;
        Ok(pulled.config_digest.to_string())
    }

    fn remove_image(&self, req: proto::RemoveImageRequest) -> Result<(), Status> {
        let reference = req
            .image
            .as_ref()
            .map(|i| i.image.as_str())
            .unwrap_or_default();
        if reference.is_empty() {
            return Err(invalid("image.image", "an image reference is required"));
        }
        let Some(image) = self.image_cache.find(self.store(), reference)? else {
            // Idempotent, as the CRI asks.
            return Ok(());
        };
        images::untag(self.store(), &image)?;
        // The content goes after the answer when the server has a cleaner (containerd's
        // garbage collector runs after its RemoveImage too); the collection first makes the
        // names' removal durable.
        if !self.runtime.defer_task() {
            self.store().gc().map_err(crate::status::from_image)?;
        }
        Ok(())
    }

    fn image_fs_info(&self) -> proto::ImageFsInfoResponse {
        let dir = self.store().snapshots_dir();
        let (bytes, inodes) = self.snapshots_usage.of(dir);
        let usage = proto::FilesystemUsage {
            timestamp: podlab_runtime::liveness::now_ns(),
            fs_id: Some(proto::FilesystemIdentifier {
                mountpoint: dir.display().to_string(),
            }),
            used_bytes: Some(proto::UInt64Value { value: bytes }),
            inodes_used: Some(proto::UInt64Value { value: inodes }),
        };
        proto::ImageFsInfoResponse {
            image_filesystems: vec![usage],
            container_filesystems: Vec::new(),
        }
    }
}

/// The CRI's AuthConfig as the pull's credentials: a user and password, or a registry or
/// identity token (the base64 `auth` form is not read).
fn credentials(auth: &proto::AuthConfig) -> Option<podlab_image::credentials::Credentials> {
    use podlab_image::credentials::Credentials;
    if !auth.registry_token.is_empty() {
        return Some(Credentials::Token(auth.registry_token.clone()));
    }
    if !auth.username.is_empty() {
        return Some(Credentials::Basic {
            username: auth.username.clone(),
            password: auth.password.clone(),
        });
    }
    if !auth.identity_token.is_empty() {
        return Some(Credentials::Token(auth.identity_token.clone()));
    }
    None
}

/// CPU time and working set of `cgroup` as the CRI's stats carry them, stamped `now`; the
/// values are left out when there is no cgroup or it cannot be read.
fn cgroup_usage(
    cgroup: Option<&podlab_cgroups::Cgroup>,
    now: i64,
) -> (proto::CpuUsage, proto::MemoryUsage) {
    let cpu = cgroup.and_then(|c| podlab_cgroups::cpu::usage_ns(c).ok().flatten());
    let memory = cgroup.and_then(|c| podlab_cgroups::memory::working_set_bytes(c).ok().flatten());
    (
        proto::CpuUsage {
            timestamp: now,
            usage_core_nano_seconds: cpu.map(|value| proto::UInt64Value { value }),
            usage_nano_cores: None,
        },
        proto::MemoryUsage {
            timestamp: now,
            working_set_bytes: memory.map(|value| proto::UInt64Value { value }),
            ..Default::default()
        },
    )
}

fn unimplemented<T>(rpc: &str, why: &str) -> Reply<T> {
    Err(Status::unimplemented(format!(
        "{rpc} is not implemented by podlab cri yet: {why}"
    )))
}

/// The RuntimeService half.
pub struct Runtimes(pub Arc<Cri>);
/// The ImageService half.
pub struct Images(pub Arc<Cri>);

use crate::events::EventStream;

/// The RPCs that may wait on NRI plugins, each run as a task of its own (see [`to_the_end`]).
impl Runtimes {
    async fn run_pod_sandbox_to_the_end(
        &self,
        request: Request<proto::RunPodSandboxRequest>,
    ) -> Reply<proto::RunPodSandboxResponse> {
        let req = request.into_inner();
        let what = req
            .config
            .as_ref()
            .and_then(|c| c.metadata.as_ref())
            .map(|m| format!("{}/{}", m.namespace, m.name))
            .unwrap_or_default();
        let pod = req
            .config
            .as_ref()
            .and_then(|c| c.metadata.as_ref())
            .map(|m| podlab_runtime::config::PodSandboxMetadata {
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                uid: m.uid.clone(),
                attempt: m.attempt,
            });
        let reply = self.0.call_on_pod(
            "RunPodSandbox",
            &what,
            || pod,
            || {
                self.0
                    .run_pod_sandbox(req)
                    .map(|pod_sandbox_id| proto::RunPodSandboxResponse { pod_sandbox_id })
            },
        )?;
        self.0
            .nri_run_pod_sandbox(&reply.get_ref().pod_sandbox_id)
            .await?;
        Ok(reply)
    }

    async fn stop_pod_sandbox_to_the_end(
        &self,
        request: Request<proto::StopPodSandboxRequest>,
    ) -> Reply<proto::StopPodSandboxResponse> {
        let id = request.into_inner().pod_sandbox_id;
        self.0.nri_stop_pod_sandbox(&id).await;
        let pod = || self.0.pod_of_sandbox(&id);
        self.0.call_on_pod("StopPodSandbox", &id, pod, || {
            self.0
                .stop_pod_sandbox(&id)
                .map(|()| proto::StopPodSandboxResponse {})
        })
    }

    async fn remove_pod_sandbox_to_the_end(
        &self,
        request: Request<proto::RemovePodSandboxRequest>,
    ) -> Reply<proto::RemovePodSandboxResponse> {
        let id = request.into_inner().pod_sandbox_id;
        let removal = self.0.nri_before_pod_removal(&id).await;
        let pod = || self.0.pod_of_sandbox(&id);
        let reply = self.0.call_on_pod("RemovePodSandbox", &id, pod, || {
            self.0
                .remove_pod_sandbox(&id)
                .map(|()| proto::RemovePodSandboxResponse {})
        })?;
        if let Some(removal) = removal {
            self.0.nri_removed_pod(removal).await;
        }
        Ok(reply)
    }

    async fn create_container_to_the_end(
        &self,
        request: Request<proto::CreateContainerRequest>,
    ) -> Reply<proto::CreateContainerResponse> {
        let req = request.into_inner();
        let what = req.pod_sandbox_id.clone();
        let pod = || self.0.pod_of_sandbox(&what);
        let reply = self.0.call_on_pod("CreateContainer", &what, pod, || {
            self.0
                .create_container(req)
                .map(|container_id| proto::CreateContainerResponse { container_id })
        })?;
        self.0
            .nri_create_container(&reply.get_ref().container_id)
            .await?;
        Ok(reply)
    }

    async fn start_container_to_the_end(
        &self,
        request: Request<proto::StartContainerRequest>,
    ) -> Reply<proto::StartContainerResponse> {
        let id = request.into_inner().container_id;
        self.0.nri_start_container(&id).await?;
        let pod = || self.0.pod_of_container(&id);
        let reply = self.0.call_on_pod("StartContainer", &id, pod, || {
            let id = self.0.container_id("container_id", &id)?;
            self.0.runtime.start_container(&id).map_err(from_runtime)?;
            self.0.container_event(
                id.as_str(),
                proto::ContainerEventType::ContainerStartedEvent,
            );
            Ok(proto::StartContainerResponse {})
        })?;
        self.0.nri_started_container(&id).await;
        Ok(reply)
    }

    async fn stop_container_to_the_end(
        &self,
        request: Request<proto::StopContainerRequest>,
    ) -> Reply<proto::StopContainerResponse> {
        let req = request.into_inner();
        let id = req.container_id.clone();
        let running = self.0.nri_stops_running(&id);
        let pod = || self.0.pod_of_container(&id);
        let reply = self.0.call_on_pod("StopContainer", &id, pod, || {
            let grace = Duration::from_secs(u64::try_from(req.timeout).unwrap_or(0));
            match self.0.container_id("container_id", &req.container_id) {
                Ok(id) => match self.0.runtime.stop_container(&id, grace) {
                    Ok(()) if self.0.events.subscribed() => {
                        if let Ok(status) = self.0.runtime.container_status(&id) {
                            self.0.observe_sandbox(&status.sandbox_id, false);
                        }
                    }
                    Ok(()) => {}
                    Err(podlab_runtime::Error::ContainerNotFound { .. }) => {}
                    Err(e) => return Err(from_runtime(e)),
                },
                // Idempotent: an unknown container is already stopped.
                Err(s) if s.code() == tonic::Code::NotFound => {}
                Err(s) => return Err(s),
            }
            Ok(proto::StopContainerResponse {})
        })?;
        if let Some(stopped) = running {
            self.0.nri_stopped_container(&stopped).await;
        }
        Ok(reply)
    }

    async fn update_container_resources_to_the_end(
        &self,
        request: Request<proto::UpdateContainerResourcesRequest>,
    ) -> Reply<proto::UpdateContainerResourcesResponse> {
        let req = request.into_inner();
        let id = req.container_id.clone();
        let requested = req
            .linux
            .as_ref()
            .ok_or_else(|| invalid("linux", "Linux resources are required"))
            .and_then(|linux| convert::cgroup_resources("linux", linux));
        // The plugins may change a valid update before it is written.
        let adjusted = match &requested {
            Ok(requested) => self.0.nri_update_container(&id, &requested.cgroup).await?,
            Err(_) => None,
        };
        let reply = self.0.call("UpdateContainerResources", &id, || {
            let id = self.0.container_id("container_id", &req.container_id)?;
            let resources = adjusted.unwrap_or(requested?.cgroup);
            self.0
                .runtime
                .update_container_resources(&id, &resources)
                .map_err(from_runtime)?;
            Ok(proto::UpdateContainerResourcesResponse {})
        })?;
        self.0.nri_updated_container(&id).await;
        Ok(reply)
    }

    async fn remove_container_to_the_end(
        &self,
        request: Request<proto::RemoveContainerRequest>,
    ) -> Reply<proto::RemoveContainerResponse> {
        let id = request.into_inner().container_id;
        let removal = self.0.nri_before_container_removal(&id);
        let pod = || self.0.pod_of_container(&id);
        let reply = self.0.call_on_pod("RemoveContainer", &id, pod, || {
            match self.0.container_id("container_id", &id) {
                Ok(id) => {
                    let sandbox = self.0.before_container_removal(&id);
                    self.0.runtime.remove_container(&id).map_err(from_runtime)?;
                    if let Some(sandbox) = sandbox {
                        self.0.container_removed(&id, &sandbox);
                    }
                }
                Err(s) if s.code() == tonic::Code::NotFound => {}
                Err(s) => return Err(s),
            }
            Ok(proto::RemoveContainerResponse {})
        })?;
        if let Some(removed) = removal {
            self.0.nri_removed_container(removed).await;
        }
        Ok(reply)
    }
}

/// Runs an RPC's body as a task of its own: a client that goes away drops its handler at the
/// next `.await` (an NRI plugin's answer), and the body would stop half done (a sandbox made
/// and still hidden); as a task it runs to its end whoever waits for it.
async fn to_the_end<T: Send + 'static>(
    body: impl std::future::Future<Output = Reply<T>> + Send + 'static,
) -> Reply<T> {
    tokio::spawn(body)
        .await
        .unwrap_or_else(|e| Err(Status::internal(format!("the call's task ended: {e}"))))
}

#[tonic::async_trait]
impl RuntimeService for Runtimes {
    async fn version(&self, _: Request<proto::VersionRequest>) -> Reply<proto::VersionResponse> {
        self.0.call("Version", "", || {
            Ok(proto::VersionResponse {
                version: "0.1.0".into(),
                runtime_name: "podlab".into(),
                runtime_version: env!("CARGO_PKG_VERSION").into(),
                runtime_api_version: CRI_API_VERSION.into(),
            })
        })
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<proto::RunPodSandboxRequest>,
    ) -> Reply<proto::RunPodSandboxResponse> {
        let this = Runtimes(Arc::clone(&self.0));
        to_the_end(async move { this.run_pod_sandbox_to_the_end(request).await }).await
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<proto::StopPodSandboxRequest>,
    ) -> Reply<proto::StopPodSandboxResponse> {
        let this = Runtimes(Arc::clone(&self.0));
        to_the_end(async move { this.stop_pod_sandbox_to_the_end(request).await }).await
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<proto::RemovePodSandboxRequest>,
    ) -> Reply<proto::RemovePodSandboxResponse> {
        let this = Runtimes(Arc::clone(&self.0));
        to_the_end(async move { this.remove_pod_sandbox_to_the_end(request).await }).await
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<proto::PodSandboxStatusRequest>,
    ) -> Reply<proto::PodSandboxStatusResponse> {
        let req = request.into_inner();
        let id = req.pod_sandbox_id.clone();
        self.0
            .call("PodSandboxStatus", &id, || self.0.pod_sandbox_status(req))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<proto::ListPodSandboxRequest>,
    ) -> Reply<proto::ListPodSandboxResponse> {
        self.0.call("ListPodSandbox", "", || {
            self.0.list_pod_sandbox(request.into_inner())
        })
    }

    async fn create_container(
        &self,
        request: Request<proto::CreateContainerRequest>,
    ) -> Reply<proto::CreateContainerResponse> {
        let this = Runtimes(Arc::clone(&self.0));
        to_the_end(async move { this.create_container_to_the_end(request).await }).await
    }

    async fn start_container(
        &self,
        request: Request<proto::StartContainerRequest>,
    ) -> Reply<proto::StartContainerResponse> {
        let this = Runtimes(Arc::clone(&self.0));
        to_the_end(async move { this.start_container_to_the_end(request).await }).await
    }

    async fn stop_container(
        &self,
        request: Request<proto::StopContainerRequest>,
    ) -> Reply<proto::StopContainerResponse> {
        let this = Runtimes(Arc::clone(&self.0));
        to_the_end(async move { this.stop_container_to_the_end(request).await }).await
    }

    async fn remove_container(
        &self,
        request: Request<proto::RemoveContainerRequest>,
    ) -> Reply<proto::RemoveContainerResponse> {
        let this = Runtimes(Arc::clone(&self.0));
        to_the_end(async move { this.remove_container_to_the_end(request).await }).await
    }

    async fn list_containers(
        &self,
        request: Request<proto::ListContainersRequest>,
    ) -> Reply<proto::ListContainersResponse> {
        self.0.call("ListContainers", "", || {
            self.0.list_containers(request.into_inner())
        })
    }

    async fn container_status(
        &self,
        request: Request<proto::ContainerStatusRequest>,
    ) -> Reply<proto::ContainerStatusResponse> {
        let req = request.into_inner();
        let id = req.container_id.clone();
        self.0.call("ContainerStatus", &id, || {
            let id = self.0.container_id("container_id", &req.container_id)?;
            let (status, record) = self
                .0
                .runtime
                .container_status_and_record(&id)
                .map_err(from_runtime)?;
            let mut info = std::collections::HashMap::new();
            if req.verbose {
                let detail = serde_json::json!({
                    "pid": status.pid.unwrap_or(0),
                    "sandboxID": status.sandbox_id.as_str(),
                    "namespaces": status.namespaces.iter()
                        .map(|(kind, inode)| (kind.proc_name().to_string(), *inode))
                        .collect::<BTreeMap<_, _>>(),
                });
                info.insert("info".to_string(), detail.to_string());
            }
            Ok(proto::ContainerStatusResponse {
                status: Some(self.0.container_status_proto_of(&status, Some(&record))),
                info,
            })
        })
    }

    async fn update_container_resources(
        &self,
        request: Request<proto::UpdateContainerResourcesRequest>,
    ) -> Reply<proto::UpdateContainerResourcesResponse> {
        let this = Runtimes(Arc::clone(&self.0));
        to_the_end(async move { this.update_container_resources_to_the_end(request).await }).await
    }

    async fn reopen_container_log(
        &self,
        request: Request<proto::ReopenContainerLogRequest>,
    ) -> Reply<proto::ReopenContainerLogResponse> {
        let id = request.into_inner().container_id;
        self.0.call("ReopenContainerLog", &id, || {
            let id = self.0.container_id("container_id", &id)?;
            self.0
                .runtime
                .reopen_container_log(&id)
                .map_err(from_runtime)?;
            Ok(proto::ReopenContainerLogResponse {})
        })
    }

    async fn exec_sync(
        &self,
        request: Request<proto::ExecSyncRequest>,
    ) -> Reply<proto::ExecSyncResponse> {
        let req = request.into_inner();
        let id = req.container_id.clone();
        self.0.call("ExecSync", &id, || self.0.exec_sync(req))
    }

    async fn exec(&self, request: Request<proto::ExecRequest>) -> Reply<proto::ExecResponse> {
        let req = request.into_inner();
        let id = req.container_id.clone();
        self.0.call("Exec", &id, || {
            self.0.running_container(&req.container_id)?;
            if req.cmd.is_empty() {
                return Err(invalid("cmd", "a command is required"));
            }
            stream_flags(req.tty, req.stdin, req.stdout, req.stderr)?;
            let url = self.0.streams.url(crate::streaming::Pending::Exec(req))?;
            Ok(proto::ExecResponse { url })
        })
    }

    async fn attach(&self, request: Request<proto::AttachRequest>) -> Reply<proto::AttachResponse> {
        let req = request.into_inner();
        let id = req.container_id.clone();
        self.0.call("Attach", &id, || {
            self.0.running_container(&req.container_id)?;
            stream_flags(req.tty, req.stdin, req.stdout, req.stderr)?;
            let url = self.0.streams.url(crate::streaming::Pending::Attach(req))?;
            Ok(proto::AttachResponse { url })
        })
    }

    async fn port_forward(
        &self,
        request: Request<proto::PortForwardRequest>,
    ) -> Reply<proto::PortForwardResponse> {
        let req = request.into_inner();
        let id = req.pod_sandbox_id.clone();
        self.0.call("PortForward", &id, || {
            let sandbox = self.0.sandbox_id("pod_sandbox_id", &req.pod_sandbox_id)?;
            let status = self
                .0
                .runtime
                .pod_sandbox_status(&sandbox)
                .map_err(from_runtime)?;
            if status.state != podlab_runtime::status::SandboxState::Ready {
                return Err(Status::failed_precondition(format!(
                    "failed to get sandbox ip: sandbox {:?} is not running",
                    sandbox.as_str()
                )));
            }
            let url = self
                .0
                .streams
                .url(crate::streaming::Pending::PortForward(req))?;
            Ok(proto::PortForwardResponse { url })
        })
    }

    async fn container_stats(
        &self,
        request: Request<proto::ContainerStatsRequest>,
    ) -> Reply<proto::ContainerStatsResponse> {
        let id = request.into_inner().container_id;
        self.0.call("ContainerStats", &id, || {
            let id = self.0.container_id("container_id", &id)?;
            let status = self.0.runtime.container_status(&id).map_err(from_runtime)?;
            Ok(proto::ContainerStatsResponse {
                stats: Some(self.0.container_stats(&status)),
            })
        })
    }

    async fn list_container_stats(
        &self,
        request: Request<proto::ListContainerStatsRequest>,
    ) -> Reply<proto::ListContainerStatsResponse> {
        self.0.call("ListContainerStats", "", || {
            self.0.list_container_stats(request.into_inner())
        })
    }

    async fn pod_sandbox_stats(
        &self,
        request: Request<proto::PodSandboxStatsRequest>,
    ) -> Reply<proto::PodSandboxStatsResponse> {
        let id = request.into_inner().pod_sandbox_id;
        self.0.call("PodSandboxStats", &id, || {
            let id = self.0.sandbox_id("pod_sandbox_id", &id)?;
            Ok(proto::PodSandboxStatsResponse {
                stats: Some(self.0.pod_sandbox_stats(&id)?),
            })
        })
    }

    async fn list_pod_sandbox_stats(
        &self,
        request: Request<proto::ListPodSandboxStatsRequest>,
    ) -> Reply<proto::ListPodSandboxStatsResponse> {
        let filter = request.into_inner().filter.unwrap_or_default();
        self.0.call("ListPodSandboxStats", "", || {
            let listed = self.0.list_pod_sandbox(proto::ListPodSandboxRequest {
                filter: Some(proto::PodSandboxFilter {
                    id: filter.id,
                    label_selector: filter.label_selector,
                    state: None,
                }),
            })?;
            let mut stats = Vec::new();
            for sandbox in listed.items {
                let Ok(id) = self.0.runtime.resolve_sandbox_id(&sandbox.id) else {
                    continue;
                };
                // One removed meanwhile is left out.
                if let Ok(one) = self.0.pod_sandbox_stats(&id) {
                    stats.push(one);
                }
            }
            Ok(proto::ListPodSandboxStatsResponse { stats })
        })
    }

    async fn update_runtime_config(
        &self,
        request: Request<proto::UpdateRuntimeConfigRequest>,
    ) -> Reply<proto::UpdateRuntimeConfigResponse> {
        let cidr = request
            .into_inner()
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
            .unwrap_or_default();
        // podlab's network has its own subnet; a pod CIDR from kubelet is taken note of only.
        self.0.call("UpdateRuntimeConfig", &cidr, || {
            Ok(proto::UpdateRuntimeConfigResponse {})
        })
    }

    async fn status(&self, _: Request<proto::StatusRequest>) -> Reply<proto::StatusResponse> {
        self.0.call("Status", "", || {
            let network = if self.0.network_ready {
                proto::RuntimeCondition {
                    r#type: "NetworkReady".into(),
                    status: true,
                    ..Default::default()
                }
            } else {
                proto::RuntimeCondition {
                    r#type: "NetworkReady".into(),
                    status: false,
                    reason: "NetworkPluginNotReady".into(),
                    message: "podlab cri runs without a pod network (PODLAB_NETWORK=none)".into(),
                }
            };
            Ok(proto::StatusResponse {
                status: Some(proto::RuntimeStatus {
                    conditions: vec![
                        proto::RuntimeCondition {
                            r#type: "RuntimeReady".into(),
                            status: true,
                            ..Default::default()
                        },
                        network,
                    ],
                }),
                info: Default::default(),
                runtime_handlers: vec![proto::RuntimeHandler {
                    name: String::new(),
                    features: Some(proto::RuntimeHandlerFeatures {
                        recursive_read_only_mounts: podlab_ns::mnt::recursive_readonly_supported(),
                        user_namespaces: self.0.user_namespaces_supported(),
                    }),
                }],
                features: Some(proto::RuntimeFeatures {
                    supplemental_groups_policy: true,
                }),
            })
        })
    }

    async fn checkpoint_container(
        &self,
        _: Request<proto::CheckpointContainerRequest>,
    ) -> Reply<proto::CheckpointContainerResponse> {
        unimplemented(
            "CheckpointContainer",
            "podlab does not checkpoint containers",
        )
    }

    type GetContainerEventsStream = EventStream;

    async fn get_container_events(
        &self,
        _: Request<proto::GetEventsRequest>,
    ) -> Reply<Self::GetContainerEventsStream> {
        self.0
            .call("GetContainerEvents", "", || self.0.events.subscribe())
    }

    async fn list_metric_descriptors(
        &self,
        _: Request<proto::ListMetricDescriptorsRequest>,
    ) -> Reply<proto::ListMetricDescriptorsResponse> {
        self.0.call("ListMetricDescriptors", "", || {
            Ok(proto::ListMetricDescriptorsResponse {
                descriptors: crate::metrics::descriptors(),
            })
        })
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<proto::ListPodSandboxMetricsRequest>,
    ) -> Reply<proto::ListPodSandboxMetricsResponse> {
        self.0.call("ListPodSandboxMetrics", "", || {
            Ok(proto::ListPodSandboxMetricsResponse {
                pod_metrics: self.0.pod_sandbox_metrics(),
            })
        })
    }

    async fn runtime_config(
        &self,
        _: Request<proto::RuntimeConfigRequest>,
    ) -> Reply<proto::RuntimeConfigResponse> {
        self.0.call("RuntimeConfig", "", || {
            Ok(proto::RuntimeConfigResponse {
                linux: Some(proto::LinuxRuntimeConfiguration {
                    cgroup_driver: proto::CgroupDriver::Cgroupfs as i32,
                }),
            })
        })
    }
}

#[tonic::async_trait]
impl ImageService for Images {
    async fn list_images(
        &self,
        request: Request<proto::ListImagesRequest>,
    ) -> Reply<proto::ListImagesResponse> {
        self.0.call("ListImages", "", || {
            self.0.list_images(request.into_inner())
        })
    }

    async fn image_status(
        &self,
        request: Request<proto::ImageStatusRequest>,
    ) -> Reply<proto::ImageStatusResponse> {
        let req = request.into_inner();
        let what = req
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        self.0
            .call("ImageStatus", &what, || self.0.image_status(req))
    }

    async fn pull_image(
        &self,
        request: Request<proto::PullImageRequest>,
    ) -> Reply<proto::PullImageResponse> {
        let req = request.into_inner();
        let what = req
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let trace = self.0.trace.then(|| Arc::new(images::PullTrace::start()));
        let reply = self.0.call("PullImage", &what, || {
            self.0
                .pull_image(req, trace.clone())
                .map(|image_ref| proto::PullImageResponse { image_ref })
        });
        if let Some(trace) = trace {
            trace.print(match &reply {
                Ok(_) => "layers in the snapshots, image named",
                Err(_) => "failed",
            });
        }
        reply
    }

    async fn remove_image(
        &self,
        request: Request<proto::RemoveImageRequest>,
    ) -> Reply<proto::RemoveImageResponse> {
        let req = request.into_inner();
        let what = req
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        self.0.call("RemoveImage", &what, || {
            self.0
                .remove_image(req)
                .map(|()| proto::RemoveImageResponse {})
        })
    }

    async fn image_fs_info(
        &self,
        _: Request<proto::ImageFsInfoRequest>,
    ) -> Reply<proto::ImageFsInfoResponse> {
        self.0
            .call("ImageFsInfo", "", || Ok(self.0.image_fs_info()))
    }
}

/// One line of `--trace` below an RPC's: a step, the process that made it, its time.
pub(crate) fn print_step(step: &str, process: &str, ms: f64) {
    eprintln!("cri:   {step:<44} {process:<7} {ms:8.2} ms");
}
