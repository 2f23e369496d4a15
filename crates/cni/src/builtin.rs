//! The built-in path: what the bridge and host-local plugins do, done directly over netlink.
//!
//! No process is started and no `ip` is run: one rtnetlink handle in the node's namespace
//! makes sure the bridge is there (with the gateway address, up), creates the veth with its peer
//! born inside the pod's namespace as `eth0`, attaches the host end and brings it up; one handle
//! in the pod's namespace brings `lo` and `eth0` up and gives `eth0` its address, which also
//! gives the pod its only route (the subnet, on-link). The address comes from [`crate::ipam`].
//!
//! The host end's name is derived from the attachment (`veth` + 8 hex digits of a hash of the
//! network, container id and interface), so teardown needs no state to find it: deleting it
//! deletes the pod end too. The result has the bridge plugin's shape: interfaces bridge, host
//! veth, container interface (index 2, `sandbox` set), and the address on index 2.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsFd, BorrowedFd};

use podlab_ns::net::Netlink;
use podlab_ns::{ops, NsKind};

use crate::cache::{self, CachedAttachment};
use crate::ipam::LeaseStore;
use crate::result::{CniResult, Dns, Interface, IpConfig};
use crate::{Attachment, Error, NetworkStatus, PodNetwork, PodlabNet, Result};

/// The spec version of the results the built-in path gives.
const RESULT_VERSION: &str = "1.0.0";

/// podlab's network made over netlink, with podlab's own lease store.
#[derive(Debug, Clone)]
pub struct BuiltinNetwork {
    net: PodlabNet,
    store: LeaseStore,
}

impl BuiltinNetwork {
    pub fn new(net: PodlabNet) -> Result<BuiltinNetwork> {
        crate::args::check_network_name(&net.name).map_err(Error::Invalid)?;
        crate::args::check_ifname(&net.bridge)?;
        let (start, end) = net.range()?;
        let store = LeaseStore::new(&net.lease_dir(), &net.name, start, end, net.gateway());
        Ok(BuiltinNetwork { net, store })
    }

    /// The lease store (to list or free leases).
    pub fn leases(&self) -> &LeaseStore {
        &self.store
    }

    /// The host end's name of the veth of `attachment`.
    pub fn host_veth(&self, attachment: &Attachment) -> String {
        host_veth_name(&self.net.name, &attachment.container_id, &attachment.ifname)
    }

    /// Makes the attachment; `made_veth` tells the cleanup whether the veth is ours to delete
    /// (a name clash must not delete someone else's).
    fn attach(
        &self,
        a: &Attachment,
        pod_ns: BorrowedFd<'_>,
        ip: Ipv4Addr,
        made_veth: &mut bool,
    ) -> Result<CniResult> {
        let host = self.host_veth(a);
        let gateway = self.net.gateway();
        let prefix_len = self.net.subnet.prefix_len();

        let mut node = Netlink::open()?;
        let bridge_up = match node.link(&self.net.bridge)? {
            Some(link) => link.up,
            None => {
                ignore_exists(node.create_bridge(&self.net.bridge))?;
                false
            }
        };
        if self.net.is_gateway {
            ignore_exists(node.add_address(&self.net.bridge, gateway.into(), prefix_len))?;
        }
        if !bridge_up {
            node.set_up(&self.net.bridge)?;
        }
        node.create_veth(&host, &a.ifname, Some(pod_ns))?;
        *made_veth = true;
        node.set_master(&host, &self.net.bridge)?;
        node.set_up(&host)?;
        podlab_fault::point_reached("network.after-veth");

        let mut pod = Netlink::open_in(pod_ns)?;
        pod.loopback_up()?;
        pod.add_address(&a.ifname, ip.into(), prefix_len)?;
        pod.set_up(&a.ifname)?;

        let mac = |link: Option<podlab_ns::net::Link>| link.and_then(|l| l.mac).unwrap_or_default();
        // The bridge takes a port's MAC when its first port comes, so it is read afterwards.
        let interfaces = vec![
            Interface {
                name: self.net.bridge.clone(),
                mac: mac(node.link(&self.net.bridge)?),
                mtu: None,
                sandbox: String::new(),
            },
            Interface {
                name: host.clone(),
                mac: mac(node.link(&host)?),
                mtu: None,
                sandbox: String::new(),
            },
            Interface {
                name: a.ifname.clone(),
                mac: mac(pod.link(&a.ifname)?),
                mtu: None,
                sandbox: a.netns_path.display().to_string(),
            },
        ];
        let address = ipnet::IpNet::new(IpAddr::V4(ip), prefix_len).expect("prefix fits");
        Ok(CniResult {
            cni_version: RESULT_VERSION.to_owned(),
            interfaces,
            ips: vec![IpConfig {
                address,
                gateway: self.net.is_gateway.then_some(IpAddr::V4(gateway)),
                interface: Some(2),
            }],
            routes: Vec::new(),
            dns: Dns::default(),
        })
    }

