//! The API server's checks on the security contexts of a pod and its containers, with its
//! wording, plus one podlab adds: a capability name Linux does not have is refused here, with
//! its field path, where containerd would only refuse it at CreateContainer.
//!
//! AppArmor: the `appArmorProfile` fields (`ValidateAppArmorProfileField`), the deprecated
//! `container.apparmor.security.beta.kubernetes.io/NAME` annotations
//! (`ValidateAppArmorPodAnnotations`), and that an annotation and the field it stands for
//! agree when a pod is made (`validateAppArmorAnnotationsAndFieldsMatchOnCreate`); the
//! annotation is then copied into the container's field by [`sync_app_armor_annotations`]
//! (`applyAppArmorVersionSkew`). SELinux: `seLinuxChangePolicy`; the API server checks
//! nothing of `seLinuxOptions`.

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Pod, PodSecurityContext, SeccompProfile, SecurityContext,
};

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
    if let Some(profile) = &context.app_armor_profile {
        validate_app_armor(profile, &format!("{path}.appArmorProfile"), errors);
    }
    if let Some(policy) = context.se_linux_change_policy.as_deref() {
        if !["MountOption", "Recursive"].contains(&policy) {
            errors.push(FieldError::new(
                format!("{path}.seLinuxChangePolicy"),
                format!(
                    "Unsupported value: {policy:?}: supported values: \"MountOption\", \"Recursive\""
                ),
            ));
        }
    }
    validate_sysctls(context, host_network, path, errors);
}

/// The annotation value of each AppArmor profile type.
const ANNOTATION_RUNTIME_DEFAULT: &str = "runtime/default";
const ANNOTATION_UNCONFINED: &str = "unconfined";
const ANNOTATION_LOCALHOST_PREFIX: &str = "localhost/";
/// `v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix`.
pub const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// `ValidateAppArmorProfileField`.
fn validate_app_armor(profile: &AppArmorProfile, path: &str, errors: &mut Vec<FieldError>) {
    let localhost = profile.localhost_profile.as_deref();
    match profile.type_.as_str() {
        "Localhost" => match localhost {
            None => errors.push(FieldError::new(
                format!("{path}.localhostProfile"),
                "Required value: must be set when AppArmor type is Localhost",
            )),
            Some(name) => {
                if name.trim() != name {
                    errors.push(FieldError::new(
                        format!("{path}.localhostProfile"),
                        format!("Invalid value: {name:?}: must not be padded with whitespace"),
                    ));
                } else if name.is_empty() {
                    errors.push(FieldError::new(
                        format!("{path}.localhostProfile"),
                        "Required value: must be set when AppArmor type is Localhost",
                    ));
                }
                // PATH_MAX - 1.
                if name.len() > 4095 {
                    errors.push(FieldError::new(
                        format!("{path}.localhostProfile"),
                        "Too long: may not be more than 4095 bytes",
                    ));
                }
            }
        },
        "RuntimeDefault" | "Unconfined" => {
            if let Some(name) = localhost {
                errors.push(FieldError::new(
                    format!("{path}.localhostProfile"),
                    format!(
                        "Invalid value: {name:?}: can only be set when AppArmor type is Localhost"
                    ),
                ));
            }
        }
        "" => errors.push(FieldError::new(
            format!("{path}.type"),
            "Required value: type is required when appArmorProfile is set",
        )),
        other => errors.push(FieldError::new(
            format!("{path}.type"),
            format!(
                "Unsupported value: {other:?}: supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\""
            ),
        )),
    }
}

/// Every container of the pod (init, app, ephemeral) with its path, in the API server's
/// visiting order, and its AppArmor profile field.
fn containers_with_profiles(pod: &Pod) -> Vec<(String, String, Option<&AppArmorProfile>)> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    fn profile(c: Option<&SecurityContext>) -> Option<&AppArmorProfile> {
        c.and_then(|c| c.app_armor_profile.as_ref())
    }
    let mut out = Vec::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let at = format!("spec.initContainers[{i}]");
        out.push((at, c.name.clone(), profile(c.security_context.as_ref())));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let at = format!("spec.containers[{i}]");
        out.push((at, c.name.clone(), profile(c.security_context.as_ref())));
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let at = format!("spec.ephemeralContainers[{i}]");
        out.push((at, c.name.clone(), profile(c.security_context.as_ref())));
    }
    out
}

