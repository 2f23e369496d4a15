//! kubelet's securityContext rules: the pod's and the container's contexts merged into what
//! the runtime is asked for (`DetermineEffectiveSecurityContext`, `getSeccompProfile`,
//! `AddNoNewPrivileges`, `ConvertToRuntimeMaskedPaths`), the runAsNonRoot check made before
//! a container is created, and the node's seccomp settings.
//!
//! The container's `runAsUser`, `runAsGroup`, `runAsNonRoot` and `seccompProfile` win over the
//! pod's; `supplementalGroups` (and `fsGroup`) are the pod's; capabilities, `privileged`,
//! `allowPrivilegeEscalation`, `procMount` and `readOnlyRootFilesystem` are the container's
//! alone. A container with no seccomp profile at either level gets the node's default:
//! kubelet's `--seccomp-default` (RuntimeDefault when set, Unconfined when not). kubelet
//! leaves that flag off; podlab's node turns it on unless told otherwise
//! (`PODLAB_NODE_SECCOMP_DEFAULT=false`), so that a container is filtered by default.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, SeccompProfile, SecurityContext};
use podlab_runtime::seccomp::SeccompProfile as RuntimeProfile;
use podlab_runtime::{SandboxSecurity, SecurityConfig};

/// `PODLAB_NODE_SECCOMP_DEFAULT`: `true` (podlab's default) or `false` (kubelet's).
pub const ENV_SECCOMP_DEFAULT: &str = "PODLAB_NODE_SECCOMP_DEFAULT";
/// `PODLAB_NODE_SECCOMP_ROOT`: the folder `Localhost` profiles are read from.
pub const ENV_SECCOMP_ROOT: &str = "PODLAB_NODE_SECCOMP_ROOT";

/// The node's security settings (kubelet's `--seccomp-default` and its seccomp folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSecurity {
    /// RuntimeDefault for a container whose pod and container name no profile.
    pub seccomp_default: bool,
    /// Where `Localhost` profiles are: kubelet's is `<root-dir>/seccomp`
    /// (`/var/lib/kubelet/seccomp`), podlab's `$PODLAB_ROOT/seccomp`.
    pub seccomp_root: PathBuf,
    /// kubelet's `--allowed-unsafe-sysctls`: names or `prefix*` patterns, each namespaced.
    pub allowed_unsafe_sysctls: Vec<String>,
    /// The safe sysctls and the allowed unsafe ones ([`crate::sysctl`]).
    pub sysctls: crate::sysctl::Allowlist,
    /// Whether the kernel enforces AppArmor ([`crate::apparmor`]), seen when the node starts.
    pub apparmor: crate::apparmor::Host,
}

impl NodeSecurity {
    /// podlab's defaults for a node whose state is under `root`.
    pub fn new(root: &Path) -> NodeSecurity {
        NodeSecurity {
            seccomp_default: true,
            seccomp_root: root.join("seccomp"),
            allowed_unsafe_sysctls: Vec::new(),
            sysctls: crate::sysctl::Allowlist::for_node::<&str>(&[])
                .expect("the safe sysctls are namespaced"),
            apparmor: crate::apparmor::Host::detect(),
        }
    }

    /// Allows these unsafe sysctls too (kubelet's `--allowed-unsafe-sysctls`): a
    /// comma-separated list of names and `prefix*` patterns, each of a namespace.
    pub fn allow_unsafe_sysctls(&mut self, list: &str) -> Result<(), String> {
        let patterns: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        self.sysctls = crate::sysctl::Allowlist::for_node(&patterns)?;
        self.allowed_unsafe_sysctls = patterns;
        Ok(())
    }

    /// [`NodeSecurity::new`], then `PODLAB_NODE_SECCOMP_DEFAULT`, `PODLAB_NODE_SECCOMP_ROOT`
    /// and `PODLAB_NODE_ALLOWED_UNSAFE_SYSCTLS`.
    pub fn from_env(root: &Path) -> Result<NodeSecurity, String> {
        let mut node = NodeSecurity::new(root);
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(value) = var(ENV_SECCOMP_DEFAULT) {
            node.seccomp_default = match value.as_str() {
                "true" | "1" => true,
                "false" | "0" => false,
                other => {
                    return Err(format!(
                        "{ENV_SECCOMP_DEFAULT}: {other:?} is not true or false"
                    ))
                }
            };
        }
        if let Some(value) = var(ENV_SECCOMP_ROOT) {
            node.seccomp_root = PathBuf::from(value);
        }
        if let Some(value) = var(crate::sysctl::ENV_ALLOWED_UNSAFE_SYSCTLS) {
            node.allow_unsafe_sysctls(&value)
                .map_err(|e| format!("{}: {e}", crate::sysctl::ENV_ALLOWED_UNSAFE_SYSCTLS))?;
        }
        Ok(node)
    }
}

