//! The parts of `/proc` and `/sys` a container may not touch: runc's default spec's
//! `readonlyPaths` and `maskedPaths`, applied as runc applies them after `pivot_root`.
//!
//! `/proc` is a fresh procfs of the container's pid namespace, but many of its files are not
//! namespaced at all: `/proc/sys/kernel/core_pattern` is the host's, and whoever writes it
//! chooses the program the host's kernel runs, as root, at the next crash. So `/proc/sys` and
//! its siblings are bound over themselves read-only (a write gets EROFS), and the files that
//! leak host state or talk to hardware (`/proc/kcore`, `/proc/keys`, `/sys/firmware`...) are
//! hidden: a file gets `/dev/null` bound over it, a folder an empty read-only tmpfs.
//!
//! A privileged container and `procMount: Unmasked` get neither list, as with containerd.

use std::path::Path;

use nix::mount::MsFlags;

/// runc's (and containerd's, and kubelet's `DefaultProcMount`) read-only paths.
pub const READONLY: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// runc's default masked paths (containerd's default spec, kubelet's `defaultMaskedPaths`).
pub const MASKED: [&str; 12] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The default lists as owned strings (what a container config without its own lists gets).
pub fn default_readonly() -> Vec<String> {
    READONLY.iter().map(|p| p.to_string()).collect()
}

pub fn default_masked() -> Vec<String> {
    MASKED.iter().map(|p| p.to_string()).collect()
}

/// Why a path could not be protected: the mount call and its errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub step: &'static str,
    pub errno: nix::Error,
}

/// Binds `path` over itself and remounts it read-only, keeping the flags the kernel locks on
/// a mount (nosuid, nodev, noexec of a procfs). A path that does not exist is skipped: this
/// kernel does not have it, so there is nothing to protect.
pub fn make_readonly(path: &Path) -> Result<(), Failure> {
    match nix::mount::mount(
        Some(path),
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    ) {
        Ok(()) => {}
        Err(nix::Error::ENOENT) => return Ok(()),
        Err(errno) => {
            return Err(Failure {
                step: "bind-mount over itself",
                errno,
            })
        }
    }
    let kept = podlab_ns::mnt::inherited_mount_flags(path).map_err(|e| Failure {
        step: "statvfs",
        errno: e.errno().unwrap_or(nix::Error::EIO),
    })?;
    nix::mount::mount(
        Some(path),
        path,
        None::<&str>,
        kept | MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .map_err(|errno| Failure {
        step: "remount read-only",
        errno,
    })
}

/// Hides `path`: `/dev/null` bound over a file, an empty read-only tmpfs over a folder. A path
/// that does not exist is skipped. The folders are told by a `stat` (following links, as the
/// mount does) rather than by the bind's ENOTDIR: a bind refused that late costs as much as a
/// mount here (35-45 µs against 2-3 for the `stat`); ENOTDIR still falls back to the tmpfs.
pub fn mask(path: &Path) -> Result<(), Failure> {
    match nix::sys::stat::stat(path) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => return empty_readonly_tmpfs(path),
        Err(nix::Error::ENOENT) => return Ok(()),
        _ => {}
    }
    match nix::mount::mount(
        Some("/dev/null"),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    ) {
        Ok(()) | Err(nix::Error::ENOENT) => Ok(()),
        Err(nix::Error::ENOTDIR) => empty_readonly_tmpfs(path),
        Err(errno) => Err(Failure {
            step: "bind /dev/null",
            errno,
        }),
    }
}

fn empty_readonly_tmpfs(path: &Path) -> Result<(), Failure> {
    nix::mount::mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .map_err(|errno| Failure {
        step: "mount an empty read-only tmpfs",
        errno,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_are_runcs_defaults() {
        assert!(READONLY.contains(&"/proc/sys"));
        assert!(MASKED.contains(&"/proc/kcore"));
        assert!(MASKED.contains(&"/sys/devices/virtual/powercap"));
        assert!(READONLY.iter().all(|p| !MASKED.contains(p)));
    }
}
