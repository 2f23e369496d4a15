//! The API server's checks on a Pod, with its wording: `Required value`, `Invalid value`,
//! `Duplicate value`, `Unsupported value`, `Not found`. All problems are collected, not just
//! the first, so that one round trip fixes a manifest.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};

use crate::FieldError;

pub fn validate_pod(pod: &Pod) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut err = |path: String, message: String| errors.push(FieldError::new(path, message));

    match pod.metadata.name.as_deref() {
        None | Some("") => err(
            "metadata.name".into(),
            "Required value: name or generateName is required".into(),
        ),
        Some(name) => {
            if let Some(why) = dns1123_subdomain(name) {
                err(
                    "metadata.name".into(),
                    format!("Invalid value: {name:?}: {why}"),
                );
            }
        }
    }
    if let Some(ns) = pod.metadata.namespace.as_deref() {
        if let Some(why) = dns1123_label(ns) {
            err(
                "metadata.namespace".into(),
                format!("Invalid value: {ns:?}: {why}"),
            );
        }
    }
    let Some(spec) = &pod.spec else {
        err("spec".into(), "Required value".into());
        return errors;
    };
    if spec.containers.is_empty() {
        err("spec.containers".into(), "Required value".into());
    }
    if let Some(policy) = spec.restart_policy.as_deref() {
        if !["Always", "OnFailure", "Never"].contains(&policy) {
            err(
                "spec.restartPolicy".into(),
                format!("Unsupported value: {policy:?}: supported values: \"Always\", \"OnFailure\", \"Never\""),
            );
        }
    }
    for (field, value) in [
        ("spec.hostname", &spec.hostname),
        ("spec.subdomain", &spec.subdomain),
    ] {
        if let Some(value) = value.as_deref() {
            if let Some(why) = dns1123_label(value) {
                err(field.into(), format!("Invalid value: {value:?}: {why}"));
            }
        }
    }
    if let Some(grace) = spec.termination_grace_period_seconds {
        if grace < 0 {
            err(
                "spec.terminationGracePeriodSeconds".into(),
                format!("Invalid value: {grace}: must be greater than or equal to 0"),
            );
        }
    }

    let mut volumes = HashSet::new();
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        let path = format!("spec.volumes[{i}]");
        if let Some(why) = dns1123_label(&volume.name) {
            err(
                format!("{path}.name"),
                format!("Invalid value: {:?}: {why}", volume.name),
            );
        } else if !volumes.insert(volume.name.as_str()) {
            err(
                format!("{path}.name"),
                format!("Duplicate value: {:?}", volume.name),
            );
        }
        let mut found = Vec::new();
        crate::volumes::validate_source(volume, &path, &mut found);
        for e in found {
            err(e.path, e.message);
        }
    }

    let mut names = HashSet::new();
    let lists = [
        (
            "spec.initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
            true,
        ),
        ("spec.containers", spec.containers.as_slice(), false),
    ];
    let never = spec.restart_policy.as_deref() == Some("Never");
    for (list, containers, init) in lists {
        for (i, container) in containers.iter().enumerate() {
            let path = format!("{list}[{i}]");
            validate_container(container, &path, init, &volumes, &mut names, &mut errors);
            validate_resize_policy(container, &path, never, &mut errors);
        }
    }
    crate::resources::validate_pod_level(pod, &mut errors);
    crate::security::validate_app_armor_annotations(pod, &mut errors);
    if let Some(context) = &spec.security_context {
        crate::security::validate_pod(
            context,
            spec.host_network.unwrap_or(false),
            "spec.securityContext",
            &mut errors,
        );
    }
    // The API server's validateHostUsers: a pod in a user namespace of its own shares none
    // of the node's namespaces.
    if spec.host_users == Some(false) && spec.host_network == Some(true) {
        errors.push(FieldError::new(
            "spec.hostNetwork",
            "Forbidden: when `pod.Spec.HostUsers` is false",
        ));
    }
    for (i, container) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let path = format!("spec.ephemeralContainers[{i}]");
        if container.name.is_empty() {
            errors.push(FieldError::new(format!("{path}.name"), "Required value"));
        } else if !names.insert(container.name.clone()) {
            errors.push(FieldError::new(
                format!("{path}.name"),
                format!("Duplicate value: {:?}", container.name),
            ));
        }
        if container.image.as_deref().unwrap_or("").is_empty() {
            errors.push(FieldError::new(format!("{path}.image"), "Required value"));
        }
        if let Some(context) = &container.security_context {
            crate::security::validate_container(
                context,
                &format!("{path}.securityContext"),
                &mut errors,
            );
        }
        if container.resources.is_some() {
            errors.push(FieldError::new(
                format!("{path}.resources"),
                "Forbidden: cannot be set for an Ephemeral Container",
            ));
        }
        if container
            .resize_policy
            .as_ref()
            .is_some_and(|p| !p.is_empty())
        {
            errors.push(FieldError::new(
                format!("{path}.resizePolicy"),
                "Forbidden: cannot be set for an Ephemeral Container",
            ));
        }
    }
    errors
}

