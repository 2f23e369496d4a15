//! The API server's `resize` subresource of a Pod (`kubectl patch pod --subresource resize`),
//! the one way to change a running pod's cpu and memory (in-place pod resize, KEP-1287, on by
//! default since Kubernetes 1.33).
//!
//! Two steps, as the pod registry's `podResizeStrategy` takes them: [`take_resize`] keeps of
//! the new spec only what a resize may change (each container's `resources` and
//! `resizePolicy`, by name; every other change is dropped without a word, as
//! `dropNonResizeUpdates` drops it), then [`validate_pod_resize`] refuses, in the API server's
//! words (`ValidatePodResize`), renamed or reordered containers, resources other than cpu and
//! memory, requests or limits removed, a non-sidecar init container resized, and a resize that
//! would move the pod to another QoS class. The result is then validated as a new pod is
//! (limits not below requests, quantities), by the caller's decoding.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};

use crate::resources::{pod_qos, CPU, MEMORY};
use crate::FieldError;

/// `old` with `new`'s `resources` and `resizePolicy` for each container and init container of
/// the same name (`dropNonResizeUpdates`).
pub fn take_resize(old: &PodSpec, new: &PodSpec) -> PodSpec {
    let mut spec = old.clone();
    let take = |into: &mut Vec<Container>, from: &[Container]| {
        for container in into.iter_mut() {
            if let Some(new) = from.iter().find(|c| c.name == container.name) {
                container.resources = new.resources.clone();
                container.resize_policy = new.resize_policy.clone();
            }
        }
    };
    take(&mut spec.containers, &new.containers);
    if let Some(init) = spec.init_containers.as_mut() {
        take(init, new.init_containers.as_deref().unwrap_or_default());
    }
    spec
}

/// The containers of `patched` that are renamed or reordered against `old`: a resize may not
/// (`spec.containers[0].name: Forbidden: ...`). Checked on the patch's result, before
/// [`take_resize`] matches containers by name.
pub fn validate_container_order(old: &PodSpec, patched: &PodSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let old_init = old.init_containers.as_deref().unwrap_or_default();
    let new_init = patched.init_containers.as_deref().unwrap_or_default();
    for (path, old, new) in [
        (
            "spec.containers",
            &old.containers[..],
            &patched.containers[..],
        ),
        ("spec.initContainers", old_init, new_init),
    ] {
        if old.len() != new.len() {
            errors.push(FieldError::new(
                path,
                "Forbidden: containers may not be added or removed on resize",
            ));
            continue;
        }
        for (i, (old, new)) in old.iter().zip(new).enumerate() {
            if old.name != new.name {
                errors.push(FieldError::new(
                    format!("{path}[{i}].name"),
                    "Forbidden: containers may not be renamed or reordered on resize",
                ));
            }
        }
    }
    errors
}

/// What is wrong with resizing the stored pod `old` to `new` (both defaulted, `new` made by
/// [`take_resize`]); empty when the resize is allowed.
pub fn validate_pod_resize(old: &Pod, new: &Pod) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let (Some(old_spec), Some(new_spec)) = (&old.spec, &new.spec) else {
        return errors;
    };
    for (i, (before, after)) in old_spec
        .containers
        .iter()
        .zip(&new_spec.containers)
        .enumerate()
    {
        let path = format!("spec.containers[{i}].resources");
        resources_change(&before.resources, &after.resources, &path, &mut errors);
    }
    let old_init = old_spec.init_containers.as_deref().unwrap_or_default();
    let new_init = new_spec.init_containers.as_deref().unwrap_or_default();
    for (i, (before, after)) in old_init.iter().zip(new_init).enumerate() {
        let path = format!("spec.initContainers[{i}].resources");
        let sidecar = before.restart_policy.as_deref() == Some("Always");
        if !sidecar && before.resources != after.resources {
            errors.push(FieldError::new(
                path,
                "Forbidden: resources for non-sidecar init containers are immutable",
            ));
            continue;
        }
        resources_change(&before.resources, &after.resources, &path, &mut errors);
    }
    let before = old
        .status
        .as_ref()
        .and_then(|s| s.qos_class.clone())
        .unwrap_or_else(|| pod_qos(old).to_string());
    if pod_qos(new) != before {
        errors.push(FieldError::new(
            "spec",
            format!(
                "Invalid value: {before:?}: Pod QOS Class may not change as a result of resizing"
            ),
        ));
    }
    errors
}

/// One container's `resources` change: cpu and memory only, nothing removed.
fn resources_change(
    before: &Option<ResourceRequirements>,
    after: &Option<ResourceRequirements>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let empty = ResourceRequirements::default();
    let before = before.as_ref().unwrap_or(&empty);
    let after = after.as_ref().unwrap_or(&empty);
    if other_resources(before) != other_resources(after) {
        errors.push(FieldError::new(
            path,
            "Forbidden: only cpu and memory resources are mutable",
        ));
    }
    for (field, old, new, what) in [
        (
            "requests",
            &before.requests,
            &after.requests,
            "resource requests",
        ),
        ("limits", &before.limits, &after.limits, "resource limits"),
    ] {
        let had = |name: &str| old.as_ref().is_some_and(|m| m.contains_key(name));
        let has = |name: &str| new.as_ref().is_some_and(|m| m.contains_key(name));
        if [CPU, MEMORY].iter().any(|name| had(name) && !has(name)) {
            errors.push(FieldError::new(
                format!("{path}.{field}"),
                format!("Forbidden: {what} cannot be removed"),
            ));
        }
    }
}

