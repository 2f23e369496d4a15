//! The namespace kinds: their names, their `CLONE_NEW*` flags, and whether this kernel has them.

use std::fmt;
use std::str::FromStr;

use nix::sched::CloneFlags;
use serde::{Deserialize, Serialize};

use crate::Error;

/// One kind of Linux namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NsKind {
    Uts,
    Ipc,
    Net,
    Pid,
    Mnt,
    User,
    Cgroup,
    Time,
}

impl NsKind {
    /// Every kind, in the order `lsns` prints them in podlab's tables.
    pub const ALL: [NsKind; 8] = [
        NsKind::Mnt,
        NsKind::Uts,
        NsKind::Ipc,
        NsKind::Pid,
        NsKind::Net,
        NsKind::User,
        NsKind::Cgroup,
        NsKind::Time,
    ];

    /// The file name under `/proc/PID/ns/`.
    pub fn proc_name(self) -> &'static str {
        match self {
            NsKind::Uts => "uts",
            NsKind::Ipc => "ipc",
            NsKind::Net => "net",
            NsKind::Pid => "pid",
            NsKind::Mnt => "mnt",
            NsKind::User => "user",
            NsKind::Cgroup => "cgroup",
            NsKind::Time => "time",
        }
    }

    /// The flag for `unshare(2)`, `clone(2)` and `setns(2)`.
    pub fn clone_flag(self) -> CloneFlags {
        match self {
            NsKind::Uts => CloneFlags::CLONE_NEWUTS,
            NsKind::Ipc => CloneFlags::CLONE_NEWIPC,
            NsKind::Net => CloneFlags::CLONE_NEWNET,
            NsKind::Pid => CloneFlags::CLONE_NEWPID,
            NsKind::Mnt => CloneFlags::CLONE_NEWNS,
            NsKind::User => CloneFlags::CLONE_NEWUSER,
            NsKind::Cgroup => CloneFlags::CLONE_NEWCGROUP,
            // nix has no constant for CLONE_NEWTIME (0x80): it shares its bit with CSIGNAL's range.
            NsKind::Time => CloneFlags::from_bits_retain(0x0000_0080),
        }
    }

    /// All flags of a set of kinds, for one `unshare(2)` or `clone(2)` call.
    pub fn flags_of(kinds: &[NsKind]) -> CloneFlags {
        kinds
            .iter()
            .fold(CloneFlags::empty(), |acc, k| acc | k.clone_flag())
    }

    /// Whether the running kernel has this kind (it shows `/proc/self/ns/<kind>`).
    pub fn supported(self) -> bool {
        std::path::Path::new("/proc/self/ns")
            .join(self.proc_name())
            .exists()
    }

    /// `Ok(())` when the kernel has this kind, else [`Error::KindUnsupported`].
    pub fn require(self) -> Result<(), Error> {
        if self.supported() {
            Ok(())
        } else {
            Err(Error::KindUnsupported { kind: self })
        }
    }
}

impl fmt::Display for NsKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.proc_name())
    }
}

impl FromStr for NsKind {
    type Err = Error;

    /// Accepts the `/proc` names and the names util-linux also takes (`mount`, `network`).
    fn from_str(s: &str) -> Result<Self, Error> {
        Ok(match s {
            "uts" => NsKind::Uts,
            "ipc" => NsKind::Ipc,
            "net" | "network" => NsKind::Net,
            "pid" => NsKind::Pid,
            "mnt" | "mount" => NsKind::Mnt,
            "user" => NsKind::User,
            "cgroup" => NsKind::Cgroup,
            "time" => NsKind::Time,
            other => return Err(Error::UnknownKind(other.to_string())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in NsKind::ALL {
            assert_eq!(kind.proc_name().parse::<NsKind>().unwrap(), kind);
        }
    }

    #[test]
    fn unknown_kind_is_named_in_the_error() {
        let err = "bogus".parse::<NsKind>().unwrap_err();
        assert!(err.to_string().contains("\"bogus\""), "{err}");
    }

    #[test]
    fn flags_are_distinct() {
        let all = NsKind::flags_of(&NsKind::ALL);
        assert_eq!(all.bits().count_ones(), 8);
    }
}