    /// Undoes the attachment; `ip`: the address it was given, when known (its lease is then
    /// the only one read).
    fn detach(&self, a: &Attachment, delete_veth: bool, ip: Option<Ipv4Addr>) -> Result<()> {
        // The veth dies with the pod's namespace; when that is still there, deleting the host
        // end takes the pod end with it. Either way, by name, from the node.
        if delete_veth {
            Netlink::open()?.delete_link(&self.host_veth(a))?;
        }
        match ip {
            Some(ip) => self.store.release_at(ip, &a.container_id, &a.ifname)?,
            None => self.store.release(&a.container_id, &a.ifname)?,
        };
        Ok(())
    }

    fn cache_path(&self, a: &Attachment) -> std::path::PathBuf {
        cache::cache_path(&a.cache_dir, &self.net.name, &a.container_id, &a.ifname)
    }
}

impl PodNetwork for BuiltinNetwork {
    fn setup(&self, a: &Attachment) -> Result<NetworkStatus> {
        a.check()?;
        if a.capability_args
            .get(crate::conf::PORT_MAPPINGS)
            .and_then(serde_json::Value::as_array)
            .is_some_and(|mappings| !mappings.is_empty())
        {
            // The built-in path makes the bridge and veths only; host ports are portmap's.
            return Err(Error::NoCapability {
                network: self.net.name.clone(),
                path: "<built-in network>".into(),
                capability: crate::conf::PORT_MAPPINGS,
            });
        }
        let pod_ns = ops::open(&a.netns_path, NsKind::Net)?;
        // The attachment's cache entry is written when an ADD succeeds and removed by its DEL:
        // without one it holds no address, and the lease store need not read every lease to
        // know it.
        if self.cache_path(a).exists() {
            return Err(Error::Invalid(format!(
                "{} ({}) is already attached to network {:?}: a DEL must come before a second ADD",
                a.container_id, a.ifname, self.net.name
            )));
        }
        let ip = self.store.allocate_new(&a.container_id, &a.ifname)?;
        podlab_fault::point_reached("network.after-lease");
        let mut made_veth = false;
        let made = self.attach(a, pod_ns.as_fd(), ip, &mut made_veth).and_then(|result| {
            let raw = serde_json::to_value(&result).expect("a result serializes");
            cache::store(
                &self.cache_path(a),
                &CachedAttachment {
                    kind: CachedAttachment::KIND.to_owned(),
                    container_id: a.container_id.clone(),
                    ifname: a.ifname.clone(),
                    network_name: self.net.name.clone(),
                    netns: a.netns_path.display().to_string(),
                    cni_args: a.cni_args()?,
                    capability_args: Default::default(),
                    config: serde_json::json!({"builtin": self.net.name, "bridge": self.net.bridge}),
                    result: raw.clone(),
                },
            )?;
            Ok((result, raw))
        });
        match made {
            Ok((result, raw)) => Ok(NetworkStatus::of(
                &self.net.name,
                &a.ifname,
                result,
                raw.to_string(),
            )),
            Err(error) => match self.detach(a, made_veth, Some(ip)) {
                Ok(()) => Err(error),
                Err(cleanup) => Err(Error::CleanupFailed {
                    error: Box::new(error),
                    cleanup: Box::new(cleanup),
                }),
            },
        }
    }

