//! kubelet's AppArmor admission (`pkg/security/apparmor`, `lifecycle.NewAppArmorAdmitHandler`):
//! a pending pod that asks for an AppArmor profile other than `Unconfined` (pod or container
//! `securityContext.appArmorProfile`, or the deprecated
//! `container.apparmor.security.beta.kubernetes.io/NAME` annotation) is admitted only on a host
//! whose kernel enforces AppArmor. Otherwise it is rejected before anything is made for it:
//! phase Failed, reason `AppArmor`, `Pod was rejected: Cannot enforce AppArmor: AppArmor is
//! not enabled on the host`, a Warning event with the same words.
//!
//! Whether the host has AppArmor is runc's test, which kubelet uses: `/sys/kernel/security/apparmor`
//! exists and `/sys/module/apparmor/parameters/enabled` starts with `Y`. podlab's runtime
//! applies no AppArmor profile, so on a host that has AppArmor a pod that asks for one is
//! rejected too, with a reason that says so, rather than run unconfined.

use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod};

/// kubelet's `AppArmorNotAdmittedReason`.
pub const REASON: &str = "AppArmor";
/// The deprecated annotation's prefix (`v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix`).
pub const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// What the host can do: kubelet's `validateHost`, checked once when the node starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// No AppArmor in the kernel: kubelet's "AppArmor is not enabled on the host".
    Disabled,
    /// AppArmor enforces here, but podlab's runtime does not load or apply profiles.
    EnabledWithoutRuntimeSupport,
}

impl Host {
    /// runc's `apparmor.IsEnabled`, which kubelet calls: the securityfs folder and the
    /// module's `enabled` parameter.
    pub fn detect() -> Host {
        let fs = std::path::Path::new("/sys/kernel/security/apparmor").exists();
        let enabled = std::fs::read("/sys/module/apparmor/parameters/enabled")
            .is_ok_and(|b| b.len() > 1 && b[0] == b'Y');
        if fs && enabled {
            Host::EnabledWithoutRuntimeSupport
        } else {
            Host::Disabled
        }
    }

    fn error(&self) -> &'static str {
        match self {
            Host::Disabled => "AppArmor is not enabled on the host",
            Host::EnabledWithoutRuntimeSupport => {
                "podlab's runtime does not apply AppArmor profiles"
            }
        }
    }
}

fn confines(profile: Option<&AppArmorProfile>) -> bool {
    profile.is_some_and(|p| p.type_ != "Unconfined")
}

/// kubelet's `isRequired`: a profile other than Unconfined at the pod or a container's level,
/// or an annotation whose value is not `unconfined`.
pub fn is_required(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let pod_level = spec
        .security_context
        .as_ref()
        .and_then(|c| c.app_armor_profile.as_ref());
    let container_level = |c: &Container| {
        confines(
            c.security_context
                .as_ref()
                .and_then(|s| s.app_armor_profile.as_ref()),
        )
    };
    let ephemeral = spec.ephemeral_containers.iter().flatten().any(|c| {
        confines(
            c.security_context
                .as_ref()
                .and_then(|s| s.app_armor_profile.as_ref()),
        )
    });
    let annotated = pod
        .metadata
        .annotations
        .iter()
        .flatten()
        .any(|(key, value)| key.starts_with(ANNOTATION_PREFIX) && value != "unconfined");
    confines(pod_level)
        || spec.containers.iter().any(container_level)
        || spec.init_containers.iter().flatten().any(container_level)
        || ephemeral
        || annotated
}

/// kubelet's admit handler: None when the pod may run here, else the rejection's message
/// (its reason is [`REASON`]). Only a pending pod is judged, as kubelet's handler does.
pub fn admit(pod: &Pod, host: &Host) -> Option<String> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !matches!(phase, None | Some("Pending")) || !is_required(pod) {
        return None;
    }
    Some(format!("Cannot enforce AppArmor: {}", host.error()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn profile(type_: &str) -> serde_json::Value {
        json!({"appArmorProfile": {"type": type_, "localhostProfile": (type_ == "Localhost").then_some("p")}})
    }

    #[test]
    fn only_a_profile_that_confines_needs_apparmor() {
        let none = pod(json!({"spec": {"containers": [{"name": "app"}]}}));
        assert!(!is_required(&none));
        let unconfined = pod(json!({"spec": {
            "securityContext": profile("Unconfined"),
            "containers": [{"name": "app", "securityContext": profile("Unconfined")}]}}));
        assert!(!is_required(&unconfined));
        for asks in [
            json!({"spec": {"securityContext": profile("RuntimeDefault"), "containers": [{"name": "app"}]}}),
            json!({"spec": {"containers": [{"name": "app", "securityContext": profile("Localhost")}]}}),
            json!({"spec": {"initContainers": [{"name": "i", "securityContext": profile("RuntimeDefault")}], "containers": [{"name": "app"}]}}),
            json!({"spec": {"containers": [{"name": "app"}], "ephemeralContainers": [{"name": "d", "securityContext": profile("RuntimeDefault")}]}}),
            json!({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/app": "runtime/default"}}, "spec": {"containers": [{"name": "app"}]}}),
        ] {
            assert!(is_required(&pod(asks.clone())), "{asks}");
        }
        let annotated_unconfined = pod(json!({
            "metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}},
            "spec": {"containers": [{"name": "app"}]}}));
        assert!(!is_required(&annotated_unconfined));
    }

    #[test]
    fn a_pending_pod_that_needs_apparmor_is_rejected_in_kubelets_words() {
        let spec =
            json!({"securityContext": profile("RuntimeDefault"), "containers": [{"name": "app"}]});
        let asks = pod(json!({ "spec": spec }));
        assert_eq!(
            admit(&asks, &Host::Disabled).as_deref(),
            Some("Cannot enforce AppArmor: AppArmor is not enabled on the host")
        );
        let running = pod(json!({"spec": spec, "status": {"phase": "Running"}}));
        assert_eq!(admit(&running, &Host::Disabled), None, "not judged again");
        assert!(admit(&asks, &Host::EnabledWithoutRuntimeSupport)
            .unwrap()
            .starts_with("Cannot enforce AppArmor: "));
    }
}