/// A container's requests and limits of resources other than cpu and memory, and its claims.
fn other_resources(r: &ResourceRequirements) -> impl PartialEq + '_ {
    let pick = |map: &'_ Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        map.iter()
            .flatten()
            .filter(|(name, _)| name.as_str() != CPU && name.as_str() != MEMORY)
            .map(|(name, value)| (name.clone(), value.0.clone()))
            .collect::<Vec<_>>()
    };
    (pick(&r.requests), pick(&r.limits), &r.claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: &str) -> Pod {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{containers}");
        crate::decode_pod(&text, "test").unwrap()
    }

    fn resized(old: &Pod, containers: &str) -> Pod {
        let patched = pod(containers);
        let mut new = old.clone();
        new.spec = Some(take_resize(
            old.spec.as_ref().unwrap(),
            patched.spec.as_ref().unwrap(),
        ));
        new
    }

    fn errors(old: &Pod, new: &Pod) -> Vec<String> {
        validate_pod_resize(old, new)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    const BURSTABLE: &str = "  containers: [{name: a, image: busybox, resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: 200m, memory: 64Mi}}}]";

    #[test]
    fn cpu_and_memory_change_and_everything_else_is_dropped() {
        let old = pod(BURSTABLE);
        let new = resized(
            &old,
            "  containers: [{name: a, image: other, command: [x], resources: {requests: {cpu: 150m, memory: 32Mi}, limits: {cpu: 300m, memory: 48Mi}}}]",
        );
        assert_eq!(errors(&old, &new), Vec::<String>::new());
        let c = &new.spec.as_ref().unwrap().containers[0];
        assert_eq!(c.image.as_deref(), Some("busybox"));
        assert_eq!(c.command, None);
        let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert_eq!(limits["cpu"].0, "300m");
        assert_eq!(limits["memory"].0, "48Mi");
    }

    #[test]
    fn a_change_of_qos_class_is_refused_with_the_class_stored() {
        let old = pod("  containers: [{name: a, image: busybox}]");
        let new = resized(
            &old,
            "  containers: [{name: a, image: busybox, resources: {requests: {memory: 40Mi}}}]",
        );
        assert_eq!(
            errors(&old, &new),
            ["spec: Invalid value: \"BestEffort\": Pod QOS Class may not change as a result of resizing"]
        );
        let old = pod(BURSTABLE);
        let new = resized(
            &old,
            "  containers: [{name: a, image: busybox, resources: {requests: {cpu: 200m, memory: 64Mi}, limits: {cpu: 200m, memory: 64Mi}}}]",
        );
        assert_eq!(errors(&old, &new).len(), 1);
    }

    #[test]
    fn requests_and_limits_cannot_be_removed() {
        let old = pod(BURSTABLE);
        let new = resized(
            &old,
            "  containers: [{name: a, image: busybox, resources: {requests: {cpu: 100m}, limits: {cpu: 200m}}}]",
        );
        assert_eq!(
            errors(&old, &new),
            [
                "spec.containers[0].resources.requests: Forbidden: resource requests cannot be removed",
                "spec.containers[0].resources.limits: Forbidden: resource limits cannot be removed"
            ]
        );
    }

    #[test]
    fn other_resources_and_plain_init_containers_are_immutable() {
        let old = pod("  containers: [{name: a, image: busybox, resources: {requests: {cpu: 100m, ephemeral-storage: 1Gi}}}]");
        let new = resized(
            &old,
            "  containers: [{name: a, image: busybox, resources: {requests: {cpu: 100m, ephemeral-storage: 2Gi}}}]",
        );
        assert_eq!(
            errors(&old, &new),
            ["spec.containers[0].resources: Forbidden: only cpu and memory resources are mutable"]
        );
        let init = |cpu: &str, policy: &str| {
            format!("  initContainers: [{{name: i, image: busybox, {policy}resources: {{requests: {{cpu: {cpu}}}}}}}]\n  containers: [{{name: a, image: busybox, resources: {{requests: {{cpu: 100m}}}}}}]")
        };
        let old = pod(&init("100m", ""));
        let new = resized(&old, &init("200m", ""));
        assert_eq!(
            errors(&old, &new),
            ["spec.initContainers[0].resources: Forbidden: resources for non-sidecar init containers are immutable"]
        );
        let old = pod(&init("100m", "restartPolicy: Always, "));
        let new = resized(&old, &init("200m", "restartPolicy: Always, "));
        assert_eq!(errors(&old, &new), Vec::<String>::new());
    }

    #[test]
    fn renamed_or_reordered_containers_are_refused() {
        let old = pod("  containers: [{name: a, image: busybox}, {name: b, image: busybox}]");
        let new = pod("  containers: [{name: b, image: busybox}, {name: a, image: busybox}]");
        let errors: Vec<String> =
            validate_container_order(old.spec.as_ref().unwrap(), new.spec.as_ref().unwrap())
                .iter()
                .map(ToString::to_string)
                .collect();
        assert_eq!(
            errors,
            [
                "spec.containers[0].name: Forbidden: containers may not be renamed or reordered on resize",
                "spec.containers[1].name: Forbidden: containers may not be renamed or reordered on resize"
            ]
        );
    }
}
