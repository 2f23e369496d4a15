//! CRI messages to podlab-runtime's configs and back: every field is either carried over,
//! refused with `InvalidArgument` naming it, or (for what only SELinux/AppArmor hosts or the pause
//! container's own image would use) documented in docs/cri.md as ignored, as containerd ignores it
//! on hosts without those.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use podlab_runtime::config::{ContainerResources, LinuxSandboxConfig, Propagation};
use podlab_runtime::seccomp::SeccompProfile;
use podlab_runtime::{
    ContainerConfig, ContainerMetadata, ContainerState, DnsConfig, EnvVar, Mount, NetworkMode,
    PodSandboxConfig, PodSandboxMetadata, PortMapping, SandboxState,
};
use tonic::Status;

use crate::proto;
use crate::status::{invalid, unsupported};

pub fn btree(map: &HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

pub fn hash(map: &BTreeMap<String, String>) -> HashMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// containerd's sandbox name (`makeSandboxName`): what makes two sandboxes the same pod attempt.
pub fn sandbox_name(metadata: &PodSandboxMetadata) -> String {
    format!(
        "{}_{}_{}_{}",
        metadata.name, metadata.namespace, metadata.uid, metadata.attempt
    )
}

/// containerd's container name (`makeContainerName`).
pub fn container_name(container: &ContainerMetadata, sandbox: &PodSandboxMetadata) -> String {
    format!(
        "{}_{}_{}_{}_{}",
        container.name, sandbox.name, sandbox.namespace, sandbox.uid, container.attempt
    )
}

fn mode(value: i32) -> proto::NamespaceMode {
    proto::NamespaceMode::try_from(value).unwrap_or(proto::NamespaceMode::Pod)
}

/// RunPodSandboxRequest.config → the runtime's sandbox config.
pub fn sandbox_config(
    config: Option<&proto::PodSandboxConfig>,
) -> Result<PodSandboxConfig, Status> {
    let config = config.ok_or_else(|| invalid("config", "a pod sandbox config is required"))?;
    let metadata = config
        .metadata
        .as_ref()
        .ok_or_else(|| invalid("config.metadata", "sandbox config must include metadata"))?;
    if metadata.name.is_empty() {
        return Err(invalid(
            "config.metadata.name",
            "a pod sandbox needs a name",
        ));
    }
    let mut out = PodSandboxConfig {
        metadata: PodSandboxMetadata {
            name: metadata.name.clone(),
            namespace: metadata.namespace.clone(),
            uid: metadata.uid.clone(),
            attempt: metadata.attempt,
        },
        hostname: config.hostname.clone(),
        labels: btree(&config.labels),
        annotations: btree(&config.annotations),
        log_directory: (!config.log_directory.is_empty())
            .then(|| PathBuf::from(&config.log_directory)),
        dns: config.dns_config.as_ref().map(|dns| DnsConfig {
            servers: dns.servers.clone(),
            searches: dns.searches.clone(),
            options: dns.options.clone(),
        }),
        // A config without namespace options means POD for each (proto3's zero value), as
        // containerd reads it: the containers share the pod's pid namespace, pause its PID 1.
        share_process_namespace: true,
        ..PodSandboxConfig::default()
    };
    // Without a parent (critest's cgroupfs pods) the pod still gets a cgroup, as under
    // containerd, so that its containers' limits hold: one folder per sandbox name.
    out.linux.cgroup_parent = default_cgroup_parent(&out.metadata);
    out.port_mappings = port_mappings(&config.port_mappings)?;
    if let Some(linux) = &config.linux {
        let parent = linux.cgroup_parent.trim_matches('/');
        out.linux = LinuxSandboxConfig {
            cgroup_parent: if parent.is_empty() {
                out.linux.cgroup_parent.clone()
            } else {
                parent.to_string()
            },
            resources: linux
                .resources
                .as_ref()
                .map(|r| cgroup_resources("config.linux.resources", r))
                .transpose()?
                .map(|r| r.cgroup)
                .unwrap_or_default(),
            // Written in the sandbox's own net and ipc namespaces; one the runtime cannot set
            // there (a global one) fails RunPodSandbox, as runc refuses it.
            sysctls: btree(&linux.sysctls),
            security: Default::default(),
        };
        if let Some(security) = &linux.security_context {
            out.linux.security = sandbox_security(security)?;
            if let Some(ns) = &security.namespace_options {
                let field = "config.linux.security_context.namespace_options";
                match mode(ns.network) {
                    proto::NamespaceMode::Node => out.host_network = true,
                    proto::NamespaceMode::Pod => {}
                    other => {
                        return Err(invalid(
                            &format!("{field}.network"),
                            format!("{} is not a pod's network mode", other.as_str_name()),
                        ))
                    }
                }
                match mode(ns.pid) {
                    proto::NamespaceMode::Pod => out.share_process_namespace = true,
                    proto::NamespaceMode::Container => out.share_process_namespace = false,
                    proto::NamespaceMode::Node => {
                        out.share_process_namespace = false;
                        out.host_pid = true;
                    }
                    proto::NamespaceMode::Target => {
                        return Err(invalid(
                            &format!("{field}.pid"),
                            "TARGET is for containers, not pod sandboxes",
                        ))
                    }
                }
                match mode(ns.ipc) {
                    proto::NamespaceMode::Pod => {}
                    proto::NamespaceMode::Node => out.host_ipc = true,
                    other => {
                        return Err(invalid(
                            &format!("{field}.ipc"),
                            format!("{} is not a pod's ipc mode", other.as_str_name()),
                        ))
                    }
                }
                if let Some(user) = &ns.userns_options {
                    out.linux.security.user_namespace =
                        user_namespace(&format!("{field}.userns_options"), user)?;
                }
            }
        }
    }
    Ok(out)
}

/// A pod's `userns_options`: mode POD with its maps, or NODE (the node's, as without any);
/// containerd's checks (one mapping each, the pod's root in it) come with the runtime's
/// [`podlab_runtime::config::UserNamespace::check`].
pub(crate) fn user_namespace(
    field: &str,
    user: &proto::UserNamespace,
) -> Result<Option<podlab_runtime::config::UserNamespace>, Status> {
    match mode(user.mode) {
        proto::NamespaceMode::Node => return Ok(None),
        proto::NamespaceMode::Pod => {}
        other => {
            return Err(invalid(
                &format!("{field}.mode"),
                format!(
                    "{} is not a mode of a pod's user namespace (POD or NODE)",
                    other.as_str_name()
                ),
            ))
        }
    }
    let maps = |mappings: &[proto::IdMapping]| {
        mappings
            .iter()
            .map(|m| podlab_ns::user::IdMapping {
                inside: m.container_id,
                outside: m.host_id,
                count: m.length,
            })
            .collect()
    };
    let namespace = podlab_runtime::config::UserNamespace {
        uids: maps(&user.uids),
        gids: maps(&user.gids),
    };
    namespace
        .check()
        .map_err(|message| invalid(field, message))?;
    Ok(Some(namespace))
}

/// The mappings with a host port, as CNI's `portMappings` (containerd's `toCNIPortMappings`:
/// one without a host port publishes nothing and is left out; the protocol in lower case).
fn port_mappings(mappings: &[proto::PortMapping]) -> Result<Vec<PortMapping>, Status> {
    let mut out = Vec::new();
    for (i, port) in mappings.iter().enumerate() {
        if port.host_port == 0 {
            continue;
        }
        let field = |name: &str| format!("config.port_mappings[{i}].{name}");
        let number = |name: &str, value: i32| {
            u16::try_from(value)
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| invalid(&field(name), format!("{value} is not a port (1-65535)")))
        };
        let protocol = proto::Protocol::try_from(port.protocol).map_err(|_| {
            invalid(
                &field("protocol"),
                format!("{} is not a protocol", port.protocol),
            )
        })?;
        if !port.host_ip.is_empty() && port.host_ip.parse::<std::net::IpAddr>().is_err() {
            return Err(invalid(
                &field("host_ip"),
                format!("{:?} is not an IP address", port.host_ip),
            ));
        }
        out.push(PortMapping {
            protocol: protocol.as_str_name().to_ascii_lowercase(),
            container_port: number("container_port", port.container_port)?,
            host_port: number("host_port", port.host_port)?,
            host_ip: port.host_ip.clone(),
        });
    }
    Ok(out)
}

