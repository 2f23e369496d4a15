//! What the kubelet layer asks for: the runtime's own settings, a pod sandbox, a container.
//!
//! The shapes follow the CRI messages (`PodSandboxConfig`, `ContainerConfig`) with the fields
//! podlab implements; everything is plain data, serialisable, so that it is stored as given in
//! the sandbox's and the container's state files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use podlab_ns::mnt::Propagation;

use crate::id::ContainerId;

/// Where the runtime keeps its state and finds its helper binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// `$PODLAB_ROOT`: `sandboxes/<id>/...` lives below it.
    pub root: PathBuf,
    /// The folder holding `podlab-pause` and `podlab-shim`.
    pub helper_dir: PathBuf,
    /// The image store's root (podlab-image).
    pub image_root: PathBuf,
}

impl RuntimeConfig {
    /// The defaults: `$PODLAB_ROOT`, else `/run/podlab` for root and `$XDG_RUNTIME_DIR/podlab`
    /// otherwise; helpers next to the running executable; images under `<root>/images` unless
    /// `$PODLAB_IMAGE_ROOT` says otherwise.
    pub fn from_env() -> RuntimeConfig {
        let root = default_root();
        let image_root = std::env::var_os("PODLAB_IMAGE_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("images"));
        let helper_dir = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("."));
        RuntimeConfig {
            root,
            helper_dir,
            image_root,
        }
    }

    /// The defaults with another state root (images under it too).
    pub fn with_root(root: impl Into<PathBuf>) -> RuntimeConfig {
        let root = root.into();
        RuntimeConfig {
            image_root: root.join("images"),
            root,
            ..RuntimeConfig::from_env()
        }
    }
}

/// `$PODLAB_ROOT`, else `/run/podlab` for root, else `$XDG_RUNTIME_DIR/podlab`.
pub fn default_root() -> PathBuf {
    if let Some(root) = std::env::var_os("PODLAB_ROOT").filter(|r| !r.is_empty()) {
        return PathBuf::from(root);
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/run/podlab");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("podlab"),
        None => std::env::temp_dir().join(format!("podlab-{}", nix::unistd::geteuid())),
    }
}

/// Who the sandbox is for (CRI `PodSandboxMetadata`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodSandboxMetadata {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
}

/// The pod's `/etc/resolv.conf` (CRI `DNSConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsConfig {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

/// One `hostAliases` entry of the pod spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAlias {
    pub ip: String,
    pub hostnames: Vec<String>,
}

/// What goes into the pod's `/etc/hosts` besides the localhost lines.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostsConfig {
    /// The pod's domain (`<subdomain>.<namespace>.svc.<cluster-domain>`) when it has a
    /// subdomain: its line then reads `IP  HOST.DOMAIN  HOST`.
    pub domain: Option<String>,
    pub aliases: Vec<HostAlias>,
}

/// A pod sandbox to make (CRI `PodSandboxConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodSandboxConfig {
    pub metadata: PodSandboxMetadata,
    /// The pod's hostname (the pod name, or `spec.hostname`). Ignored with `host_network`,
    /// where the pod has the node's uts namespace, as kubelet and containerd do it.
    pub hostname: String,
    /// The NIS domain name of the pod's uts namespace; empty leaves the kernel's `(none)`.
    pub domainname: String,
    /// `shareProcessNamespace`: one pid namespace for the pod, the pause process its PID 1.
    pub share_process_namespace: bool,
    /// `hostNetwork`: the node's network (and uts) namespace.
    pub host_network: bool,
    /// `hostPID` (CRI pid mode NODE): pause and the containers live in the node's pid
    /// namespace (the runtime's), not one of the pod's.
    #[serde(default)]
    pub host_pid: bool,
    /// `hostIPC` (CRI ipc mode NODE): the node's ipc namespace instead of the pod's own.
    #[serde(default)]
    pub host_ipc: bool,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The folder for the containers' logs: a container's relative `log_path` is below it.
    pub log_directory: Option<PathBuf>,
    /// None: the node's `/etc/resolv.conf` is copied, as containerd does without a DNS config.
    pub dns: Option<DnsConfig>,
    pub hosts: HostsConfig,
    /// CRI `LinuxPodSandboxConfig`: the pod's cgroup and its values.
    #[serde(default)]
    pub linux: LinuxSandboxConfig,
    /// Host ports forwarded to the pod (CRI `port_mappings` with a host port): the network
    /// plugin's `portMappings` capability (the CNI `portmap` plugin) makes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_mappings: Vec<PortMapping>,
}

