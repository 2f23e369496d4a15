//! The pod's `/etc/hostname`, `/etc/hosts` and `/etc/resolv.conf`, written once per sandbox and
//! bind-mounted into every container, with the contents kubelet and containerd give them.

use crate::config::{DnsConfig, HostsConfig};

/// kubelet's first line of a hosts file it manages for a pod with its own network.
pub const MANAGED_HOSTS_HEADER: &str = "# Kubernetes-managed hosts file.\n";
/// ... and for a `hostNetwork` pod, whose hosts file is the node's.
pub const MANAGED_HOSTS_HEADER_HOST_NETWORK: &str =
    "# Kubernetes-managed hosts file (host network).\n";

/// `/etc/hostname`: the name and a newline.
pub fn render_hostname(hostname: &str) -> String {
    format!("{hostname}\n")
}

/// `/etc/hosts` of a pod with its own network: the localhost lines, then the pod's own line for
/// each of its IPs (`IP  HOST.DOMAIN  HOST` with a domain, else `IP  HOST`), then the
/// `hostAliases`.
pub fn render_hosts(hostname: &str, ips: &[String], hosts: &HostsConfig) -> String {
    let mut text = String::from(MANAGED_HOSTS_HEADER);
    text.push_str("127.0.0.1\tlocalhost\n");
    text.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    text.push_str("fe00::0\tip6-localnet\n");
    text.push_str("fe00::0\tip6-mcastprefix\n");
    text.push_str("fe00::1\tip6-allnodes\n");
    text.push_str("fe00::2\tip6-allrouters\n");
    for ip in ips {
        match hosts.domain.as_deref().filter(|d| !d.is_empty()) {
            Some(domain) => text.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n")),
            None => text.push_str(&format!("{ip}\t{hostname}\n")),
        }
    }
    text.push_str(&render_aliases(hosts));
    text
}

/// `/etc/hosts` of a `hostNetwork` pod: the node's file under kubelet's header, then the aliases.
pub fn render_host_network_hosts(node_hosts: &str, hosts: &HostsConfig) -> String {
    let mut text = String::from(MANAGED_HOSTS_HEADER_HOST_NETWORK);
    text.push_str(node_hosts);
    text.push_str(&render_aliases(hosts));
    text
}

fn render_aliases(hosts: &HostsConfig) -> String {
    if hosts.aliases.is_empty() {
        return String::new();
    }
    let mut text = String::from("\n# Entries added by HostAliases.\n");
    for alias in &hosts.aliases {
        for name in &alias.hostnames {
            text.push_str(&format!("{}\t{name}\n", alias.ip));
        }
    }
    text
}

/// `/etc/resolv.conf` from a DNS config, in containerd's order: `search`, one `nameserver` per
/// server, `options`.
pub fn render_resolv_conf(dns: &DnsConfig) -> String {
    let mut text = String::new();
    if !dns.searches.is_empty() {
        text.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    for server in &dns.servers {
        text.push_str(&format!("nameserver {server}\n"));
    }
    if !dns.options.is_empty() {
        text.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HostAlias;

    #[test]
    fn hosts_without_an_ip_has_only_the_localhost_lines() {
        let text = render_hosts("web", &[], &HostsConfig::default());
        assert!(text.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(text.ends_with("fe00::2\tip6-allrouters\n"), "{text}");
        assert!(!text.contains("web"));
    }

    #[test]
    fn hosts_with_ip_domain_and_aliases() {
        let hosts = HostsConfig {
            domain: Some("sub.default.svc.cluster.local".into()),
            aliases: vec![HostAlias {
                ip: "10.1.2.3".into(),
                hostnames: vec!["foo".into(), "bar".into()],
            }],
        };
        let text = render_hosts("web", &["10.88.0.5".into()], &hosts);
        assert!(
            text.contains("10.88.0.5\tweb.sub.default.svc.cluster.local\tweb\n"),
            "{text}"
        );
        assert!(
            text.ends_with("\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo\n10.1.2.3\tbar\n"),
            "{text}"
        );
        let plain = render_hosts("web", &["10.88.0.5".into()], &HostsConfig::default());
        assert!(plain.ends_with("10.88.0.5\tweb\n"), "{plain}");
    }

    #[test]
    fn host_network_hosts_is_the_nodes_file() {
        let text = render_host_network_hosts("127.0.0.1 localhost\n", &HostsConfig::default());
        assert_eq!(
            text,
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
        );
    }

    #[test]
    fn resolv_conf_in_containerds_order() {
        let dns = DnsConfig {
            servers: vec!["10.96.0.10".into(), "10.96.0.11".into()],
            searches: vec![
                "default.svc.cluster.local".into(),
                "svc.cluster.local".into(),
            ],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            render_resolv_conf(&dns),
            "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\n\
             nameserver 10.96.0.11\noptions ndots:5\n"
        );
        assert_eq!(render_resolv_conf(&DnsConfig::default()), "");
        assert_eq!(render_hostname("web"), "web\n");
    }
}
