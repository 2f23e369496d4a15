//! Where the RPCs tell NRI plugins of their steps (see [`crate::nri`]), in containerd's order:
//! a pod or container is shown only once its creating hook has passed, a failed creating hook
//! removes what was made, and a pod's containers stop before its StopPodSandbox hook.
//! Without `--nri-socket`, or with no plugin connected, each of these returns at once, having
//! described nothing (a creating hook still shows what it hid).

use std::time::Duration;

use podlab_runtime::status::{ContainerState, SandboxState};
use podlab_runtime::{ContainerFilter, ContainerId, SandboxId};
use tonic::Status;

use super::Cri;
use crate::nri::api::{self, Event};
use crate::nri::{self, adjust, describe};
use crate::proto;
use crate::status::from_runtime;

/// What RemovePodSandbox tells the plugins once the pod is gone: the pod and its containers,
/// described while they were there.
pub(super) struct PodRemoval {
    pod: api::PodSandbox,
    containers: Vec<api::Container>,
}

impl Cri {
    /// NRI, when it serves plugins and one is connected: else the hooks have nobody to tell.
    fn listening(&self) -> Option<&crate::nri::Nri> {
        self.nri.as_ref().filter(|nri| !nri.idle())
    }

    /// RunPodSandbox made `id` (hidden): the plugins' RunPodSandbox, then the pod is shown; if
    /// a plugin fails it, the pod is stopped and removed and the RPC fails.
    pub(super) async fn nri_run_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        let Some(nri) = &self.nri else {
            return Ok(());
        };
        if nri.idle() {
            nri.show(id);
            self.sandbox_started(id);
            return Ok(());
        }
        let sandbox = self.runtime.resolve_sandbox_id(id).map_err(|e| {
            nri.show(id);
            from_runtime(e)
        })?;
        let hook = match describe::pod(&self.runtime, &sandbox) {
            Some(pod) => nri.state_change(Event::RunPodSandbox, &pod, None).await,
            None => Ok(()),
        };
        if let Err(e) = hook {
            let _ = self.runtime.stop_pod_sandbox(&sandbox);
            let _ = self.runtime.remove_pod_sandbox(&sandbox);
            nri.show(id);
            return Err(Status::unknown(format!(
                "failed to run pod sandbox {id:?}: {e}"
            )));
        }
        nri.show(id);
        self.sandbox_started(id);
        Ok(())
    }

    /// Before StopPodSandbox stops a ready pod: its running containers stop (no grace, as
    /// containerd stops them), each told to the plugins, then the plugins' StopPodSandbox while
    /// the pod is still there to look at. A stopped or unknown pod tells nothing: Stop is
    /// idempotent, its hook is not.
    pub(super) async fn nri_stop_pod_sandbox(&self, id: &str) {
        let Some(nri) = self.listening() else {
            return;
        };
        let Ok(sandbox) = self.sandbox_id("pod_sandbox_id", id) else {
            return;
        };
        let ready = self
            .runtime
            .pod_sandbox_status(&sandbox)
            .is_ok_and(|s| s.state == SandboxState::Ready);
        if !ready {
            return;
        }
        let filter = ContainerFilter {
            sandbox_id: Some(sandbox.clone()),
            ..Default::default()
        };
        let running: Vec<ContainerId> = self
            .runtime
            .list_containers(&filter)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.state == ContainerState::Running)
            .map(|c| c.id)
            .collect();
        for container in running {
            if self
                .runtime
                .stop_container(&container, Duration::ZERO)
                .is_ok()
            {
                self.nri_stopped_container(&container).await;
            }
        }
        if let Some(pod) = describe::pod(&self.runtime, &sandbox) {
            nri.tell(Event::StopPodSandbox, &pod, None).await;
        }
    }

    /// Before RemovePodSandbox: a ready pod is stopped as StopPodSandbox stops it (its hooks
    /// told), and the pod and its containers are described for [`Cri::nri_removed_pod`].
    pub(super) async fn nri_before_pod_removal(&self, id: &str) -> Option<PodRemoval> {
        self.listening()?;
        self.nri_stop_pod_sandbox(id).await;
        let sandbox = self.sandbox_id("pod_sandbox_id", id).ok()?;
        let pod = describe::pod(&self.runtime, &sandbox)?;
        let filter = ContainerFilter {
            sandbox_id: Some(sandbox),
            ..Default::default()
        };
        let containers = self
            .runtime
            .list_containers(&filter)
            .unwrap_or_default()
            .iter()
            .filter_map(|c| describe::container_alone(&self.runtime, &c.id))
            .collect();
        Some(PodRemoval { pod, containers })
    }

    /// RemovePodSandbox removed the pod: the plugins hear of each container's removal, then
    /// the pod's.
    pub(super) async fn nri_removed_pod(&self, removal: PodRemoval) {
        let Some(nri) = self.listening() else {
            return;
        };
        for container in &removal.containers {
            nri.forget_container(&container.id);
            nri.tell(Event::RemoveContainer, &removal.pod, Some(container))
                .await;
        }
        nri.tell(Event::RemovePodSandbox, &removal.pod, None).await;
    }

    /// CreateContainer made `id` (hidden): the plugins' CreateContainer, then the container is
    /// shown and PostCreateContainer told; if a plugin fails it, the container is removed and
    /// the RPC fails.
    pub(super) async fn nri_create_container(&self, id: &str) -> Result<(), Status> {
        let Some(nri) = &self.nri else {
            return Ok(());
        };
        if nri.idle() {
            nri.show(id);
            self.container_event(id, proto::ContainerEventType::ContainerCreatedEvent);
            return Ok(());
        }
        let container = self.runtime.resolve_container_id(id).map_err(|e| {
            nri.show(id);
            from_runtime(e)
        })?;
        let described = describe::container(&self.runtime, &container);
        let hook = match &described {
            Some((pod, created)) => nri
                .create_container(pod, created)
                .await
                .map_err(|e| e.to_string()),
            None => Ok(nri::CreateAnswers {
                adjusted: None,
                updates: Vec::new(),
            }),
        };
        let applied = hook.and_then(|answers| self.nri_apply_create_answers(&container, answers));
        let adjusted = match applied {
            Ok(adjusted) => adjusted,
            Err(e) => {
                let _ = self.runtime.remove_container(&container);
                nri.show(id);
                return Err(Status::unknown(format!(
                    "failed to create container {id:?}: {e}"
                )));
            }
        };
        // PostCreateContainer tells of the container as the plugins made it.
        let described = if adjusted {
            describe::container(&self.runtime, &container)
        } else {
            described
        };
        nri.show(id);
        self.container_event(id, proto::ContainerEventType::ContainerCreatedEvent);
        if let Some((pod, created)) = described {
            nri.tell(Event::PostCreateContainer, &pod, Some(&created))
                .await;
        }
        Ok(())
    }

    /// Before StartContainer starts `id`: the plugins' StartContainer, which may fail the start.
    pub(super) async fn nri_start_container(&self, id: &str) -> Result<(), Status> {
        let Some(nri) = self.listening() else {
            return Ok(());
        };
        let Ok(container) = self.container_id("container_id", id) else {
            return Ok(()); // the RPC says NotFound itself
        };
        if let Some((pod, starting)) = describe::container(&self.runtime, &container) {
            nri.state_change(Event::StartContainer, &pod, Some(&starting))
                .await
                .map_err(|e| Status::unknown(format!("failed to start container {id:?}: {e}")))?;
        }
        Ok(())
    }

    /// StartContainer started `id`: PostStartContainer.
    pub(super) async fn nri_started_container(&self, id: &str) {
        let Some(nri) = self.listening() else {
            return;
        };
        let Ok(container) = self.container_id("container_id", id) else {
            return;
        };
        if let Some((pod, started)) = describe::container(&self.runtime, &container) {
            nri.tell(Event::PostStartContainer, &pod, Some(&started))
                .await;
        }
    }

    /// Whether StopContainer will stop a running container, so that the plugins hear of the
    /// stop once, not of each idempotent repeat.
    pub(super) fn nri_stops_running(&self, id: &str) -> Option<ContainerId> {
        self.listening()?;
        let container = self.container_id("container_id", id).ok()?;
        let state = self.runtime.container_status(&container).ok()?.state;
        (state == ContainerState::Running).then_some(container)
    }

    /// A shim's notice for `sandbox` (something in it was reaped): the plugins hear of each
    /// container that exited by itself (StopContainer), as containerd tells them from its
    /// task-exit events.
    pub(crate) async fn nri_observe_sandbox(&self, sandbox: &SandboxId) {
        if self.listening().is_none() {
            return;
        }
        let filter = ContainerFilter {
            sandbox_id: Some(sandbox.clone()),
            state: Some(ContainerState::Exited),
            ..Default::default()
        };
        for container in self.runtime.list_containers(&filter).unwrap_or_default() {
            if !self.hidden(container.id.as_str()) {
                self.nri_stopped_container(&container.id).await;
            }
        }
    }

    /// A container stopped or exited: the plugins' StopContainer, once per container.
    pub(super) async fn nri_stopped_container(&self, container: &ContainerId) {
        let Some(nri) = self.listening() else {
            return;
        };
        if !nri.first_stop(container.as_str()) {
            return;
        }
        if let Some((pod, stopped)) = describe::container(&self.runtime, container) {
            match nri.stop_container(&pod, &stopped).await {
                Ok(updates) => {
                    for (plugin, update) in updates {
                        if let Err(e) = self.nri_update(&update) {
                            eprintln!("podlab cri: NRI plugin {plugin}: StopContainer's update of {:?}: {e}", update.container_id);
                        }
                    }
                }
                Err(e) => eprintln!("podlab cri: {e}"),
            }
        }
    }

    /// A CreateContainer hook's answers: the container adjusted, then the other containers
    /// updated; whether there was an adjustment. An update that fails, unless the plugin said
    /// to ignore its failure, fails the creation.
    fn nri_apply_create_answers(
        &self,
        container: &ContainerId,
        answers: nri::CreateAnswers,
    ) -> Result<bool, String> {
        if let Some(merge) = &answers.adjusted {
            self.runtime
                .adjust_created_container(container, |record| merge.apply_to(record))
                .map_err(|e| format!("applying the NRI plugins' adjustment: {e}"))?;
        }
        self.nri_make_updates(&answers.updates)?;
        Ok(answers.adjusted.is_some())
    }

    /// The updates of other containers that a CreateContainer's or an UpdateContainer's
    /// plugins asked for, each made; the first that fails, unless its plugin said to ignore
    /// its failure, is the error.
    fn nri_make_updates(&self, updates: &[(String, api::ContainerUpdate)]) -> Result<(), String> {
        for (plugin, update) in updates {
            if let Err(e) = self.nri_update(update) {
                if !update.ignore_failure {
                    return Err(format!(
                        "NRI plugin {plugin}: its update of container {:?}: {e}",
                        update.container_id
                    ));
                }
            }
        }
        Ok(())
    }

    /// Before UpdateContainerResources writes `requested` to container `id`: the plugins'
    /// UpdateContainer, which may change the update (the resources to write are returned; None
    /// when nobody listens) and update other containers (a failure fails the RPC unless the
    /// plugin said to ignore it).
    pub(super) async fn nri_update_container(
        &self,
        id: &str,
        requested: &podlab_cgroups::Resources,
    ) -> Result<Option<podlab_cgroups::Resources>, Status> {
        let Some(nri) = self.listening() else {
            return Ok(None);
        };
        let Ok(container) = self.container_id("container_id", id) else {
            return Ok(None); // the RPC says NotFound itself
        };
        let Some((pod, current)) = describe::container(&self.runtime, &container) else {
            return Ok(None);
        };
        let failed = |e: String| Status::unknown(format!("NRI container update failed: {e}"));
        let answers = nri
            .update_container(&pod, &current, adjust::describe_resources(requested))
            .await
            .map_err(|e| failed(e.to_string()))?;
        self.nri_make_updates(&answers.updates).map_err(failed)?;
        adjust::cgroup_resources(&answers.resources)
            .map(Some)
            .map_err(|r| failed(adjust::refusal_text(&r)))
    }

    /// UpdateContainerResources updated `id`: PostUpdateContainer.
    pub(super) async fn nri_updated_container(&self, id: &str) {
        let Some(nri) = self.listening() else {
            return;
        };
        let Ok(container) = self.container_id("container_id", id) else {
            return;
        };
        if let Some((pod, updated)) = describe::container(&self.runtime, &container) {
            nri.tell(Event::PostUpdateContainer, &pod, Some(&updated))
                .await;
        }
    }

    /// An NRI container update: new cgroup values, as UpdateContainerResources writes them. An
    /// unknown container is no error (containerd's rule: it may be gone already).
    fn nri_update(&self, update: &api::ContainerUpdate) -> Result<(), String> {
        let Ok(container) = self.runtime.resolve_container_id(&update.container_id) else {
            return Ok(());
        };
        let asked = update
            .linux
            .as_ref()
            .and_then(|linux| linux.resources.clone())
            .unwrap_or_default();
        let resources = adjust::cgroup_resources(&asked).map_err(|r| adjust::refusal_text(&r))?;
        self.runtime
            .update_container_resources(&container, &resources)
            .map_err(|e| e.to_string())
    }

    /// A plugin's own UpdateContainers: each update made (those that fail are answered back,
    /// as containerd answers), then each eviction, a stop without grace as containerd's.
    pub(crate) async fn nri_update_containers(
        &self,
        plugin: &str,
        asked: api::UpdateContainersRequest,
    ) -> Vec<api::ContainerUpdate> {
        let mut failed = Vec::new();
        for update in asked.update {
            if let Err(e) = self.nri_update(&update) {
                eprintln!(
                    "podlab cri: NRI plugin {plugin}: its update of container {:?} failed: {e}",
                    update.container_id
                );
                failed.push(update);
            }
        }
        for eviction in asked.evict {
            let Ok(container) = self.runtime.resolve_container_id(&eviction.container_id) else {
                continue;
            };
            let running = self
                .runtime
                .container_status(&container)
                .is_ok_and(|s| s.state == ContainerState::Running);
            match self.runtime.stop_container(&container, Duration::ZERO) {
                Ok(()) if running => self.nri_stopped_container(&container).await,
                Ok(()) => {}
                Err(e) => eprintln!(
                    "podlab cri: NRI plugin {plugin}: its eviction of container {:?} ({}) failed: {e}",
                    eviction.container_id, eviction.reason
                ),
            }
        }
        failed
    }

    /// Before RemoveContainer: the container described, for [`Cri::nri_removed_container`].
    pub(super) fn nri_before_container_removal(
        &self,
        id: &str,
    ) -> Option<(api::PodSandbox, api::Container)> {
        self.listening()?;
        let container = self.container_id("container_id", id).ok()?;
        describe::container(&self.runtime, &container)
    }

    /// RemoveContainer removed it: the plugins' RemoveContainer.
    pub(super) async fn nri_removed_container(&self, removed: (api::PodSandbox, api::Container)) {
        let Some(nri) = self.listening() else {
            return;
        };
        let (pod, container) = removed;
        nri.forget_container(&container.id);
        nri.tell(Event::RemoveContainer, &pod, Some(&container))
            .await;
    }
}
