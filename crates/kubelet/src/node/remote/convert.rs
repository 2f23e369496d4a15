//! The agent's CRI-shaped configs as CRI v1 messages, filled the way kubelet's `kuberuntime`
//! fills them (`generatePodSandboxConfig`, `generateContainerConfig`, `namespacesForPod`), and
//! the runtime's answers back as the statuses the rules read.
//!
//! What podlab's in-process runtime takes that the CRI has no field for, and so does not reach
//! a remote runtime (docs/cri.md, "the node agent as a CRI client"):
//! - the pod's NIS domain name and its FQDN line in `/etc/hosts` (`subdomain`): kubelet writes
//!   that file itself and mounts it; the runtime writes its own;
//! - the pod cgroup's `pids.max` (kubelet's `podPidsLimit`), which kubelet's pod container
//!   manager writes on the node, not through the CRI;
//! - `procMount: Unmasked` on `podlab cri`, which reads an empty `masked_paths` as its defaults
//!   (containerd reads it as none, as kubelet means it).

use std::collections::BTreeMap;
use std::path::PathBuf;

use podlab_cri::convert::{resources_out, sandbox_state_in};
use podlab_cri::proto;
use podlab_runtime::config::{ContainerConfig, ContainerResources, PodSandboxConfig};
use podlab_runtime::seccomp::SeccompProfile;
use podlab_runtime::{
    ContainerFilter, ContainerId, ContainerMetadata, ContainerState, ContainerStatus, Error,
    NetworkMode, PodSandboxMetadata, Result, SandboxId, SandboxStatus,
};

use podlab_cri::convert::{btree, hash};

/// A failed call in grpc-go's words (`rpc error: code = NotFound desc = …`), which kubelet
/// shows in its events; NotFound stays not-found and DeadlineExceeded a timeout, so that the
/// agent's rules read them as they read the in-process runtime's.
pub fn rpc_error(rpc: &str, target: &str, status: &tonic::Status) -> Error {
    match status.code() {
        tonic::Code::NotFound if rpc.contains("Sandbox") => Error::SandboxNotFound {
            id: target.to_string(),
        },
        tonic::Code::NotFound if rpc.contains("Container") => Error::ContainerNotFound {
            id: target.to_string(),
        },
        tonic::Code::DeadlineExceeded => Error::Timeout {
            what: format!("{rpc} {target}"),
            seconds: 0.0,
        },
        code => Error::Invalid(format!(
            "{rpc} {target}: rpc error: code = {code:?} desc = {}",
            status.message()
        )),
    }
}

pub fn sandbox_id(id: &str) -> Result<SandboxId> {
    SandboxId::parse(id)
}

pub fn container_id(id: &str) -> Result<ContainerId> {
    ContainerId::parse(id)
}

fn mode(mode: proto::NamespaceMode) -> i32 {
    mode as i32
}

/// kubelet's `namespacesForPod`: the node's network, pid and ipc namespaces for `hostNetwork`,
/// `hostPID`, `hostIPC`; one pid namespace for the pod with `shareProcessNamespace`, else one
/// per container; the pod's user namespace with `hostUsers: false`.
fn pod_namespaces(config: &PodSandboxConfig) -> proto::NamespaceOption {
    use proto::NamespaceMode::{Container, Node, Pod};
    proto::NamespaceOption {
        network: mode(if config.host_network { Node } else { Pod }),
        pid: mode(if config.host_pid {
            Node
        } else if config.share_process_namespace {
            Pod
        } else {
            Container
        }),
        ipc: mode(if config.host_ipc { Node } else { Pod }),
        userns_options: Some(podlab_cri::convert::user_namespace_out(
            config.linux.security.user_namespace.as_ref(),
        )),
        ..Default::default()
    }
}

