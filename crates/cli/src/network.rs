//! Which network pods get, and the glue that hands it to the runtime (containerd's CRI plugin
//! calls libcni the same way): `PODLAB_NETWORK=cni` (the default: podlab's conflist through
//! the real plugins in /usr/lib/cni), `builtin` (podlab's netlink fast path), or `none` (`lo`
//! only).
//!
//! Both paths put pods on the bridge `podlab0` with podlab's subnet, and nothing beyond it: no
//! NAT, no default route, and the node's IPv4 forwarding left as it was.
//!
//! The bridge and the subnet belong to the network namespace, not to one `$PODLAB_ROOT`: every
//! root in it (a user's, a test's, a demo's) shares them. So the IPAM leases and the conflist
//! live in `/run/podlab-net/<netns inode>/`, and attaches (and the detaches that may remove the
//! bridge) are serialised by binding an abstract unix socket, which is itself per network
//! namespace and leaves no file behind.
//!
//! The bridge outlives its pods while a node agent runs, as a CNI bridge does on a kubelet node
//! (creating and deleting a bridge costs the kernel ~40 ms, more than the rest of a pod's
//! network): the agent removes it, if no port is left, when it stops. A one-shot command
//! (`podlab run --rm` without an agent) removes it at its detach. `podlab gc` removes an
//! unused one either way.
//!
//! The folder records which namespace it is for (its cookie: inode numbers are reused), so that
//! a later namespace with the same number never inherits an earlier one's leases, and `podlab
//! gc` and the node agent remove the folders of namespaces that are gone ([`identity`]).
//!
//! A one-shot command leaves one network namespace attached ahead of time for the next pod,
//! until 1.5 s after it returned ([`warm`]): the next `run --rm`'s pause joins it, so the
//! plugins' ADD is off that command's way.

pub mod hostports;
mod identity;
pub mod warm;

pub use identity::collect_gone;

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use podlab_cni::{open_network, Attachment, NetworkKind, PodlabNet};
use podlab_runtime::{NetworkAttachment, NetworkPlugin, PodNetwork};

pub const ENV_NETWORK: &str = "PODLAB_NETWORK";

const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// What a detach that leaves the bridge without a port does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bridge {
    /// Remove it (and the network's folder): a one-shot command.
    RemoveWhenUnused,
    /// Keep it for the next pod: the node agent, whose `node_stopping` removes it if unused.
    Keep,
}

/// The network for pods, as `PODLAB_NETWORK` chooses it. It is the network namespace's, not
/// `_root`'s: see the module doc.
pub fn plugin(root: &Path) -> Result<Option<Arc<dyn NetworkPlugin>>> {
    plugin_with(root, Bridge::RemoveWhenUnused)
}

/// [`plugin`], with the bridge kept or not after the last detach.
pub fn plugin_with(root: &Path, bridge: Bridge) -> Result<Option<Arc<dyn NetworkPlugin>>> {
    Ok(podlab_network(root, bridge)?.map(|n| Arc::new(n) as Arc<dyn NetworkPlugin>))
}

/// The network `PODLAB_NETWORK` chooses, as podlab's own type (None: `none`).
pub(crate) fn podlab_network(_root: &Path, bridge: Bridge) -> Result<Option<PodlabNetwork>> {
    let kind = std::env::var(ENV_NETWORK).unwrap_or_else(|_| "cni".into());
    if kind == "none" {
        return Ok(None);
    }
    if kind != "cni" && kind != "builtin" {
        bail!("{ENV_NETWORK}={kind:?}: expected cni, builtin or none");
    }
    let net_root = network_root()?;
    let mut network_kind =
        NetworkKind::podlab(&kind, &net_root).with_context(|| format!("the {kind} network"))?;
    if let NetworkKind::Cni(config) = &mut network_kind {
        // The pod's shim brings `lo` up over netlink when it makes the network namespace,
        // before the ADD: the `loopback` plugin would start a Go program for nothing at every
        // ADD and DEL (containerd runs it because its shim does not do that).
        config.loopback = false;
    }
    Ok(Some(PodlabNetwork {
        kind,
        network: network_kind,
        bridge: PodlabNet::podlab(&net_root).bridge,
        keep_bridge: bridge == Bridge::Keep,
        net_root,
    }))
}

