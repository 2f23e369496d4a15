//! The API server's checks on the security contexts of a pod and its containers, with its
//! wording, plus one podlab adds: a capability name Linux does not have is refused here, with
//! its field path, where containerd would only refuse it at CreateContainer.

use k8s_openapi::api::core::v1::{PodSecurityContext, SeccompProfile, SecurityContext};

use crate::FieldError;

/// The sysctl name rule (`validation.IsValidSysctlName`): at most 253 characters of
/// dot- or slash-separated lowercase segments.
const SYSCTL_MAX_LENGTH: usize = 253;

/// `host_network`: the pod's `spec.hostNetwork` (a `net.` sysctl cannot be set in the
/// node's network namespace).
pub fn validate_pod(
    context: &PodSecurityContext,
    host_network: bool,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    validate_ids(
        [
            ("runAsUser", context.run_as_user),
            ("runAsGroup", context.run_as_group),
            ("fsGroup", context.fs_group),
        ],
        path,
        errors,
    );
    if let Some(policy) = context.fs_group_change_policy.as_deref() {
        if !["Always", "OnRootMismatch"].contains(&policy) {
            errors.push(FieldError::new(
                format!("{path}.fsGroupChangePolicy"),
                format!(
                    "Unsupported value: {policy:?}: supported values: \"Always\", \"OnRootMismatch\""
                ),
            ));
        }
    }
    if let Some(policy) = context.supplemental_groups_policy.as_deref() {
        if !["Merge", "Strict"].contains(&policy) {
            errors.push(FieldError::new(
                format!("{path}.supplementalGroupsPolicy"),
                format!("Unsupported value: {policy:?}: supported values: \"Merge\", \"Strict\""),
            ));
        }
    }
    for (i, group) in context.supplemental_groups.iter().flatten().enumerate() {
        validate_ids(
            [("", Some(*group))],
            &format!("{path}.supplementalGroups[{i}]"),
            errors,
        );
    }
    if let Some(profile) = &context.seccomp_profile {
        validate_seccomp(profile, &format!("{path}.seccompProfile"), errors);
    }
    validate_sysctls(context, host_network, path, errors);
}

/// The API server's `validateSysctls`: each name valid and given once, and none of the
/// node's network namespace when the pod has `hostNetwork` (`ValidateHostSysctl`).
fn validate_sysctls(
    context: &PodSecurityContext,
    host_network: bool,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let mut seen = std::collections::HashSet::new();
    for (i, sysctl) in context.sysctls.iter().flatten().enumerate() {
        let at = format!("{path}.sysctls[{i}].name");
        let name = sysctl.name.as_str();
        if name.is_empty() {
            errors.push(FieldError::new(at.clone(), "Required value"));
        } else if !is_valid_sysctl_name(name) {
            errors.push(FieldError::new(
                at.clone(),
                format!(
                    "Invalid value: {name:?}: must have at most {SYSCTL_MAX_LENGTH} characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"
                ),
            ));
        } else if seen.contains(name) {
            errors.push(FieldError::new(
                at.clone(),
                format!("Duplicate value: {name:?}"),
            ));
        }
        if host_network && podlab_ns::sysctl::namespace_of(name) == Some(podlab_ns::NsKind::Net) {
            errors.push(FieldError::new(
                at,
                format!("Invalid value: {name:?}: may not be specified when 'hostNetwork' is true"),
            ));
        }
        seen.insert(name);
    }
}