fn seccomp(profile: &SeccompProfile) -> proto::SecurityProfile {
    use proto::security_profile::ProfileType;
    match profile {
        SeccompProfile::Unconfined => proto::SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        },
        SeccompProfile::RuntimeDefault => proto::SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        SeccompProfile::Localhost(path) => proto::SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: path.display().to_string(),
        },
    }
}

/// kubelet's `generatePodSandboxConfig`: metadata, hostname (none with `hostNetwork`), the log
/// directory, DNS, host ports, labels and annotations, and the Linux part: the pod's cgroup
/// (absolute, as kubelet's cgroupfs driver names it), sysctls, the pod's resources and the
/// sandbox's security context with its namespaces.
pub fn sandbox_config(config: &PodSandboxConfig) -> proto::PodSandboxConfig {
    let security = &config.linux.security;
    let id = |v: Option<u32>| {
        v.map(|value| proto::Int64Value {
            value: value.into(),
        })
    };
    let parent = config.linux.cgroup_parent.trim_matches('/');
    proto::PodSandboxConfig {
        metadata: Some(podlab_cri::convert::sandbox_metadata(&config.metadata)),
        hostname: if config.host_network {
            String::new()
        } else {
            config.hostname.clone()
        },
        log_directory: config
            .log_directory
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        dns_config: config.dns.as_ref().map(|dns| proto::DnsConfig {
            servers: dns.servers.clone(),
            searches: dns.searches.clone(),
            options: dns.options.clone(),
        }),
        port_mappings: config
            .port_mappings
            .iter()
            .map(|p| proto::PortMapping {
                protocol: match p.protocol.as_str() {
                    "udp" => proto::Protocol::Udp,
                    "sctp" => proto::Protocol::Sctp,
                    _ => proto::Protocol::Tcp,
                } as i32,
                container_port: p.container_port.into(),
                host_port: p.host_port.into(),
                host_ip: p.host_ip.clone(),
            })
            .collect(),
        labels: hash(&config.labels),
        annotations: hash(&config.annotations),
        linux: Some(proto::LinuxPodSandboxConfig {
            cgroup_parent: if parent.is_empty() {
                String::new()
            } else {
                format!("/{parent}")
            },
            security_context: Some(proto::LinuxSandboxSecurityContext {
                namespace_options: Some(pod_namespaces(config)),
                run_as_user: id(security.run_as_user),
                run_as_group: id(security.run_as_group),
                supplemental_groups: security
                    .supplemental_groups
                    .iter()
                    .map(|&g| g.into())
                    .collect(),
                privileged: security.privileged,
                seccomp: Some(seccomp(&security.seccomp)),
                ..Default::default()
            }),
            sysctls: hash(&config.linux.sysctls),
            resources: (config.linux.resources != podlab_cgroups::Resources::default()).then(
                || {
                    resources_out(&ContainerResources {
                        cgroup: config.linux.resources.clone(),
                        oom_score_adj: None,
                    })
                },
            ),
            overhead: None,
        }),
        windows: None,
    }
}

/// An image by the name the pod gives (kubelet sends the resolved reference and keeps the
/// name the user gave beside it).
pub fn image_spec(image: &str) -> proto::ImageSpec {
    proto::ImageSpec {
        image: image.to_string(),
        user_specified_image: image.to_string(),
        ..Default::default()
    }
}

/// The pod's registry credentials as CRI's AuthConfig (kubelet's `toRuntimeAuthConfig`).
pub fn auth_config(credentials: &podlab_image::credentials::Credentials) -> proto::AuthConfig {
    use podlab_image::credentials::Credentials;
    match credentials {
        Credentials::Basic { username, password } => proto::AuthConfig {
            username: username.clone(),
            password: password.clone(),
            ..Default::default()
        },
        Credentials::Token(token) => proto::AuthConfig {
            registry_token: token.clone(),
            ..Default::default()
        },
    }
}

