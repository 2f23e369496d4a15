//! From a `v1.Pod` to the CRI requests that make it: what kubelet's `kuberuntime` does in
//! `generatePodSandboxConfig` and `generateContainerConfig`.
//!
//! The runtime never sees a Pod. It gets a sandbox config (metadata, hostname, namespaces to
//! share, log folder) and one container config per container (image, command and args, env with
//! `$(VAR)` references expanded, mounts of the pod's volumes, security context), labelled with
//! kubelet's `io.kubernetes.*` labels so that the runtime's records can be mapped back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};

use crate::security::NodeSecurity;
use podlab_runtime::config::{
    ContainerConfig, ContainerMetadata, EnvVar, HostsConfig, LinuxSandboxConfig, Mount,
    PodSandboxConfig, PodSandboxMetadata, PortMapping, Propagation,
};

pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// podlab's own label: which list of the spec the container comes from.
pub const LABEL_CONTAINER_KIND: &str = "podlab.io/container-kind";
/// podlab's own label on everything the node agent asks the runtime for: the agent only ever
/// stops or removes sandboxes that carry it, never one a demo made by hand in the same root.
pub const LABEL_MANAGED_BY: &str = "podlab.io/managed-by";
pub const MANAGED_BY_NODE: &str = "podlab-node";
pub const ANNOTATION_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const ANNOTATION_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
/// kubelet's container hash, in hex: what the container was made from, read back from the
/// record (a runtime may report the image under another name than the pod gave it).
pub const ANNOTATION_HASH: &str = "io.kubernetes.container.hash";

/// The cluster domain podlab pretends to be in (kubelet's `--cluster-domain` default).
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// Which list of the pod spec a container is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    Init,
    Regular,
    Ephemeral,
}

impl ContainerKind {
    pub fn label(self) -> &'static str {
        match self {
            ContainerKind::Init => "init",
            ContainerKind::Regular => "regular",
            ContainerKind::Ephemeral => "ephemeral",
        }
    }
}

impl ContainerKind {
    /// The kind a record's labels name (records made by the agent always carry one).
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Option<ContainerKind> {
        match labels.get(LABEL_CONTAINER_KIND).map(String::as_str) {
            Some("init") => Some(ContainerKind::Init),
            Some("regular") => Some(ContainerKind::Regular),
            Some("ephemeral") => Some(ContainerKind::Ephemeral),
            _ => None,
        }
    }
}

/// The pod uid of a sandbox or container the node agent made (None for anything else).
pub fn managed_pod_uid(labels: &BTreeMap<String, String>) -> Option<&str> {
    (labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_NODE))
        .then(|| labels.get(LABEL_POD_UID).map(String::as_str))
        .flatten()
}

/// Where a pod's files live on the node: its volumes and its container logs.
#[derive(Debug, Clone)]
pub struct PodDirs {
    pub volumes: PathBuf,
    pub logs: PathBuf,
}

impl PodDirs {
    /// `root/pods/<uid>/volumes` and `root/logs/<namespace>_<name>_<uid>`, as kubelet lays out
    /// `/var/lib/kubelet/pods/<uid>/volumes` and `/var/log/pods/<ns>_<name>_<uid>`.
    pub fn new(root: &Path, pod: &Pod) -> PodDirs {
        let (namespace, name, uid) = identity(pod);
        PodDirs {
            volumes: root.join("pods").join(&uid).join("volumes"),
            logs: root.join("logs").join(format!("{namespace}_{name}_{uid}")),
        }
    }

    /// The folder of an `emptyDir` volume (kubelet's `kubernetes.io~empty-dir/<name>`).
    pub fn empty_dir(&self, volume: &str) -> PathBuf {
        self.volumes.join("kubernetes.io~empty-dir").join(volume)
    }
}

/// (namespace, name, uid) of a pod, with the API server's defaults for the first.
pub fn identity(pod: &Pod) -> (String, String, String) {
    (
        pod.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata.uid.clone().unwrap_or_default(),
    )
}

