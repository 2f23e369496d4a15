//! Finding a namespace by its inode number, wherever something keeps it alive.
//!
//! A namespace lives while a process (or one thread of it) is in it, a process holds its file
//! open, or its file is bind-mounted (a pin, in any mount namespace). [`find`] looks at all
//! three, the way `lsns` and `ip netns identify` do, and returns a path under `/proc` that
//! opens each namespace found: `/proc/PID/ns/KIND`, `/proc/PID/fd/N`, or the pin seen through
//! the pinning process's root (`/proc/PID/root/MOUNTPOINT`).
//!
//! Only what `/proc` shows can be found: in a pid namespace other than the host's, processes of
//! the outer namespaces (and the pins only they see) are invisible, so "not found" means gone
//! only to a caller in the initial pid namespace ([`sees_every_process`]) or to one that knows
//! the namespace was made among the processes it sees. A namespace kept only by a socket (or
//! by a mount namespace that no process is in) is not found.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::ns_path;
use crate::NsKind;

/// `PROC_PID_INIT_INO`: the inode number of the initial pid namespace, fixed since Linux 3.8.
const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// Whether the caller is in the initial pid namespace, where `/proc` shows every process.
pub fn sees_every_process() -> bool {
    super::self_inode(NsKind::Pid).is_ok_and(|inode| inode == INITIAL_PID_NAMESPACE)
}

/// For each of `inodes` that is a live namespace of `kind`, a path that opens it. Processes
/// that end during the scan, and files that cannot be read, are passed over.
pub fn find(kind: NsKind, inodes: &BTreeSet<u64>) -> BTreeMap<u64, PathBuf> {
    let mut found = BTreeMap::new();
    let wanted = |inode: u64, path: PathBuf, found: &mut BTreeMap<u64, PathBuf>| {
        if inodes.contains(&inode) {
            found.entry(inode).or_insert(path);
        }
        found.len() == inodes.len()
    };
    if inodes.is_empty() {
        return found;
    }
    let pids = processes();
    // Processes and their threads first: the cheap and usual holders.
    for &pid in &pids {
        for path in std::iter::once(ns_path(pid, kind)).chain(thread_ns_paths(pid, kind)) {
            if let Ok(inode) = nix::sys::stat::stat(&path).map(|st| st.st_ino) {
                if wanted(inode, path, &mut found) {
                    return found;
                }
            }
        }
    }
    // Pins, once per mount namespace.
    let mut mount_namespaces = BTreeSet::new();
    for &pid in &pids {
        let Ok(mnt) = super::ns_inode(pid, NsKind::Mnt) else {
            continue;
        };
        if !mount_namespaces.insert(mnt) {
            continue;
        }
        for (inode, mount_point) in pins_in_mountinfo(pid, kind) {
            let path = PathBuf::from(format!("/proc/{pid}/root"))
                .join(mount_point.strip_prefix("/").unwrap_or(&mount_point));
            if wanted(inode, path, &mut found) {
                return found;
            }
        }
    }
    // Open files last: every descriptor of every process.
    let prefix = format!("{}:[", kind.proc_name());
    for &pid in &pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let inode = target
                .to_str()
                .and_then(|t| t.strip_prefix(prefix.as_str()))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse().ok());
            if let Some(inode) = inode {
                if wanted(inode, fd.path(), &mut found) {
                    return found;
                }
            }
        }
    }
    found
}

fn processes() -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids
}

/// `/proc/PID/task/TID/ns/KIND` of the threads other than the leader (a thread may have
/// `setns`ed alone).
fn thread_ns_paths(pid: i32, kind: NsKind) -> Vec<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|task| task.file_name().to_str() != Some(&pid.to_string()))
        .map(|task| task.path().join("ns").join(kind.proc_name()))
        .collect()
}

/// The nsfs mounts of `kind` in the mount namespace of `pid`: (namespace inode, mount point).
fn pins_in_mountinfo(pid: i32, kind: NsKind) -> Vec<(u64, PathBuf)> {
    crate::mnt::mounts_of(pid)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|mount| Some((pinned_inode(&mount, kind)?, mount.mount_point)))
        .collect()
}

/// The inode of the namespace a mount pins, if it is a pin of `kind`: an nsfs mount whose root
/// is `KIND:[INODE]`.
fn pinned_inode(mount: &crate::mnt::MountInfo, kind: NsKind) -> Option<u64> {
    if mount.fs_type != "nsfs" {
        return None;
    }
    mount
        .root
        .to_str()?
        .strip_prefix(kind.proc_name())?
        .strip_prefix(":[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_gives_its_inode() {
        let text = "812 29 0:4 net:[4026532301] /run/my\\040pins/net rw shared:5 - nsfs nsfs rw\n\
                    30 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n";
        let mounts = crate::mnt::parse_mountinfo(text).unwrap();
        assert_eq!(mounts[0].mount_point, PathBuf::from("/run/my pins/net"));
        assert_eq!(pinned_inode(&mounts[0], NsKind::Net), Some(4026532301));
        assert_eq!(pinned_inode(&mounts[0], NsKind::Uts), None);
        assert_eq!(pinned_inode(&mounts[1], NsKind::Net), None);
    }

    /// The caller's own namespace is found through a process; a pinned one whose process is
    /// gone through its pin; an inode no namespace has, nowhere.
    #[test]
    fn finds_a_live_namespace_and_not_a_gone_one() {
        let mine = super::super::self_inode(NsKind::Net).unwrap();
        let found = find(NsKind::Net, &BTreeSet::from([mine, 1]));
        let path = found.get(&mine).expect("own namespace found");
        assert_eq!(nix::sys::stat::stat(path).unwrap().st_ino, mine);
        assert!(!found.contains_key(&1));
    }
}