    fn teardown(&self, a: &Attachment) -> Result<()> {
        a.check()?;
        // Only a hint: without it (no cache, or an unreadable one), every lease is read.
        let given = cache::load(&self.cache_path(a))
            .ok()
            .flatten()
            .and_then(|cached| serde_json::from_value::<CniResult>(cached.result).ok())
            .and_then(|result| {
                result
                    .pod_ips(&a.ifname)
                    .into_iter()
                    .find_map(|ip| match ip {
                        IpAddr::V4(ip) => Some(ip),
                        IpAddr::V6(_) => None,
                    })
            });
        self.detach(a, true, given)?;
        cache::remove(&self.cache_path(a))
    }

    fn check(&self, a: &Attachment) -> Result<()> {
        a.check()?;
        let problem = |problem: String| Error::Check {
            network: self.net.name.clone(),
            problem,
        };
        let leased: Vec<Ipv4Addr> = self
            .store
            .leases()?
            .into_iter()
            .filter(|l| l.container_id == a.container_id && l.ifname == a.ifname)
            .map(|l| l.ip)
            .collect();
        let [ip] = leased[..] else {
            return Err(problem(format!(
                "{} ({}) holds {} leases, not one",
                a.container_id,
                a.ifname,
                leased.len()
            )));
        };
        let pod_ns = ops::open(&a.netns_path, NsKind::Net)
            .map_err(|e| problem(format!("the pod's network namespace: {e}")))?;
        let mut pod = Netlink::open_in(pod_ns.as_fd())?;
        match pod.link(&a.ifname)? {
            Some(link) if link.up => {}
            Some(_) => return Err(problem(format!("{} is down in the pod", a.ifname))),
            None => return Err(problem(format!("the pod has no {}", a.ifname))),
        }
        let has_ip = pod.addresses()?.iter().any(|x| {
            x.ifname == a.ifname
                && x.addr == IpAddr::V4(ip)
                && x.prefix_len == self.net.subnet.prefix_len()
        });
        if !has_ip {
            return Err(problem(format!("{} lacks its address {ip}", a.ifname)));
        }
        let mut node = Netlink::open()?;
        let bridge = node
            .link(&self.net.bridge)?
            .ok_or_else(|| problem(format!("no bridge {}", self.net.bridge)))?;
        let host = self.host_veth(a);
        match node.link(&host)? {
            Some(link) if link.master == Some(bridge.index) => Ok(()),
            Some(_) => Err(problem(format!(
                "{host} is not attached to {}",
                self.net.bridge
            ))),
            None => Err(problem(format!("the node has no {host}"))),
        }
    }

    fn name(&self) -> String {
        self.net.name.clone()
    }
}

fn ignore_exists(done: podlab_ns::Result<()>) -> podlab_ns::Result<()> {
    match done {
        Err(err) if err.errno() == Some(nix::Error::EEXIST) => Ok(()),
        other => other,
    }
}

/// `veth` + 8 hex digits of FNV-1a over the network, container id and interface name: stable
/// across calls, 12 bytes (an interface name has at most 15).
pub fn host_veth_name(network: &str, container_id: &str, ifname: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in [network, container_id, ifname].join("\0").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("veth{:08x}", (hash ^ (hash >> 32)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_veth_names_are_stable_distinct_and_short() {
        let a = host_veth_name("podlab", "abc", "eth0");
        assert_eq!(a, host_veth_name("podlab", "abc", "eth0"));
        assert_ne!(a, host_veth_name("podlab", "abd", "eth0"));
        assert_ne!(a, host_veth_name("podlab", "abc", "eth1"));
        assert_eq!(a.len(), 12);
        assert!(a.starts_with("veth"));
    }
}
