//! kubelet's sysctl admission (`pkg/kubelet/sysctl`): a pod's `spec.securityContext.sysctls`
//! must each be on the node's allowlist, or the pod is rejected before anything is made for
//! it: phase Failed, reason `SysctlForbidden`, a Warning event with the same words.
//!
//! The allowlist is kubelet's safe set (namespaced, and with no effect on any other pod: the
//! names of `safe_sysctls.go` in Kubernetes 1.34, each kept only when the running kernel has
//! it), plus the node's `--allowed-unsafe-sysctls` (podlab: `podlab node
//! --allowed-unsafe-sysctls`, or `PODLAB_NODE_ALLOWED_UNSAFE_SYSCTLS`), names or patterns
//! ending in `*`. An unsafe entry must be namespaced (net, or kernel.shm/msg/sem and
//! fs.mqueue of ipc) or the node refuses to start: nothing a pod asks for can ever reach a
//! global kernel parameter. Allowed sysctls are written by the runtime inside the sandbox's new
//! namespaces ([`podlab_ns::sysctl`]), never on the host.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use podlab_ns::sysctl::{namespace_of, to_dots};
use podlab_ns::NsKind;

/// kubelet's `ForbiddenReason`.
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";
/// `PODLAB_NODE_ALLOWED_UNSAFE_SYSCTLS`: kubelet's `--allowed-unsafe-sysctls`, comma-separated.
pub const ENV_ALLOWED_UNSAFE_SYSCTLS: &str = "PODLAB_NODE_ALLOWED_UNSAFE_SYSCTLS";

/// kubelet's safe sysctls, with the kernel (major, minor) that first has each.
const SAFE_SYSCTLS: &[(&str, Option<(u32, u32)>)] = &[
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
    ("net.ipv4.tcp_fin_timeout", Some((4, 6))),
    ("net.ipv4.tcp_keepalive_intvl", Some((4, 5))),
    ("net.ipv4.tcp_keepalive_probes", Some((4, 5))),
    ("net.ipv4.tcp_rmem", Some((4, 15))),
    ("net.ipv4.tcp_wmem", Some((4, 15))),
];

/// The safe sysctls a kernel of `version` has (kubelet's `SafeSysctlAllowlist`); those that
/// need a known version are dropped when the version cannot be read.
pub fn safe_sysctls(version: Option<(u32, u32)>) -> Vec<&'static str> {
    SAFE_SYSCTLS
        .iter()
        .filter(|(_, needs)| needs.is_none_or(|needs| version.is_some_and(|v| v >= needs)))
        .map(|(name, _)| *name)
        .collect()
}

/// The running kernel's (major, minor), from its release (`uname -r`).
pub fn kernel_version() -> Option<(u32, u32)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>());
    Some((numbers.next()?.ok()?, numbers.next()?.ok()?))
}

/// kubelet's `patternAllowlist`: exact names and prefixes (a pattern without its `*`), each
/// with the namespace it belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    sysctls: BTreeMap<String, NsKind>,
    prefixes: BTreeMap<String, NsKind>,
}

impl Allowlist {
    /// kubelet's `NewAllowlist`, with its error messages.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Allowlist, String> {
        let mut list = Allowlist::default();
        for pattern in patterns {
            let pattern = pattern.as_ref();
            if !is_valid_sysctl_pattern(pattern) {
                return Err(format!(
                    "sysctl {pattern:?} must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
                ));
            }
            let dotted = to_dots(pattern);
            match dotted.strip_suffix('*') {
                Some(prefix) => {
                    let kind = namespace_of(prefix).ok_or_else(|| {
                        format!("the sysctls {dotted:?} are not known to be namespaced")
                    })?;
                    list.prefixes.insert(prefix.to_string(), kind);
                }
                None => {
                    let kind = namespace_of(&dotted).ok_or_else(|| {
                        format!("the sysctl {dotted:?} are not known to be namespaced")
                    })?;
                    list.sysctls.insert(dotted, kind);
                }
            }
        }
        Ok(list)
    }

    /// The node's allowlist: the safe sysctls this kernel has, and the unsafe ones the node
    /// allows.
    pub fn for_node<S: AsRef<str>>(allowed_unsafe: &[S]) -> Result<Allowlist, String> {
        let mut patterns: Vec<String> = safe_sysctls(kernel_version())
            .into_iter()
            .map(String::from)
            .collect();
        patterns.extend(allowed_unsafe.iter().map(|s| s.as_ref().to_string()));
        Allowlist::new(&patterns)
    }

    /// kubelet's `validateSysctl`: Ok when allowed; otherwise why not.
    fn check(&self, sysctl: &str, host_net: bool, host_ipc: bool) -> Result<(), String> {
        let sysctl = to_dots(sysctl);
        let kind = self.sysctls.get(&sysctl).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(prefix, _)| sysctl.starts_with(prefix.as_str()))
                .map(|(_, kind)| *kind)
        });
        match kind {
            None => Err(format!("{sysctl:?} not allowlisted")),
            Some(NsKind::Ipc) if host_ipc => {
                Err(format!("{sysctl:?} not allowed with host ipc enabled"))
            }
            Some(NsKind::Net) if host_net => {
                Err(format!("{sysctl:?} not allowed with host net enabled"))
            }
            Some(_) => Ok(()),
        }
    }

    /// kubelet's `Admit`: None when every sysctl of the pod is allowed, else the rejection's
    /// message (its reason is [`FORBIDDEN_REASON`]).
    pub fn admit(&self, pod: &Pod) -> Option<String> {
        let spec = pod.spec.as_ref()?;
        let host_net = spec.host_network.unwrap_or(false);
        let host_ipc = spec.host_ipc.unwrap_or(false);
        let sysctls = spec.security_context.as_ref()?.sysctls.as_ref()?;
        sysctls
            .iter()
            .find_map(|s| self.check(&s.name, host_net, host_ipc).err())
            .map(|why| format!("forbidden sysctl: {why}"))
    }
}