/// Set in a `run --rm`'s removal when a warm namespace's keeper follows it ([`warm`]): the
/// removal then keeps the bridge for it (the keeper removes it, if unused, when it ends).
static WARM_KEEPER_FOLLOWS: AtomicBool = AtomicBool::new(false);

pub(crate) struct PodlabNetwork {
    kind: String,
    /// Opened for each attach and detach, under the lock: opening writes the default conflist,
    /// which must not come back after the last pod's detach removed it.
    network: NetworkKind,
    bridge: String,
    keep_bridge: bool,
    /// `/run/podlab-net/<netns inode>`: the conflist and leases of this network namespace.
    net_root: PathBuf,
}

impl PodlabNetwork {
    fn attachment(pod: &PodNetwork<'_>) -> Attachment {
        // The ADD result is cached in the sandbox's folder (`<sandbox>/ns/net` → `<sandbox>`),
        // which goes with the sandbox.
        let sandbox_dir = warm::sandbox_dir(pod.netns);
        // A pod that joined a warm namespace keeps the CNI container id its ADD ran with.
        let container_id = warm::adopted_id(sandbox_dir);
        let container_id = container_id.as_deref().unwrap_or(pod.sandbox_id.as_str());
        let netns = pod.netns_now.unwrap_or(pod.netns);
        let mut attachment = Attachment::new(container_id, netns, sandbox_dir).for_pod(
            &pod.metadata.namespace,
            &pod.metadata.name,
            &pod.metadata.uid,
        );
        if !pod.port_mappings.is_empty() {
            // containerd's `WithCapabilityPortMap`: CNI's `portMappings` runtimeConfig.
            attachment.capability_args.insert(
                podlab_cni::conf::PORT_MAPPINGS.to_owned(),
                port_mappings_arg(pod.port_mappings),
            );
        }
        attachment
    }

    /// Serialises attaches, and detaches that may remove the bridge, in this network namespace,
    /// so that removing an empty bridge never races an attach.
    fn locked<T>(&self, f: impl FnOnce() -> T) -> Result<T, podlab_runtime::network::PluginError> {
        let _lock = lock_network_namespace()?;
        Ok(f())
    }

    /// The ADD of `attachment`, under the network's lock.
    fn add(
        &self,
        attachment: &Attachment,
    ) -> Result<podlab_cni::NetworkStatus, podlab_runtime::network::PluginError> {
        Ok(self.locked(|| {
            identity::claim(&self.net_root).map_err(|e| {
                podlab_cni::Error::Invalid(format!("the pod network's state folder: {e:#}"))
            })?;
            // The bridge plugin turns on IPv4 forwarding for the node whenever it makes the
            // bridge a gateway. Pods on podlab0 reach each other and the node on-link, so
            // forwarding is not needed, and podlab forwards nothing towards the host's network:
            // the node's setting is put back as it was.
            let forwarding = std::fs::read_to_string(IP_FORWARD).ok();
            let status = open_network(self.network.clone()).and_then(|n| n.setup(attachment));
            if let Some(before) = forwarding {
                if std::fs::read_to_string(IP_FORWARD).ok().as_deref() != Some(before.as_str()) {
                    let _ = std::fs::write(IP_FORWARD, before.trim());
                }
            }
            status
        })??)
    }