/// kubelet's `generateContainerConfig` and `generateLinuxContainerConfig`: metadata (the
/// restart count as attempt), image, command and args, env, mounts, `<name>/<restart>.log`,
/// kubelet's labels and annotations (made by [`crate::translate`]), stdin and tty, resources,
/// and the effective security context with the container's namespaces.
pub fn container_config(
    config: &ContainerConfig,
    sandbox: &PodSandboxConfig,
) -> Result<proto::ContainerConfig> {
    let sec = &config.security;
    let mut namespaces = pod_namespaces(sandbox);
    if let Some(target) = &config.target_container {
        namespaces.pid = mode(proto::NamespaceMode::Target);
        namespaces.target_id = target.to_string();
    }
    let id = |v: Option<u32>| {
        v.map(|value| proto::Int64Value {
            value: value.into(),
        })
    };
    let mut mounts = Vec::with_capacity(config.mounts.len());
    for mount in &config.mounts {
        let (image, image_sub_path) = podlab_cri::convert::image_volume_out(mount);
        mounts.push(proto::Mount {
            container_path: mount.container_path.display().to_string(),
            host_path: mount.host_path.display().to_string(),
            readonly: mount.readonly,
            propagation: podlab_cri::convert::propagation_out(mount.propagation),
            image,
            image_sub_path,
            ..Default::default()
        });
    }
    Ok(proto::ContainerConfig {
        metadata: Some(proto::ContainerMetadata {
            name: config.metadata.name.clone(),
            attempt: config.metadata.attempt,
        }),
        image: Some(image_spec(&config.image)),
        command: config.command.clone(),
        args: config.args.clone(),
        working_dir: config.working_dir.clone().unwrap_or_default(),
        envs: config
            .env
            .iter()
            .map(|e| proto::KeyValue {
                key: e.name.clone(),
                value: e.value.clone(),
            })
            .collect(),
        mounts,
        labels: hash(&config.labels),
        annotations: hash(&config.annotations),
        log_path: config
            .log_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        stdin: config.stdin,
        stdin_once: config.stdin_once,
        tty: config.tty,
        linux: Some(proto::LinuxContainerConfig {
            resources: Some(resources_out(&config.resources)),
            security_context: Some(proto::LinuxContainerSecurityContext {
                capabilities: Some(proto::Capability {
                    add_capabilities: sec.add_capabilities.clone(),
                    drop_capabilities: sec.drop_capabilities.clone(),
                    add_ambient_capabilities: Vec::new(),
                }),
                privileged: sec.privileged,
                namespace_options: Some(namespaces),
                run_as_user: id(config.run_as_user),
                run_as_group: id(config.run_as_group),
                readonly_rootfs: config.readonly_rootfs,
                supplemental_groups: sec.supplemental_groups.iter().map(|&g| g.into()).collect(),
                supplemental_groups_policy: if sec.strict_supplemental_groups {
                    proto::SupplementalGroupsPolicy::Strict
                } else {
                    proto::SupplementalGroupsPolicy::Merge
                } as i32,
                no_new_privs: sec.no_new_privs,
                // kubelet sends the default lists itself (`procMount: Default`), and an
                // empty list for `Unmasked`.
                masked_paths: sec.masked(),
                readonly_paths: sec.readonly(),
                seccomp: Some(seccomp(&sec.seccomp)),
                ..Default::default()
            }),
        }),
        ..Default::default()
    })
}

pub fn container_filter(filter: &ContainerFilter) -> proto::ContainerFilter {
    proto::ContainerFilter {
        id: filter
            .id
            .as_ref()
            .map(|i| i.to_string())
            .unwrap_or_default(),
        state: filter.state.map(|s| proto::ContainerStateValue {
            state: podlab_cri::convert::container_state(s),
        }),
        pod_sandbox_id: filter
            .sandbox_id
            .as_ref()
            .map(|i| i.to_string())
            .unwrap_or_default(),
        label_selector: hash(&filter.labels),
    }
}

/// A CRI container state as the runtime's.
pub fn container_state(value: i32) -> ContainerState {
    podlab_cri::convert::container_state_in(value)
}