/// One host port forwarded to the pod's address (CRI `PortMapping`, CNI's `portMappings`
/// entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    /// `tcp`, `udp` or `sctp`, as CNI spells them.
    pub protocol: String,
    pub container_port: u16,
    pub host_port: u16,
    /// The node address the port is opened on; empty: every local address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

/// The pod's cgroup (CRI `LinuxPodSandboxConfig.cgroup_parent` and `resources`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinuxSandboxConfig {
    /// kubelet's name for the pod's cgroup (`kubepods/burstable/pod<uid>`), below the runtime's
    /// cgroup root. Empty: the pod gets no cgroups.
    #[serde(default)]
    pub cgroup_parent: String,
    /// The pod cgroup's values, as kubelet's pod container manager computes them.
    #[serde(default)]
    pub resources: podlab_cgroups::Resources,
    /// Namespaced sysctls to set in the sandbox's own net and ipc namespaces (CRI `sysctls`),
    /// by their dotted names. A global one, or a net one with `host_network`, fails
    /// RunPodSandbox, as runc refuses it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
    /// The pause process's security context (CRI `LinuxSandboxSecurityContext`).
    #[serde(default)]
    pub security: SandboxSecurity,
}

/// What kubelet asks for the sandbox itself (CRI `LinuxSandboxSecurityContext`): the pod-level
/// seccomp profile, user and groups, and whether any container is privileged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxSecurity {
    /// The pod's `seccompProfile`, or the node's default (kubelet's `getSeccompProfile` with
    /// no container).
    pub seccomp: crate::seccomp::SeccompProfile,
    /// The pod's `runAsUser`; None: the pause image's user, 65535.
    pub run_as_user: Option<u32>,
    /// The pod's `runAsGroup`; None: the pause image's group (65535), or 0 with a `run_as_user`.
    pub run_as_group: Option<u32>,
    /// The pod's `supplementalGroups` and `fsGroup`.
    pub supplemental_groups: Vec<u32>,
    /// kubelet's `HasPrivilegedContainer`: every capability and no seccomp filter, as
    /// containerd gives a privileged sandbox.
    pub privileged: bool,
    /// A user namespace of the pod's own (CRI `userns_options` in mode POD, Kubernetes'
    /// `hostUsers: false`); None: the node's.
    pub user_namespace: Option<UserNamespace>,
}

/// The id the kernel shows for one a user namespace does not map (`/proc/sys/kernel/overflowuid`).
const OVERFLOW_ID: u32 = 65534;

/// A pod's user namespace: how its uids and gids are numbered on the node. The pod's root is
/// an unprivileged user of the node (kubelet gives each pod 65536 ids of its own), root only
/// over the pod's namespaces and files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserNamespace {
    pub uids: Vec<podlab_ns::user::IdMapping>,
    pub gids: Vec<podlab_ns::user::IdMapping>,
}

impl UserNamespace {
    /// What containerd accepts: one mapping of each kind (both the same length), with the
    /// pod's root (id 0) in it; `Err` says what is wrong, in the CRI's words
    /// (`container_id`, `host_id`, `length`).
    pub fn check(&self) -> std::result::Result<(), String> {
        for (kind, map) in [("uids", &self.uids), ("gids", &self.gids)] {
            let [mapping] = map.as_slice() else {
                return Err(format!(
                    "{kind}: exactly one mapping is supported, {} given",
                    map.len()
                ));
            };
            if mapping.count == 0 {
                return Err(format!("{kind}: the mapping's length is 0"));
            }
            if mapping.inside != 0 {
                return Err(format!(
                    "{kind}: container id 0 must be mapped (the mapping starts at container id {})",
                    mapping.inside
                ));
            }
            if mapping.outside.checked_add(mapping.count - 1).is_none() {
                return Err(format!("{kind}: host ids past 2^32 - 1"));
            }
        }
        if self.uids[0].count != self.gids[0].count {
            return Err("uids and gids: the mappings must have the same length".into());
        }
        Ok(())
    }

    /// The node's uid of `uid` in the pod.
    pub fn host_uid(&self, uid: u32) -> Option<u32> {
        podlab_ns::user::map_to_outside(&self.uids, uid)
    }

    /// The node's gid of `gid` in the pod.
    pub fn host_gid(&self, gid: u32) -> Option<u32> {
        podlab_ns::user::map_to_outside(&self.gids, gid)
    }

