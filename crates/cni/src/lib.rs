//! # podlab-cni: a pod's network, through CNI plugins or podlab's own netlink path
//!
//! A pod's network namespace starts with nothing but a `lo` that is down. Giving it a network is
//! the job of CNI, the Container Network Interface: the runtime runs plugin binaries with a few
//! `CNI_*` variables and a JSON configuration on stdin, and reads the result (interfaces, IPs,
//! routes) on stdout. This crate is podlab's twin of libcni, the client containerd and CRI-O use:
//!
//! - [`conf`]: network configuration lists (`.conflist`), found in a folder as libcni finds them;
//! - [`exec`]: running one plugin, with its environment, stdin, stdout, error JSON and deadline;
//! - [`result`]: the ADD result and the error JSON, typed;
//! - [`cache`]: the ADD result kept per attachment for DEL and CHECK;
//! - [`cni`]: [`CniNetwork`], the chain runner: ADD in order, DEL in reverse, CHECK;
//! - [`podlab_net`]: podlab's default network (bridge `podlab0`, host-local IPAM, no route out);
//! - [`builtin`] and [`ipam`]: the same network made directly over netlink, with podlab's own
//!   file-locked address store, for when the cost of running plugins is what is being studied.
//!
//! Both paths implement [`PodNetwork`]; a runtime holds one and calls `setup` from
//! RunPodSandbox and `teardown` from StopPodSandbox.
//!
//! ## Where the node side lives
//! Plugins (and the built-in path) work in the network namespace of their caller: the bridge and
//! the host ends of the veths are made there. Tests and benchmarks therefore run inside a
//! network namespace of their own (`unshare --net`), which is the "node" they attach pods to.

pub mod args;
pub mod builtin;
pub mod cache;
pub mod cni;
pub mod conf;
pub mod error;
pub mod exec;
pub mod ipam;
pub mod podlab_net;
pub mod result;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use builtin::BuiltinNetwork;
pub use cni::{CniConfig, CniNetwork};
pub use conf::ConfList;
pub use error::{Error, Result};
pub use podlab_net::PodlabNet;
pub use result::{CniResult, Interface};

/// One pod's attachment to a network: which namespace, which interface, whose pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attachment {
    /// CNI_CONTAINERID: the sandbox id.
    pub container_id: String,
    /// CNI_NETNS: the pod's network namespace (a pin, or `/proc/PID/ns/net`).
    pub netns_path: PathBuf,
    /// CNI_IFNAME: the interface made inside the pod, `eth0`.
    pub ifname: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub pod_uid: String,
    /// Where the ADD result is kept for DEL and CHECK (the sandbox folder).
    pub cache_dir: PathBuf,
    /// Capability arguments offered to plugins that declare them (`portMappings`, ...); they
    /// reach a plugin as `runtimeConfig`.
    pub capability_args: serde_json::Map<String, serde_json::Value>,
}

impl Attachment {
    /// An attachment of `eth0` in `netns_path` for the sandbox `container_id`.
    pub fn new(container_id: &str, netns_path: &Path, cache_dir: &Path) -> Attachment {
        Attachment {
            container_id: container_id.to_owned(),
            netns_path: netns_path.to_owned(),
            ifname: "eth0".to_owned(),
            cache_dir: cache_dir.to_owned(),
            ..Attachment::default()
        }
    }

    /// Sets the pod's namespace, name and uid (for CNI_ARGS).
    pub fn for_pod(mut self, namespace: &str, name: &str, uid: &str) -> Attachment {
        self.pod_namespace = namespace.to_owned();
        self.pod_name = name.to_owned();
        self.pod_uid = uid.to_owned();
        self
    }

    /// CNI_ARGS for this attachment.
    pub fn cni_args(&self) -> Result<String> {
        args::k8s_cni_args(&args::PodIdentity {
            namespace: &self.pod_namespace,
            name: &self.pod_name,
            uid: &self.pod_uid,
            infra_container_id: &self.container_id,
        })
    }

    pub(crate) fn check(&self) -> Result<()> {
        args::check_container_id(&self.container_id)?;
        args::check_ifname(&self.ifname)
    }
}

/// What a pod got from its network: the sandbox status's IPs, and the full result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkStatus {
    /// The network's name (`podlab`).
    pub network: String,
    /// The pod IP (`status.podIP`): the first address of the container-side interface.
    pub ip: Option<IpAddr>,
    /// Every address of the container-side interface (`status.podIPs`), in result order.
    pub ips: Vec<IpAddr>,
    pub interfaces: Vec<Interface>,
    pub result: CniResult,
    /// The result as the plugin printed it (what a runtime stores and shows).
    pub result_json: String,
}

impl NetworkStatus {
    pub(crate) fn of(network: &str, ifname: &str, result: CniResult, result_json: String) -> Self {
        let ips = result.pod_ips(ifname);
        NetworkStatus {
            network: network.to_owned(),
            ip: ips.first().copied(),
            ips,
            interfaces: result.interfaces.clone(),
            result,
            result_json,
        }
    }
}

/// A pod network, as a runtime holds it. The caller must not run two operations on the same
/// attachment at once (the spec's rule); different pods may be set up concurrently.
pub trait PodNetwork: Send + Sync {
    /// Attaches the pod (CNI ADD). On failure nothing is left: what was made is torn down
    /// again (a DEL after the failed ADD, as the spec requires) before the error returns.
    fn setup(&self, attachment: &Attachment) -> Result<NetworkStatus>;
    /// Detaches the pod (CNI DEL). Succeeds when there is nothing to remove, also when the
    /// network namespace is already gone, and when called twice.
    fn teardown(&self, attachment: &Attachment) -> Result<()>;
    /// Verifies an attachment made by `setup` is still as it was (CNI CHECK).
    fn check(&self, attachment: &Attachment) -> Result<()>;
    /// The network's name.
    fn name(&self) -> String;
}

/// Which path gives pods their network.
#[derive(Debug, Clone)]
pub enum NetworkKind {
    /// Real CNI plugins driven by a conflist.
    Cni(CniConfig),
    /// podlab's own netlink path (`--network builtin`).
    Builtin(PodlabNet),
}

impl NetworkKind {
    /// podlab's defaults for `kind` (`"cni"` or `"builtin"`) under podlab's root folder; see
    /// [`CniConfig::podlab`] and [`PodlabNet::podlab`].
    pub fn podlab(kind: &str, root: &Path) -> Result<NetworkKind> {
        match kind {
            "cni" => Ok(NetworkKind::Cni(CniConfig::podlab(root))),
            "builtin" => Ok(NetworkKind::Builtin(PodlabNet::podlab(root))),
            other => Err(Error::Invalid(format!(
                "unknown network kind {other:?} (expected \"cni\" or \"builtin\")"
            ))),
        }
    }
}

/// The network of `kind`, ready for a runtime to hold.
pub fn open_network(kind: NetworkKind) -> Result<Box<dyn PodNetwork>> {
    Ok(match kind {
        NetworkKind::Cni(config) => Box::new(CniNetwork::new(config)?),
        NetworkKind::Builtin(net) => Box::new(BuiltinNetwork::new(net)?),
    })
}