pub fn validate_container(context: &SecurityContext, path: &str, errors: &mut Vec<FieldError>) {
    validate_ids(
        [
            ("runAsUser", context.run_as_user),
            ("runAsGroup", context.run_as_group),
        ],
        path,
        errors,
    );
    if let Some(profile) = &context.seccomp_profile {
        validate_seccomp(profile, &format!("{path}.seccompProfile"), errors);
    }
    if let Some(mount) = context.proc_mount.as_deref() {
        if !["Default", "Unmasked"].contains(&mount) {
            errors.push(FieldError::new(
                format!("{path}.procMount"),
                format!(
                    "Unsupported value: {mount:?}: supported values: \"Default\", \"Unmasked\""
                ),
            ));
        }
    }
    let capabilities = context.capabilities.as_ref();
    for (list, names) in [
        ("add", capabilities.and_then(|c| c.add.as_ref())),
        ("drop", capabilities.and_then(|c| c.drop.as_ref())),
    ] {
        for (i, name) in names.iter().copied().flatten().enumerate() {
            if !is_capability(name) {
                errors.push(FieldError::new(
                    format!("{path}.capabilities.{list}[{i}]"),
                    format!(
                        "Unsupported value: {name:?}: not a Linux capability (a name such as \"NET_ADMIN\", or \"ALL\")"
                    ),
                ));
            }
        }
    }
    if context.allow_privilege_escalation == Some(false) {
        if context.privileged == Some(true) {
            errors.push(FieldError::new(
                path.to_string(),
                "Invalid value: cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        let adds_sys_admin = capabilities
            .and_then(|c| c.add.as_ref())
            .is_some_and(|add| add.iter().any(|c| c == "SYS_ADMIN" || c == "CAP_SYS_ADMIN"));
        if adds_sys_admin {
            errors.push(FieldError::new(
                path.to_string(),
                "Invalid value: cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            ));
        }
    }
}

fn validate_ids<const N: usize>(
    ids: [(&str, Option<i64>); N],
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    for (field, id) in ids {
        if let Some(id) = id.filter(|id| !(0..=i32::MAX as i64).contains(id)) {
            let at = if field.is_empty() {
                path.to_string()
            } else {
                format!("{path}.{field}")
            };
            errors.push(FieldError::new(
                at,
                format!("Invalid value: {id}: must be between 0 and 2147483647, inclusive"),
            ));
        }
    }
}

fn validate_seccomp(profile: &SeccompProfile, path: &str, errors: &mut Vec<FieldError>) {
    let localhost = profile.localhost_profile.as_deref();
    match profile.type_.as_str() {
        "Localhost" => match localhost {
            None | Some("") => errors.push(FieldError::new(
                format!("{path}.localhostProfile"),
                "Required value: must be set when seccomp type is Localhost",
            )),
            Some(file) if file.starts_with('/') => errors.push(FieldError::new(
                format!("{path}.localhostProfile"),
                format!("Invalid value: {file:?}: must be a relative path"),
            )),
            Some(file) if file.split('/').any(|part| part == "..") => {
                errors.push(FieldError::new(
                    format!("{path}.localhostProfile"),
                    format!("Invalid value: {file:?}: must not contain '..'"),
                ))
            }
            Some(_) => {}
        },
        "RuntimeDefault" | "Unconfined" => {
            if let Some(file) = localhost {
                errors.push(FieldError::new(
                    format!("{path}.localhostProfile"),
                    format!(
                        "Invalid value: {file:?}: can only be set when seccomp type is Localhost"
                    ),
                ));
            }
        }
        other => errors.push(FieldError::new(
            format!("{path}.type"),
            format!(
                "Unsupported value: {other:?}: supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\""
            ),
        )),
    }
}

/// A capability name as containerd reads it: `ALL`, or `NAME`/`CAP_NAME` of a Linux
/// capability, in any case.
pub fn is_capability(name: &str) -> bool {
    if name.eq_ignore_ascii_case("ALL") {
        return true;
    }
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    caps::all()
        .iter()
        .any(|c| c.to_string().strip_prefix("CAP_") == Some(bare))
}

/// `IsValidSysctlName`: segments of `[a-z0-9]`, with `-` and `_` inside, joined by `.` or `/`.
pub fn is_valid_sysctl_name(name: &str) -> bool {
    let segment = |s: &str| {
        let bytes = s.as_bytes();
        let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        !bytes.is_empty()
            && edge(&bytes[0])
            && edge(&bytes[bytes.len() - 1])
            && bytes.iter().all(|b| edge(b) || *b == b'-' || *b == b'_')
    };
    name.len() <= SYSCTL_MAX_LENGTH && name.split(['.', '/']).all(segment)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors_of(yaml: &str) -> Vec<String> {
        let context: SecurityContext = serde_yaml_ng::from_str(yaml).unwrap();
        let mut errors = Vec::new();
        validate_container(&context, "spec.containers[0].securityContext", &mut errors);
        errors.into_iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn an_unknown_capability_is_refused_at_its_path() {
        let errors = errors_of("capabilities: {add: [NET_ADMIN, NET_ADMINN], drop: [ALL]}");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.containers[0].securityContext.capabilities.add[1]: Unsupported value: \"NET_ADMINN\""),
            "{errors:?}"
        );
    }

    #[test]
    fn seccomp_profiles_are_checked_as_the_api_server_does() {
        assert!(errors_of("seccompProfile: {type: RuntimeDefault}").is_empty());
        let errors = errors_of("seccompProfile: {type: Localhost}");
        assert_eq!(errors, ["spec.containers[0].securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost"]);
        let errors = errors_of("seccompProfile: {type: Localhost, localhostProfile: ../x.json}");
        assert!(errors[0].contains("must not contain '..'"), "{errors:?}");
        let errors = errors_of("seccompProfile: {type: Strict}");
        assert!(
            errors[0].contains("Unsupported value: \"Strict\""),
            "{errors:?}"
        );
    }

    #[test]
    fn group_policies_are_checked_as_the_api_server_does() {
        let pod_errors = |yaml: &str| {
            let context: PodSecurityContext = serde_yaml_ng::from_str(yaml).unwrap();
            let mut errors = Vec::new();
            validate_pod(&context, false, "spec.securityContext", &mut errors);
            errors
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
        };
        assert!(pod_errors(
            "{supplementalGroupsPolicy: Strict, fsGroupChangePolicy: OnRootMismatch}"
        )
        .is_empty());
        assert!(pod_errors("{supplementalGroupsPolicy: Merge}").is_empty());
        assert_eq!(
            pod_errors("{supplementalGroupsPolicy: strict, fsGroupChangePolicy: Never}"),
            [
                "spec.securityContext.fsGroupChangePolicy: Unsupported value: \"Never\": supported values: \"Always\", \"OnRootMismatch\"",
                "spec.securityContext.supplementalGroupsPolicy: Unsupported value: \"strict\": supported values: \"Merge\", \"Strict\"",
            ]
        );
    }

    #[test]
    fn privileged_without_escalation_is_a_contradiction() {
        let errors = errors_of("{privileged: true, allowPrivilegeEscalation: false}");
        assert_eq!(errors, ["spec.containers[0].securityContext: Invalid value: cannot set `allowPrivilegeEscalation` to false and `privileged` to true"]);
    }

    #[test]
    fn sysctls_are_unique_and_none_of_the_nodes_network_with_host_network() {
        let context: PodSecurityContext = serde_yaml_ng::from_str(
            "sysctls: [{name: net.ipv4.tcp_syncookies, value: '0'}, {name: kernel.shm_rmid_forced, value: '1'}, {name: net.ipv4.tcp_syncookies, value: '1'}]",
        )
        .unwrap();
        let errors_with = |host_network: bool| {
            let mut errors = Vec::new();
            validate_pod(&context, host_network, "spec.securityContext", &mut errors);
            errors
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            errors_with(false),
            ["spec.securityContext.sysctls[2].name: Duplicate value: \"net.ipv4.tcp_syncookies\""]
        );
        let errors = errors_with(true);
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert_eq!(
            errors[0],
            "spec.securityContext.sysctls[0].name: Invalid value: \"net.ipv4.tcp_syncookies\": may not be specified when 'hostNetwork' is true"
        );
    }

    #[test]
    fn sysctl_names_follow_the_api_servers_rule() {
        assert!(is_valid_sysctl_name("net.ipv4.ip_local_port_range"));
        assert!(is_valid_sysctl_name("net/ipv4/conf/eth0.100/forwarding"));
        assert!(!is_valid_sysctl_name("net..core"));
        assert!(!is_valid_sysctl_name("Net.core"));
    }
}
