//! The Pod fields podlab implements. Everything else that Kubernetes knows is refused with its
//! path: a pod that asks for an NFS volume must not silently run without them.
//!
//! A pattern names a field path with `[*]` for list items. A pattern ending in `.*` allows the
//! whole subtree below it (maps of labels, the read-only `status`).

use serde_json::Value;

use crate::FieldError;

const POD_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata.name",
    "metadata.namespace",
    "metadata.labels.*",
    "metadata.annotations.*",
    "metadata.uid",
    "metadata.resourceVersion",
    "metadata.generation",
    "metadata.creationTimestamp",
    "metadata.deletionTimestamp",
    "metadata.deletionGracePeriodSeconds",
    "metadata.generateName",
    "metadata.ownerReferences.*",
    "spec.restartPolicy",
    "spec.shareProcessNamespace",
    "spec.hostNetwork",
    "spec.hostUsers",
    "spec.hostname",
    "spec.subdomain",
    "spec.terminationGracePeriodSeconds",
    "spec.nodeName",
    "spec.dnsPolicy",
    "spec.schedulerName",
    "spec.enableServiceLinks",
    "spec.readinessGates.*",
    // Pod-level resources (KEP-2837): their names are checked by the validation.
    "spec.resources",
    "spec.resources.requests.*",
    "spec.resources.limits.*",
    "spec.securityContext",
    "spec.securityContext.runAsUser",
    "spec.securityContext.runAsGroup",
    "spec.securityContext.runAsNonRoot",
    "spec.securityContext.supplementalGroups",
    "spec.securityContext.supplementalGroupsPolicy",
    "spec.securityContext.fsGroup",
    "spec.securityContext.fsGroupChangePolicy",
    "spec.securityContext.seccompProfile.type",
    "spec.securityContext.seccompProfile.localhostProfile",
    "spec.securityContext.appArmorProfile.type",
    "spec.securityContext.appArmorProfile.localhostProfile",
    "spec.securityContext.seLinuxOptions.user",
    "spec.securityContext.seLinuxOptions.role",
    "spec.securityContext.seLinuxOptions.type",
    "spec.securityContext.seLinuxOptions.level",
    "spec.securityContext.seLinuxChangePolicy",
    "spec.securityContext.sysctls[*].name",
    "spec.securityContext.sysctls[*].value",
    "spec.imagePullSecrets[*].name",
    "spec.volumes[*].name",
    "spec.volumes[*].emptyDir.medium",
    "spec.volumes[*].emptyDir.sizeLimit",
    "spec.volumes[*].emptyDir",
    "spec.volumes[*].image.reference",
    "spec.volumes[*].image.pullPolicy",
    "spec.volumes[*].hostPath.path",
    "spec.volumes[*].hostPath.type",
    "spec.volumes[*].configMap.name",
    "spec.volumes[*].configMap.items[*].key",
    "spec.volumes[*].configMap.items[*].path",
    "spec.volumes[*].configMap.items[*].mode",
    "spec.volumes[*].configMap.defaultMode",
    "spec.volumes[*].configMap.optional",
    "spec.volumes[*].secret.secretName",
    "spec.volumes[*].secret.items[*].key",
    "spec.volumes[*].secret.items[*].path",
    "spec.volumes[*].secret.items[*].mode",
    "spec.volumes[*].secret.defaultMode",
    "spec.volumes[*].secret.optional",
    "spec.volumes[*].downwardAPI.defaultMode",
    "spec.volumes[*].downwardAPI.items[*].path",
    "spec.volumes[*].downwardAPI.items[*].mode",
    "spec.volumes[*].downwardAPI.items[*].fieldRef.fieldPath",
    "spec.volumes[*].downwardAPI.items[*].fieldRef.apiVersion",
    "spec.volumes[*].downwardAPI.items[*].resourceFieldRef.containerName",
    "spec.volumes[*].downwardAPI.items[*].resourceFieldRef.resource",
    "spec.volumes[*].downwardAPI.items[*].resourceFieldRef.divisor",
    // kubectl and the API server print what they defaulted; reading it back must work.
    "status.*",
];

/// Fields of `containers[*]` and `initContainers[*]` (and, without probes and ports,
/// `ephemeralContainers[*]`).
const CONTAINER_FIELDS: &[&str] = &[
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "workingDir",
    "env[*].name",
    "env[*].value",
    "env[*].valueFrom.fieldRef.fieldPath",
    "env[*].valueFrom.fieldRef.apiVersion",
    "env[*].valueFrom.resourceFieldRef.resource",
    "env[*].valueFrom.resourceFieldRef.divisor",
    "env[*].valueFrom.resourceFieldRef.containerName",
    "env[*].valueFrom.configMapKeyRef.name",
    "env[*].valueFrom.configMapKeyRef.key",
    "env[*].valueFrom.configMapKeyRef.optional",
    "env[*].valueFrom.secretKeyRef.name",
    "env[*].valueFrom.secretKeyRef.key",
    "env[*].valueFrom.secretKeyRef.optional",
    "envFrom[*].prefix",
    "envFrom[*].configMapRef.name",
    "envFrom[*].configMapRef.optional",
    "envFrom[*].secretRef.name",
    "envFrom[*].secretRef.optional",
    "volumeMounts[*].name",
    "volumeMounts[*].mountPath",
    "volumeMounts[*].readOnly",
    "volumeMounts[*].subPath",
    "volumeMounts[*].subPathExpr",
    "securityContext.runAsUser",
    "securityContext.runAsGroup",
    "securityContext.runAsNonRoot",
    "securityContext.readOnlyRootFilesystem",
    "securityContext.allowPrivilegeEscalation",
    "securityContext.privileged",
    "securityContext.procMount",
    "securityContext.capabilities.add",
    "securityContext.capabilities.drop",
    "securityContext.seccompProfile.type",
    "securityContext.seccompProfile.localhostProfile",
    "securityContext.appArmorProfile.type",
    "securityContext.appArmorProfile.localhostProfile",
    "securityContext.seLinuxOptions.user",
    "securityContext.seLinuxOptions.role",
    "securityContext.seLinuxOptions.type",
    "securityContext.seLinuxOptions.level",
    // Checked as the API server checks them (an ephemeral container's is forbidden there).
    "resizePolicy[*].resourceName",
    "resizePolicy[*].restartPolicy",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "restartPolicy",
    "ports[*].name",
    "ports[*].containerPort",
    "ports[*].protocol",
    "targetContainerName",
    // A console (`tty`) and an open stdin, for `attach` and `run -it`.
    "stdin",
    "stdinOnce",
    "tty",
    // `resources: {}` is what kubectl prints for a container without any.
    "resources",
    "resources.limits",
    "resources.requests",
    "resources.limits.cpu",
    "resources.limits.memory",
    "resources.requests.cpu",
    "resources.requests.memory",
    "resources.limits.ephemeral-storage",
    "resources.requests.ephemeral-storage",
    "resources.limits.hugepages-*",
    "resources.requests.hugepages-*",
];