/// The merged context of one container, as the CRI request carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effective {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_non_root: bool,
    pub readonly_rootfs: bool,
    pub security: SecurityConfig,
    /// The field path of the profile that decided (for errors), if any did.
    pub seccomp_field: Option<String>,
}

/// `field_prefix` is the container's path (`spec.containers[0]`).
pub fn effective(
    pod: &Pod,
    container: Option<&SecurityContext>,
    field_prefix: &str,
    node: &NodeSecurity,
) -> Effective {
    let pod_context = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let from_pod = |f: fn(&k8s_openapi::api::core::v1::PodSecurityContext) -> Option<i64>| {
        pod_context.and_then(f)
    };
    let run_as_user = container
        .and_then(|c| c.run_as_user)
        .or_else(|| from_pod(|p| p.run_as_user));
    let run_as_group = container
        .and_then(|c| c.run_as_group)
        .or_else(|| from_pod(|p| p.run_as_group));
    let run_as_non_root = container
        .and_then(|c| c.run_as_non_root)
        .or_else(|| pod_context.and_then(|p| p.run_as_non_root))
        .unwrap_or(false);
    let mut supplemental_groups: Vec<u32> = pod_context
        .and_then(|p| p.supplemental_groups.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|g| g as u32)
        .collect();
    if let Some(fs_group) = from_pod(|p| p.fs_group) {
        supplemental_groups.push(fs_group as u32);
    }
    let (profile, seccomp_field) = match (
        container.and_then(|c| c.seccomp_profile.as_ref()),
        pod_context.and_then(|p| p.seccomp_profile.as_ref()),
    ) {
        (Some(own), _) => (
            Some(own),
            Some(format!("{field_prefix}.securityContext.seccompProfile")),
        ),
        (None, Some(pods)) => (
            Some(pods),
            Some("spec.securityContext.seccompProfile".to_string()),
        ),
        (None, None) => (None, None),
    };
    let seccomp = match profile {
        Some(profile) => runtime_profile(profile, node),
        None if node.seccomp_default => RuntimeProfile::RuntimeDefault,
        None => RuntimeProfile::Unconfined,
    };
    let capabilities = container.and_then(|c| c.capabilities.as_ref());
    let unmasked = container.and_then(|c| c.proc_mount.as_deref()) == Some("Unmasked");
    Effective {
        run_as_user,
        run_as_group,
        run_as_non_root,
        readonly_rootfs: container
            .and_then(|c| c.read_only_root_filesystem)
            .unwrap_or(false),
        security: SecurityConfig {
            // procMount: Unmasked asks for neither list; Default for the runtime's.
            masked_paths: unmasked.then(Vec::new),
            readonly_paths: unmasked.then(Vec::new),
            privileged: container.and_then(|c| c.privileged).unwrap_or(false),
            add_capabilities: capabilities.and_then(|c| c.add.clone()).unwrap_or_default(),
            drop_capabilities: capabilities
                .and_then(|c| c.drop.clone())
                .unwrap_or_default(),
            no_new_privs: container.and_then(|c| c.allow_privilege_escalation) == Some(false),
            seccomp,
            supplemental_groups,
            strict_supplemental_groups: pod_context
                .and_then(|p| p.supplemental_groups_policy.as_deref())
                == Some("Strict"),
        },
        seccomp_field,
    }
}

/// [`effective`] for the container `name` of `pod` (init, regular or ephemeral); None when
/// the pod has no container of that name.
pub fn for_container(pod: &Pod, name: &str, node: &NodeSecurity) -> Option<Effective> {
    let spec = pod.spec.as_ref()?;
    fn find<'p>(
        name: &str,
        list: &str,
        contexts: Vec<(&str, Option<&'p SecurityContext>)>,
    ) -> Option<(String, Option<&'p SecurityContext>)> {
        contexts
            .into_iter()
            .enumerate()
            .find(|(_, (n, _))| *n == name)
            .map(|(i, (_, context))| (format!("{list}[{i}]"), context))
    }
    let (path, context) = find(
        name,
        "spec.initContainers",
        spec.init_containers
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.security_context.as_ref()))
            .collect(),
    )
    .or_else(|| {
        find(
            name,
            "spec.containers",
            spec.containers
                .iter()
                .map(|c| (c.name.as_str(), c.security_context.as_ref()))
                .collect(),
        )
    })
    .or_else(|| {
        find(
            name,
            "spec.ephemeralContainers",
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| (c.name.as_str(), c.security_context.as_ref()))
                .collect(),
        )
    })?;
    Some(effective(pod, context, &path, node))
}