    /// The DEL of `attachment`; then the bridge and the network's folder go if no pod is left
    /// on it, unless `keep_bridge`.
    ///
    /// Only a DEL that may remove the bridge takes the network's lock. One that keeps it (the
    /// node agent's, the CRI server's) removes only what its own ADD made: the veth, the lease
    /// (under host-local's own file lock, or the built-in IPAM's), portmap's rules (under
    /// iptables' lock). No other ADD or DEL touches those, and the plugins are made for that:
    /// containerd runs ADDs and DELs side by side. So a StopPodSandbox's DEL, left to the CRI's
    /// cleaner, no longer holds up the next RunPodSandbox's ADD for its whole run (critest's
    /// pod benchmark: the ADD 13.7 ms with the lock, 7.4 without, medians of 52). ADDs still
    /// queue on the lock: each puts back the node's IPv4 forwarding as it found it, which two
    /// at once could not.
    fn del(
        &self,
        attachment: &Attachment,
        keep_bridge: bool,
    ) -> Result<(), podlab_runtime::network::PluginError> {
        if keep_bridge {
            open_network(self.network.clone())?.teardown(attachment)?;
            return Ok(());
        }
        self.locked(|| {
            open_network(self.network.clone())?.teardown(attachment)?;
            let _ = remove_if_unused(&self.bridge, &self.net_root);
            Ok::<(), podlab_cni::Error>(())
        })??;
        Ok(())
    }
}

impl NetworkPlugin for PodlabNetwork {
    fn name(&self) -> &str {
        &self.kind
    }

    fn set_up(
        &self,
        pod: &PodNetwork<'_>,
    ) -> Result<NetworkAttachment, podlab_runtime::network::PluginError> {
        let attachment = Self::attachment(pod);
        let status = self.add(&attachment)?;
        let result = serde_json::from_str(&status.result_json).ok();
        Ok(NetworkAttachment {
            ips: status.ips.iter().map(|ip| ip.to_string()).collect(),
            result,
        })
    }

    fn tear_down(
        &self,
        pod: &PodNetwork<'_>,
        _result: Option<&serde_json::Value>,
    ) -> Result<(), podlab_runtime::network::PluginError> {
        let attachment = Self::attachment(pod);
        let keep = self.keep_bridge || WARM_KEEPER_FOLLOWS.load(Ordering::SeqCst);
        self.del(&attachment, keep)
    }

    fn take_prepared(&self, pod: &PodNetwork<'_>) -> Option<podlab_runtime::PreparedNetwork> {
        warm::take(self, pod)
    }

    fn node_stopping(&self) -> Result<(), podlab_runtime::network::PluginError> {
        if self.keep_bridge {
            gc().map_err(|e| format!("{e:#}"))?;
            collect_gone().map_err(|e| format!("{e:#}"))?;
            collect_host_ports().map_err(|e| format!("{e:#}"))?;
        }
        Ok(())
    }
}

/// A pod's host ports as CNI's `portMappings` capability argument (the portmap plugin's
/// `runtimeConfig.portMappings`).
fn port_mappings_arg(mappings: &[podlab_runtime::PortMapping]) -> serde_json::Value {
    mappings
        .iter()
        .map(|m| {
            let mut entry = serde_json::json!({
                "hostPort": m.host_port,
                "containerPort": m.container_port,
                "protocol": m.protocol,
            });
            if !m.host_ip.is_empty() {
                entry["hostIP"] = m.host_ip.clone().into();
            }
            entry
        })
        .collect()
}

/// Deletes podlab's bridge when no interface is attached to it any more.
fn remove_bridge_if_unused(bridge: &str) -> bool {
    let Ok(mut netlink) = podlab_ns::net::Netlink::open() else {
        return false;
    };
    let Ok(links) = netlink.links() else {
        return false;
    };
    let Some(index) = links.iter().find(|l| l.name == bridge).map(|l| l.index) else {
        return true;
    };
    !links.iter().any(|l| l.master == Some(index)) && netlink.delete_link(bridge).is_ok()
}