const PROBE_FIELDS: &[&str] = &[
    "exec.command",
    "tcpSocket.port",
    "tcpSocket.host",
    "httpGet.path",
    "httpGet.port",
    "httpGet.host",
    "httpGet.scheme",
    "httpGet.httpHeaders[*].name",
    "httpGet.httpHeaders[*].value",
    "initialDelaySeconds",
    "periodSeconds",
    "timeoutSeconds",
    "successThreshold",
    "failureThreshold",
    "terminationGracePeriodSeconds",
];

fn patterns() -> Vec<String> {
    let mut all: Vec<String> = POD_FIELDS.iter().map(|s| s.to_string()).collect();
    for list in [
        "spec.containers[*]",
        "spec.initContainers[*]",
        "spec.ephemeralContainers[*]",
    ] {
        all.extend(CONTAINER_FIELDS.iter().map(|f| format!("{list}.{f}")));
        if list != "spec.ephemeralContainers[*]" {
            for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
                all.extend(PROBE_FIELDS.iter().map(|f| format!("{list}.{probe}.{f}")));
            }
        }
    }
    all
}

/// Adds a [`FieldError`] for every field of `pod` that podlab does not implement.
pub fn check_pod(pod: &Value, errors: &mut Vec<FieldError>) {
    let patterns = patterns();
    let mut leaves = Vec::new();
    collect_leaves(pod, String::new(), String::new(), &mut leaves);
    for (path, pattern_path) in leaves {
        if !patterns.iter().any(|p| allows(p, &pattern_path)) {
            errors.push(FieldError::new(path, "not supported by podlab; remove it"));
        }
    }
}

/// Whether `pattern` allows the field at `path` (both with `[*]` for list items).
fn allows(pattern: &str, path: &str) -> bool {
    // `name-*`: one field whose name starts with `name-` (`hugepages-2Mi`).
    if let Some(prefix) = pattern.strip_suffix('*').filter(|p| p.ends_with('-')) {
        return path
            .strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty() && !rest.contains(['.', '[']));
    }
    match pattern.strip_suffix(".*") {
        Some(subtree) => {
            path == subtree
                || path.starts_with(&format!("{subtree}."))
                || path.starts_with(&format!("{subtree}["))
        }
        None => path == pattern,
    }
}

/// The leaves of a document: (real path, path with `[*]`). Empty objects and lists are leaves;
/// null values are skipped (they mean "unset").
fn collect_leaves(value: &Value, path: String, pattern: String, out: &mut Vec<(String, String)>) {
    let join = |base: &str, key: &str| {
        if base.is_empty() {
            key.to_string()
        } else {
            format!("{base}.{key}")
        }
    };
    match value {
        Value::Null => {}
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                collect_leaves(child, join(&path, key), join(&pattern, key), out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, child) in items.iter().enumerate() {
                let item_is_scalar = !matches!(child, Value::Object(_) | Value::Array(_));
                if item_is_scalar {
                    // A list of strings (command, args) is one field.
                    out.push((path.clone(), pattern.clone()));
                    return;
                }
                collect_leaves(child, format!("{path}[{i}]"), format!("{pattern}[*]"), out);
            }
        }
        _ => out.push((path, pattern)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors_for(pod: Value) -> Vec<String> {
        let mut errors = Vec::new();
        check_pod(&pod, &mut errors);
        errors.into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn labels_are_a_free_subtree() {
        let pod = serde_json::json!({"metadata": {"labels": {"a/b": "c"}}});
        assert!(errors_for(pod).is_empty());
    }

    #[test]
    fn an_unimplemented_volume_type_is_refused_at_its_path() {
        let pod = serde_json::json!({"spec": {"volumes": [{"name": "v", "nfs": {"path": "/"}}]}});
        assert_eq!(errors_for(pod), ["spec.volumes[0].nfs.path"]);
    }

    #[test]
    fn probes_are_refused_on_ephemeral_containers() {
        let pod = serde_json::json!({"spec": {"ephemeralContainers": [{"name": "d", "livenessProbe": {"periodSeconds": 1}}]}});
        assert_eq!(
            errors_for(pod),
            ["spec.ephemeralContainers[0].livenessProbe.periodSeconds"]
        );
    }

    #[test]
    fn an_empty_dir_may_be_empty() {
        let pod = serde_json::json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}});
        assert!(errors_for(pod).is_empty());
    }
}
