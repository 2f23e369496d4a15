//! What plugins print: the result of a successful ADD (spec section "Success"), and the error
//! JSON of a failure.
//!
//! A result lists the `interfaces` the plugin made (host side and, with `sandbox` set, the ones
//! inside the container's netns), the `ips` with the index of the interface each belongs to,
//! `routes` and `dns`. The pod IP is the first address of the container-side interface.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// A CNI result (spec 0.3.0 to 1.1.0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniResult {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteConfig>,
    #[serde(default)]
    pub dns: Dns,
}

/// An interface a plugin created or configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The netns path for an interface inside the container; absent for host-side ones.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
}

/// One address, `10.88.0.5/16` with its gateway, on the interface of index `interface`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    pub address: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// An index into `interfaces`; absent in IPAM plugins' results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteConfig {
    pub dst: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl CniResult {
    /// Reads a result; an `ips[].interface` that points past `interfaces` is an error.
    pub fn parse(bytes: &[u8]) -> Result<CniResult, String> {
        let result: CniResult = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        for (i, ip) in result.ips.iter().enumerate() {
            if let Some(index) = ip.interface {
                if index >= result.interfaces.len() {
                    return Err(format!(
                        "ips[{i}] ({}) names interface {index}, but there are only {}",
                        ip.address,
                        result.interfaces.len()
                    ));
                }
            }
        }
        Ok(result)
    }

    /// The index of the container-side interface `ifname` (one with `sandbox` set).
    pub fn container_interface(&self, ifname: &str) -> Option<usize> {
        self.interfaces
            .iter()
            .position(|i| i.name == ifname && !i.sandbox.is_empty())
    }

    /// The addresses of the container-side interface `ifname`, in result order; the pod IPs.
    /// A result without interfaces (an IPAM-only chain) gives all its addresses.
    pub fn pod_ips(&self, ifname: &str) -> Vec<IpAddr> {
        let container = self.container_interface(ifname);
        self.ips
            .iter()
            .filter(|ip| match (container, ip.interface) {
                (Some(index), Some(of)) => index == of,
                (None, _) => self.interfaces.is_empty(),
                (Some(_), None) => false,
            })
            .map(|ip| ip.address.addr())
            .collect()
    }
}

/// A plugin's error JSON: `{"cniVersion", "code", "msg", "details"}`, printed on stdout.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PluginError {
    pub code: u32,
    #[serde(default)]
    pub msg: String,
    #[serde(default)]
    pub details: String,
}

impl PluginError {
    /// The error JSON in `stdout`, if that is what it holds.
    pub fn parse(stdout: &[u8]) -> Option<PluginError> {
        serde_json::from_slice(stdout).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's own example of a result (SPEC.md, "Success").
    const SPEC_EXAMPLE: &str = r#"{
      "cniVersion": "1.1.0",
      "interfaces": [
          {"name": "cni0", "mac": "00:11:22:33:44:55"},
          {"name": "veth3243", "mac": "55:44:33:22:11:11"},
          {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}
      ],
      "ips": [
          {"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 2}
      ],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dns": {"nameservers": ["10.1.0.1"]}
    }"#;

    #[test]
    fn the_spec_example_gives_the_pod_ip_of_eth0() {
        let result = CniResult::parse(SPEC_EXAMPLE.as_bytes()).unwrap();
        assert_eq!(result.container_interface("eth0"), Some(2));
        assert_eq!(
            result.pod_ips("eth0"),
            ["10.1.0.5".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(result.ips[0].address.prefix_len(), 16);
        assert_eq!(result.routes[0].dst.to_string(), "0.0.0.0/0");
        assert_eq!(result.dns.nameservers, ["10.1.0.1"]);
        assert!(result.pod_ips("eth1").is_empty(), "no such interface");
    }

    #[test]
    fn host_side_and_other_interfaces_do_not_give_the_pod_ip() {
        let result = CniResult::parse(
            br#"{"cniVersion": "1.0.0",
                 "interfaces": [{"name": "eth0", "mac": "aa"},
                                {"name": "eth0", "sandbox": "/proc/9/ns/net"},
                                {"name": "net1", "sandbox": "/proc/9/ns/net"}],
                 "ips": [{"address": "192.168.7.3/24", "interface": 2},
                         {"address": "10.88.0.9/16", "interface": 1},
                         {"address": "fd00::9/64", "interface": 1},
                         {"address": "10.99.0.1/16", "interface": 0}]}"#,
        )
        .unwrap();
        let ips: Vec<String> = result
            .pod_ips("eth0")
            .iter()
            .map(|ip| ip.to_string())
            .collect();
        assert_eq!(ips, ["10.88.0.9", "fd00::9"], "dual stack, in result order");
    }

    #[test]
    fn ipam_results_and_old_versions_read_too() {
        // host-local's own result: no interfaces, no ips[].interface.
        let ipam = CniResult::parse(
            br#"{"cniVersion": "1.0.0", "ips": [{"address": "10.88.0.2/16", "gateway": "10.88.0.1"}],
                 "routes": [{"dst": "10.88.0.0/16"}], "dns": {}}"#,
        )
        .unwrap();
        assert_eq!(
            ipam.pod_ips("eth0"),
            ["10.88.0.2".parse::<IpAddr>().unwrap()]
        );
        // 0.3.1 adds ips[].version, which is ignored.
        let old = CniResult::parse(
            br#"{"cniVersion": "0.3.1", "interfaces": [{"name": "eth0", "sandbox": "/x"}],
                 "ips": [{"version": "4", "address": "10.22.0.4/24", "interface": 0}]}"#,
        )
        .unwrap();
        assert_eq!(
            old.pod_ips("eth0"),
            ["10.22.0.4".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn broken_results_are_refused() {
        let past = CniResult::parse(
            br#"{"cniVersion": "1.0.0", "interfaces": [], "ips": [{"address": "10.0.0.2/8", "interface": 3}]}"#,
        );
        assert!(past.unwrap_err().contains("interface 3"));
        assert!(CniResult::parse(
            br#"{"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.300/8"}]}"#
        )
        .is_err());
        assert!(CniResult::parse(b"").is_err());
    }

    #[test]
    fn error_json_is_read_from_stdout() {
        let err = PluginError::parse(
            br#"{"cniVersion": "1.0.0", "code": 11, "msg": "try again", "details": "lock busy"}"#,
        )
        .unwrap();
        assert_eq!(
            (err.code, err.msg.as_str(), err.details.as_str()),
            (11, "try again", "lock busy")
        );
        // What bridge 1.1.1 prints: no cniVersion, no details.
        let bridge = PluginError::parse(
            br#"{"code": 999, "msg": "failed to allocate for range 0: no IP addresses available in range set: 10.89.0.2-10.89.0.2"}"#,
        )
        .unwrap();
        assert_eq!(bridge.code, 999);
        assert!(bridge.details.is_empty());
        assert!(PluginError::parse(b"panic: runtime error").is_none());
    }
}
