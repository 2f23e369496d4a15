//! The capabilities a container keeps: containerd's default set, nothing else.
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

/// Takes every capability outside the default set out of the bounding set, so that no later
/// `execve` (of a setuid binary, say) can ever get it back. Needs CAP_SETPCAP, so it comes
/// before the user switch.
pub fn drop_bounding() -> Result<(), String> {
    let keep = default_set();
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

/// For a process that stays root: effective and permitted become the default set (effective
/// first, as it must stay a subset of permitted), inheritable and ambient empty.
pub fn limit_root_sets() -> Result<(), String> {
    let keep = default_set();
    caps::set(None, CapSet::Effective, &keep).map_err(|e| format!("effective set: {e}"))?;
    caps::set(None, CapSet::Permitted, &keep).map_err(|e| format!("permitted set: {e}"))?;
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
}
