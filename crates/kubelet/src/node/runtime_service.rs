//! What the node agent asks of a container runtime: kubelet's `internalapi.RuntimeService`
//! (and the one call of its `ImageManagerService` the sync pass makes), cut down to the calls
//! the agent makes.
//!
//! kubelet's `kuberuntime` never talks to containerd directly: it holds a `RuntimeService`,
//! which is either the remote CRI client (`k8s.io/cri-client`) or, in its tests, a fake. The
//! agent does the same with two implementations:
//!
//! - [`podlab_runtime::Runtime`] in the agent's own process, the default: the calls go
//!   straight to the runtime's state files and to the pods' shims, with no RPC in between, and
//!   the PLEG can relist by `stat`ing those files ([`RuntimeService::local`]);
//! - [`super::remote::RemoteRuntime`], a CRI v1 gRPC client (`podlab node --runtime-endpoint
//!   unix:///…`): any CRI runtime, `podlab cri` or containerd's CRI plugin.
//!
//! The messages are podlab-runtime's CRI-shaped configs and statuses; the remote client turns
//! them into CRI messages and back ([`super::remote`]).

use std::time::Duration;

use podlab_runtime::config::{ContainerConfig, PodSandboxConfig};
use podlab_runtime::{
    ContainerFilter, ContainerId, ContainerState, ContainerStatus, ExecResult, Result, Runtime,
    SandboxId, SandboxStatus,
};

/// The runtime calls of the node agent (kubelet's `RuntimeService`, the calls it uses).
pub trait RuntimeService: Send + Sync {
    /// RunPodSandbox.
    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<SandboxId>;
    /// StopPodSandbox: its containers stopped, its network torn down.
    fn stop_pod_sandbox(&self, id: &SandboxId) -> Result<()>;
    /// RemovePodSandbox.
    fn remove_pod_sandbox(&self, id: &SandboxId) -> Result<()>;
    /// PodSandboxStatus.
    fn pod_sandbox_status(&self, id: &SandboxId) -> Result<SandboxStatus>;
    /// ListPodSandbox: every sandbox the runtime has, with its status.
    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxStatus>>;
    /// CreateContainer in `sandbox`, made with `sandbox_config` (CRI sends it along, as
    /// kubelet's `startContainer` does).
    fn create_container(
        &self,
        sandbox: &SandboxId,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<ContainerId>;
    /// StartContainer.
    fn start_container(&self, id: &ContainerId) -> Result<()>;
    /// StopContainer with `grace` before the SIGKILL; stops waiting (the container keeps its
    /// SIGTERM) once `give_up()` is true. True when the container is no longer running.
    fn stop_container_unless(
        &self,
        id: &ContainerId,
        grace: Duration,
        give_up: &dyn Fn() -> bool,
    ) -> Result<bool>;
    /// RemoveContainer.
    fn remove_container(&self, id: &ContainerId) -> Result<()>;
    /// ListContainers, each with its ContainerStatus (exit code, times, log path).
    fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<ContainerStatus>>;
    /// ListContainers alone: each container's sandbox, id and state (the PLEG's relist).
    fn list_container_states(&self) -> Result<Vec<(SandboxId, ContainerId, ContainerState)>> {
        Ok(self
            .list_containers(&ContainerFilter::default())?
            .into_iter()
            .map(|c| (c.sandbox_id, c.id, c.state))
            .collect())
    }
    /// ExecSync (exec probes); a command still running after `timeout` is
    /// [`podlab_runtime::Error::Timeout`].
    fn exec_sync(
        &self,
        id: &ContainerId,
        cmd: &[String],
        timeout: Option<Duration>,
    ) -> Result<ExecResult>;
    /// The image's USER (ImageStatus's `uid`/`username`), for kubelet's runAsNonRoot check.
    fn image_user(&self, image: &str) -> Result<String>;
    /// The bytes of a container's writable layer (ContainerStats' `writable_layer.used_bytes`,
    /// which kubelet's eviction manager reads); None when not known.
    fn writable_layer_bytes(&self, _sandbox: &SandboxId, _id: &ContainerId) -> Option<u64> {
        None
    }
    /// UpdateContainerResources: a running container's cgroup values changed in place (an
    /// in-place resize).
    fn update_container_resources(
        &self,
        id: &ContainerId,
        resources: &podlab_cgroups::Resources,
    ) -> Result<()>;
    /// UpdatePodSandboxResources: the pod's cgroup values of an in-place resize. kubelet
    /// writes the pod cgroup itself and only notifies a CRI runtime, best effort; a remote
    /// runtime here owns the pod cgroup it made and is not told (the CRI of this build has no
    /// such call).
    fn update_pod_sandbox_resources(
        &self,
        _id: &SandboxId,
        _resources: &podlab_cgroups::Resources,
    ) -> Result<()> {
        Ok(())
    }
    /// The memory a container uses now (its cgroup's working set), for the check before a
    /// memory limit is lowered; None when not known.
    fn container_memory_usage(&self, _id: &ContainerId) -> Option<u64> {
        None
    }
    /// The memory a pod uses now (its pod cgroup's working set); None when not known.
    fn pod_memory_usage(&self, _sandbox: &SandboxId) -> Option<u64> {
        None
    }
    /// The in-process runtime, when this is it: its state files, the shims' notices.
    fn local(&self) -> Option<&Runtime> {
        None
    }
}

impl RuntimeService for Runtime {
    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<SandboxId> {
        Runtime::run_pod_sandbox(self, config)
    }

