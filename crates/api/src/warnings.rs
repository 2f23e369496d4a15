//! The warnings the API server answers a Pod create with (`GetWarningsForPod` in
//! `pkg/api/pod/warnings.go`), for the fields podlab accepts: deprecated annotations, seccomp
//! annotations without their field, fractional byte quantities of memory and ephemeral storage,
//! an `env` entry that hides an earlier one. kubectl prints each as `Warning: TEXT` on stderr;
//! so do `podlab apply` and `podlab run`. They never refuse anything.
//!
//! The deprecated AppArmor annotation's warning comes from `applyAppArmorVersionSkew`
//! ([`crate::security::sync_app_armor_annotations`]), not from here: for a Pod, the API server
//! warns there, where it copies the annotation into the field.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Container, Pod, SecurityContext};

use crate::quantity::Amount;
use crate::resources::{EPHEMERAL_STORAGE, MEMORY};

/// Annotations that no longer do anything (`deprecatedAnnotations`), with the API server's words.
const DEPRECATED_ANNOTATIONS: &[(&str, &str)] = &[
    (
        "scheduler.alpha.kubernetes.io/critical-pod",
        "non-functional in v1.16+; use the \"priorityClassName\" field instead",
    ),
    (
        "security.alpha.kubernetes.io/sysctls",
        "non-functional in v1.11+; use the \"sysctls\" field instead",
    ),
    (
        "security.alpha.kubernetes.io/unsafe-sysctls",
        "non-functional in v1.11+; use the \"sysctls\" field instead",
    ),
];

/// `v1.SeccompPodAnnotationKey` and `v1.SeccompContainerAnnotationKeyPrefix`.
const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";
const SECCOMP_MESSAGE: &str = "non-functional in v1.27+; use the \"seccompProfile\" field instead";

/// `GetWarningsForPod` for a created Pod, in the API server's order.
pub fn pod(pod: &Pod) -> Vec<String> {
    let mut warnings = Vec::new();
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    for (key, message) in DEPRECATED_ANNOTATIONS {
        if annotations.contains_key(*key) {
            warnings.push(format!("metadata.annotations[{key}]: {message}"));
        }
    }
    let Some(spec) = &pod.spec else {
        return warnings;
    };
    let pod_seccomp = spec
        .security_context
        .as_ref()
        .is_some_and(|c| c.seccomp_profile.is_some());
    if !pod_seccomp && annotations.contains_key(SECCOMP_POD_ANNOTATION) {
        warnings.push(format!(
            "metadata.annotations[{SECCOMP_POD_ANNOTATION}]: {SECCOMP_MESSAGE}"
        ));
    }
    let mut container = |c: &Container, path: String| {
        let seccomp = c
            .security_context
            .as_ref()
            .is_some_and(|s: &SecurityContext| s.seccomp_profile.is_some());
        let key = format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", c.name);
        if !seccomp && annotations.contains_key(&key) {
            warnings.push(format!("metadata.annotations[{key}]: {SECCOMP_MESSAGE}"));
        }
        container_warnings(c, &path, &mut warnings);
    };
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        container(c, format!("spec.initContainers[{i}]"));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        container(c, format!("spec.containers[{i}]"));
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        // An ephemeral container has no resources; its env is checked as any container's.
        let as_container = Container {
            name: c.name.clone(),
            env: c.env.clone(),
            security_context: c.security_context.clone(),
            ..Default::default()
        };
        container(&as_container, format!("spec.ephemeralContainers[{i}]"));
    }
    warnings
}

/// One container's fractional byte quantities and hidden `env` entries.
fn container_warnings(c: &Container, path: &str, warnings: &mut Vec<String>) {
    let resources = c.resources.as_ref();
    for (kind, name) in [
        ("limits", MEMORY),
        ("requests", MEMORY),
        ("limits", EPHEMERAL_STORAGE),
        ("requests", EPHEMERAL_STORAGE),
    ] {
        let map = match kind {
            "limits" => resources.and_then(|r| r.limits.as_ref()),
            _ => resources.and_then(|r| r.requests.as_ref()),
        };
        let Some(quantity) = map.and_then(|m| m.get(name)) else {
            continue;
        };
        let fractional = Amount::parse(&quantity.0).is_ok_and(|a| a.milli() % 1000 != 0);
        if fractional {
            let text = crate::quantity::canonical(&quantity.0).unwrap_or(quantity.0.clone());
            warnings.push(format!(
                "{path}.resources.{kind}[{name}]: fractional byte value {text:?} is invalid, must be an integer"
            ));
        }
    }
    let mut seen = HashSet::new();
    for (i, var) in c.env.iter().flatten().enumerate() {
        if seen.insert(var.name.as_str()) {
            continue;
        }
        let reference = format!("$({})", var.name);
        let value = var.value.as_deref().unwrap_or("");
        if var.value_from.is_some() || value == reference || !value.contains(&reference) {
            warnings.push(format!(
                "{path}.env[{i}]: hides previous definition of {:?}, which may be dropped when using apply",
                var.name
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    fn warnings(yaml: &str) -> Vec<String> {
        let value: serde_json::Value = serde_yaml_ng::from_str(yaml).unwrap();
        crate::manifest::decode_pod_value_warned(value, "test")
            .unwrap()
            .1
    }

    #[test]
    fn an_apparmor_annotation_warns_as_the_api_server_warns_on_create() {
        let got = warnings(
            "{apiVersion: v1, kind: Pod, metadata: {name: p, annotations: {container.apparmor.security.beta.kubernetes.io/app: runtime/default}}, spec: {containers: [{name: app, image: busybox}]}}",
        );
        assert_eq!(
            got,
            ["metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]: deprecated since v1.30; use the \"appArmorProfile\" field instead"]
        );
        // The same profile as the pod's field: nothing is copied, nothing said.
        let got = warnings(
            "{apiVersion: v1, kind: Pod, metadata: {name: p, annotations: {container.apparmor.security.beta.kubernetes.io/app: runtime/default}}, spec: {securityContext: {appArmorProfile: {type: RuntimeDefault}}, containers: [{name: app, image: busybox}]}}",
        );
        assert!(got.is_empty(), "{got:?}");
        assert!(warnings(
            "{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, image: busybox}]}}"
        )
        .is_empty());
    }

    #[test]
    fn fractional_bytes_deprecated_annotations_and_hidden_env_are_warned_in_order() {
        let got = warnings(
            r#"
apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations:
    security.alpha.kubernetes.io/sysctls: "kernel.shm_rmid_forced=1"
    container.seccomp.security.alpha.kubernetes.io/app: runtime/default
spec:
  containers:
  - name: app
    image: busybox
    resources: {limits: {memory: 64Mi, ephemeral-storage: 1500m}}
    env: [{name: A, value: x}, {name: A, value: "$(A)y"}, {name: A, value: z}]
"#,
        );
        assert_eq!(
            got,
            [
                "metadata.annotations[security.alpha.kubernetes.io/sysctls]: non-functional in v1.11+; use the \"sysctls\" field instead",
                "metadata.annotations[container.seccomp.security.alpha.kubernetes.io/app]: non-functional in v1.27+; use the \"seccompProfile\" field instead",
                "spec.containers[0].resources.limits[ephemeral-storage]: fractional byte value \"1500m\" is invalid, must be an integer",
                "spec.containers[0].resources.requests[ephemeral-storage]: fractional byte value \"1500m\" is invalid, must be an integer",
                "spec.containers[0].env[2]: hides previous definition of \"A\", which may be dropped when using apply",
            ]
        );
    }
}