fn runtime_profile(profile: &SeccompProfile, node: &NodeSecurity) -> RuntimeProfile {
    match profile.type_.as_str() {
        "RuntimeDefault" => RuntimeProfile::RuntimeDefault,
        "Localhost" => RuntimeProfile::Localhost(
            node.seccomp_root
                .join(profile.localhost_profile.as_deref().unwrap_or_default()),
        ),
        _ => RuntimeProfile::Unconfined,
    }
}

/// What kubelet asks for the sandbox (`applySandboxSecurityContext`): the pod's `runAsUser`
/// and `runAsGroup`, its `fsGroup` and `supplementalGroups`, privileged when any container is
/// (`HasPrivilegedContainer`), and the pod-level seccomp profile or the node's default
/// (`getSeccompProfile` with no container).
pub fn for_sandbox(pod: &Pod, node: &NodeSecurity) -> SandboxSecurity {
    let spec = pod.spec.as_ref();
    let context = spec.and_then(|s| s.security_context.as_ref());
    let id = |value: Option<i64>| value.and_then(|v| u32::try_from(v).ok());
    let mut supplemental_groups: Vec<u32> = context
        .and_then(|c| c.fs_group)
        .and_then(|g| u32::try_from(g).ok())
        .into_iter()
        .collect();
    supplemental_groups.extend(
        context
            .and_then(|c| c.supplemental_groups.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|g| u32::try_from(*g).ok()),
    );
    let privileged = spec.is_some_and(|spec| {
        let contexts = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .map(|c| c.security_context.as_ref())
            .chain(
                spec.ephemeral_containers
                    .iter()
                    .flatten()
                    .map(|c| c.security_context.as_ref()),
            );
        contexts.flatten().any(|c| c.privileged == Some(true))
    });
    let seccomp = match context.and_then(|c| c.seccomp_profile.as_ref()) {
        Some(profile) => runtime_profile(profile, node),
        None if node.seccomp_default => RuntimeProfile::RuntimeDefault,
        None => RuntimeProfile::Unconfined,
    };
    SandboxSecurity {
        seccomp,
        run_as_user: id(context.and_then(|c| c.run_as_user)),
        run_as_group: id(context.and_then(|c| c.run_as_group)),
        supplemental_groups,
        privileged,
        user_namespace: None,
    }
}

/// kubelet's `format.Pod`: `name_namespace(uid)`.
pub fn pod_full_name(pod: &Pod) -> String {
    let (namespace, name, uid) = crate::translate::identity(pod);
    format!("{name}_{namespace}({uid})")
}

/// kubelet's `verifyRunAsNonRoot`, with its messages: None when the container may start.
/// `image_user` is the image config's USER (`uid`, `name`, `uid:gid`; empty is root).
pub fn verify_run_as_non_root(
    pod: &Pod,
    container: &str,
    effective: &Effective,
    image_user: &str,
) -> Option<String> {
    if !effective.run_as_non_root {
        return None;
    }
    let pod = pod_full_name(pod);
    if let Some(uid) = effective.run_as_user {
        return (uid == 0).then(|| {
            format!("container's runAsUser breaks non-root policy (pod: {pod:?}, container: {container})")
        });
    }
    let user = image_user.split(':').next().unwrap_or("");
    match user.parse::<i64>() {
        _ if user.is_empty() => Some(format!(
            "container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})"
        )),
        Ok(0) => Some(format!(
            "container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})"
        )),
        Ok(_) => None,
        Err(_) => Some(format!(
            "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: {pod:?}, container: {container})"
        )),
    }
}