/// The pause process's security context: the pod-level seccomp profile, user, groups and
/// whether any container is privileged (kubelet's `HasPrivilegedContainer`).
fn sandbox_security(
    security: &proto::LinuxSandboxSecurityContext,
) -> Result<podlab_runtime::config::SandboxSecurity, Status> {
    let field = "config.linux.security_context";
    #[allow(deprecated)]
    let legacy_seccomp = security.seccomp_profile_path.as_str();
    let id = |name: &str, value: Option<&proto::Int64Value>| {
        value
            .map(|v| id32(&format!("{field}.{name}"), v.value))
            .transpose()
    };
    let mut groups = Vec::new();
    for (i, gid) in security.supplemental_groups.iter().enumerate() {
        groups.push(id32(&format!("{field}.supplemental_groups[{i}]"), *gid)?);
    }
    Ok(podlab_runtime::config::SandboxSecurity {
        seccomp: seccomp(
            &format!("{field}.seccomp"),
            security.seccomp.as_ref(),
            legacy_seccomp,
        )?,
        run_as_user: id("run_as_user", security.run_as_user.as_ref())?,
        run_as_group: id("run_as_group", security.run_as_group.as_ref())?,
        supplemental_groups: groups,
        privileged: security.privileged,
        user_namespace: None,
    })
}

/// The pod cgroup of a sandbox whose config names none: `podlab-cri/<sandbox name>`, with
/// anything but `[A-Za-z0-9._-]` made `_`.
pub fn default_cgroup_parent(metadata: &PodSandboxMetadata) -> String {
    let name: String = sandbox_name(metadata)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("podlab-cri/{name}")
}

/// What a container config needs from its surroundings while it is translated.
pub struct ContainerContext<'a> {
    /// The sandbox's config (its pid namespace decides what POD means).
    pub sandbox: &'a PodSandboxConfig,
    /// The image's store name, already resolved from the request's reference.
    pub image_name: String,
    /// The image's `/etc/passwd`, for run_as_username.
    pub passwd: Option<String>,
}

