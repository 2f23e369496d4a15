//! kubelet's cgroup layout with the cgroupfs driver, and podlab's cgroup root.
//!
//! kubelet puts every pod under `kubepods` below its `--cgroup-root`, in a folder named after
//! the pod's QoS class: Guaranteed pods straight in `kubepods`, the others in
//! `kubepods/burstable` and `kubepods/besteffort`; a pod's folder is `pod<uid>`, and containerd
//! puts each container (the pause sandbox too) in `<pod folder>/<container id>`.
//!
//! podlab's `--cgroup-root` is `podlab-<hash of the state root>` (or `$PODLAB_CGROUP_ROOT`): one
//! machine may run several podlab roots at once (the tests' throw-away roots), and each must
//! find, and remove, only its own cgroups.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Cgroup, Hierarchy};

/// The pod's QoS class (`status.qosClass`), kubelet's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }

    /// The QoS folder below `kubepods` (none for Guaranteed).
    pub fn folder(self) -> Option<&'static str> {
        match self {
            QosClass::Guaranteed => None,
            QosClass::Burstable => Some("burstable"),
            QosClass::BestEffort => Some("besteffort"),
        }
    }
}

impl std::fmt::Display for QosClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// kubelet's node-level cgroup folder.
pub const KUBEPODS: &str = "kubepods";

/// podlab's `--cgroup-root`: the folder below each hierarchy's root that holds `kubepods`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupRoot {
    pub name: String,
}

impl CgroupRoot {
    /// `$PODLAB_CGROUP_ROOT`, else `podlab-<12 hex digits of the state root's FNV-1a hash>`.
    pub fn for_state_root(state_root: &Path) -> CgroupRoot {
        if let Some(name) = std::env::var_os("PODLAB_CGROUP_ROOT").filter(|v| !v.is_empty()) {
            return CgroupRoot {
                name: name.to_string_lossy().trim_matches('/').to_string(),
            };
        }
        let absolute = std::path::absolute(state_root).unwrap_or_else(|_| state_root.to_path_buf());
        let hash = fnv1a64(absolute.as_os_str().as_encoded_bytes());
        CgroupRoot {
            name: format!("podlab-{:012x}", hash & 0xffff_ffff_ffff),
        }
    }

    /// `<root>/kubepods`.
    pub fn kubepods(&self) -> String {
        format!("{}/{KUBEPODS}", self.name)
    }

    /// The pod's cgroup path: `<root>/kubepods[/burstable|/besteffort]/pod<uid>`.
    pub fn pod(&self, qos: QosClass, pod_uid: &str) -> String {
        match qos.folder() {
            Some(folder) => format!("{}/{folder}/pod{pod_uid}", self.kubepods()),
            None => format!("{}/pod{pod_uid}", self.kubepods()),
        }
    }

    /// How many folders a pod's cgroup is below each hierarchy's root, its own included.
    pub fn depth_of(relative: &str) -> usize {
        relative.split('/').filter(|p| !p.is_empty()).count()
    }

    /// The root's cgroup in `hierarchy`.
    pub fn cgroup(&self, hierarchy: &Hierarchy) -> Cgroup {
        hierarchy.cgroup(&self.name)
    }
}

/// FNV-1a, 64 bits: a hash that stays the same across Rust releases (std's does not promise to).
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_laid_out_as_kubelet_does() {
        let root = CgroupRoot {
            name: "podlab-abc".into(),
        };
        assert_eq!(
            root.pod(QosClass::Guaranteed, "u1"),
            "podlab-abc/kubepods/podu1"
        );
        assert_eq!(
            root.pod(QosClass::Burstable, "u1"),
            "podlab-abc/kubepods/burstable/podu1"
        );
        assert_eq!(
            root.pod(QosClass::BestEffort, "u1"),
            "podlab-abc/kubepods/besteffort/podu1"
        );
    }

    #[test]
    fn each_state_root_has_its_own_cgroup_root() {
        if std::env::var_os("PODLAB_CGROUP_ROOT").is_some() {
            return eprintln!("skipped: PODLAB_CGROUP_ROOT names the root");
        }
        let a = CgroupRoot::for_state_root(Path::new("/run/podlab"));
        let b = CgroupRoot::for_state_root(Path::new("/tmp/test-root"));
        assert_ne!(a, b);
        assert_eq!(a, CgroupRoot::for_state_root(Path::new("/run/podlab")));
        assert!(a.name.starts_with("podlab-") && a.name.len() == "podlab-".len() + 12);
    }
}