/// The container's SELinux options as kubelet hands them to the runtime
/// (`DetermineEffectiveSecurityContext`: the container's `seLinuxOptions` whole, else the
/// pod's). On a host without SELinux containerd and runc apply no label; containerd still
/// checks the `level`'s form before anything else (`checkSelinuxLevel`), and CreateContainer
/// fails with its words: the one effect the options have here.
pub fn bad_selinux_level(pod: &Pod, name: &str) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let container = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .and_then(|c| c.security_context.as_ref())
        .and_then(|c| c.se_linux_options.as_ref());
    let ephemeral = || {
        spec.ephemeral_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .and_then(|c| c.security_context.as_ref())
            .and_then(|c| c.se_linux_options.as_ref())
    };
    let pod_level = || {
        spec.security_context
            .as_ref()
            .and_then(|c| c.se_linux_options.as_ref())
    };
    let options = container.or_else(ephemeral).or_else(pod_level)?;
    let level = options.level.as_deref().filter(|l| !l.is_empty())?;
    (!is_selinux_level(level)).then(|| {
        format!("failed to generate container spec: the format of 'level' {level:?} is not correct")
    })
}

/// containerd's level form: `s<d>[-s<d>][:c<n>[.c<n>][,c<n>[.c<n>]]...]`, n of 1 to 4 digits
/// (`^s\d(-s\d)??(:c\d{1,4}(\.c\d{1,4})?(,c\d{1,4}(\.c\d{1,4})?)*)?$`).
fn is_selinux_level(level: &str) -> bool {
    let sensitivity = |s: &str| {
        s.strip_prefix('s')
            .is_some_and(|d| d.len() == 1 && d.bytes().all(|b| b.is_ascii_digit()))
    };
    let category = |c: &str| {
        c.strip_prefix('c')
            .is_some_and(|d| (1..=4).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()))
    };
    let (range, categories) = match level.split_once(':') {
        Some((range, categories)) => (range, Some(categories)),
        None => (level, None),
    };
    let range_ok = match range.split_once('-') {
        Some((low, high)) => sensitivity(low) && sensitivity(high),
        None => sensitivity(range),
    };
    let categories_ok = categories.is_none_or(|list| {
        list.split(',').all(|item| match item.split_once('.') {
            Some((from, to)) => category(from) && category(to),
            None => category(item),
        })
    });
    range_ok && categories_ok
}

