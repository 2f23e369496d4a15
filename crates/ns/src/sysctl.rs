//! Namespaced sysctls: which namespace a kernel parameter belongs to, and reading or writing
//! one in the namespaces of the calling process.
//!
//! Most of `/proc/sys` is global: a write there changes the whole machine. A few parameters
//! belong to a namespace instead, and the kernel answers a read or write of those from the
//! namespaces of the process that makes it: everything below `net.` from its network namespace,
//! `kernel.shm*`, `kernel.msg*`, `kernel.sem` and `fs.mqueue.*` from its ipc namespace
//! (kubelet's `NamespacedBy`, runc's `validateSysctl`). A pod's sysctls are written by a process
//! that has already entered the pod's new namespaces, so that the host's values never move.
//!
//! Names come in two spellings: `net.ipv4.conf.eth0/100.forwarding` (dots between the levels)
//! and `net/ipv4/conf/eth0.100/forwarding` (slashes, dots allowed inside a level). [`to_dots`]
//! is kubelet's `ConvertSysctlVariableToDotsSeparator`; [`proc_path`] takes either.

use std::io::Write;
use std::path::PathBuf;

use crate::{Error, NsKind, Result};

/// Where the kernel shows its parameters.
pub const PROC_SYS: &str = "/proc/sys";

/// The namespace a sysctl is isolated by: `Some(Net)`, `Some(Ipc)`, or None for a parameter
/// that is global (writing it would change the host). `name` in either spelling.
pub fn namespace_of(name: &str) -> Option<NsKind> {
    let name = to_dots(name);
    if name == "kernel.sem" {
        return Some(NsKind::Ipc);
    }
    if ["kernel.shm", "kernel.msg", "fs.mqueue."]
        .iter()
        .any(|prefix| name.starts_with(prefix))
    {
        return Some(NsKind::Ipc);
    }
    name.starts_with("net.").then_some(NsKind::Net)
}

/// The name with dots between its levels: a name whose first separator is a slash has its
/// dots and slashes swapped (`net/ipv4/conf/eth0.100/forwarding` →
/// `net.ipv4.conf.eth0/100.forwarding`); any other is returned as it is.
pub fn to_dots(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// The file of the sysctl under `/proc/sys` (the levels of the dotted name as folders).
pub fn proc_path(name: &str) -> PathBuf {
    let levels: String = to_dots(name)
        .chars()
        .map(|c| match c {
            '.' => '/',
            '/' => '.',
            c => c,
        })
        .collect();
    PathBuf::from(PROC_SYS).join(levels)
}

/// Reads a sysctl as the calling process's namespaces see it, without the trailing newline.
pub fn read(name: &str) -> Result<String> {
    let path = proc_path(name);
    let text = std::fs::read_to_string(&path).map_err(|cause| Error::Io {
        what: "reading",
        path: path.clone(),
        cause,
    })?;
    Ok(text.trim_end_matches('\n').to_string())
}

/// Writes a namespaced sysctl in the calling process's namespaces. A name that is not
/// namespaced is refused before anything is opened (runc: "is not in a separate kernel
/// namespace"), and so is a `net.` name when `own_net` is false (the caller is in the host's
/// network namespace).
pub fn write(name: &str, value: &str, own_net: bool) -> Result<()> {
    match namespace_of(name) {
        None => {
            return Err(Error::Invalid(format!(
                "sysctl {name:?} is not in a separate kernel namespace"
            )))
        }
        Some(NsKind::Net) if !own_net => {
            return Err(Error::Invalid(format!(
                "sysctl {name:?} not allowed in host network namespace"
            )))
        }
        Some(_) => {}
    }
    let path = proc_path(name);
    let io = |cause| Error::Io {
        what: "writing",
        path: path.clone(),
        cause,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(io)?;
    file.write_all(value.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_kubelets() {
        assert_eq!(
            namespace_of("net.ipv4.ip_local_port_range"),
            Some(NsKind::Net)
        );
        assert_eq!(namespace_of("net/core/somaxconn"), Some(NsKind::Net));
        assert_eq!(namespace_of("kernel.shm_rmid_forced"), Some(NsKind::Ipc));
        assert_eq!(namespace_of("kernel.msgmax"), Some(NsKind::Ipc));
        assert_eq!(namespace_of("kernel.sem"), Some(NsKind::Ipc));
        assert_eq!(namespace_of("fs.mqueue.msg_max"), Some(NsKind::Ipc));
        assert_eq!(namespace_of("kernel.semx"), None);
        assert_eq!(namespace_of("kernel.core_pattern"), None);
        assert_eq!(namespace_of("vm.swappiness"), None);
        assert_eq!(namespace_of("fs.mqueue"), None);
    }

    #[test]
    fn both_spellings_reach_the_same_file() {
        assert_eq!(
            to_dots("net/ipv4/conf/eth0.100/forwarding"),
            "net.ipv4.conf.eth0/100.forwarding"
        );
        assert_eq!(
            to_dots("net.ipv4.tcp_syncookies"),
            "net.ipv4.tcp_syncookies"
        );
        let want = PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/forwarding");
        assert_eq!(proc_path("net/ipv4/conf/eth0.100/forwarding"), want);
        assert_eq!(proc_path("net.ipv4.conf.eth0/100.forwarding"), want);
    }

    #[test]
    fn a_global_or_host_network_sysctl_is_never_written() {
        let err = write("kernel.core_pattern", "|/tmp/x", true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "sysctl \"kernel.core_pattern\" is not in a separate kernel namespace"
        );
        let err = write("net.ipv4.tcp_syncookies", "0", false).unwrap_err();
        assert!(err
            .to_string()
            .contains("not allowed in host network namespace"));
    }
}