/// The pod's hostname: `spec.hostname`, else the pod name cut to 63 characters without a
/// trailing `-` or `.` (kubelet's `GeneratePodHostNameAndDomain`).
pub fn hostname(pod: &Pod) -> String {
    if let Some(name) = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
    {
        return name;
    }
    let name = pod.metadata.name.clone().unwrap_or_default();
    let cut: String = name.chars().take(63).collect();
    cut.trim_end_matches(['-', '.']).to_string()
}

/// `<subdomain>.<namespace>.svc.cluster.local` when the pod has a subdomain.
pub fn domain(pod: &Pod) -> Option<String> {
    let subdomain = pod
        .spec
        .as_ref()?
        .subdomain
        .clone()
        .filter(|s| !s.is_empty())?;
    let (namespace, _, _) = identity(pod);
    Some(format!("{subdomain}.{namespace}.svc.{CLUSTER_DOMAIN}"))
}

/// The sandbox config of `pod`'s `attempt`-th sandbox, on a node with the security settings
/// of the environment ([`NodeSecurity::from_env`], podlab's defaults when they do not read).
pub fn sandbox_config(pod: &Pod, dirs: &PodDirs, attempt: u32) -> PodSandboxConfig {
    let root = podlab_runtime::config::default_root();
    let node = NodeSecurity::from_env(&root).unwrap_or_else(|_| NodeSecurity::new(&root));
    sandbox_config_for(pod, dirs, attempt, &node)
}

/// [`sandbox_config`] on a node with the security settings `node`.
pub fn sandbox_config_for(
    pod: &Pod,
    dirs: &PodDirs,
    attempt: u32,
    node: &NodeSecurity,
) -> PodSandboxConfig {
    let (namespace, name, uid) = identity(pod);
    let spec = pod.spec.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = pod.metadata.labels.clone().unwrap_or_default();
    labels.insert(LABEL_POD_NAME.into(), name.clone());
    labels.insert(LABEL_POD_NAMESPACE.into(), namespace.clone());
    labels.insert(LABEL_POD_UID.into(), uid.clone());
    labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY_NODE.into());
    let domain = domain(pod);
    PodSandboxConfig {
        metadata: PodSandboxMetadata {
            name,
            namespace,
            uid,
            attempt,
        },
        hostname: hostname(pod),
        domainname: domain.clone().unwrap_or_default(),
        share_process_namespace: spec.share_process_namespace.unwrap_or(false),
        host_network: spec.host_network.unwrap_or(false),
        host_pid: spec.host_pid.unwrap_or(false),
        host_ipc: spec.host_ipc.unwrap_or(false),
        labels,
        annotations: pod.metadata.annotations.clone().unwrap_or_default(),
        log_directory: Some(dirs.logs.clone()),
        // No cluster DNS here: ClusterFirst falls back to the node's resolv.conf, as kubelet
        // does when it has no cluster DNS configured.
        dns: None,
        hosts: HostsConfig {
            domain,
            aliases: Vec::new(),
        },
        linux: LinuxSandboxConfig {
            cgroup_parent: crate::qos::pod_cgroup_parent(pod),
            resources: crate::qos::pod_resources(pod),
            sysctls: crate::sysctl::sandbox_sysctls(pod),
            security: crate::security::for_sandbox(pod, node),
        },
        port_mappings: port_mappings(&spec),
    }
}

/// kubelet's `MakePortMappings` as `generatePodSandboxConfig` uses it: every container port
/// with a `hostPort`, in container order, the protocol in CNI's lower case (TCP by default).
fn port_mappings(spec: &k8s_openapi::api::core::v1::PodSpec) -> Vec<PortMapping> {
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|port| {
            let host_port = u16::try_from(port.host_port?).ok().filter(|&p| p != 0)?;
            Some(PortMapping {
                protocol: port
                    .protocol
                    .as_deref()
                    .unwrap_or("TCP")
                    .to_ascii_lowercase(),
                container_port: u16::try_from(port.container_port).ok()?,
                host_port,
                host_ip: port.host_ip.clone().unwrap_or_default(),
            })
        })
        .collect()
}