    fn stop_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        Runtime::stop_pod_sandbox(self, id)
    }

    fn remove_pod_sandbox(&self, id: &SandboxId) -> Result<()> {
        Runtime::remove_pod_sandbox(self, id)
    }

    fn pod_sandbox_status(&self, id: &SandboxId) -> Result<SandboxStatus> {
        Runtime::pod_sandbox_status(self, id)
    }

    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxStatus>> {
        Runtime::list_pod_sandboxes(self)
    }

    fn create_container(
        &self,
        sandbox: &SandboxId,
        config: &ContainerConfig,
        _sandbox_config: &PodSandboxConfig,
    ) -> Result<ContainerId> {
        Runtime::create_container(self, sandbox, config)
    }

    fn start_container(&self, id: &ContainerId) -> Result<()> {
        Runtime::start_container(self, id)
    }

    fn stop_container_unless(
        &self,
        id: &ContainerId,
        grace: Duration,
        give_up: &dyn Fn() -> bool,
    ) -> Result<bool> {
        Runtime::stop_container_unless(self, id, grace, give_up)
    }

    fn remove_container(&self, id: &ContainerId) -> Result<()> {
        Runtime::remove_container(self, id)
    }

    fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<ContainerStatus>> {
        Runtime::list_containers(self, filter)
    }

    fn exec_sync(
        &self,
        id: &ContainerId,
        cmd: &[String],
        timeout: Option<Duration>,
    ) -> Result<ExecResult> {
        Runtime::exec_sync(self, id, cmd, timeout)
    }

    fn image_user(&self, image: &str) -> Result<String> {
        Runtime::image_user(self, image)
    }

    /// The blocks allocated under the container's overlay upper folder.
    fn writable_layer_bytes(&self, sandbox: &SandboxId, id: &ContainerId) -> Option<u64> {
        let upper = self.layout().sandbox(sandbox).container(id).upper();
        crate::eviction::disk_usage(&upper).ok()
    }

    fn update_container_resources(
        &self,
        id: &ContainerId,
        resources: &podlab_cgroups::Resources,
    ) -> Result<()> {
        Runtime::update_container_resources(self, id, resources)
    }

    fn update_pod_sandbox_resources(
        &self,
        id: &SandboxId,
        resources: &podlab_cgroups::Resources,
    ) -> Result<()> {
        Runtime::update_pod_sandbox_resources(self, id, resources)
    }

    fn container_memory_usage(&self, id: &ContainerId) -> Option<u64> {
        let cgroup = self.container_cgroup(id).ok()??;
        podlab_cgroups::memory::working_set_bytes(&cgroup).ok()?
    }

    fn pod_memory_usage(&self, sandbox: &SandboxId) -> Option<u64> {
        let cgroup = self.pod_sandbox_cgroup(sandbox).ok()??;
        podlab_cgroups::memory::working_set_bytes(&cgroup).ok()?
    }

    fn local(&self) -> Option<&Runtime> {
        Some(self)
    }
}
