//! The API server's defaulting of a Pod (`SetDefaults_Pod` and friends): what a cluster fills
//! in before anyone reads the object back, so that `podlab get pod -o yaml` shows the same.

use k8s_openapi::api::core::v1::{Container, Pod, Probe, Volume};

pub const DEFAULT_NAMESPACE: &str = "default";
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

pub fn default_pod(pod: &mut Pod) {
    // PrepareForCreate's AppArmor version skew: an annotation becomes its container's field.
    crate::security::sync_app_armor_annotations(pod);
    pod.metadata
        .namespace
        .get_or_insert_with(|| DEFAULT_NAMESPACE.to_string());
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.termination_grace_period_seconds
        .get_or_insert(DEFAULT_GRACE_SECONDS);
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    spec.enable_service_links.get_or_insert(true);
    spec.security_context.get_or_insert_with(Default::default);
    for volume in spec.volumes.iter_mut().flatten() {
        default_volume(volume);
    }
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        default_container(container);
    }
    for c in spec.ephemeral_containers.iter_mut().flatten() {
        default_common(
            &mut c.termination_message_path,
            &mut c.termination_message_policy,
            &mut c.image_pull_policy,
            c.image.as_deref(),
        );
    }
    crate::resources::default_pod_requests(pod);
}

/// The files of configMap, secret and downwardAPI volumes default to 0644 (`defaultMode: 420`),
/// a downwardAPI `fieldRef` to `apiVersion: v1`.
fn default_volume(volume: &mut Volume) {
    const DEFAULT_MODE: i32 = 0o644;
    // An image volume's pullPolicy defaults as a container's does (from its reference's tag).
    if let Some(source) = volume.image.as_mut() {
        if source.pull_policy.is_none() {
            source.pull_policy = Some(pull_policy_for(source.reference.as_deref()).to_string());
        }
    }
    if let Some(source) = volume.config_map.as_mut() {
        source.default_mode.get_or_insert(DEFAULT_MODE);
    }
    if let Some(source) = volume.secret.as_mut() {
        source.default_mode.get_or_insert(DEFAULT_MODE);
    }
    if let Some(source) = volume.downward_api.as_mut() {
        source.default_mode.get_or_insert(DEFAULT_MODE);
        for field in source
            .items
            .iter_mut()
            .flatten()
            .filter_map(|i| i.field_ref.as_mut())
        {
            field.api_version.get_or_insert_with(|| "v1".into());
        }
    }
}

/// What every kind of container gets: the termination message file and policy, the pull policy.
fn default_common(
    message_path: &mut Option<String>,
    message_policy: &mut Option<String>,
    pull_policy: &mut Option<String>,
    image: Option<&str>,
) {
    message_path.get_or_insert_with(|| "/dev/termination-log".into());
    message_policy.get_or_insert_with(|| "File".into());
    pull_policy.get_or_insert_with(|| pull_policy_for(image).into());
}

fn default_container(c: &mut Container) {
    default_common(
        &mut c.termination_message_path,
        &mut c.termination_message_policy,
        &mut c.image_pull_policy,
        c.image.as_deref(),
    );
    let container = c;
    if let Some(resources) = container.resources.as_mut() {
        crate::resources::default_requests(resources);
    }
    for port in container.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| "TCP".into());
    }
    for probe in [
        &mut container.liveness_probe,
        &mut container.readiness_probe,
        &mut container.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
}

/// Probe timings default to 1 s timeout, 10 s period, 1 success, 3 failures.
pub fn default_probe(probe: &mut Probe) {
    probe.timeout_seconds.get_or_insert(1);
    probe.period_seconds.get_or_insert(10);
    probe.success_threshold.get_or_insert(1);
    probe.failure_threshold.get_or_insert(3);
    if let Some(http) = probe.http_get.as_mut() {
        http.path.get_or_insert_with(|| "/".into());
        http.scheme.get_or_insert_with(|| "HTTP".into());
    }
}

/// The API server's rule (`SetDefaults_Container` with `parsers.ParseImageName`): `Always` when
/// the image's tag is `latest` (written, or implied by an image with neither tag nor digest),
/// else `IfNotPresent` (a digest alone implies no tag: `name@sha256:…` is `IfNotPresent`, but
/// `name:latest@sha256:…` is `Always`).
pub fn pull_policy_for(image: Option<&str>) -> &'static str {
    let image = image.unwrap_or("");
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.rsplit_once(':').map(|(_, tag)| tag);
    match (tag, digest) {
        (Some("latest"), _) | (None, None) => "Always",
        _ => "IfNotPresent",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(pull_policy_for(Some("busybox")), "Always");
        assert_eq!(pull_policy_for(Some("busybox:latest")), "Always");
        assert_eq!(pull_policy_for(Some("busybox:1.36")), "IfNotPresent");
        assert_eq!(pull_policy_for(Some("localhost:5000/busybox")), "Always");
        assert_eq!(
            pull_policy_for(Some("localhost:5000/busybox:2")),
            "IfNotPresent"
        );
        let digest = "sha256:6d9ac9237a84afe1516540f40a0fafdc86859b2141954b4d643af7066d598b74";
        assert_eq!(
            pull_policy_for(Some(&format!("busybox@{digest}"))),
            "IfNotPresent"
        );
        assert_eq!(
            pull_policy_for(Some(&format!("busybox:1.36@{digest}"))),
            "IfNotPresent"
        );
        assert_eq!(
            pull_policy_for(Some(&format!("busybox:latest@{digest}"))),
            "Always"
        );
    }
}
