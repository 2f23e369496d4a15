//! The API server's rule for an update of a Pod that exists (`ValidatePodUpdate`): on a pod
//! already bound to a node only the images of its containers and init containers may change
//! (the kubelet then kills and recreates that container, its hash having changed); every other
//! field of the spec is fixed once the pod exists. podlab refuses at decode the other fields
//! Kubernetes lets an update change (`activeDeadlineSeconds`, `tolerations`), so they cannot
//! differ here.
//!
//! Both specs are compared as stored, defaulted. A default that follows the image
//! (`imagePullPolicy`: `Always` for `:latest`, else `IfNotPresent`) moves with it: a pull
//! policy that is the default of its image on both sides is not a change of its own, which is
//! what `kubectl apply` gives too (the manifest never named the field, so the patch leaves it).

use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::defaults::pull_policy_for;
use crate::FieldError;

/// The fields an update may change, in the API server's words.
const MUTABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`";

/// What is wrong with replacing the defaulted spec `old` by the defaulted spec `new`; empty
/// when the update is allowed.
pub fn validate_pod_spec_update(old: &PodSpec, new: &PodSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let old_init = old.init_containers.as_deref().unwrap_or_default();
    let new_init = new.init_containers.as_deref().unwrap_or_default();
    for (path, old, new) in [
        ("spec.containers", &old.containers[..], &new.containers[..]),
        ("spec.initContainers", old_init, new_init),
    ] {
        if old.len() != new.len() {
            errors.push(FieldError::new(
                path,
                "Forbidden: pod updates may not add or remove containers",
            ));
        }
    }
    if !errors.is_empty() {
        return errors;
    }
    let mut munged = old.clone();
    for (old, new) in munged.containers.iter_mut().zip(&new.containers) {
        take_image(old, new);
    }
    let munged_init = munged.init_containers.iter_mut().flatten();
    for (old, new) in munged_init.zip(new.init_containers.iter().flatten()) {
        take_image(old, new);
    }
    if &munged != new {
        errors.push(FieldError::new(
            "spec",
            format!("Forbidden: pod updates may not change fields other than {MUTABLE}"),
        ));
    }
    errors
}

/// `old` with `new`'s image, and `new`'s pull policy where both are their image's default.
fn take_image(old: &mut Container, new: &Container) {
    let defaulted =
        |c: &Container| c.image_pull_policy.as_deref() == Some(pull_policy_for(c.image.as_deref()));
    if defaulted(old) && defaulted(new) {
        old.image_pull_policy = new.image_pull_policy.clone();
    }
    old.image = new.image.clone();
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn spec(yaml: &str) -> PodSpec {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{yaml}");
        let pod: Pod = crate::decode_pod(&text, "test").unwrap();
        pod.spec.unwrap()
    }

    #[test]
    fn an_image_change_is_allowed_with_the_pull_policy_defaulted_from_each_image() {
        let old = spec("  containers: [{name: a, image: busybox}]");
        let new = spec("  containers: [{name: a, image: \"busybox:1.36\"}]");
        assert_eq!(
            old.containers[0].image_pull_policy.as_deref(),
            Some("Always")
        );
        assert_eq!(
            new.containers[0].image_pull_policy.as_deref(),
            Some("IfNotPresent")
        );
        assert_eq!(validate_pod_spec_update(&old, &new), vec![]);
        let old = spec("  initContainers: [{name: i, image: busybox}]\n  containers: [{name: a, image: busybox}]");
        let new = spec("  initContainers: [{name: i, image: \"busybox:2\"}]\n  containers: [{name: a, image: busybox}]");
        assert_eq!(validate_pod_spec_update(&old, &new), vec![]);
    }

    #[test]
    fn a_pull_policy_set_against_its_image_default_is_a_change() {
        let old = spec("  containers: [{name: a, image: busybox}]");
        let new = spec("  containers: [{name: a, image: busybox, imagePullPolicy: Never}]");
        let errors = validate_pod_spec_update(&old, &new);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "spec");
        assert!(errors[0].message.starts_with(
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
        ));
    }

    #[test]
    fn other_fields_and_added_containers_are_forbidden() {
        let old = spec("  containers: [{name: a, image: busybox, command: [sleep, \"1\"]}]");
        let new = spec("  containers: [{name: a, image: busybox, command: [sleep, \"2\"]}]");
        assert_eq!(validate_pod_spec_update(&old, &new).len(), 1);
        let new = spec("  containers: [{name: a, image: busybox}, {name: b, image: busybox}]");
        let errors = validate_pod_spec_update(&old, &new);
        assert_eq!(
            errors[0].to_string(),
            "spec.containers: Forbidden: pod updates may not add or remove containers"
        );
    }

    #[test]
    fn a_resize_of_a_running_pods_resources_is_refused_in_the_api_servers_words() {
        let old = spec("  containers: [{name: a, image: busybox, resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}], resources: {limits: {cpu: 100m}}}]");
        let new = spec("  containers: [{name: a, image: busybox, resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}], resources: {limits: {cpu: 200m}}}]");
        let errors = validate_pod_spec_update(&old, &new);
        assert_eq!(errors.len(), 1);
        assert!(errors[0]
            .to_string()
            .starts_with("spec: Forbidden: pod updates may not change fields other than"));
    }
}
