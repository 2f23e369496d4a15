//! kubelet's volume ownership (`pkg/volume/volume_linux.go`, `SetVolumeOwnership`): with a
//! pod `fsGroup`, every file and folder of a volume gets that group, group read (and write,
//! unless the volume is read-only), and folders get the setgid bit and group search, so that
//! what a container makes there later keeps the group.
//!
//! `fsGroupChangePolicy: OnRootMismatch` skips the walk when the volume's root already has the
//! group, the permission bits and setgid; `Always` (or none) walks every time. kubelet hands
//! the pod's policy only to the plugins that take it (persistent volumes): emptyDir, configMap,
//! secret and downwardAPI call this with no policy, so they are changed whole each time they
//! are set up. podlab's volumes do the same.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::volume::VolumeError;

/// Group read and write, for a writable volume.
const RW_MASK: u32 = 0o660;
/// Group read, for a read-only one.
const RO_MASK: u32 = 0o440;
/// Search on folders.
const EXEC_MASK: u32 = 0o110;
const SETGID: u32 = 0o2000;

/// `spec.securityContext.fsGroupChangePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangePolicy {
    Always,
    OnRootMismatch,
}

impl ChangePolicy {
    /// The API value (`Always`, `OnRootMismatch`); anything else is Always, as kubelet reads it.
    pub fn parse(value: Option<&str>) -> Option<ChangePolicy> {
        value.map(|v| match v {
            "OnRootMismatch" => ChangePolicy::OnRootMismatch,
            _ => ChangePolicy::Always,
        })
    }
}

/// Gives the volume at `dir` the group `fs_group` (nothing without one), as kubelet does;
/// `read_only` is the plugin's attribute (configMap, secret, downwardAPI), not the mount's.
/// Returns whether the walk was made.
pub fn set_volume_ownership(
    dir: &Path,
    fs_group: Option<u32>,
    policy: Option<ChangePolicy>,
    read_only: bool,
) -> Result<bool, VolumeError> {
    let Some(gid) = fs_group else {
        return Ok(false);
    };
    if policy == Some(ChangePolicy::OnRootMismatch) && !requires_change(dir, gid, read_only) {
        return Ok(false);
    }
    walk(dir, gid, read_only)?;
    Ok(true)
}

/// kubelet's `requiresPermissionChange`: the root's group differs, or it is not a folder, or
/// it lacks one of the mask's bits or setgid.
fn requires_change(dir: &Path, gid: u32, read_only: bool) -> bool {
    let Ok(meta) = std::fs::metadata(dir) else {
        return true;
    };
    if meta.gid() != gid || !meta.is_dir() {
        return true;
    }
    let wanted = if read_only { RO_MASK } else { RW_MASK } | EXEC_MASK;
    let mode = meta.mode();
    mode & wanted != wanted || mode & SETGID == 0
}

/// `filepath.Walk` with kubelet's `changeFilePermission` on each entry: links are not followed,
/// their own group is changed and their mode left (a chmod would reach their target).
fn walk(path: &Path, gid: u32, read_only: bool) -> Result<(), VolumeError> {
    let io = |what: &'static str| {
        move |source| VolumeError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    };
    let meta = std::fs::symlink_metadata(path).map_err(io("reading"))?;
    std::os::unix::fs::lchown(path, None, Some(gid)).map_err(io("changing the group of"))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mut mask = if read_only { RO_MASK } else { RW_MASK };
    if meta.is_dir() {
        mask |= SETGID | EXEC_MASK;
    }
    let mode = (meta.mode() & 0o7777) | mask;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io("chmod"))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io("reading"))? {
            let entry = entry.map_err(io("reading"))?;
            walk(&entry.path(), gid, read_only)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn files_get_the_group_and_its_bits_folders_setgid_and_on_root_mismatch_skips_a_matching_root()
    {
        // Changing to a group of one's own is allowed to any owner.
        let gid = nix::unistd::getegid().as_raw();
        let dir = std::env::temp_dir().join(format!("podlab-owner-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("sub/key"), "v").unwrap();
        std::fs::set_permissions(dir.join("sub/key"), std::fs::Permissions::from_mode(0o400))
            .unwrap();
        std::os::unix::fs::symlink("sub/key", dir.join("link")).unwrap();

        assert!(set_volume_ownership(&dir, Some(gid), None, true).unwrap());
        assert_eq!(mode(&dir), 0o2755, "setgid, group search and read");
        assert_eq!(
            mode(&dir.join("sub/key")),
            0o440,
            "group read, read-only volume"
        );
        assert_eq!(mode(&dir.join("link")), 0o777, "a link's own mode is left");

        std::fs::set_permissions(dir.join("sub/key"), std::fs::Permissions::from_mode(0o400))
            .unwrap();
        let skipped =
            set_volume_ownership(&dir, Some(gid), Some(ChangePolicy::OnRootMismatch), true)
                .unwrap();
        assert!(!skipped, "the root matches: no walk");
        assert_eq!(mode(&dir.join("sub/key")), 0o400);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(
            set_volume_ownership(&dir, Some(gid), Some(ChangePolicy::OnRootMismatch), false)
                .unwrap()
        );
        assert_eq!(mode(&dir), 0o2775, "writable volume: group write too");
        assert_eq!(mode(&dir.join("sub/key")), 0o660);
        assert!(!set_volume_ownership(&dir, None, None, false).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