fn validate_container(
    container: &Container,
    path: &str,
    init: bool,
    volumes: &HashSet<&str>,
    names: &mut HashSet<String>,
    errors: &mut Vec<FieldError>,
) {
    if let Some(resources) = &container.resources {
        crate::resources::validate(resources, &format!("{path}.resources"), errors);
    }
    if let Some(context) = &container.security_context {
        crate::security::validate_container(context, &format!("{path}.securityContext"), errors);
    }
    let mut err = |field: String, message: String| errors.push(FieldError::new(field, message));
    if container.name.is_empty() {
        err(format!("{path}.name"), "Required value".into());
    } else if let Some(why) = dns1123_label(&container.name) {
        err(
            format!("{path}.name"),
            format!("Invalid value: {:?}: {why}", container.name),
        );
    } else if !names.insert(container.name.clone()) {
        err(
            format!("{path}.name"),
            format!("Duplicate value: {:?}", container.name),
        );
    }
    if container.image.as_deref().unwrap_or("").trim().is_empty() {
        err(format!("{path}.image"), "Required value".into());
    }
    match (init, container.restart_policy.as_deref()) {
        (_, None) | (true, Some("Always")) => {}
        (true, Some(other)) => err(
            format!("{path}.restartPolicy"),
            format!("Unsupported value: {other:?}: supported values: \"Always\""),
        ),
        (false, Some(_)) => err(
            format!("{path}.restartPolicy"),
            "Forbidden: may not be set for non-init containers".into(),
        ),
    }
    for (j, env) in container.env.iter().flatten().enumerate() {
        let mut found = Vec::new();
        crate::env::validate_env_var(env, &format!("{path}.env[{j}]"), &mut found);
        for e in found {
            err(e.path, e.message);
        }
        if env.name.is_empty() {
            err(format!("{path}.env[{j}].name"), "Required value".into());
        } else if env.name.contains('=') {
            err(
                format!("{path}.env[{j}].name"),
                format!("Invalid value: {:?}: must not contain '='", env.name),
            );
        }
    }
    for (j, mount) in container.volume_mounts.iter().flatten().enumerate() {
        if !volumes.contains(mount.name.as_str()) {
            err(
                format!("{path}.volumeMounts[{j}].name"),
                format!("Not found: {:?}", mount.name),
            );
        }
        if !mount.mount_path.starts_with('/') {
            err(
                format!("{path}.volumeMounts[{j}].mountPath"),
                format!(
                    "Invalid value: {:?}: must be an absolute path",
                    mount.mount_path
                ),
            );
        }
        // The API server's validateMountPropagation.
        match mount.mount_propagation.as_deref() {
            None | Some("None" | "HostToContainer") => {}
            Some("Bidirectional") => {
                let privileged = container
                    .security_context
                    .as_ref()
                    .and_then(|s| s.privileged)
                    .unwrap_or(false);
                if !privileged {
                    err(
                        format!("{path}.volumeMounts[{j}].mountPropagation"),
                        "Forbidden: Bidirectional mount propagation is available only to privileged containers".into(),
                    );
                }
            }
            Some(other) => err(
                format!("{path}.volumeMounts[{j}].mountPropagation"),
                format!("Unsupported value: {other:?}: supported values: \"Bidirectional\", \"HostToContainer\", \"None\""),
            ),
        }
        let mut found = Vec::new();
        crate::volumes::validate_sub_path(mount, &format!("{path}.volumeMounts[{j}]"), &mut found);
        for e in found {
            err(e.path, e.message);
        }
    }
    for (j, port) in container.ports.iter().flatten().enumerate() {
        if !(1..=65535).contains(&port.container_port) {
            err(
                format!("{path}.ports[{j}].containerPort"),
                format!(
                    "Invalid value: {}: must be between 1 and 65535, inclusive",
                    port.container_port
                ),
            );
        }
        // The API server's validateContainerPorts: a hostPort, when set, is a port number too.
        if let Some(host_port) = port.host_port.filter(|p| !(0..=65535).contains(p)) {
            err(
                format!("{path}.ports[{j}].hostPort"),
                format!("Invalid value: {host_port}: must be between 1 and 65535, inclusive"),
            );
        }
    }
    let probes = [
        ("livenessProbe", &container.liveness_probe, true),
        ("readinessProbe", &container.readiness_probe, false),
        ("startupProbe", &container.startup_probe, true),
    ];
    for (name, probe, success_must_be_one) in probes {
        if let Some(probe) = probe {
            validate_probe(
                probe,
                &format!("{path}.{name}"),
                success_must_be_one,
                &mut err,
            );
        }
    }
}