/// The parts of a container that `Container` and `EphemeralContainer` share.
struct ContainerView<'a> {
    name: &'a str,
    image: &'a str,
    command: &'a [String],
    args: &'a [String],
    env: Vec<(String, String)>,
    working_dir: Option<&'a str>,
    /// Volume name, mount path, read-only, `mountPropagation`.
    mounts: Vec<(&'a str, &'a str, bool, Propagation)>,
    stdin: bool,
    stdin_once: bool,
    tty: bool,
}

/// `Container` and `EphemeralContainer` are two types with the same fields; one reading serves
/// both.
macro_rules! container_view {
    ($c:expr) => {{
        let c = $c;
        ContainerView {
            name: &c.name,
            image: c.image.as_deref().unwrap_or(""),
            command: c.command.as_deref().unwrap_or_default(),
            args: c.args.as_deref().unwrap_or_default(),
            env: c
                .env
                .iter()
                .flatten()
                .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
                .collect(),
            working_dir: c.working_dir.as_deref(),
            mounts: c
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| {
                    (
                        m.name.as_str(),
                        m.mount_path.as_str(),
                        m.read_only.unwrap_or(false),
                        // kubelet's `translateMountPropagation` (the API server admitted
                        // Bidirectional only for privileged containers).
                        match m.mount_propagation.as_deref() {
                            Some("HostToContainer") => Propagation::Slave,
                            Some("Bidirectional") => Propagation::Shared,
                            _ => Propagation::Private,
                        },
                    )
                })
                .collect(),
            stdin: c.stdin.unwrap_or(false),
            stdin_once: c.stdin_once.unwrap_or(false),
            tty: c.tty.unwrap_or(false),
        }
    }};
}

impl<'a> ContainerView<'a> {
    fn of(c: &'a Container) -> Self {
        container_view!(c)
    }

    fn of_ephemeral(c: &'a EphemeralContainer) -> Self {
        container_view!(c)
    }
}

/// The container config for container `name` of `pod`, started for the `attempt`-th time, on
/// a node with the security settings of the environment ([`NodeSecurity::from_env`], podlab's
/// defaults when they do not read). None when the pod has no container of that name.
pub fn container_config(
    pod: &Pod,
    dirs: &PodDirs,
    name: &str,
    attempt: u32,
) -> Option<(ContainerKind, ContainerConfig)> {
    container_config_with_env(pod, dirs, name, attempt, None)
}

/// [`container_config`] with the environment already built ([`crate::env::container_env`]:
/// `envFrom` and `valueFrom` resolved); None takes the literal `value`s. The node's security
/// settings are those of the environment ([`NodeSecurity::from_env`], podlab's defaults when
/// they do not read).
pub fn container_config_with_env(
    pod: &Pod,
    dirs: &PodDirs,
    name: &str,
    attempt: u32,
    env: Option<Vec<(String, String)>>,
) -> Option<(ContainerKind, ContainerConfig)> {
    let root = podlab_runtime::config::default_root();
    let node = NodeSecurity::from_env(&root).unwrap_or_else(|_| NodeSecurity::new(&root));
    container_config_for(pod, dirs, name, attempt, env, &node)
}

