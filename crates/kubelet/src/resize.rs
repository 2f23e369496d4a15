//! In-place pod resize, kubelet's side (KEP-1287: `pkg/kubelet/allocation`, and kuberuntime's
//! `computePodResizeAction` / `doPodResizeAction`).
//!
//! A resize moves through four states, always in this order:
//! **desired** (the spec's `resources`, changed through the API server's `resize`
//! subresource) → **allocated** (what the node admitted: it fits the node, checked against the
//! other pods' allocations, [`admit`]) → **actuated** (what was handed to the runtime and
//! accepted: CreateContainer, UpdateContainerResources) → **actual** (the cgroup files).
//! The node agent keeps allocated and actuated per pod, as kubelet checkpoints them; this module
//! is the pure part: what a pod requests, whether it fits, and what each running container
//! needs ([`container_resize`]: nothing, an update in place, or a restart when its
//! `resizePolicy` asks for one).
//!
//! Only cpu and memory are resizable, of regular containers and sidecars (init containers with
//! `restartPolicy: Always`); the API server refuses the rest ([`podlab_api::resize`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use podlab_api::resources::{pod_request, ContainerResources, CPU, MEMORY};

use crate::model::ResizePending;

/// Each resizable container's `resources`, by container name (kubelet's `PodResourceInfo`).
pub type Allocation = BTreeMap<String, ResourceRequirements>;

/// `PodReasonInfeasible`: the resize can never fit this node.
pub const INFEASIBLE: &str = "Infeasible";
/// `PodReasonDeferred`: it fits the node, but not beside the other pods now.
pub const DEFERRED: &str = "Deferred";

/// The containers kubelet resizes (`isResizableContainer`): the regular ones, and the init
/// containers that are sidecars (`restartPolicy: Always`).
pub fn resizable(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let regular = spec.into_iter().flat_map(|s| s.containers.iter());
    let init = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten());
    let sidecars = init.filter(|c| c.restart_policy.as_deref() == Some("Always"));
    regular.chain(sidecars)
}

/// The resizable containers' resources as `pod` asks for them (`allocationFromPod`).
pub fn requested(pod: &Pod) -> Allocation {
    resizable(pod)
        .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

/// `pod` with its containers' resources replaced by `allocation`'s (`UpdatePodFromAllocation`):
/// the pod the node runs, whatever the spec asks for meanwhile.
pub fn allocated_pod(pod: &Pod, allocation: &Allocation) -> Pod {
    let mut pod = pod.clone();
    if let Some(spec) = pod.spec.as_mut() {
        let containers = spec.containers.iter_mut();
        for container in containers.chain(spec.init_containers.iter_mut().flatten()) {
            if let Some(resources) = allocation.get(&container.name) {
                container.resources = Some(resources.clone());
            }
        }
    }
    pod
}

/// Whether two `resources` ask for the same cpu and memory (quantities compared by value:
/// `1000m` is `1`), the values a resize changes.
pub fn same_cpu_memory(a: &ResourceRequirements, b: &ResourceRequirements) -> bool {
    ContainerResources::from_requirements(a) == ContainerResources::from_requirements(b)
}

/// Whether two allocations differ in any container's cpu or memory.
pub fn differs(a: &Allocation, b: &Allocation) -> bool {
    a.len() != b.len()
        || a.iter()
            .any(|(name, r)| b.get(name).is_none_or(|other| !same_cpu_memory(r, other)))
}

/// The node's allocatable cpu (milli-CPUs) and memory (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeCapacity {
    pub milli_cpu: i64,
    pub memory: i64,
}

/// A pod's effective cpu (milli-CPUs) and memory (bytes) requests (`GetResourceRequest`).
pub fn pod_requests(pod: &Pod) -> (i64, i64) {
    (
        pod_request(pod, CPU).milli(),
        pod_request(pod, MEMORY).value(),
    )
}

/// kubelet's `canResizePod`: whether the pod as `desired` fits this node beside the `others`
/// (the other pods admitted to it, at their allocated resources). Infeasible when it does not
/// fit the node at all; Deferred when it does but not beside the others now (kubelet's
/// resource fit admission, whose message it keeps).
pub fn admit(desired: &Pod, node: NodeCapacity, others: &[Pod]) -> Result<(), ResizePending> {
    let (cpu, memory) = pod_requests(desired);
    if cpu > node.milli_cpu || memory > node.memory {
        let what = if memory > node.memory {
            format!("memory, requested: {memory}, capacity: {}", node.memory)
        } else {
            format!("cpu, requested: {cpu}, capacity: {}", node.milli_cpu)
        };
        return Err(ResizePending {
            reason: INFEASIBLE.into(),
            message: format!("Node didn't have enough capacity: {what}"),
        });
    }
    let (used_cpu, used_memory) = others
        .iter()
        .map(pod_requests)
        .fold((0, 0), |(c, m), (oc, om)| (c + oc, m + om));
    for (name, requested, used, capacity) in [
        ("cpu", cpu, used_cpu, node.milli_cpu),
        ("memory", memory, used_memory, node.memory),
    ] {
        if requested + used > capacity {
            return Err(ResizePending {
                reason: DEFERRED.into(),
                message: format!(
                    "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
                ),
            });
        }
    }
    Ok(())
}

/// What a running container needs for its allocated resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerResize {
    /// Actuated as allocated.
    None,
    /// UpdateContainerResources, the container keeps running (`resizePolicy` NotRequired, the
    /// default).
    InPlace,
    /// A changed resource's `resizePolicy` is `RestartContainer`: killed and started again
    /// with the allocated resources (kubelet's "Container X resize requires restart").
    Restart,
}

