//! What identifies one attachment to the plugins: the container id, the interface name and the
//! `CNI_ARGS` key/value pairs, each checked as the CNI spec and libcni check them.

use crate::{Error, Result};

/// The Kubernetes identity of a pod, passed in `CNI_ARGS` as kubelet's runtimes pass it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodIdentity<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    /// The sandbox (infra container) id, `K8S_POD_INFRA_CONTAINER_ID`.
    pub infra_container_id: &'a str,
}

/// `CNI_ARGS` for a pod: `IgnoreUnknown=1` first (so that plugins which do not know the K8S_
/// keys accept them), then the pod's namespace, name, infra container id and uid, as containerd's
/// CRI plugin sends them.
pub fn k8s_cni_args(pod: &PodIdentity<'_>) -> Result<String> {
    cni_args(&[
        ("IgnoreUnknown", "1"),
        ("K8S_POD_NAMESPACE", pod.namespace),
        ("K8S_POD_NAME", pod.name),
        ("K8S_POD_INFRA_CONTAINER_ID", pod.infra_container_id),
        ("K8S_POD_UID", pod.uid),
    ])
}

/// `K1=V1;K2=V2`. A key or value holding `;` or `=` could not be read back, so it is refused.
pub fn cni_args(pairs: &[(&str, &str)]) -> Result<String> {
    let mut parts = Vec::with_capacity(pairs.len());
    for (key, value) in pairs {
        if key.is_empty() || key.contains([';', '=']) || value.contains([';', '=']) {
            return Err(Error::Invalid(format!(
                "CNI_ARGS pair {key:?}={value:?}: keys and values may not hold ';' or '=' (and keys may not be empty)"
            )));
        }
        parts.push(format!("{key}={value}"));
    }
    Ok(parts.join(";"))
}

/// Reads `K1=V1;K2=V2` back into pairs (what a plugin's skel does with `CNI_ARGS`).
pub fn parse_cni_args(text: &str) -> Result<Vec<(String, String)>> {
    text.split(';')
        .filter(|part| !part.is_empty())
        .map(|part| match part.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
            _ => Err(Error::Invalid(format!(
                "CNI_ARGS part {part:?} is not KEY=VALUE"
            ))),
        })
        .collect()
}

/// A container id as the spec wants it: not empty, starts with a letter or digit, then only
/// letters, digits, `_`, `.` and `-`.
pub fn check_container_id(id: &str) -> Result<()> {
    if spec_name(id) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "container id {id:?} must start with a letter or digit and hold only letters, digits, '_', '.' and '-'"
        )))
    }
}

/// A network name, with the container id's rules (libcni's ValidateNetworkName).
pub fn check_network_name(name: &str) -> std::result::Result<(), String> {
    if spec_name(name) {
        Ok(())
    } else {
        Err(format!(
            "network name {name:?} must start with a letter or digit and hold only letters, digits, '_', '.' and '-'"
        ))
    }
}

/// An interface name the kernel takes: 1 to 15 bytes, not `.` or `..`, no `/`, `:` or
/// white space (libcni's ValidateInterfaceName).
pub fn check_ifname(name: &str) -> Result<()> {
    let problem = if name.is_empty() {
        Some("is empty")
    } else if name.len() > 15 {
        Some("is longer than 15 bytes (IFNAMSIZ - 1)")
    } else if name == "." || name == ".." {
        Some("may not be '.' or '..'")
    } else if name.contains(['/', ':']) || name.chars().any(char::is_whitespace) {
        Some("may not hold '/', ':' or white space")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Error::Invalid(format!("interface name {name:?} {problem}"))),
        None => Ok(()),
    }
}

fn spec_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k8s_args_are_in_containerd_order_and_round_trip() {
        let args = k8s_cni_args(&PodIdentity {
            namespace: "default",
            name: "web-0",
            uid: "5f1c-77",
            infra_container_id: "abc123",
        })
        .unwrap();
        assert_eq!(
            args,
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;\
             K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=5f1c-77"
        );
        let pairs = parse_cni_args(&args).unwrap();
        assert_eq!(pairs[0], ("IgnoreUnknown".to_owned(), "1".to_owned()));
        assert_eq!(pairs[2], ("K8S_POD_NAME".to_owned(), "web-0".to_owned()));
        assert_eq!(pairs.len(), 5);
    }

    #[test]
    fn separators_inside_values_are_refused() {
        let err = cni_args(&[("K8S_POD_NAME", "a;b")]).unwrap_err();
        assert!(err.to_string().contains("a;b"), "{err}");
        assert!(cni_args(&[("", "x")]).is_err());
        assert!(parse_cni_args("novalue").is_err());
        assert_eq!(parse_cni_args("").unwrap(), vec![]);
        assert_eq!(
            parse_cni_args("IP=10.1.0.5").unwrap(),
            vec![("IP".to_owned(), "10.1.0.5".to_owned())]
        );
    }

    #[test]
    fn ids_and_interface_names_follow_the_spec() {
        assert!(check_container_id("4e1f0c9a_pod.x-1").is_ok());
        assert!(check_container_id("").is_err());
        assert!(check_container_id("-leading").is_err());
        assert!(check_container_id("has space").is_err());
        assert!(check_ifname("eth0").is_ok());
        assert!(check_ifname("a-very-long-name0").is_err());
        assert!(check_ifname("..").is_err());
        assert!(check_ifname("eth0:1").is_err());
        assert!(check_network_name("podlab").is_ok());
        assert!(check_network_name("pod lab").is_err());
    }
}