/// [`container_config_with_env`] on a node with the security settings `node`.
pub fn container_config_for(
    pod: &Pod,
    dirs: &PodDirs,
    name: &str,
    attempt: u32,
    env: Option<Vec<(String, String)>>,
    node: &NodeSecurity,
) -> Option<(ContainerKind, ContainerConfig)> {
    let spec = pod.spec.as_ref()?;
    let security = crate::security::for_container(pod, name, node)?;
    let (kind, view, resources) = if let Some(c) = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == name)
    {
        let resources = crate::qos::container_resources(pod, Some(c));
        (ContainerKind::Init, ContainerView::of(c), resources)
    } else if let Some(c) = spec.containers.iter().find(|c| c.name == name) {
        let resources = crate::qos::container_resources(pod, Some(c));
        (ContainerKind::Regular, ContainerView::of(c), resources)
    } else {
        let c = spec
            .ephemeral_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)?;
        let resources = crate::qos::container_resources(pod, None);
        (
            ContainerKind::Ephemeral,
            ContainerView::of_ephemeral(c),
            resources,
        )
    };
    let (namespace, pod_name, uid) = identity(pod);

    let env = env.unwrap_or_else(|| expand_env(&view.env));
    let lookup: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_POD_NAME.to_string(), pod_name);
    labels.insert(LABEL_POD_NAMESPACE.to_string(), namespace);
    labels.insert(LABEL_POD_UID.to_string(), uid);
    labels.insert(LABEL_CONTAINER_NAME.to_string(), view.name.to_string());
    labels.insert(LABEL_CONTAINER_KIND.to_string(), kind.label().to_string());
    labels.insert(LABEL_MANAGED_BY.to_string(), MANAGED_BY_NODE.to_string());
    let mut annotations = BTreeMap::new();
    annotations.insert(ANNOTATION_RESTART_COUNT.to_string(), attempt.to_string());
    let grace = spec.termination_grace_period_seconds.unwrap_or(30);
    annotations.insert(ANNOTATION_GRACE.to_string(), grace.to_string());
    let hash = crate::model::container_hash(view.name, view.image);
    annotations.insert(ANNOTATION_HASH.to_string(), format!("{hash:x}"));

    let config = ContainerConfig {
        metadata: ContainerMetadata {
            name: view.name.to_string(),
            attempt,
        },
        image: view.image.to_string(),
        command: view.command.iter().map(|s| expand(s, &lookup)).collect(),
        args: view.args.iter().map(|s| expand(s, &lookup)).collect(),
        env: env.iter().map(|(k, v)| EnvVar::new(k, v)).collect(),
        working_dir: view.working_dir.map(str::to_string),
        mounts: view
            .mounts
            .iter()
            .map(|(volume, path, readonly, propagation)| {
                match crate::volume::image_of(pod, volume).and_then(|s| s.reference.as_deref()) {
                    // Read-only whatever the mount says; its subPath (`subpath::prepare`)
                    // goes to the runtime, which opens it in the image.
                    Some(reference) => Mount {
                        container_path: PathBuf::from(path),
                        readonly: true,
                        image: Some(podlab_runtime::ImageVolume {
                            image: reference.to_string(),
                            ..Default::default()
                        }),
                        ..Mount::default()
                    },
                    None => Mount {
                        host_path: crate::volume::host_path_of(pod, dirs, volume)
                            .unwrap_or_else(|| dirs.empty_dir(volume)),
                        container_path: PathBuf::from(path),
                        readonly: *readonly || crate::volume::always_read_only(pod, volume),
                        propagation: *propagation,
                        recursive_readonly: false,
                        image: None,
                    },
                }
            })
            .collect(),
        run_as_user: security.run_as_user.map(|u| u as u32),
        run_as_group: security.run_as_group.map(|g| g as u32),
        readonly_rootfs: security.readonly_rootfs,
        security: security.security,
        log_path: Some(PathBuf::from(view.name).join(format!("{attempt}.log"))),
        target_container: None,
        resources,
        labels,
        annotations,
        stdin: view.stdin,
        stdin_once: view.stdin_once,
        tty: view.tty,
    };
    Some((kind, config))
}