fn sandbox_metadata(m: Option<&proto::PodSandboxMetadata>) -> PodSandboxMetadata {
    m.map(|m| PodSandboxMetadata {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        attempt: m.attempt,
    })
    .unwrap_or_default()
}

/// PodSandboxStatus → the runtime's status. What only podlab's own records hold (the shim's
/// and pause's pids, the pinned namespaces) is left empty.
pub fn sandbox_status(status: &proto::PodSandboxStatus) -> Result<SandboxStatus> {
    let network = status.network.as_ref();
    let node_network = status
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .is_some_and(|o| o.network == proto::NamespaceMode::Node as i32);
    Ok(SandboxStatus {
        id: sandbox_id(&status.id)?,
        metadata: sandbox_metadata(status.metadata.as_ref()),
        state: sandbox_state_in(status.state),
        created_at: status.created_at,
        network_mode: if node_network {
            NetworkMode::Node
        } else {
            NetworkMode::Pod
        },
        ip: network.map(|n| n.ip.clone()).filter(|ip| !ip.is_empty()),
        additional_ips: network
            .map(|n| n.additional_ips.iter().map(|ip| ip.ip.clone()).collect())
            .unwrap_or_default(),
        hostname: String::new(),
        pause_pid: None,
        shim_pid: None,
        namespaces: Vec::new(),
        labels: btree(&status.labels),
        annotations: btree(&status.annotations),
        log_directory: None,
        reason: None,
    })
}

/// A ListPodSandbox item: what the list carries (no network, no namespaces).
pub fn listed_sandbox(item: &proto::PodSandbox) -> Result<SandboxStatus> {
    sandbox_status(&proto::PodSandboxStatus {
        id: item.id.clone(),
        metadata: item.metadata.clone(),
        state: item.state,
        created_at: item.created_at,
        labels: item.labels.clone(),
        annotations: item.annotations.clone(),
        ..Default::default()
    })
}

/// A ListContainers item and its ContainerStatus → the runtime's status.
pub fn container_status(
    container: &proto::Container,
    status: Option<&proto::ContainerStatus>,
) -> Result<ContainerStatus> {
    let state = container_state(status.map_or(container.state, |s| s.state));
    let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let metadata = container
        .metadata
        .as_ref()
        .map(|m| ContainerMetadata {
            name: m.name.clone(),
            attempt: m.attempt,
        })
        .unwrap_or_default();
    Ok(ContainerStatus {
        id: container_id(&container.id)?,
        sandbox_id: sandbox_id(&container.pod_sandbox_id)?,
        metadata,
        state,
        created_at: container.created_at,
        started_at: status.map_or(0, |s| s.started_at),
        finished_at: status.map_or(0, |s| s.finished_at),
        exit_code: status
            .filter(|_| state == ContainerState::Exited)
            .map(|s| s.exit_code),
        reason: status.and_then(|s| text(&s.reason)),
        message: status.and_then(|s| text(&s.message)),
        image: container
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default(),
        image_id: container.image_ref.clone(),
        pid: None,
        log_path: PathBuf::from(status.map(|s| s.log_path.as_str()).unwrap_or_default()),
        namespaces: BTreeMap::new(),
        start_trace: Vec::new(),
        labels: btree(&container.labels),
        annotations: btree(&container.annotations),
        user: None,
    })
}