/// The pod's sysctls as the sandbox is asked to set them (CRI `LinuxPodSandboxConfig.sysctls`),
/// names in their dotted spelling.
pub fn sandbox_sysctls(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|c| c.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (to_dots(&s.name), s.value.clone()))
        .collect()
}

/// `IsValidSysctlPattern`: a sysctl name whose last level may end in (or be) `*`.
fn is_valid_sysctl_pattern(pattern: &str) -> bool {
    if pattern.is_empty() || pattern.len() > 253 {
        return false;
    }
    let levels: Vec<&str> = pattern.split(['.', '/']).collect();
    let (last, inner) = levels
        .split_last()
        .expect("split yields one level at least");
    let word = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let segment = |s: &str| {
        let b = s.as_bytes();
        !b.is_empty()
            && word(b[0])
            && word(b[b.len() - 1])
            && b.iter().all(|c| word(*c) || *c == b'-' || *c == b'_')
    };
    let b = last.as_bytes();
    let last_ok = match b.len() {
        0 => false,
        1 => word(b[0]) || b[0] == b'*',
        n => {
            word(b[0])
                && (word(b[n - 1]) || b[n - 1] == b'*')
                && b[1..n - 1]
                    .iter()
                    .all(|c| word(*c) || *c == b'-' || *c == b'_')
        }
    };
    inner.iter().all(|s| segment(s)) && last_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::pod;

    fn with_sysctls(names: &[&str], host_network: bool) -> Pod {
        let list: Vec<String> = names
            .iter()
            .map(|n| format!("{{name: {n}, value: '1'}}"))
            .collect();
        let mut p = pod(&format!(
            "{{apiVersion: v1, kind: Pod, metadata: {{name: p}}, spec: {{securityContext: {{sysctls: [{}]}}, containers: [{{name: c, image: busybox}}]}}}}",
            list.join(", ")
        ));
        // The API server refuses a net sysctl with hostNetwork; kubelet checks it again.
        p.spec.as_mut().unwrap().host_network = Some(host_network);
        p
    }

    #[test]
    fn the_safe_set_is_kubelets_for_the_kernel() {
        let all = safe_sysctls(Some((6, 1)));
        assert_eq!(all.len(), 12);
        assert!(all.contains(&"net.ipv4.tcp_wmem"));
        let old = safe_sysctls(Some((4, 5)));
        assert!(old.contains(&"net.ipv4.tcp_keepalive_probes"));
        assert!(!old.contains(&"net.ipv4.tcp_fin_timeout"));
        assert!(!old.contains(&"net.ipv4.tcp_rmem"));
        assert_eq!(
            safe_sysctls(None).len(),
            5,
            "unknown kernel: the unversioned five"
        );
        assert!(kernel_version().is_some());
    }

    #[test]
    fn safe_sysctls_are_admitted_and_unsafe_ones_only_when_the_node_allows_them() {
        let node = Allowlist::for_node::<&str>(&[]).unwrap();
        assert_eq!(
            node.admit(&with_sysctls(
                &["net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced"],
                false
            )),
            None
        );
        let unsafe_pod = with_sysctls(&["net.ipv4.tcp_syncookies", "kernel.msgmax"], false);
        assert_eq!(
            node.admit(&unsafe_pod).unwrap(),
            "forbidden sysctl: \"kernel.msgmax\" not allowlisted"
        );
        let allowing = Allowlist::for_node(&["kernel.msg*", "net.core.somaxconn"]).unwrap();
        assert_eq!(allowing.admit(&unsafe_pod), None);
        assert_eq!(
            allowing.admit(&with_sysctls(&["net/core/somaxconn"], false)),
            None,
            "the slash spelling is the same sysctl"
        );
        assert_eq!(
            node.admit(&with_sysctls(&["net.ipv4.tcp_syncookies"], true))
                .unwrap(),
            "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled"
        );
        assert_eq!(
            node.admit(&with_sysctls(&["kernel.shm_rmid_forced"], true)),
            None,
            "the pod keeps its own ipc namespace with hostNetwork"
        );
    }

    #[test]
    fn the_node_refuses_an_unsafe_pattern_that_is_not_namespaced_or_not_a_name() {
        assert_eq!(
            Allowlist::new(&["vm.swappiness"]).unwrap_err(),
            "the sysctl \"vm.swappiness\" are not known to be namespaced"
        );
        assert_eq!(
            Allowlist::new(&["kernel.*"]).unwrap_err(),
            "the sysctls \"kernel.*\" are not known to be namespaced"
        );
        assert!(Allowlist::new(&["Net.core"])
            .unwrap_err()
            .starts_with("sysctl \"Net.core\" must have at most 253 characters"));
        assert!(Allowlist::new(&["net.*", "fs.mqueue.*", "kernel.sem"]).is_ok());
        assert!(!is_valid_sysctl_pattern("net.*.x"));
        assert!(is_valid_sysctl_pattern("net.ipv4.tcp_*"));
    }

    #[test]
    fn sandbox_sysctls_are_dotted() {
        let p = with_sysctls(&["net/ipv4/conf/eth0.100/forwarding"], false);
        assert_eq!(
            sandbox_sysctls(&p).into_iter().collect::<Vec<_>>(),
            [(
                "net.ipv4.conf.eth0/100.forwarding".to_string(),
                "1".to_string()
            )]
        );
    }
}