    /// `user` (as the node numbers it: what `/proc/PID/status` shows the node) as the pod
    /// numbers it; an id outside the maps is the kernel's overflow id, 65534.
    pub fn inside(&self, user: crate::process::LinuxUser) -> crate::process::LinuxUser {
        let back = |map: &[podlab_ns::user::IdMapping], host: u32| {
            podlab_ns::user::map_to_inside(map, host).unwrap_or(OVERFLOW_ID)
        };
        crate::process::LinuxUser {
            uid: back(&self.uids, user.uid),
            gid: back(&self.gids, user.gid),
            supplemental_groups: user
                .supplemental_groups
                .iter()
                .map(|g| back(&self.gids, *g))
                .collect(),
        }
    }

    /// The node's uid and gid of the pod's root: the owner of what the pod must own on the
    /// node (its rootfs's upper folder, its /etc files).
    pub fn host_root(&self) -> (u32, u32) {
        (self.host_uid(0).unwrap_or(0), self.host_gid(0).unwrap_or(0))
    }
}

/// A container's resources (CRI `LinuxContainerResources`): its cgroup's values and its
/// `oom_score_adj`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerResources {
    #[serde(flatten)]
    pub cgroup: podlab_cgroups::Resources,
    #[serde(default)]
    pub oom_score_adj: Option<i32>,
}

/// Who the container is (CRI `ContainerMetadata`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerMetadata {
    pub name: String,
    /// The restart count, as kubelet passes it.
    pub attempt: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

impl EnvVar {
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: value.into(),
        }
    }
}

/// A host folder or file shown inside the container (CRI `Mount`); `emptyDir` volumes are
/// folders that the kubelet layer makes and hands to every container of the pod that mounts them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    pub host_path: PathBuf,
    pub container_path: PathBuf,
    pub readonly: bool,
    /// `rprivate` (the default), `rslave` (HostToContainer: the host path's mount must be
    /// shared or a slave) or `rshared` (Bidirectional: it must be shared), as runc sets it on
    /// the volume.
    #[serde(default, skip_serializing_if = "Propagation::is_private")]
    pub propagation: Propagation,
    /// Read-only with every mount below it too (CRI `recursive_read_only`, runc's `rro`):
    /// `readonly` and a private propagation go with it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recursive_readonly: bool,
    /// An image's content instead of a host path (CRI `Mount.image`, Kubernetes' `image`
    /// volume); `host_path` is then empty and `readonly` must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageVolume>,
}

/// An image volume (the OCI volume source, KEP-4639): the layers of an image in the store,
/// merged read-only (an overlay without an upper layer), or one folder of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageVolume {
    /// The image as the caller named it (kubelet gives the id PullImage answered).
    pub image: String,
    /// A path inside the image to mount instead of its root (CRI `image_sub_path`); it must
    /// exist there. Resolved with the image as its root: its symlinks stay inside it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub_path: String,
    /// Set by CreateContainer: the image's id, and its layer folders, the top-most first.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lowerdirs: Vec<PathBuf>,
}

/// A container to create in a sandbox (CRI `ContainerConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerConfig {
    pub metadata: ContainerMetadata,
    /// The image name, resolved in the image store.
    pub image: String,
    /// Kubernetes `command`: replaces the image's ENTRYPOINT, and then its CMD is ignored.
    pub command: Vec<String>,
    /// Kubernetes `args`: replaces the image's CMD.
    pub args: Vec<String>,
    /// Added to (and overriding) the image's environment.
    pub env: Vec<EnvVar>,
    /// Replaces the image's WorkingDir.
    pub working_dir: Option<String>,
    pub mounts: Vec<Mount>,
    /// `securityContext.runAsUser`: replaces the image's USER.
    pub run_as_user: Option<u32>,
    /// `securityContext.runAsGroup`.
    pub run_as_group: Option<u32>,
    /// `securityContext.readOnlyRootFilesystem`.
    pub readonly_rootfs: bool,
    /// The rest of the container's Linux security context.
    #[serde(default)]
    pub security: SecurityConfig,
    /// The CRI log file: relative to the sandbox's `log_directory`, or absolute. None puts it in
    /// the container's state folder.
    pub log_path: Option<PathBuf>,
    /// Join this container's pid namespace instead of the pod's (CRI `NamespaceMode::TARGET`,
    /// for ephemeral debug containers with `--target`).
    pub target_container: Option<ContainerId>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// CRI `LinuxContainerConfig.resources`.
    #[serde(default)]
    pub resources: ContainerResources,
    /// Kubernetes `stdin` (CRI `stdin`): the container's stdin is a pipe the shim keeps open
    /// for `attach -i`, instead of /dev/null.
    #[serde(default)]
    pub stdin: bool,
    /// Kubernetes `stdinOnce`: stdin is closed when the first attached client detaches.
    #[serde(default)]
    pub stdin_once: bool,
    /// Kubernetes `tty`: the container's stdio is a console made in its own devpts, held by
    /// the shim ([`crate::tty`]); its output goes to the log as stdout.
    #[serde(default)]
    pub tty: bool,
}