/// The image's USER as ImageStatus gives it: the numeric uid, or the name.
pub fn image_user(image: &proto::Image) -> String {
    match &image.uid {
        Some(uid) => uid.value.to_string(),
        None => image.username.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::pod;
    use crate::translate::{self, PodDirs};

    const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  shareProcessNamespace: true
  containers:
  - name: app
    image: busybox
    command: [sh, -c]
    args: ["echo hi"]
    env: [{name: A, value: b}]
"#;

    #[test]
    fn a_pods_sandbox_config_is_filled_as_kubelet_fills_it() {
        let pod = pod(POD);
        let dirs = PodDirs::new(std::path::Path::new("/r"), &pod);
        let message = sandbox_config(&translate::sandbox_config(&pod, &dirs, 1));
        let m = message.metadata.as_ref().unwrap();
        assert_eq!(
            (
                m.name.as_str(),
                m.namespace.as_str(),
                m.uid.as_str(),
                m.attempt
            ),
            ("web", "shop", "u-1", 1)
        );
        assert_eq!(message.hostname, "web");
        assert_eq!(message.log_directory, "/r/logs/shop_web_u-1");
        assert_eq!(message.labels["io.kubernetes.pod.uid"], "u-1");
        assert_eq!(message.labels["app"], "web");
        let linux = message.linux.as_ref().unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/besteffort/podu-1");
        let ns = linux
            .security_context
            .as_ref()
            .and_then(|s| s.namespace_options.clone())
            .unwrap();
        assert_eq!(ns.pid, proto::NamespaceMode::Pod as i32);
        assert_eq!(ns.network, proto::NamespaceMode::Pod as i32);
        assert_eq!(ns.ipc, proto::NamespaceMode::Pod as i32);
    }

    #[test]
    fn a_containers_config_carries_kubelets_labels_annotations_and_log_path() {
        let pod = pod(POD);
        let dirs = PodDirs::new(std::path::Path::new("/r"), &pod);
        let sandbox = translate::sandbox_config(&pod, &dirs, 0);
        let (_, config) = translate::container_config(&pod, &dirs, "app", 2).unwrap();
        let message = container_config(&config, &sandbox).unwrap();
        assert_eq!(message.metadata.as_ref().unwrap().attempt, 2);
        assert_eq!(message.image.as_ref().unwrap().image, "busybox");
        assert_eq!(
            (message.command.clone(), message.args.clone()),
            (
                vec!["sh".to_string(), "-c".into()],
                vec!["echo hi".to_string()]
            )
        );
        assert_eq!(message.log_path, "app/2.log");
        assert_eq!(message.labels["io.kubernetes.container.name"], "app");
        assert_eq!(message.labels["io.kubernetes.pod.namespace"], "shop");
        assert_eq!(
            message.annotations["io.kubernetes.container.restartCount"],
            "2"
        );
        assert!(message.annotations.contains_key(translate::ANNOTATION_HASH));
        assert_eq!(message.envs[0].key, "A");
        let security = message.linux.unwrap().security_context.unwrap();
        assert_eq!(
            security.namespace_options.unwrap().pid,
            proto::NamespaceMode::Pod as i32
        );
        assert!(
            !security.masked_paths.is_empty(),
            "kubelet sends the default masked paths"
        );
    }

    #[test]
    fn statuses_come_back_and_not_found_stays_not_found() {
        let id = SandboxId::generate();
        let container = proto::Container {
            id: ContainerId::generate().to_string(),
            pod_sandbox_id: id.to_string(),
            metadata: Some(proto::ContainerMetadata {
                name: "app".into(),
                attempt: 1,
            }),
            state: proto::ContainerState::ContainerExited as i32,
            ..Default::default()
        };
        let status = proto::ContainerStatus {
            exit_code: 3,
            reason: "Error".into(),
            log_path: "/r/logs/x/app/1.log".into(),
            state: proto::ContainerState::ContainerExited as i32,
            ..Default::default()
        };
        let out = container_status(&container, Some(&status)).unwrap();
        assert_eq!(
            (out.exit_code, out.reason.as_deref(), out.sandbox_id),
            (Some(3), Some("Error"), id)
        );
        let err = rpc_error("PodSandboxStatus", "abc", &tonic::Status::not_found("nope"));
        assert!(err.is_not_found());
        let err = rpc_error("StartContainer", "abc", &tonic::Status::unknown("boom"));
        assert_eq!(
            err.to_string(),
            "StartContainer abc: rpc error: code = Unknown desc = boom"
        );
    }
}
