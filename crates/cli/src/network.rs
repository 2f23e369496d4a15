//! Which network pods get, and the glue that hands it to the runtime (containerd's CRI plugin
//! calls libcni the same way): `PODLAB_NETWORK=cni` (the default: podlab's conflist through
//! the real plugins in /usr/lib/cni), `builtin` (podlab's netlink fast path), or `none` (`lo`
//! only).
//!
//! Both paths put pods on the bridge `podlab0` with podlab's subnet, and nothing beyond it: no
//! NAT, no default route, and the node's IPv4 forwarding left as it was. The bridge is podlab's, so it goes when its last pod goes: every
//! attach and detach takes `<root>/network.lock`, and a detach that leaves the bridge without a
//! port removes it.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use podlab_cni::{open_network, Attachment, NetworkKind, PodlabNet};
use podlab_runtime::{NetworkAttachment, NetworkPlugin, PodNetwork};

pub const ENV_NETWORK: &str = "PODLAB_NETWORK";

const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// The network for pods under `root`, as `PODLAB_NETWORK` chooses it.
pub fn plugin(root: &Path) -> Result<Option<Arc<dyn NetworkPlugin>>> {
    let kind = std::env::var(ENV_NETWORK).unwrap_or_else(|_| "cni".into());
    if kind == "none" {
        return Ok(None);
    }
    if kind != "cni" && kind != "builtin" {
        bail!("{ENV_NETWORK}={kind:?}: expected cni, builtin or none");
    }
    let network_kind =
        NetworkKind::podlab(&kind, root).with_context(|| format!("the {kind} network"))?;
    let network =
        open_network(network_kind).with_context(|| format!("opening the {kind} network"))?;
    Ok(Some(Arc::new(PodlabNetwork {
        kind,
        network,
        bridge: PodlabNet::podlab(root).bridge,
        lock: root.join("network.lock"),
    })))
}

struct PodlabNetwork {
    kind: String,
    network: Box<dyn podlab_cni::PodNetwork>,
    bridge: String,
    lock: PathBuf,
}

impl PodlabNetwork {
    fn attachment(pod: &PodNetwork<'_>) -> Attachment {
        // The ADD result is cached in the sandbox's folder (`<sandbox>/ns/net` → `<sandbox>`),
        // which goes with the sandbox.
        let sandbox_dir = pod
            .netns
            .parent()
            .and_then(Path::parent)
            .unwrap_or(pod.netns);
        Attachment::new(pod.sandbox_id.as_str(), pod.netns, sandbox_dir).for_pod(
            &pod.metadata.namespace,
            &pod.metadata.name,
            &pod.metadata.uid,
        )
    }

    /// Serialises attach and detach, so that removing an empty bridge never races an attach.
    fn locked<T>(&self, f: impl FnOnce() -> T) -> Result<T, podlab_runtime::network::PluginError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.lock)?;
        // SAFETY: flock on a descriptor we own; released when `file` is dropped.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(Box::new(std::io::Error::last_os_error()));
        }
        Ok(f())
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
        let status = self.locked(|| {
            // The bridge plugin turns on IPv4 forwarding for the node whenever it makes the
            // bridge a gateway. Pods on podlab0 reach each other and the node on-link, so
            // forwarding is not needed, and podlab forwards nothing towards the host's network:
            // the node's setting is put back as it was.
            let forwarding = std::fs::read_to_string(IP_FORWARD).ok();
            let status = self.network.setup(&attachment);
            if let Some(before) = forwarding {
                if std::fs::read_to_string(IP_FORWARD).ok().as_deref() != Some(before.as_str()) {
                    let _ = std::fs::write(IP_FORWARD, before.trim());
                }
            }
            status
        })??;
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
        self.locked(|| {
            self.network.teardown(&attachment)?;
            remove_bridge_if_unused(&self.bridge);
            Ok::<(), podlab_cni::Error>(())
        })??;
        Ok(())
    }
}

/// Deletes podlab's bridge when no interface is attached to it any more.
fn remove_bridge_if_unused(bridge: &str) {
    let Ok(mut netlink) = podlab_ns::net::Netlink::open() else {
        return;
    };
    let Ok(links) = netlink.links() else { return };
    let Some(index) = links.iter().find(|l| l.name == bridge).map(|l| l.index) else {
        return;
    };
    if !links.iter().any(|l| l.master == Some(index)) {
        let _ = netlink.delete_link(bridge);
    }
}