/// A container's Linux security settings beyond its user (CRI `LinuxContainerSecurityContext`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SecurityConfig {
    /// Paths hidden from the container ([`crate::masked_paths`]); None: runc's defaults, an
    /// empty list: none (kubelet's `procMount: Unmasked`).
    pub masked_paths: Option<Vec<String>>,
    /// Paths made read-only; None: runc's defaults, an empty list: none.
    pub readonly_paths: Option<Vec<String>>,
    /// containerd's privileged container: every capability, the host's devices, `/sys` and
    /// `/proc` writable, no masked paths, no seccomp filter.
    pub privileged: bool,
    /// Kubernetes names (`NET_ADMIN`, or `CAP_NET_ADMIN`; `ALL`) added to containerd's default
    /// set, then dropped from it, in containerd's order.
    pub add_capabilities: Vec<String>,
    pub drop_capabilities: Vec<String>,
    /// `allowPrivilegeEscalation: false`: the process gets no_new_privs.
    pub no_new_privs: bool,
    pub seccomp: crate::seccomp::SeccompProfile,
    /// Groups the process is in besides its primary one (pod `supplementalGroups`).
    pub supplemental_groups: Vec<u32>,
    /// `supplementalGroupsPolicy: Strict`: the process is in its primary group and
    /// `supplemental_groups` only, not in the groups the image's `/etc/group` lists its user
    /// in (containerd's `Merge`, the default, adds those).
    pub strict_supplemental_groups: bool,
}

impl SecurityConfig {
    /// The paths to mask, the runtime's defaults filled in.
    pub fn masked(&self) -> Vec<String> {
        self.masked_paths
            .clone()
            .unwrap_or_else(crate::masked_paths::default_masked)
    }

    /// The paths to make read-only, the runtime's defaults filled in.
    pub fn readonly(&self) -> Vec<String> {
        self.readonly_paths
            .clone()
            .unwrap_or_else(crate::masked_paths::default_readonly)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podlab_ns::user::IdMapping;

    fn map(inside: u32, outside: u32, count: u32) -> Vec<IdMapping> {
        vec![IdMapping {
            inside,
            outside,
            count,
        }]
    }

    fn user(uids: Vec<IdMapping>, gids: Vec<IdMapping>) -> UserNamespace {
        UserNamespace { uids, gids }
    }

    #[test]
    fn a_user_namespace_has_one_mapping_of_each_kind_with_root_in_it() {
        let good = user(map(0, 65536, 65536), map(0, 65536, 65536));
        assert_eq!(good.check(), Ok(()));
        assert_eq!(good.host_root(), (65536, 65536));
        assert_eq!(good.host_uid(65535), Some(131071));
        assert_eq!(good.host_uid(65536), None);
        let mut two = good.clone();
        two.gids.push(two.gids[0]);
        assert!(two
            .check()
            .unwrap_err()
            .contains("gids: exactly one mapping"));
        let no_root = user(map(1, 65536, 65536), map(0, 65536, 65536));
        assert!(no_root.check().unwrap_err().contains("container id 0"));
        let empty = user(map(0, 65536, 0), map(0, 65536, 0));
        assert!(empty.check().unwrap_err().contains("length is 0"));
        let past_the_end = user(map(0, u32::MAX, 2), map(0, 0, 2));
        assert!(past_the_end.check().unwrap_err().contains("2^32"));
        let uneven = user(map(0, 65536, 65536), map(0, 65536, 1000));
        assert!(uneven.check().unwrap_err().contains("same length"));
    }

    #[test]
    fn ids_the_node_shows_are_given_back_as_the_pod_numbers_them() {
        let namespace = user(map(0, 100_000, 65536), map(0, 200_000, 65536));
        let seen = crate::process::LinuxUser {
            uid: 101_000,
            gid: 200_005,
            supplemental_groups: vec![200_000, 7],
        };
        let inside = namespace.inside(seen);
        assert_eq!((inside.uid, inside.gid), (1000, 5));
        assert_eq!(inside.supplemental_groups, [0, OVERFLOW_ID]);
    }
}