/// `ValidateAppArmorPodAnnotations` and, for a pod being made,
/// `validateAppArmorAnnotationsAndFieldsMatchOnCreate`.
pub fn validate_app_armor_annotations(pod: &Pod, errors: &mut Vec<FieldError>) {
    let containers = containers_with_profiles(pod);
    for (key, value) in pod.metadata.annotations.iter().flatten() {
        let Some(name) = key.strip_prefix(APPARMOR_ANNOTATION_PREFIX) else {
            continue;
        };
        let at = format!("metadata.annotations[{key}]");
        if !containers.iter().any(|(_, n, _)| n == name) {
            errors.push(FieldError::new(
                at.clone(),
                format!("Invalid value: {name:?}: container not found"),
            ));
        }
        let well_formed = value.is_empty()
            || value == ANNOTATION_RUNTIME_DEFAULT
            || value == ANNOTATION_UNCONFINED
            || value.starts_with(ANNOTATION_LOCALHOST_PREFIX);
        if !well_formed {
            errors.push(FieldError::new(
                at,
                format!("Invalid value: {value:?}: invalid AppArmor profile name: {value:?}"),
            ));
        }
    }
    let pod_profile = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|c| c.app_armor_profile.as_ref());
    for (path, name, own) in containers {
        let Some(profile) = own.or(pod_profile) else {
            continue;
        };
        let key = format!("{APPARMOR_ANNOTATION_PREFIX}{name}");
        let Some(annotation) = pod.metadata.annotations.as_ref().and_then(|a| a.get(&key)) else {
            continue;
        };
        let at = format!("{path}.securityContext.appArmorProfile");
        let type_mismatch = || {
            FieldError::new(
                format!("{at}.type"),
                "Forbidden: apparmor type in annotation and field must match",
            )
        };
        match profile.type_.as_str() {
            "Unconfined" if annotation != ANNOTATION_UNCONFINED => errors.push(type_mismatch()),
            "RuntimeDefault" if annotation != ANNOTATION_RUNTIME_DEFAULT => {
                errors.push(type_mismatch())
            }
            "Localhost" => match annotation.strip_prefix(ANNOTATION_LOCALHOST_PREFIX) {
                None => errors.push(type_mismatch()),
                Some(named) if profile.localhost_profile.as_deref() != Some(named) => {
                    errors.push(FieldError::new(
                        format!("{at}.localhostProfile"),
                        "Forbidden: apparmor profile in annotation and field must match",
                    ))
                }
                Some(_) => {}
            },
            _ => {}
        }
    }
}

/// The API server's `applyAppArmorVersionSkew` when a pod is made: a container with an
/// annotation and no `appArmorProfile` gets the field the annotation stands for, unless that
/// is invalid or already the pod's profile. Returns the annotations' deprecation warnings.
pub fn sync_app_armor_annotations(pod: &mut Pod) -> Vec<String> {
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let Some(spec) = pod.spec.as_mut() else {
        return Vec::new();
    };
    let pod_profile = spec
        .security_context
        .as_ref()
        .and_then(|c| c.app_armor_profile.clone());
    let mut warnings = Vec::new();
    let mut sync = |name: &str, context: &mut Option<SecurityContext>| {
        let key = format!("{APPARMOR_ANNOTATION_PREFIX}{name}");
        let Some(annotation) = annotations.get(&key) else {
            return;
        };
        if context
            .as_ref()
            .is_some_and(|c| c.app_armor_profile.is_some())
        {
            return;
        }
        let field = profile_for_annotation(annotation).filter(|p| {
            let mut errors = Vec::new();
            validate_app_armor(p, "", &mut errors);
            errors.is_empty()
        });
        let copied = field.is_some() && field != pod_profile;
        if copied {
            context
                .get_or_insert_with(Default::default)
                .app_armor_profile = field.clone();
        }
        if field.is_none() || copied {
            warnings.push(format!(
                "metadata.annotations[{key}]: deprecated since v1.30; use the \"appArmorProfile\" field instead"
            ));
        }
    };
    for c in spec.init_containers.iter_mut().flatten() {
        sync(&c.name, &mut c.security_context);
    }
    for c in spec.containers.iter_mut() {
        sync(&c.name, &mut c.security_context);
    }
    for c in spec.ephemeral_containers.iter_mut().flatten() {
        sync(&c.name, &mut c.security_context);
    }
    warnings
}