/// CreateContainerRequest.config → the runtime's container config (without a target container,
/// which the caller resolves: see [`pid_target`]).
pub fn container_config(
    config: &proto::ContainerConfig,
    context: &ContainerContext<'_>,
) -> Result<ContainerConfig, Status> {
    let metadata = config
        .metadata
        .as_ref()
        .ok_or_else(|| invalid("config.metadata", "container config must include metadata"))?;
    if metadata.name.is_empty() {
        return Err(invalid("config.metadata.name", "a container needs a name"));
    }
    if !config.devices.is_empty() {
        return Err(unsupported("config.devices", "a device"));
    }
    if !config.cdi_devices.is_empty() {
        return Err(unsupported("config.cdi_devices", "a CDI device"));
    }
    let mut out = ContainerConfig {
        metadata: ContainerMetadata {
            name: metadata.name.clone(),
            attempt: metadata.attempt,
        },
        image: context.image_name.clone(),
        command: config.command.clone(),
        args: config.args.clone(),
        env: config
            .envs
            .iter()
            .map(|kv| EnvVar::new(&kv.key, &kv.value))
            .collect(),
        working_dir: (!config.working_dir.is_empty()).then(|| config.working_dir.clone()),
        labels: btree(&config.labels),
        annotations: btree(&config.annotations),
        log_path: (!config.log_path.is_empty()).then(|| PathBuf::from(&config.log_path)),
        // Held by the shim for Attach: a console with `tty`, a stdin pipe with `stdin`.
        stdin: config.stdin,
        stdin_once: config.stdin_once,
        tty: config.tty,
        ..ContainerConfig::default()
    };
    for (i, mount) in config.mounts.iter().enumerate() {
        out.mounts
            .push(container_mount(&format!("config.mounts[{i}]"), mount)?);
    }
    let Some(linux) = &config.linux else {
        return Ok(out);
    };
    if let Some(resources) = &linux.resources {
        out.resources = cgroup_resources("config.linux.resources", resources)?;
    }
    let Some(security) = &linux.security_context else {
        return Ok(out);
    };
    let field = "config.linux.security_context";
    let sec = &mut out.security;
    sec.privileged = security.privileged;
    if let Some(caps) = &security.capabilities {
        if !caps.add_ambient_capabilities.is_empty() {
            return Err(unsupported(
                &format!("{field}.capabilities.add_ambient_capabilities"),
                "an ambient capability",
            ));
        }
        sec.add_capabilities = caps.add_capabilities.clone();
        sec.drop_capabilities = caps.drop_capabilities.clone();
    }
    sec.no_new_privs = security.no_new_privs;
    // An empty list is the runtime's defaults, as in containerd (proto3 has no nil list).
    sec.masked_paths = (!security.masked_paths.is_empty()).then(|| security.masked_paths.clone());
    sec.readonly_paths =
        (!security.readonly_paths.is_empty()).then(|| security.readonly_paths.clone());
    for (i, gid) in security.supplemental_groups.iter().enumerate() {
        sec.supplemental_groups
            .push(id32(&format!("{field}.supplemental_groups[{i}]"), *gid)?);
    }
    // containerd: the image's /etc/group memberships are added only under Merge.
    sec.strict_supplemental_groups =
        match proto::SupplementalGroupsPolicy::try_from(security.supplemental_groups_policy) {
            Ok(proto::SupplementalGroupsPolicy::Merge) => false,
            Ok(proto::SupplementalGroupsPolicy::Strict) => true,
            Err(_) => {
                return Err(invalid(
                    &format!("{field}.supplemental_groups_policy"),
                    format!(
                        "unsupported supplementalGroupsPolicy: {}",
                        security.supplemental_groups_policy
                    ),
                ))
            }
        };
    #[allow(deprecated)]
    let legacy_seccomp = security.seccomp_profile_path.as_str();
    sec.seccomp = seccomp(
        &format!("{field}.seccomp"),
        security.seccomp.as_ref(),
        legacy_seccomp,
    )?;
    if let Some(apparmor) = &security.apparmor {
        if apparmor.profile_type == proto::security_profile::ProfileType::Localhost as i32 {
            return Err(unsupported(
                &format!("{field}.apparmor"),
                "an AppArmor profile (AppArmor is not enabled on this node)",
            ));
        }
    }
    out.run_as_user = security
        .run_as_user
        .as_ref()
        .map(|v| id32(&format!("{field}.run_as_user"), v.value))
        .transpose()?;
    out.run_as_group = security
        .run_as_group
        .as_ref()
        .map(|v| id32(&format!("{field}.run_as_group"), v.value))
        .transpose()?;
    if out.run_as_group.is_some()
        && out.run_as_user.is_none()
        && security.run_as_username.is_empty()
    {
        // containerd: "user group is specified without user".
        return Err(invalid(
            &format!("{field}.run_as_group"),
            "a group is specified without run_as_user or run_as_username",
        ));
    }
    if out.run_as_user.is_none() && !security.run_as_username.is_empty() {
        let name = &security.run_as_username;
        let uid = context
            .passwd
            .as_deref()
            .and_then(|passwd| uid_of(passwd, name))
            .ok_or_else(|| {
                invalid(
                    &format!("{field}.run_as_username"),
                    format!("unable to find user {name}: no matching entries in passwd file"),
                )
            })?;
        out.run_as_user = Some(uid);
    }
    out.readonly_rootfs = security.readonly_rootfs;
    let userns_options = security
        .namespace_options
        .as_ref()
        .and_then(|ns| ns.userns_options.as_ref());
    same_user_namespace(
        &format!("{field}.namespace_options.userns_options"),
        userns_options,
        context.sandbox.linux.security.user_namespace.as_ref(),
    )?;
    if let Some(ns) = &security.namespace_options {
        match mode(ns.pid) {
            proto::NamespaceMode::Container | proto::NamespaceMode::Target => {}
            proto::NamespaceMode::Pod if context.sandbox.share_process_namespace => {}
            proto::NamespaceMode::Pod => {
                return Err(invalid(
                    &format!("{field}.namespace_options.pid"),
                    "POD needs a pod sandbox whose pid namespace is POD",
                ))
            }
            // The node's pid namespace comes with the sandbox's (kubelet sets both from
            // hostPID); a container cannot take it alone.
            proto::NamespaceMode::Node if context.sandbox.host_pid => {}
            proto::NamespaceMode::Node => {
                return Err(invalid(
                    &format!("{field}.namespace_options.pid"),
                    "NODE needs a pod sandbox whose pid namespace is NODE (hostPID)",
                ))
            }
        }
    }
    Ok(out)
}

