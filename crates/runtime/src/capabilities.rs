//! The capabilities a container keeps: containerd's default set, changed by the container's
//! `capabilities.add`/`drop`, or all of them for a privileged container.
//!
//! Root in a container is not root on the host: of the 41 capabilities, containerd's default
//! OCI spec keeps 14 in the bounding, permitted and effective sets and none in the inheritable
//! and ambient ones. A non-root container user ends up with none at all, because `execve` gives
//! a non-root process only its ambient capabilities (and it has none).

use caps::{CapSet, Capability, CapsHashSet};

/// containerd's `defaultUnixCaps` (and Docker's default set).
pub const DEFAULT: [Capability; 14] = [
    Capability::CAP_CHOWN,
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_FSETID,
    Capability::CAP_FOWNER,
    Capability::CAP_MKNOD,
    Capability::CAP_NET_RAW,
    Capability::CAP_SETGID,
    Capability::CAP_SETUID,
    Capability::CAP_SETFCAP,
    Capability::CAP_SETPCAP,
    Capability::CAP_NET_BIND_SERVICE,
    Capability::CAP_SYS_CHROOT,
    Capability::CAP_KILL,
    Capability::CAP_AUDIT_WRITE,
];

pub fn default_set() -> CapsHashSet {
    DEFAULT.iter().copied().collect()
}

/// The OCI spellings (`CAP_CHOWN` ...), for an exported bundle's config.json.
pub fn default_names() -> Vec<String> {
    DEFAULT.iter().map(|c| c.to_string()).collect()
}

/// A capability by its Kubernetes name (`NET_ADMIN`) or OCI name (`CAP_NET_ADMIN`), in any
/// case, as containerd reads them; None for a name Linux does not have.
pub fn parse(name: &str) -> Option<Capability> {
    let upper = name.to_ascii_uppercase();
    let oci = if upper.starts_with("CAP_") {
        upper
    } else {
        format!("CAP_{upper}")
    };
    oci.parse().ok()
}

/// The set a container keeps (OCI names, sorted): containerd's default, or every capability
/// for a privileged one; then, in containerd's order, `ALL` added, `ALL` dropped, each name
/// added, each name dropped. An unknown name is an error naming it.
pub fn resolve(privileged: bool, add: &[String], drop: &[String]) -> Result<Vec<String>, String> {
    let mut set: CapsHashSet = if privileged {
        caps::all()
    } else {
        default_set()
    };
    let is_all = |name: &String| name.eq_ignore_ascii_case("ALL");
    if add.iter().any(is_all) {
        set = caps::all();
    }
    if drop.iter().any(is_all) {
        set.clear();
    }
    for (names, adding) in [(add, true), (drop, false)] {
        for name in names.iter().filter(|n| !is_all(n)) {
            let cap = parse(name).ok_or_else(|| format!("unknown capability {name:?}"))?;
            if adding {
                set.insert(cap);
            } else {
                set.remove(&cap);
            }
        }
    }
    let mut names: Vec<String> = set.iter().map(|c| c.to_string()).collect();
    names.sort();
    Ok(names)
}

/// The capabilities of `names` (None: the default set) that this process can still hold:
/// those in its bounding set (a kernel older than a capability does not know it).
pub fn keep_set(names: Option<&[String]>) -> CapsHashSet {
    let wanted: CapsHashSet = match names {
        None => default_set(),
        Some(names) => names.iter().filter_map(|n| parse(n)).collect(),
    };
    match caps::read(None, CapSet::Bounding) {
        Ok(bounding) => wanted.intersection(&bounding).copied().collect(),
        Err(_) => wanted,
    }
}

/// Takes every capability outside `keep` out of the bounding set, so that no later `execve`
/// (of a setuid binary, say) can ever get it back. Needs CAP_SETPCAP, so it comes before the
/// user switch.
pub fn drop_bounding(keep: &CapsHashSet) -> Result<(), String> {
    for cap in caps::all() {
        if keep.contains(&cap) {
            continue;
        }
        // A capability this kernel does not know is in no set (has_cap fails): nothing to drop.
        if let Ok(true) = caps::has_cap(None, CapSet::Bounding, cap) {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(|e| format!("dropping {cap} from the bounding set: {e}"))?;
        }
    }
    Ok(())
}

/// For a process that stays root: effective and permitted become `keep` (effective first, as
/// it must stay a subset of permitted), inheritable and ambient empty.
pub fn limit_root_sets(keep: &CapsHashSet) -> Result<(), String> {
    caps::set(None, CapSet::Effective, keep).map_err(|e| format!("effective set: {e}"))?;
    caps::set(None, CapSet::Permitted, keep).map_err(|e| format!("permitted set: {e}"))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| format!("inheritable set: {e}"))?;
    clear_ambient()
}

/// Empties the ambient set.
pub fn clear_ambient() -> Result<(), String> {
    caps::clear(None, CapSet::Ambient).map_err(|e| format!("ambient set: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_set_is_containerds() {
        let names = default_names();
        assert_eq!(names.len(), 14);
        assert!(names.contains(&"CAP_NET_BIND_SERVICE".to_string()));
        assert!(!names.contains(&"CAP_SYS_ADMIN".to_string()));
    }

    #[test]
    fn add_and_drop_follow_containerds_order() {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let set = resolve(false, &strings(&["net_admin"]), &strings(&["CHOWN"])).unwrap();
        assert!(set.contains(&"CAP_NET_ADMIN".to_string()));
        assert!(!set.contains(&"CAP_CHOWN".to_string()));
        assert_eq!(set.len(), 14);
        // ALL dropped first, then the named one added back.
        let set = resolve(false, &strings(&["NET_BIND_SERVICE"]), &strings(&["ALL"])).unwrap();
        assert_eq!(set, ["CAP_NET_BIND_SERVICE"]);
        let set = resolve(false, &strings(&["ALL"]), &strings(&["SYS_ADMIN"])).unwrap();
        assert_eq!(set.len(), caps::all().len() - 1);
        assert_eq!(resolve(true, &[], &[]).unwrap().len(), caps::all().len());
        let err = resolve(false, &strings(&["NET_ADMINN"]), &[]).unwrap_err();
        assert_eq!(err, "unknown capability \"NET_ADMINN\"");
    }
}