/// `ApparmorFieldForAnnotation`.
fn profile_for_annotation(annotation: &str) -> Option<AppArmorProfile> {
    let profile = |type_: &str, localhost_profile: Option<&str>| AppArmorProfile {
        type_: type_.into(),
        localhost_profile: localhost_profile.map(String::from),
    };
    match annotation {
        ANNOTATION_UNCONFINED => Some(profile("Unconfined", None)),
        ANNOTATION_RUNTIME_DEFAULT => Some(profile("RuntimeDefault", None)),
        _ => annotation
            .strip_prefix(ANNOTATION_LOCALHOST_PREFIX)
            .map(|name| profile("Localhost", Some(name))),
    }
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
    if let Some(profile) = &context.app_armor_profile {
        validate_app_armor(profile, &format!("{path}.appArmorProfile"), errors);
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

    fn pod_errors(yaml: &str) -> Vec<String> {
        let pod: Pod = serde_yaml_ng::from_str(yaml).unwrap();
        crate::validation::validate_pod(&pod)
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    const APP: &str = "spec: {containers: [{name: app, image: busybox";

    #[test]
    fn app_armor_profiles_are_checked_as_the_api_server_does() {
        let at = "spec.containers[0].securityContext.appArmorProfile";
        let with = |profile: &str| {
            pod_errors(&format!(
                "metadata: {{name: p}}\n{APP}, securityContext: {{appArmorProfile: {profile}}}}}]}}"
            ))
        };
        assert!(with("{type: RuntimeDefault}").is_empty());
        assert!(with("{type: Localhost, localhostProfile: k8s-deny-write}").is_empty());
        assert_eq!(
            with("{type: Localhost}"),
            [format!("{at}.localhostProfile: Required value: must be set when AppArmor type is Localhost")]
        );
        assert_eq!(
            with("{type: Localhost, localhostProfile: ' p'}"),
            [format!(
                "{at}.localhostProfile: Invalid value: \" p\": must not be padded with whitespace"
            )]
        );
        assert_eq!(
            with("{type: Unconfined, localhostProfile: p}"),
            [format!("{at}.localhostProfile: Invalid value: \"p\": can only be set when AppArmor type is Localhost")]
        );
        assert_eq!(
            with("{type: Enforce}"),
            [format!("{at}.type: Unsupported value: \"Enforce\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\"")]
        );
        let pod_level = pod_errors("metadata: {name: p}\nspec: {securityContext: {appArmorProfile: {type: ''}, seLinuxChangePolicy: Always, seLinuxOptions: {level: 's0:c1,c2', type: spc_t}}, containers: [{name: app, image: busybox, securityContext: {seLinuxOptions: {user: system_u}}}]}");
        assert_eq!(
            pod_level,
            [
                "spec.securityContext.appArmorProfile.type: Required value: type is required when appArmorProfile is set",
                "spec.securityContext.seLinuxChangePolicy: Unsupported value: \"Always\": supported values: \"MountOption\", \"Recursive\"",
            ]
        );
    }

    #[test]
    fn app_armor_annotations_name_a_container_and_match_its_field() {
        let key = "metadata.annotations[container.apparmor.security.beta.kubernetes.io/";
        let errors = pod_errors(&format!(
            "metadata: {{name: p, annotations: {{container.apparmor.security.beta.kubernetes.io/ghost: runtime/default, container.apparmor.security.beta.kubernetes.io/app: enforce}}}}\n{APP}}}]}}"
        ));
        assert_eq!(
            errors,
            [
                format!("{key}app]: Invalid value: \"enforce\": invalid AppArmor profile name: \"enforce\""),
                format!("{key}ghost]: Invalid value: \"ghost\": container not found"),
            ]
        );
        let errors = pod_errors("metadata: {name: p, annotations: {container.apparmor.security.beta.kubernetes.io/app: localhost/a}}\nspec: {securityContext: {appArmorProfile: {type: Localhost, localhostProfile: b}}, containers: [{name: app, image: busybox}, {name: other, image: busybox, securityContext: {appArmorProfile: {type: RuntimeDefault}}}]}");
        assert_eq!(
            errors,
            ["spec.containers[0].securityContext.appArmorProfile.localhostProfile: Forbidden: apparmor profile in annotation and field must match"]
        );
        let errors = pod_errors(&format!(
            "metadata: {{name: p, annotations: {{container.apparmor.security.beta.kubernetes.io/app: unconfined}}}}\n{APP}, securityContext: {{appArmorProfile: {{type: RuntimeDefault}}}}}}]}}"
        ));
        assert_eq!(
            errors,
            ["spec.containers[0].securityContext.appArmorProfile.type: Forbidden: apparmor type in annotation and field must match"]
        );
    }

    #[test]
    fn an_annotation_becomes_its_containers_field_unless_the_pod_has_the_same() {
        let mut pod: Pod = serde_yaml_ng::from_str(
            "metadata: {name: p, annotations: {container.apparmor.security.beta.kubernetes.io/a: runtime/default, container.apparmor.security.beta.kubernetes.io/b: localhost/x, container.apparmor.security.beta.kubernetes.io/c: localhost/}}\nspec: {securityContext: {appArmorProfile: {type: RuntimeDefault}}, containers: [{name: a}, {name: b}, {name: c}]}",
        )
        .unwrap();
        let warnings = sync_app_armor_annotations(&mut pod);
        let field = |i: usize| {
            pod.spec.as_ref().unwrap().containers[i]
                .security_context
                .as_ref()
                .and_then(|c| c.app_armor_profile.clone())
        };
        assert_eq!(field(0), None, "the pod's profile already says so");
        assert_eq!(
            field(1),
            Some(AppArmorProfile {
                type_: "Localhost".into(),
                localhost_profile: Some("x".into())
            })
        );
        assert_eq!(field(2), None, "an empty localhost name is not copied");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0]
            .ends_with("deprecated since v1.30; use the \"appArmorProfile\" field instead"));
    }

    #[test]
    fn resize_policies_are_checked_as_the_api_server_does() {
        let at = "spec.containers[0].resizePolicy";
        let with = |restart: &str, policies: &str| {
            pod_errors(&format!(
                "metadata: {{name: p}}\nspec: {{restartPolicy: {restart}, containers: [{{name: app, image: busybox, resizePolicy: {policies}}}]}}"
            ))
        };
        assert!(with("Always", "[{resourceName: cpu, restartPolicy: NotRequired}, {resourceName: memory, restartPolicy: RestartContainer}]").is_empty());
        assert_eq!(
            with("Always", "[{resourceName: cpu, restartPolicy: NotRequired}, {resourceName: cpu, restartPolicy: Sometimes}, {resourceName: storage, restartPolicy: NotRequired}]"),
            [
                format!("{at}[1]: Duplicate value: \"cpu\""),
                format!("{at}: Unsupported value: \"Sometimes\": supported values: \"NotRequired\", \"RestartContainer\""),
                format!("{at}: Unsupported value: \"storage\": supported values: \"cpu\", \"memory\""),
            ]
        );
        assert_eq!(
            with("Never", "[{resourceName: memory, restartPolicy: RestartContainer}]"),
            [format!("{at}: Invalid value: \"RestartContainer\": must be 'NotRequired' when `restartPolicy` is 'Never'")]
        );
        let ephemeral = pod_errors("metadata: {name: p}\nspec: {containers: [{name: app, image: busybox}], ephemeralContainers: [{name: d, image: busybox, resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}]}]}");
        assert_eq!(
            ephemeral,
            ["spec.ephemeralContainers[0].resizePolicy: Forbidden: cannot be set for an Ephemeral Container"]
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