/// A container lives in its pod's user namespace: its `userns_options` (absent is the node's,
/// as NODE) must say what the sandbox's said, as containerd checks ("user namespace config for
/// sandbox is different from container").
fn same_user_namespace(
    field: &str,
    container: Option<&proto::UserNamespace>,
    sandbox: Option<&podlab_runtime::config::UserNamespace>,
) -> Result<(), Status> {
    let container = match container {
        Some(options) => user_namespace(field, options)?,
        None => None,
    };
    if container.as_ref() == sandbox {
        return Ok(());
    }
    let describe = |namespace: Option<&podlab_runtime::config::UserNamespace>| match namespace {
        None => "the node's (NODE)".to_string(),
        Some(n) => {
            let map = |maps: &[podlab_ns::user::IdMapping]| {
                let lines: Vec<String> = maps
                    .iter()
                    .map(|m| format!("{} {} {}", m.inside, m.outside, m.count))
                    .collect();
                lines.join(", ")
            };
            format!("POD (uid_map {}; gid_map {})", map(&n.uids), map(&n.gids))
        }
    };
    Err(invalid(
        field,
        format!(
            "user namespace config for sandbox is different from container: the pod sandbox's is {}, the container's {}",
            describe(sandbox),
            describe(container.as_ref())
        ),
    ))
}

/// The container whose pid namespace a TARGET container joins (its id as given).
pub fn pid_target(config: &proto::ContainerConfig) -> Option<&str> {
    let ns = config
        .linux
        .as_ref()?
        .security_context
        .as_ref()?
        .namespace_options
        .as_ref()?;
    (mode(ns.pid) == proto::NamespaceMode::Target).then_some(ns.target_id.as_str())
}

fn id32(field: &str, value: i64) -> Result<u32, Status> {
    u32::try_from(value).map_err(|_| invalid(field, format!("{value} is not a valid id")))
}

fn uid_of(passwd: &str, name: &str) -> Option<u32> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == name).then_some(())?;
        fields.nth(1)?.parse().ok()
    })
}

fn seccomp(
    field: &str,
    profile: Option<&proto::SecurityProfile>,
    legacy: &str,
) -> Result<SeccompProfile, Status> {
    use proto::security_profile::ProfileType;
    if let Some(profile) = profile {
        return match ProfileType::try_from(profile.profile_type) {
            Ok(ProfileType::RuntimeDefault) => Ok(SeccompProfile::RuntimeDefault),
            Ok(ProfileType::Unconfined) => Ok(SeccompProfile::Unconfined),
            Ok(ProfileType::Localhost) if profile.localhost_ref.starts_with('/') => Ok(
                SeccompProfile::Localhost(PathBuf::from(&profile.localhost_ref)),
            ),
            Ok(ProfileType::Localhost) => Err(invalid(
                &format!("{field}.localhost_ref"),
                format!("{:?} is not an absolute path", profile.localhost_ref),
            )),
            Err(_) => Err(invalid(
                &format!("{field}.profile_type"),
                format!("{} is not a profile type", profile.profile_type),
            )),
        };
    }
    match legacy {
        "" | "unconfined" => Ok(SeccompProfile::Unconfined),
        "runtime/default" | "docker/default" => Ok(SeccompProfile::RuntimeDefault),
        path if path.starts_with("localhost/") => Ok(SeccompProfile::Localhost(PathBuf::from(
            &path["localhost".len()..],
        ))),
        other => Err(invalid(
            "config.linux.security_context.seccomp_profile_path",
            format!("{other:?} is not a seccomp profile"),
        )),
    }
}