/// A `Localhost` profile that is not there, said with the field that names it.
pub fn missing_profile(effective: &Effective) -> Option<String> {
    let RuntimeProfile::Localhost(path) = &effective.security.seccomp else {
        return None;
    };
    if effective.security.privileged || path.is_file() {
        return None;
    }
    let field = effective
        .seccomp_field
        .as_deref()
        .unwrap_or("seccompProfile");
    Some(format!(
        "{field}.localhostProfile: cannot load seccomp profile {:?}: no such file",
        path.display().to_string()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::pod;

    fn effective_of(pod: &Pod, node: &NodeSecurity) -> Effective {
        let spec = pod.spec.as_ref().unwrap();
        effective(
            pod,
            spec.containers[0].security_context.as_ref(),
            "spec.containers[0]",
            node,
        )
    }

    const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  securityContext:
    runAsUser: 1000
    runAsNonRoot: true
    supplementalGroups: [4000]
    seccompProfile: {type: Localhost, localhostProfile: profiles/audit.json}
  containers:
  - name: app
    image: busybox
    securityContext:
      runAsUser: 2000
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}
      procMount: Unmasked
"#;

    #[test]
    fn selinux_levels_are_checked_as_containerd_checks_them() {
        for good in [
            "s0",
            "s0-s1",
            "s0:c1",
            "s0:c0.c1023",
            "s0-s9:c1,c2.c3,c1234",
        ] {
            assert!(is_selinux_level(good), "{good}");
        }
        for bad in [
            "",
            "s",
            "s10",
            "s0:",
            "s0:c12345",
            "s0:c1,",
            "S0",
            "s0-s1-s2",
            "s0:c1.c2.c3",
            "x",
        ] {
            assert!(!is_selinux_level(bad), "{bad}");
        }
        let with = |pod_level: &str, container: &str| {
            bad_selinux_level(
                &pod(&format!(
                    "{{apiVersion: v1, kind: Pod, metadata: {{name: p}}, spec: {{securityContext: {{seLinuxOptions: {pod_level}}}, containers: [{{name: c, image: busybox, securityContext: {{seLinuxOptions: {container}}}}}]}}}}"
                )),
                "c",
            )
        };
        assert_eq!(
            with("{level: 's0:c1'}", "{user: u}"),
            None,
            "the container's options win whole"
        );
        assert_eq!(
            with("{type: t}", "{level: 'high'}").as_deref(),
            Some(
                "failed to generate container spec: the format of 'level' \"high\" is not correct"
            )
        );
        assert!(
            with("{level: 'high'}", "null").is_some(),
            "the pod's when the container has none"
        );
    }

    #[test]
    fn the_container_wins_over_the_pod_and_groups_come_from_the_pod() {
        let node = NodeSecurity::new(Path::new("/r"));
        let e = effective_of(&pod(POD), &node);
        assert_eq!(e.run_as_user, Some(2000));
        assert!(e.run_as_non_root);
        assert_eq!(e.security.supplemental_groups, [4000]);
        assert!(!e.security.strict_supplemental_groups, "Merge by default");
        let strict = POD.replace(
            "supplementalGroups: [4000]",
            "supplementalGroups: [4000]\n    supplementalGroupsPolicy: Strict",
        );
        assert!(
            effective_of(&pod(&strict), &node)
                .security
                .strict_supplemental_groups
        );
        assert!(e.security.no_new_privs);
        assert_eq!(e.security.drop_capabilities, ["ALL"]);
        assert_eq!(e.security.masked_paths, Some(Vec::new()));
        assert_eq!(
            e.security.seccomp,
            RuntimeProfile::Localhost("/r/seccomp/profiles/audit.json".into())
        );
        assert_eq!(
            e.seccomp_field.as_deref(),
            Some("spec.securityContext.seccompProfile")
        );
        assert!(missing_profile(&e).unwrap().starts_with(
            "spec.securityContext.seccompProfile.localhostProfile: cannot load seccomp profile \"/r/seccomp/profiles/audit.json\""
        ));
    }

    #[test]
    fn without_a_profile_the_node_default_decides() {
        let plain = pod("{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c, image: busybox}]}}");
        let mut node = NodeSecurity::new(Path::new("/r"));
        assert_eq!(
            effective_of(&plain, &node).security.seccomp,
            RuntimeProfile::RuntimeDefault
        );
        node.seccomp_default = false;
        let e = effective_of(&plain, &node);
        assert_eq!(e.security.seccomp, RuntimeProfile::Unconfined);
        assert_eq!(e.security.masked_paths, None, "the runtime's defaults");
        assert!(!e.security.no_new_privs, "allowPrivilegeEscalation unset");
    }

    #[test]
    fn the_sandbox_gets_the_pod_level_context_and_privileged_from_any_container() {
        let node = NodeSecurity::new(Path::new("/r"));
        let sandbox = for_sandbox(&pod(POD), &node);
        assert_eq!(
            sandbox.seccomp,
            RuntimeProfile::Localhost("/r/seccomp/profiles/audit.json".into()),
            "the pod's profile, not the container's"
        );
        assert_eq!(
            sandbox.run_as_user,
            Some(1000),
            "the pod's, not the container's"
        );
        assert_eq!(sandbox.run_as_group, None);
        assert_eq!(sandbox.supplemental_groups, vec![4000]);
        assert!(!sandbox.privileged);
        let privileged = pod("{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {securityContext: {supplementalGroups: [5, 6]}, initContainers: [{name: i, image: busybox, securityContext: {privileged: true}}], containers: [{name: c, image: busybox}]}}");
        let sandbox = for_sandbox(&privileged, &node);
        assert!(sandbox.privileged, "an init container is privileged");
        assert_eq!(sandbox.supplemental_groups, vec![5, 6]);
        assert_eq!(
            sandbox.seccomp,
            RuntimeProfile::RuntimeDefault,
            "the node's default"
        );
    }

    #[test]
    fn run_as_non_root_reads_like_kubelet() {
        let mut p = pod(POD);
        let node = NodeSecurity::new(Path::new("/r"));
        let mut e = effective_of(&p, &node);
        assert_eq!(
            verify_run_as_non_root(&p, "app", &e, ""),
            None,
            "runAsUser 2000"
        );
        e.run_as_user = None;
        p.metadata.namespace = Some("default".into());
        assert_eq!(
            verify_run_as_non_root(&p, "app", &e, "").unwrap(),
            "container has runAsNonRoot and image will run as root (pod: \"web_default(u-1)\", container: app)"
        );
        assert_eq!(verify_run_as_non_root(&p, "app", &e, "1000:1000"), None);
        assert!(verify_run_as_non_root(&p, "app", &e, "www")
            .unwrap()
            .contains("non-numeric user (www)"));
        e.run_as_user = Some(0);
        assert!(verify_run_as_non_root(&p, "app", &e, "1000")
            .unwrap()
            .starts_with("container's runAsUser breaks non-root policy"));
    }
}