/// The API server's `validateResizePolicy`: cpu or memory, each once, `NotRequired` or
/// `RestartContainer`, and only `NotRequired` in a pod whose `restartPolicy` is Never. (Init
/// containers may have one too: the API server allows it with in-place resize on.)
fn validate_resize_policy(
    container: &Container,
    path: &str,
    never: bool,
    errors: &mut Vec<FieldError>,
) {
    let at = format!("{path}.resizePolicy");
    let mut seen = HashSet::new();
    for (i, policy) in container.resize_policy.iter().flatten().enumerate() {
        let resource = policy.resource_name.as_str();
        if !seen.insert(resource) {
            errors.push(FieldError::new(
                format!("{at}[{i}]"),
                format!("Duplicate value: {resource:?}"),
            ));
        }
        match resource {
            "cpu" | "memory" => {}
            "" => errors.push(FieldError::new(at.clone(), "Required value")),
            other => errors.push(FieldError::new(
                at.clone(),
                format!("Unsupported value: {other:?}: supported values: \"cpu\", \"memory\""),
            )),
        }
        let restart = policy.restart_policy.as_str();
        match restart {
            "NotRequired" | "RestartContainer" => {}
            "" => errors.push(FieldError::new(at.clone(), "Required value")),
            other => errors.push(FieldError::new(
                at.clone(),
                format!(
                    "Unsupported value: {other:?}: supported values: \"NotRequired\", \"RestartContainer\""
                ),
            )),
        }
        if never && restart != "NotRequired" {
            errors.push(FieldError::new(
                at.clone(),
                format!(
                    "Invalid value: {restart:?}: must be 'NotRequired' when `restartPolicy` is 'Never'"
                ),
            ));
        }
    }
}

fn validate_probe(
    probe: &Probe,
    path: &str,
    success_must_be_one: bool,
    err: &mut dyn FnMut(String, String),
) {
    let handlers = [
        probe.exec.is_some(),
        probe.tcp_socket.is_some(),
        probe.http_get.is_some(),
        probe.grpc.is_some(),
    ];
    match handlers.iter().filter(|h| **h).count() {
        0 => err(
            path.into(),
            "Required value: must specify a handler type".into(),
        ),
        1 => {}
        _ => err(
            path.into(),
            "Forbidden: may not specify more than 1 handler type".into(),
        ),
    }
    for (field, value) in [
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ] {
        if let Some(v) = value {
            let min = if field == "initialDelaySeconds" { 0 } else { 1 };
            if v < min {
                err(
                    format!("{path}.{field}"),
                    format!("Invalid value: {v}: must be greater than or equal to {min}"),
                );
            }
        }
    }
    if success_must_be_one && probe.success_threshold.is_some_and(|v| v != 1) {
        err(
            format!("{path}.successThreshold"),
            "Invalid value: must be 1".into(),
        );
    }
}

/// `None` when `s` is a DNS-1123 label (what container, volume and namespace names must be).
pub fn dns1123_label(s: &str) -> Option<&'static str> {
    const WHY: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
    if s.is_empty() || s.len() > 63 {
        return Some("must be no more than 63 characters and not empty");
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !s.chars().all(ok_char) || !alnum(s.chars().next()) || !alnum(s.chars().last()) {
        return Some(WHY);
    }
    None
}

/// `None` when `s` is a DNS-1123 subdomain (what object names must be): at most 253
/// characters of dot-separated parts, each lower-case alphanumerics and `-`, starting and ending
/// with an alphanumeric. Unlike a label, a part has no length limit of its own.
pub fn dns1123_subdomain(s: &str) -> Option<&'static str> {
    if s.is_empty() || s.len() > 253 {
        return Some("must be no more than 253 characters");
    }
    let part_ok = |p: &str| {
        let alnum =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && alnum(p.chars().next())
            && alnum(p.chars().last())
    };
    if s.split('.').all(part_ok) {
        None
    } else {
        Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        assert!(dns1123_label("web-1").is_none());
        assert!(dns1123_label("Web").is_some());
        assert!(dns1123_label("-a").is_some());
        assert!(dns1123_subdomain("a.b-c").is_none());
        assert!(dns1123_subdomain("a..b").is_some());
        // Object names may have parts longer than a label (63): only the total is limited.
        assert!(dns1123_subdomain(&"a".repeat(100)).is_none());
        assert!(dns1123_subdomain(&"a".repeat(254)).is_some());
    }
}