/// An image volume (the OCI volume source): the image is looked up, and the sub path
/// checked in it, when the container is created; a read-write one fails there too.
fn image_volume(
    field: &str,
    mount: &proto::Mount,
    image: &proto::ImageSpec,
) -> Result<Mount, Status> {
    if mount.container_path.is_empty() {
        return Err(invalid(
            &format!("{field}.container_path"),
            "must not be empty",
        ));
    }
    if !mount.host_path.is_empty() {
        return Err(invalid(
            &format!("{field}.host_path"),
            "must be empty when image is set (an image volume has no host path)",
        ));
    }
    if image.image.is_empty() {
        return Err(invalid(
            &format!("{field}.image.image"),
            "must not be empty",
        ));
    }
    if mount.propagation != proto::MountPropagation::PropagationPrivate as i32 {
        return Err(invalid(
            &format!("{field}.propagation"),
            "an image volume is private: nothing is mounted below it from either side",
        ));
    }
    Ok(Mount {
        container_path: PathBuf::from(&mount.container_path),
        readonly: mount.readonly,
        image: Some(podlab_runtime::ImageVolume {
            image: image.image.clone(),
            sub_path: mount.image_sub_path.clone(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn container_mount(field: &str, mount: &proto::Mount) -> Result<Mount, Status> {
    if let Some(image) = &mount.image {
        return image_volume(field, mount, image);
    }
    if mount.container_path.is_empty() {
        return Err(invalid(
            &format!("{field}.container_path"),
            "must not be empty",
        ));
    }
    if mount.host_path.is_empty() {
        return Err(invalid(&format!("{field}.host_path"), "must not be empty"));
    }
    // containerd: PRIVATE is `rprivate`, HOST_TO_CONTAINER `rslave`, BIDIRECTIONAL `rshared`
    // (the host path's mount is checked when the container is created).
    let propagation = match proto::MountPropagation::try_from(mount.propagation) {
        Ok(proto::MountPropagation::PropagationPrivate) => Propagation::Private,
        Ok(proto::MountPropagation::PropagationHostToContainer) => Propagation::Slave,
        Ok(proto::MountPropagation::PropagationBidirectional) => Propagation::Shared,
        Err(_) => {
            return Err(invalid(
                &format!("{field}.propagation"),
                format!("{} is not a mount propagation", mount.propagation),
            ))
        }
    };
    // containerd's checks and words.
    if mount.recursive_read_only && !mount.readonly {
        return Err(invalid(
            &format!("{field}.recursive_read_only"),
            format!(
                "recursive read-only mount conflicts with RW mount (hostPath={:?})",
                mount.host_path
            ),
        ));
    }
    if mount.recursive_read_only && propagation != Propagation::Private {
        return Err(invalid(
            &format!("{field}.recursive_read_only"),
            format!(
                "recursive read-only mount needs private propagation, got {:?} (hostPath={:?})",
                proto::MountPropagation::try_from(mount.propagation)
                    .map(|p| p.as_str_name())
                    .unwrap_or_default(),
                mount.host_path
            ),
        ));
    }
    if !mount.uid_mappings.is_empty() || !mount.gid_mappings.is_empty() {
        return Err(unsupported(
            &format!("{field}.uid_mappings"),
            "an id-mapped mount",
        ));
    }
    // containerd makes a missing host path as a folder.
    let host = PathBuf::from(&mount.host_path);
    if !host.exists() {
        std::fs::create_dir_all(&host)
            .map_err(|e| Status::unknown(format!("failed to mkdir {:?}: {e}", mount.host_path)))?;
    }
    Ok(Mount {
        host_path: host,
        container_path: PathBuf::from(&mount.container_path),
        readonly: mount.readonly,
        propagation,
        recursive_readonly: mount.recursive_read_only,
        image: None,
    })
}

/// An image volume as the CRI's `Mount` carries it: the image as named, the id it resolved to
/// (`image_ref`, once CreateContainer has resolved it), and the sub path. Empty for others.
pub fn image_volume_out(mount: &Mount) -> (Option<proto::ImageSpec>, String) {
    match &mount.image {
        Some(volume) => (
            Some(proto::ImageSpec {
                image: volume.image.clone(),
                image_ref: volume.image_id.clone(),
                ..Default::default()
            }),
            volume.sub_path.clone(),
        ),
        None => (None, String::new()),
    }
}

/// A volume's propagation as ContainerStatus reports it.
pub fn propagation_out(propagation: Propagation) -> i32 {
    (match propagation {
        Propagation::Private => proto::MountPropagation::PropagationPrivate,
        Propagation::Slave => proto::MountPropagation::PropagationHostToContainer,
        Propagation::Shared => proto::MountPropagation::PropagationBidirectional,
    }) as i32
}

/// LinuxContainerResources → a cgroup's values and `oom_score_adj`.
pub fn cgroup_resources(
    field: &str,
    resources: &proto::LinuxContainerResources,
) -> Result<ContainerResources, Status> {
    if !resources.cpuset_cpus.is_empty() || !resources.cpuset_mems.is_empty() {
        return Err(unsupported(&format!("{field}.cpuset_cpus"), "a cpuset"));
    }
    if !resources.unified.is_empty() {
        return Err(unsupported(
            &format!("{field}.unified"),
            "a cgroup v2 value",
        ));
    }
    if resources.memory_swap_limit_in_bytes != 0
        && resources.memory_swap_limit_in_bytes != resources.memory_limit_in_bytes
    {
        return Err(unsupported(
            &format!("{field}.memory_swap_limit_in_bytes"),
            "a swap limit",
        ));
    }
    let non_negative = |name: &str, value: i64| {
        u64::try_from(value)
            .map_err(|_| invalid(&format!("{field}.{name}"), "must not be negative"))
    };
    Ok(ContainerResources {
        cgroup: podlab_cgroups::Resources {
            cpu_shares: non_negative("cpu_shares", resources.cpu_shares)?,
            cpu_quota: resources.cpu_quota,
            cpu_period: non_negative("cpu_period", resources.cpu_period)?,
            memory_limit_in_bytes: resources.memory_limit_in_bytes,
            pids_limit: 0,
            hugepage_limits: resources
                .hugepage_limits
                .iter()
                .map(|l| podlab_cgroups::hugetlb::HugepageLimit {
                    page_size: l.page_size.clone(),
                    limit: l.limit,
                })
                .collect(),
        },
        oom_score_adj: (resources.oom_score_adj != 0)
            .then(|| i32::try_from(resources.oom_score_adj))
            .transpose()
            .map_err(|_| invalid(&format!("{field}.oom_score_adj"), "out of range"))?,
    })
}

pub fn resources_out(resources: &ContainerResources) -> proto::LinuxContainerResources {
    proto::LinuxContainerResources {
        cpu_period: resources.cgroup.cpu_period as i64,
        cpu_quota: resources.cgroup.cpu_quota,
        cpu_shares: resources.cgroup.cpu_shares as i64,
        memory_limit_in_bytes: resources.cgroup.memory_limit_in_bytes,
        oom_score_adj: resources.oom_score_adj.unwrap_or(0) as i64,
        hugepage_limits: resources
            .cgroup
            .hugepage_limits
            .iter()
            .map(|l| proto::HugepageLimit {
                page_size: l.page_size.clone(),
                limit: l.limit,
            })
            .collect(),
        ..Default::default()
    }
}

pub fn sandbox_metadata(m: &PodSandboxMetadata) -> proto::PodSandboxMetadata {
    proto::PodSandboxMetadata {
        name: m.name.clone(),
        uid: m.uid.clone(),
        namespace: m.namespace.clone(),
        attempt: m.attempt,
    }
}

pub fn container_metadata(m: &ContainerMetadata) -> proto::ContainerMetadata {
    proto::ContainerMetadata {
        name: m.name.clone(),
        attempt: m.attempt,
    }
}

pub fn sandbox_state(state: SandboxState) -> i32 {
    match state {
        SandboxState::Ready => proto::PodSandboxState::SandboxReady as i32,
        SandboxState::NotReady => proto::PodSandboxState::SandboxNotready as i32,
    }
}

pub fn sandbox_state_in(value: i32) -> SandboxState {
    if value == proto::PodSandboxState::SandboxReady as i32 {
        SandboxState::Ready
    } else {
        SandboxState::NotReady
    }
}

pub fn container_state(state: ContainerState) -> i32 {
    (match state {
        ContainerState::Created => proto::ContainerState::ContainerCreated,
        ContainerState::Running => proto::ContainerState::ContainerRunning,
        ContainerState::Exited => proto::ContainerState::ContainerExited,
        ContainerState::Unknown => proto::ContainerState::ContainerUnknown,
    }) as i32
}

pub fn container_state_in(value: i32) -> ContainerState {
    match proto::ContainerState::try_from(value) {
        Ok(proto::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(proto::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(proto::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

/// The sandbox's namespace options as PodSandboxStatus reports them.
pub fn namespace_options(
    config: &PodSandboxConfig,
    network: NetworkMode,
) -> proto::NamespaceOption {
    proto::NamespaceOption {
        network: match network {
            NetworkMode::Node => proto::NamespaceMode::Node,
            NetworkMode::Pod => proto::NamespaceMode::Pod,
        } as i32,
        pid: if config.host_pid {
            proto::NamespaceMode::Node
        } else if config.share_process_namespace {
            proto::NamespaceMode::Pod
        } else {
            proto::NamespaceMode::Container
        } as i32,
        ipc: if config.host_ipc {
            proto::NamespaceMode::Node
        } else {
            proto::NamespaceMode::Pod
        } as i32,
        userns_options: Some(user_namespace_out(
            config.linux.security.user_namespace.as_ref(),
        )),
        ..Default::default()
    }
}

/// A pod's user namespace as `userns_options`: POD with its maps, or NODE.
pub fn user_namespace_out(
    user: Option<&podlab_runtime::config::UserNamespace>,
) -> proto::UserNamespace {
    let Some(user) = user else {
        return proto::UserNamespace {
            mode: proto::NamespaceMode::Node as i32,
            ..Default::default()
        };
    };
    let maps = |map: &[podlab_ns::user::IdMapping]| {
        map.iter()
            .map(|m| proto::IdMapping {
                container_id: m.inside,
                host_id: m.outside,
                length: m.count,
            })
            .collect()
    };
    proto::UserNamespace {
        mode: proto::NamespaceMode::Pod as i32,
        uids: maps(&user.uids),
        gids: maps(&user.gids),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> proto::PodSandboxConfig {
        proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: name.into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: "h".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_sandbox_without_metadata_is_refused_naming_the_field() {
        let err = sandbox_config(Some(&proto::PodSandboxConfig::default())).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.message().starts_with("config.metadata:"),
            "{}",
            err.message()
        );
        let err = sandbox_config(Some(&pod(""))).unwrap_err();
        assert!(
            err.message().starts_with("config.metadata.name:"),
            "{}",
            err.message()
        );
    }

    /// A container named `c` with these namespace options.
    fn container_in(namespaces: proto::NamespaceOption) -> proto::ContainerConfig {
        proto::ContainerConfig {
            metadata: Some(proto::ContainerMetadata {
                name: "c".into(),
                attempt: 0,
            }),
            linux: Some(proto::LinuxContainerConfig {
                security_context: Some(proto::LinuxContainerSecurityContext {
                    namespace_options: Some(namespaces),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn context(sandbox: &PodSandboxConfig) -> ContainerContext<'_> {
        ContainerContext {
            sandbox,
            image_name: "busybox".into(),
            passwd: None,
        }
    }

    #[test]
    fn node_pid_and_ipc_modes_are_the_hosts_and_reported_back() {
        let mut config = pod("p");
        config.linux = Some(proto::LinuxPodSandboxConfig {
            security_context: Some(proto::LinuxSandboxSecurityContext {
                namespace_options: Some(proto::NamespaceOption {
                    pid: proto::NamespaceMode::Node as i32,
                    ipc: proto::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let out = sandbox_config(Some(&config)).unwrap();
        assert!(out.host_pid && out.host_ipc && !out.share_process_namespace);
        let reported = namespace_options(&out, NetworkMode::Pod);
        assert_eq!(reported.pid, proto::NamespaceMode::Node as i32);
        assert_eq!(reported.ipc, proto::NamespaceMode::Node as i32);
        // A container may take the node's pid namespace only with its sandbox.
        let container = container_in(proto::NamespaceOption {
            pid: proto::NamespaceMode::Node as i32,
            ..Default::default()
        });
        assert!(container_config(&container, &context(&out)).is_ok());
        let err = container_config(&container, &context(&PodSandboxConfig::default())).unwrap_err();
        assert!(err
            .message()
            .starts_with("config.linux.security_context.namespace_options.pid: NODE needs"));
    }

    #[test]
    fn port_mappings_become_cnis_as_containerd_makes_them() {
        let mut config = pod("p");
        config.port_mappings = vec![
            proto::PortMapping {
                container_port: 80,
                host_port: 8080,
                ..Default::default()
            },
            // No host port: nothing to publish.
            proto::PortMapping {
                container_port: 81,
                ..Default::default()
            },
            proto::PortMapping {
                protocol: proto::Protocol::Udp as i32,
                container_port: 53,
                host_port: 5353,
                host_ip: "127.0.0.1".into(),
            },
        ];
        let out = sandbox_config(Some(&config)).unwrap();
        assert_eq!(
            out.port_mappings,
            [
                PortMapping {
                    protocol: "tcp".into(),
                    container_port: 80,
                    host_port: 8080,
                    host_ip: String::new(),
                },
                PortMapping {
                    protocol: "udp".into(),
                    container_port: 53,
                    host_port: 5353,
                    host_ip: "127.0.0.1".into(),
                },
            ]
        );
        config.port_mappings[0].container_port = 0;
        let err = sandbox_config(Some(&config)).unwrap_err();
        assert_eq!(
            err.message(),
            "config.port_mappings[0].container_port: 0 is not a port (1-65535)"
        );
        config.port_mappings[0].container_port = 80;
        config.port_mappings[0].host_port = 70000;
        let err = sandbox_config(Some(&config)).unwrap_err();
        assert!(err
            .message()
            .starts_with("config.port_mappings[0].host_port:"));
    }

    #[test]
    fn no_namespace_options_mean_pod_as_in_containerd() {
        assert!(
            sandbox_config(Some(&pod("p")))
                .unwrap()
                .share_process_namespace
        );
        let mut config = pod("p");
        config.linux = Some(proto::LinuxPodSandboxConfig {
            security_context: Some(proto::LinuxSandboxSecurityContext {
                namespace_options: Some(proto::NamespaceOption {
                    pid: proto::NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(
            !sandbox_config(Some(&config))
                .unwrap()
                .share_process_namespace
        );
    }

    #[test]
    fn namespace_options_carry_over() {
        let mut config = pod("p");
        config.linux = Some(proto::LinuxPodSandboxConfig {
            security_context: Some(proto::LinuxSandboxSecurityContext {
                namespace_options: Some(proto::NamespaceOption {
                    network: proto::NamespaceMode::Node as i32,
                    pid: proto::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let out = sandbox_config(Some(&config)).unwrap();
        assert!(out.host_network && out.share_process_namespace);
        assert_eq!(sandbox_name(&out.metadata), "p_default_u1_0");
    }

    #[test]
    fn run_as_username_is_looked_up_in_the_images_passwd() {
        let sandbox = PodSandboxConfig::default();
        let context = ContainerContext {
            sandbox: &sandbox,
            image_name: "busybox".into(),
            passwd: Some("root:x:0:0::/root:/bin/sh\nwww-data:x:33:33::/var/www:/bin/sh\n".into()),
        };
        let mut config = proto::ContainerConfig {
            metadata: Some(proto::ContainerMetadata {
                name: "c".into(),
                attempt: 0,
            }),
            linux: Some(proto::LinuxContainerConfig {
                security_context: Some(proto::LinuxContainerSecurityContext {
                    run_as_username: "www-data".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            container_config(&config, &context).unwrap().run_as_user,
            Some(33)
        );
        config
            .linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap()
            .run_as_username = "nobody-here".into();
        let err = container_config(&config, &context).unwrap_err();
        assert!(err
            .message()
            .starts_with("config.linux.security_context.run_as_username:"));
    }

    #[test]
    fn the_strict_supplemental_groups_policy_reaches_the_runtime() {
        let sandbox = PodSandboxConfig::default();
        let context = ContainerContext {
            sandbox: &sandbox,
            image_name: "busybox".into(),
            passwd: None,
        };
        let config = |policy: i32| proto::ContainerConfig {
            metadata: Some(proto::ContainerMetadata {
                name: "c".into(),
                attempt: 0,
            }),
            linux: Some(proto::LinuxContainerConfig {
                security_context: Some(proto::LinuxContainerSecurityContext {
                    supplemental_groups: vec![1234],
                    supplemental_groups_policy: policy,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let strict = |policy| {
            container_config(&config(policy), &context)
                .map(|c| c.security.strict_supplemental_groups)
        };
        assert!(!strict(proto::SupplementalGroupsPolicy::Merge as i32).unwrap());
        assert!(strict(proto::SupplementalGroupsPolicy::Strict as i32).unwrap());
        let err = strict(7).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.message()
                .starts_with("config.linux.security_context.supplemental_groups_policy:"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn seccomp_profiles_map_as_in_containerd() {
        use proto::security_profile::ProfileType;
        let profile = |t: ProfileType, r: &str| proto::SecurityProfile {
            profile_type: t as i32,
            localhost_ref: r.into(),
        };
        assert_eq!(seccomp("f", None, "").unwrap(), SeccompProfile::Unconfined);
        assert_eq!(
            seccomp("f", Some(&profile(ProfileType::RuntimeDefault, "")), "").unwrap(),
            SeccompProfile::RuntimeDefault
        );
        assert_eq!(
            seccomp("f", Some(&profile(ProfileType::Localhost, "/p.json")), "").unwrap(),
            SeccompProfile::Localhost("/p.json".into())
        );
        assert!(seccomp("f", Some(&profile(ProfileType::Localhost, "p.json")), "").is_err());
        assert_eq!(
            seccomp("f", None, "localhost//x.json").unwrap(),
            SeccompProfile::Localhost("/x.json".into())
        );
    }

    #[test]
    fn a_containers_user_namespace_must_be_its_sandboxs() {
        let mapping = |host_id| proto::IdMapping {
            container_id: 0,
            host_id,
            length: 65536,
        };
        let pod_mode = |host_id| proto::UserNamespace {
            mode: proto::NamespaceMode::Pod as i32,
            uids: vec![mapping(host_id)],
            gids: vec![mapping(host_id)],
        };
        let node_mode = proto::UserNamespace {
            mode: proto::NamespaceMode::Node as i32,
            ..Default::default()
        };
        let sandbox = PodSandboxConfig {
            linux: LinuxSandboxConfig {
                security: podlab_runtime::config::SandboxSecurity {
                    user_namespace: user_namespace("f", &pod_mode(300000)).unwrap(),
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let container = |userns_options| {
            container_in(proto::NamespaceOption {
                pid: proto::NamespaceMode::Container as i32,
                userns_options,
                ..Default::default()
            })
        };
        let field = "config.linux.security_context.namespace_options.userns_options";
        assert!(container_config(&container(Some(pod_mode(300000))), &context(&sandbox)).is_ok());
        for other in [None, Some(node_mode.clone()), Some(pod_mode(400000))] {
            let err = container_config(&container(other.clone()), &context(&sandbox)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{other:?}");
            assert!(
                err.message().starts_with(&format!(
                    "{field}: user namespace config for sandbox is different from container"
                )),
                "{}",
                err.message()
            );
        }
        // Without one on either side, both are the node's.
        let plain = PodSandboxConfig::default();
        assert!(container_config(&container(None), &context(&plain)).is_ok());
        assert!(container_config(&container(Some(node_mode)), &context(&plain)).is_ok());
        assert!(container_config(&container(Some(pod_mode(300000))), &context(&plain)).is_err());
    }
}