/// Where this network namespace's conflist and leases live (with the namespace's identity: see
/// [`identity`]).
pub fn network_root() -> Result<PathBuf> {
    let inode = podlab_ns::ops::self_inode(podlab_ns::NsKind::Net)?;
    Ok(PathBuf::from(identity::BASE).join(inode.to_string()))
}

/// [`lock_network_namespace`] for another network namespace, taken only if it is free at once.
fn try_lock_network_namespace_of(netns: BorrowedFd<'_>) -> Result<OwnedFd> {
    let locked = podlab_ns::net::socket_in(netns, "bind(@podlab-network)", || {
        podlab_ns::net::bind_abstract(NETWORK_LOCK)
    })?;
    Ok(locked)
}

/// The abstract unix name whose holder holds a network namespace's pod network.
const NETWORK_LOCK: &[u8] = b"podlab-network";

/// Held while attaching to or detaching from this network namespace's pod network.
struct NetworkLock {
    _socket: OwnedFd,
    _in_process: std::sync::MutexGuard<'static, ()>,
}

/// A lock held while the returned value lives: the abstract unix socket `podlab-network`,
/// which only one process of a network namespace can bind at a time. The threads of one
/// process (the node agent's pod workers: a thousand of them in a burst) first queue on a
/// mutex, sleeping without a time limit, so only one of them polls the socket against other
/// processes (a warm namespace's keeper, `podlab gc`, other commands).
fn lock_network_namespace() -> std::io::Result<NetworkLock> {
    static IN_PROCESS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A worker that panicked with the lock held left nothing of its own to mend under it.
    let in_process = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let start = Instant::now();
    loop {
        match podlab_ns::net::bind_abstract(NETWORK_LOCK) {
            Ok(fd) => {
                return Ok(NetworkLock {
                    _socket: fd,
                    _in_process: in_process,
                })
            }
            Err(e)
                if e.raw_os_error() == Some(libc::EADDRINUSE)
                    && start.elapsed() < Duration::from_secs(120) =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => {
                return Err(std::io::Error::other(format!(
                    "locking the pod network (held by another process for {:?}): {e}",
                    start.elapsed()
                )))
            }
        }
    }
}

/// `podlab gc`'s part: after a `kill -9` of everything, this network namespace's podlab state
/// can outlive its pods. With no pod attached to podlab's bridge (or no bridge), every lease in
/// it is stale, so the bridge and the folder go. True when something was removed.
pub fn gc() -> Result<bool> {
    let net_root = network_root()?;
    // The warm namespace kept for the next pod goes first (its keeper DELs it), and what a
    // killed keeper left (its lease) after it.
    warm::stop_keeper();
    let _lock = lock_network_namespace()?;
    warm::collect_orphans(&net_root);
    // The bridge is looked for even without the folder: a network of the user's own conflist
    // (`PODLAB_CNI_CONF_DIR`) keeps its leases elsewhere but its bridge here.
    remove_if_unused(&PodlabNet::podlab(&net_root).bridge, &net_root)
}

/// `podlab gc`'s part for host ports: the nat rules that podlab's pods of this network
/// namespace left without a DEL ([`hostports`]); the CNI container ids whose rules went.
pub fn collect_host_ports() -> Result<Vec<String>> {
    let net = PodlabNet::podlab(&network_root()?);
    let _lock = lock_network_namespace()?;
    hostports::collect(&net.name, &net.lease_dir())
}

/// With the network's lock held: when no pod is attached to `bridge` any more, the bridge and
/// the network's folder go (true when there was a folder).
fn remove_if_unused(bridge: &str, net_root: &Path) -> Result<bool> {
    if !remove_bridge_if_unused(bridge) || !net_root.exists() {
        return Ok(false); // pods are still attached, or nothing else to remove
    }
    std::fs::remove_dir_all(net_root)
        .with_context(|| format!("removing {}", net_root.display()))?;
    if let Some(parent) = net_root.parent() {
        let _ = std::fs::remove_dir(parent); // only when no other netns uses it
    }
    Ok(true)
}