/// Env values with `$(VAR)` references to earlier variables expanded, in order.
fn expand_env(env: &[(String, String)]) -> Vec<(String, String)> {
    let mut done: Vec<(String, String)> = Vec::new();
    for (name, value) in env {
        let lookup: BTreeMap<&str, &str> =
            done.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let value = expand(value, &lookup);
        done.retain(|(k, _)| k != name);
        done.push((name.clone(), value));
    }
    done
}

/// Kubernetes' `$(VAR)` expansion: a defined variable is replaced, `$$` is a literal `$`, and
/// anything else (an undefined variable, an unclosed `$(`) is left as written.
pub fn expand(input: &str, vars: &BTreeMap<&str, &str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match vars.get(name) {
                        Some(value) => out.push_str(value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str(&rest[at..]);
                    rest = "";
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::pod;

    const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  subdomain: front
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", "echo $(GREETING) $$HOME $(MISSING)"]
    env: [{name: WHO, value: pod}, {name: GREETING, value: "hi $(WHO)"}]
    volumeMounts: [{name: data, mountPath: /data, readOnly: true}]
    securityContext: {runAsUser: 1000, readOnlyRootFilesystem: true}
"#;

    #[test]
    fn env_references_expand_in_order_and_in_command() {
        let pod = pod(POD);
        let dirs = PodDirs::new(Path::new("/r"), &pod);
        let (kind, config) = container_config(&pod, &dirs, "app", 2).unwrap();
        assert_eq!(kind, ContainerKind::Regular);
        assert_eq!(config.command[2], "echo hi pod $HOME $(MISSING)");
        assert_eq!(config.env[1].value, "hi pod");
        assert_eq!(config.metadata.attempt, 2);
        assert_eq!(config.log_path.as_deref(), Some(Path::new("app/2.log")));
        assert_eq!(config.run_as_user, Some(1000));
        assert!(config.readonly_rootfs);
        assert_eq!(
            config.mounts[0].host_path,
            Path::new("/r/pods/u-1/volumes/kubernetes.io~empty-dir/data")
        );
        assert!(config.mounts[0].readonly);
    }

    #[test]
    fn sandbox_gets_hostname_domain_and_labels() {
        let pod = pod(POD);
        let dirs = PodDirs::new(Path::new("/r"), &pod);
        let config = sandbox_config(&pod, &dirs, 1);
        assert_eq!(config.hostname, "web");
        assert_eq!(config.domainname, "front.shop.svc.cluster.local");
        assert_eq!(config.metadata.attempt, 1);
        assert_eq!(config.labels[LABEL_POD_UID], "u-1");
        assert_eq!(managed_pod_uid(&config.labels), Some("u-1"));
        let (kind, container) = container_config(&pod, &dirs, "app", 0).unwrap();
        assert_eq!(ContainerKind::from_labels(&container.labels), Some(kind));
        assert_eq!(managed_pod_uid(&container.labels), Some("u-1"));
        let mut by_hand = config.labels.clone();
        by_hand.remove(LABEL_MANAGED_BY);
        assert_eq!(managed_pod_uid(&by_hand), None);
        assert_eq!(
            config.log_directory.as_deref(),
            Some(Path::new("/r/logs/shop_web_u-1"))
        );
    }

    #[test]
    fn long_pod_names_are_cut_to_a_hostname() {
        // 64 characters whose 63rd is a dot (podlab-api caps each dot-separated part at 63).
        let name = format!("{}.x", "a".repeat(62));
        let pod = pod(&POD
            .replace("name: web", &format!("name: {name}"))
            .replace("  subdomain: front\n", ""));
        assert_eq!(hostname(&pod), "a".repeat(62));
    }

    #[test]
    fn expansion_edge_cases() {
        let vars = BTreeMap::from([("A", "1")]);
        assert_eq!(expand("$(A)$(A)", &vars), "11");
        assert_eq!(expand("$$(A)", &vars), "$(A)");
        assert_eq!(expand("$(A", &vars), "$(A");
        assert_eq!(expand("cost: $5", &vars), "cost: $5");
    }
}
