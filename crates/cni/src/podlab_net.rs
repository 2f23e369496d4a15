//! podlab's own network: one bridge on the node, one subnet, and nothing beyond it.
//!
//! The same description drives both paths. For CNI it becomes the default conflist (bridge
//! plugin + host-local IPAM), written into the configuration folder when that folder has none;
//! for the built-in path it is the bridge, gateway and address range to use. Both keep their
//! leases in `<data_dir>/<name>/`, one file per address, in host-local's layout.
//!
//! What is deliberately absent: `ipMasq` (no NAT), any route but the subnet's own (the pod's
//! only route is the on-link one the kernel adds with its address, so pods reach each other
//! and the node's bridge address, and nothing else).
//!
//! The chain ends with `portmap` (`capabilities: {"portMappings": true}`), as containerd's
//! default conflist does: a pod's host ports become DNAT rules on this node towards the pod's
//! own address, plus portmap's `snat` for connections from 127.0.0.1 (it marks them and
//! masquerades them to the bridge address, and sets `route_localnet` on the bridge), nothing
//! towards any other network. A pod without host ports does not run it at all
//! ([`crate::ConfList::idle`]).
//!
//! One side effect to know about: with `isGateway`, the bridge plugin (v1.1.1, Debian's) writes
//! `1` to `/proc/sys/net/ipv4/ip_forward` of the network namespace it runs in, which is the
//! caller's. That switch is per network namespace: in the tests and benchmarks, which run in a
//! namespace of their own, only that namespace changes. The built-in path never touches it.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde_json::{json, Value};

use crate::conf::conf_files;
use crate::{Error, Result};

/// The file name the default conflist is written under.
pub const DEFAULT_CONFLIST_FILE: &str = "10-podlab.conflist";

/// podlab's network, for either path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodlabNet {
    /// The network's name (also the lease folder's name).
    pub name: String,
    pub bridge: String,
    pub subnet: Ipv4Net,
    /// First and last address handed out; by default the subnet's hosts after the gateway.
    pub range_start: Option<Ipv4Addr>,
    pub range_end: Option<Ipv4Addr>,
    /// Give the bridge the gateway address (the node's address on the pod subnet, how the
    /// node reaches its pods).
    pub is_gateway: bool,
    /// Where leases live: `<data_dir>/<name>/`. Inside podlab's root, never /var/lib/cni.
    pub data_dir: PathBuf,
}

impl PodlabNet {
    /// `podlab` on `podlab0`, 10.88.0.0/16, leases under `data_dir`.
    pub fn new(data_dir: &Path) -> PodlabNet {
        PodlabNet {
            name: "podlab".to_owned(),
            bridge: "podlab0".to_owned(),
            subnet: "10.88.0.0/16".parse().expect("a valid prefix"),
            range_start: None,
            range_end: None,
            is_gateway: true,
            data_dir: data_dir.to_owned(),
        }
    }

    /// The defaults with leases under `<root>/cni/ipam`.
    pub fn podlab(root: &Path) -> PodlabNet {
        PodlabNet::new(&root.join("cni").join("ipam"))
    }

    /// The gateway: the subnet's first host address (host-local's default).
    pub fn gateway(&self) -> Ipv4Addr {
        offset(self.subnet.network(), 1)
    }

    /// The addresses handed out, first and last (the gateway inside it is skipped).
    pub fn range(&self) -> Result<(Ipv4Addr, Ipv4Addr)> {
        let start = self.range_start.unwrap_or(offset(self.subnet.network(), 1));
        let end = self
            .range_end
            .unwrap_or(offset(self.subnet.broadcast(), -1));
        for address in [start, end] {
            if !self.subnet.contains(&address) {
                return Err(Error::Invalid(format!(
                    "range address {address} is outside the subnet {}",
                    self.subnet
                )));
            }
        }
        if u32::from(start) > u32::from(end) || self.subnet.prefix_len() > 30 {
            return Err(Error::Invalid(format!(
                "empty address range {start}-{end} in {}",
                self.subnet
            )));
        }
        Ok((start, end))
    }

    /// The leases folder: `<data_dir>/<name>`.
    pub fn lease_dir(&self) -> PathBuf {
        self.data_dir.join(&self.name)
    }

    /// The default conflist: bridge + host-local, no masquerade, no route but the subnet's.
    pub fn conflist(&self) -> Value {
        let mut range = json!({
            "subnet": self.subnet.to_string(),
            "gateway": self.gateway().to_string(),
        });
        if let Some(start) = self.range_start {
            range["rangeStart"] = start.to_string().into();
        }
        if let Some(end) = self.range_end {
            range["rangeEnd"] = end.to_string().into();
        }
        json!({
            "cniVersion": "1.0.0",
            "name": self.name,
            "plugins": [{
                "type": "bridge",
                "bridge": self.bridge,
                "isGateway": self.is_gateway,
                "isDefaultGateway": false,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[range]],
                    "routes": [],
                    "dataDir": self.data_dir.display().to_string(),
                }
            }, {
                "type": "portmap",
                "capabilities": {"portMappings": true},
                "snat": true,
            }]
        })
    }

    /// The default conflist as written to disk.
    pub fn conflist_text(&self) -> String {
        let mut text = serde_json::to_string_pretty(&self.conflist()).expect("JSON serializes");
        text.push('\n');
        text
    }

    /// The default conflist as an older podlab wrote it, before portmap was in the chain.
    fn conflist_text_before_portmap(&self) -> String {
        let mut list = self.conflist();
        if let Some(plugins) = list["plugins"].as_array_mut() {
            plugins.retain(|p| p["type"] != "portmap");
        }
        let mut text = serde_json::to_string_pretty(&list).expect("JSON serializes");
        text.push('\n');
        text
    }

    /// Writes the default conflist into `conf_dir` when that folder has no configuration file
    /// yet (first use), or when its only file is an older podlab default, byte for byte (one
    /// written before portmap was in the chain); a folder with any other file, or a default
    /// someone edited, is left as it is. Returns the file written.
    pub fn write_if_missing(&self, conf_dir: &Path) -> Result<Option<PathBuf>> {
        let path = conf_dir.join(DEFAULT_CONFLIST_FILE);
        let text = self.conflist_text();
        match conf_files(conf_dir)?.as_slice() {
            [] => {}
            [only] if *only == path => {
                let older = std::fs::read_to_string(&path)
                    .is_ok_and(|old| old == self.conflist_text_before_portmap());
                if !older {
                    return Ok(None);
                }
            }
            _ => return Ok(None),
        }
        crate::cache::write_atomically(
            &path,
            text.as_bytes(),
            "writing the default CNI conflist",
            crate::cache::Durability::PowerLoss,
        )?;
        Ok(Some(path))
    }
}