/// `computePodResizeAction` for one running container: RestartContainer wins over NotRequired
/// when both kinds of resource changed.
pub fn container_resize(
    container: &Container,
    allocated: &ResourceRequirements,
    actuated: &ResourceRequirements,
) -> ContainerResize {
    let (a, b) = (
        ContainerResources::from_requirements(allocated),
        ContainerResources::from_requirements(actuated),
    );
    let cpu_changed = (a.cpu_request, a.cpu_limit) != (b.cpu_request, b.cpu_limit);
    let memory_changed = (a.memory_request, a.memory_limit) != (b.memory_request, b.memory_limit);
    if !cpu_changed && !memory_changed {
        return ContainerResize::None;
    }
    let restarts = |resource: &str| {
        container
            .resize_policy
            .iter()
            .flatten()
            .any(|p| p.resource_name == resource && p.restart_policy == "RestartContainer")
    };
    if (cpu_changed && restarts(CPU)) || (memory_changed && restarts(MEMORY)) {
        ContainerResize::Restart
    } else {
        ContainerResize::InPlace
    }
}

/// The memory limit of `resources` in bytes, if set.
pub fn memory_limit(resources: &ResourceRequirements) -> Option<i64> {
    ContainerResources::from_requirements(resources)
        .memory_limit
        .map(|a| a.value())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: &str) -> Pod {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{containers}");
        podlab_api::decode_pod(&text, "test").unwrap()
    }

    const NODE: NodeCapacity = NodeCapacity {
        milli_cpu: 2000,
        memory: 4 << 30,
    };

    #[test]
    fn sidecars_are_resizable_and_plain_init_containers_are_not() {
        let p = pod("  initContainers: [{name: i, image: busybox}, {name: s, image: busybox, restartPolicy: Always}]\n  containers: [{name: a, image: busybox, resources: {requests: {cpu: 100m}}}]");
        let names: Vec<String> = requested(&p).into_keys().collect();
        assert_eq!(names, ["a", "s"]);
    }

    #[test]
    fn a_resize_beyond_the_node_is_infeasible_and_beside_others_deferred() {
        let big =
            pod("  containers: [{name: a, image: busybox, resources: {requests: {cpu: \"5\"}}}]");
        assert_eq!(
            admit(&big, NODE, &[]),
            Err(ResizePending {
                reason: "Infeasible".into(),
                message: "Node didn't have enough capacity: cpu, requested: 5000, capacity: 2000"
                    .into()
            })
        );
        let huge =
            pod("  containers: [{name: a, image: busybox, resources: {requests: {memory: 5Gi}}}]");
        assert_eq!(
            admit(&huge, NODE, &[]).unwrap_err().message,
            "Node didn't have enough capacity: memory, requested: 5368709120, capacity: 4294967296"
        );
        let other =
            pod("  containers: [{name: o, image: busybox, resources: {requests: {cpu: 1500m}}}]");
        let grown =
            pod("  containers: [{name: a, image: busybox, resources: {requests: {cpu: \"1\"}}}]");
        assert_eq!(
            admit(&grown, NODE, std::slice::from_ref(&other)),
            Err(ResizePending {
                reason: "Deferred".into(),
                message: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000".into()
            })
        );
        assert_eq!(admit(&grown, NODE, &[]), Ok(()));
    }

    #[test]
    fn restart_container_policy_wins_for_the_resource_it_names() {
        let p = pod("  containers: [{name: a, image: busybox, resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}, {resourceName: memory, restartPolicy: RestartContainer}], resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: 200m, memory: 64Mi}}}]");
        let container = &p.spec.as_ref().unwrap().containers[0];
        let before = container.resources.clone().unwrap();
        let with = |yaml: &str| {
            pod(&format!(
                "  containers: [{{name: a, image: busybox, resources: {yaml}}}]"
            ))
            .spec
            .unwrap()
            .containers[0]
                .resources
                .clone()
                .unwrap()
        };
        assert_eq!(
            container_resize(container, &before, &before),
            ContainerResize::None
        );
        let cpu = with("{requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: 300m, memory: 64Mi}}");
        assert_eq!(
            container_resize(container, &cpu, &before),
            ContainerResize::InPlace
        );
        let memory =
            with("{requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: 300m, memory: 96Mi}}");
        assert_eq!(
            container_resize(container, &memory, &before),
            ContainerResize::Restart
        );
        let same = with("{requests: {cpu: 0.1, memory: 32Mi}, limits: {cpu: 200m, memory: 64Mi}}");
        assert_eq!(
            container_resize(container, &same, &before),
            ContainerResize::None
        );
    }

    #[test]
    fn the_allocated_pod_runs_the_allocation_not_the_spec() {
        let p =
            pod("  containers: [{name: a, image: busybox, resources: {requests: {cpu: 500m}}}]");
        let mut allocation = requested(&p);
        let asked =
            pod("  containers: [{name: a, image: busybox, resources: {requests: {cpu: 100m}}}]");
        assert!(differs(&allocation, &requested(&asked)));
        allocation.insert(
            "a".into(),
            asked.spec.unwrap().containers[0].resources.clone().unwrap(),
        );
        let running = allocated_pod(&p, &allocation);
        assert_eq!(pod_requests(&running).0, 100);
    }
}