fn offset(address: Ipv4Addr, by: i64) -> Ipv4Addr {
    Ipv4Addr::from((i64::from(u32::from(address)) + by) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfList;

    #[test]
    fn the_default_conflist_is_valid_and_has_no_way_out() {
        let net = PodlabNet::new(Path::new("/run/podlab/cni/ipam"));
        let text = net.conflist_text();
        let list =
            ConfList::from_bytes(Path::new(DEFAULT_CONFLIST_FILE), text.as_bytes(), true).unwrap();
        assert_eq!(list.name, "podlab");
        assert_eq!(list.cni_version, "1.0.0");
        assert_eq!(list.plugins.len(), 2, "bridge, then portmap");
        let portmap = &list.plugins[1].raw;
        assert_eq!(portmap["type"], "portmap");
        assert_eq!(portmap["capabilities"]["portMappings"], true);
        let bridge = &list.plugins[0].raw;
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], "podlab0");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["isDefaultGateway"], false);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["hairpinMode"], true);
        let ipam = &bridge["ipam"];
        assert_eq!(ipam["type"], "host-local");
        assert_eq!(ipam["ranges"][0][0]["subnet"], "10.88.0.0/16");
        assert_eq!(ipam["ranges"][0][0]["gateway"], "10.88.0.1");
        assert_eq!(ipam["routes"], json!([]), "no default route, no route out");
        assert_eq!(ipam["dataDir"], "/run/podlab/cni/ipam");
        assert!(!text.contains("0.0.0.0/0"));
    }

    #[test]
    fn ranges_follow_host_local_defaults_and_are_checked() {
        let mut net = PodlabNet::new(Path::new("/x"));
        net.subnet = "10.89.0.0/24".parse().unwrap();
        assert_eq!(net.gateway().to_string(), "10.89.0.1");
        let (start, end) = net.range().unwrap();
        assert_eq!(
            (start.to_string(), end.to_string()),
            ("10.89.0.1".into(), "10.89.0.254".into())
        );
        net.range_start = Some("10.89.0.2".parse().unwrap());
        net.range_end = Some("10.89.0.2".parse().unwrap());
        assert!(net.range().is_ok());
        let conf = net.conflist();
        assert_eq!(
            conf["plugins"][0]["ipam"]["ranges"][0][0]["rangeEnd"],
            "10.89.0.2"
        );
        net.range_end = Some("10.90.0.2".parse().unwrap());
        assert!(net.range().is_err());
    }

    #[test]
    fn the_default_is_written_only_into_an_empty_folder() {
        let dir = std::env::temp_dir().join(format!("podlab-cni-default-{}", std::process::id()));
        let net = PodlabNet::new(Path::new("/x"));
        let path = dir.join(DEFAULT_CONFLIST_FILE);
        let first = net.write_if_missing(&dir).unwrap();
        let second = net.write_if_missing(&dir).unwrap();
        // An older default (without portmap) is brought up to date; another file is the user's.
        std::fs::write(&path, net.conflist_text_before_portmap()).unwrap();
        let refreshed = net.write_if_missing(&dir).unwrap();
        std::fs::write(dir.join("20-mine.conflist"), "{}").unwrap();
        let beside_another = net.write_if_missing(&dir).unwrap();
        std::fs::remove_file(dir.join("20-mine.conflist")).unwrap();
        let loaded = ConfList::load_dir(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(first, Some(path.clone()));
        assert_eq!(second, None);
        assert_eq!(refreshed, first);
        assert_eq!(beside_another, None);
        assert_eq!(loaded.name, "podlab");
        assert_eq!(loaded.plugins.len(), 2, "bridge, then portmap");
    }

    /// Lab 10 breaks the default conflist on purpose (a plugin type misspelt) and the user
    /// mends it: the next command must not quietly put the default back (it did once the
    /// older-default refresh came, and the lab's pod never failed).
    #[test]
    fn regression_an_edited_default_conflist_is_left_as_the_user_made_it() {
        let dir = std::env::temp_dir().join(format!("podlab-cni-edited-{}", std::process::id()));
        let net = PodlabNet::new(Path::new("/x"));
        let path = dir.join(DEFAULT_CONFLIST_FILE);
        net.write_if_missing(&dir).unwrap();
        let edited = net
            .conflist_text()
            .replace("\"type\": \"bridge\"", "\"type\": \"brigde\"");
        std::fs::write(&path, &edited).unwrap();
        let rewritten = net.write_if_missing(&dir).unwrap();
        let now = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(rewritten, None);
        assert!(edited.contains("brigde"));
        assert_eq!(now, edited);
    }
}
