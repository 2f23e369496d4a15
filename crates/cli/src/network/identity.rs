//! Which network namespace a `/run/podlab-net/<inode>` folder belongs to, and the removal of the
//! folders whose namespace is gone.
//!
//! The folder is named after its namespace's inode number, and the kernel hands that number out
//! again once the namespace is gone (lowest free number first, to a namespace of any kind). So
//! "no namespace has this number" cannot be the only test, and a folder's number alone cannot
//! say whose it is. Each folder therefore records, in `netns.json`, its namespace's cookie (a
//! number never reused, [`podlab_ns::net::cookie`]) and the pid namespace of the process that
//! made it:
//!
//! * an attach claims its namespace's folder first ([`claim`]): a folder that records another
//!   cookie is the state of an earlier namespace that had the same number (its leases name pods
//!   that no longer exist), and is replaced;
//! * `podlab gc` and the node agent (when it starts and when it stops) remove the folder of every
//!   namespace that is gone ([`collect_gone`]): no live network namespace has its number, or the
//!   one that has it has another cookie. Only a process that can see whatever might keep the
//!   namespace alive judges a folder: one in the host's pid namespace, or one in the pid
//!   namespace the folder's maker was in (a test sandbox judges its own folders, never the
//!   host's or another sandbox's, whose processes it cannot see).
//!
//! A folder of a namespace that is gone is removed without a lock: nobody can attach in a
//! namespace that does not exist. That leaves one window: a namespace made between the scan and
//! the removal, that got the same number and attaches a pod at once, loses the folder it has
//! just claimed (its next attach claims a new one). A folder whose number went to another live
//! namespace is removed under that namespace's network lock, so it never races that namespace's
//! own claim.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use podlab_ns::NsKind;
use serde::{Deserialize, Serialize};

/// The folder of every network namespace's pod network state.
pub const BASE: &str = "/run/podlab-net";

/// The identity file in a namespace's folder.
const FILE: &str = "netns.json";

/// What a folder records about the namespace it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Identity {
    /// The namespace's cookie; `None` on a kernel without `SO_NETNS_COOKIE` (before 5.14).
    cookie: Option<u64>,
    /// The inode number of the pid namespace the folder's maker was in.
    pid_namespace: u64,
}

impl Identity {
    /// The calling thread's network namespace.
    fn own() -> Result<Identity> {
        Ok(Identity {
            cookie: podlab_ns::net::cookie::self_cookie()?,
            pid_namespace: podlab_ns::ops::self_inode(NsKind::Pid)?,
        })
    }

    fn read(folder: &Path) -> Option<Identity> {
        let text = std::fs::read(folder.join(FILE)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Written beside its place then renamed, so a reader never sees half of it.
    fn write(&self, folder: &Path) -> Result<()> {
        let file = folder.join(FILE);
        let partial = folder.join(format!(".{FILE}.{}", std::process::id()));
        std::fs::write(&partial, serde_json::to_vec(self)?)
            .and_then(|()| std::fs::rename(&partial, &file))
            .with_context(|| format!("writing {}", file.display()))
    }
}

/// With the network's lock held, before an attach: makes `net_root` (this network namespace's
/// folder) this namespace's. A folder that records another namespace's cookie is an earlier
/// namespace's with the same inode number, and goes first; one that records nothing (made by
/// an older podlab) is kept and claimed.
pub fn claim(net_root: &Path) -> Result<()> {
    let own = Identity::own()?;
    match Identity::read(net_root) {
        Some(recorded) if recorded.cookie == own.cookie => return Ok(()),
        Some(_) => std::fs::remove_dir_all(net_root).with_context(|| {
            format!(
                "removing {}, the state of an earlier network namespace with this inode number",
                net_root.display()
            )
        })?,
        None => {}
    }
    std::fs::create_dir_all(net_root)
        .with_context(|| format!("creating {}", net_root.display()))?;
    own.write(net_root)
}

/// Removes the folder of every network namespace that is gone (see the module doc), other than
/// this process's own namespace's. Returns the folders removed.
pub fn collect_gone() -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(BASE) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {BASE}")),
    };
    let own = podlab_ns::ops::self_inode(NsKind::Net)?;
    let own_pid_namespace = podlab_ns::ops::self_inode(NsKind::Pid)?;
    let sees_every_process = podlab_ns::ops::sees_every_process();
    let mut judged: BTreeMap<u64, (PathBuf, Option<Identity>)> = BTreeMap::new();
    for entry in entries.flatten() {
        let Some(inode) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if inode == own || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let identity = Identity::read(&entry.path());
        let visible = sees_every_process
            || identity
                .as_ref()
                .is_some_and(|i| i.pid_namespace == own_pid_namespace);
        if visible {
            judged.insert(inode, (entry.path(), identity));
        }
    }
    let live = podlab_ns::ops::find(
        NsKind::Net,
        &judged.keys().copied().collect::<BTreeSet<_>>(),
    );
    let mut removed = Vec::new();
    for (inode, (folder, identity)) in judged {
        let (gone, _lock) = match live.get(&inode) {
            None => (true, None),
            Some(holder) => match identity.and_then(|i| i.cookie) {
                Some(recorded) => {
                    let lock = lock_if_number_reused(holder, &folder, recorded);
                    (lock.is_some(), lock)
                }
                // Nothing to tell an earlier namespace from this one: it stays.
                None => (false, None),
            },
        };
        if gone {
            match std::fs::remove_dir_all(&folder) {
                Ok(()) => removed.push(folder),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("removing {}", folder.display())),
            }
        }
    }
    Ok(removed)
}

/// When the live namespace at `holder` is another one than the folder's (its cookie is not
/// `recorded`): that namespace's network lock, to hold while the folder is removed, so that the
/// removal never races that namespace's own claim. `None` when it is the folder's namespace, or
/// when its lock is taken (a namespace busy attaching claims its folder itself).
fn lock_if_number_reused(
    holder: &Path,
    folder: &Path,
    recorded: u64,
) -> Option<std::os::fd::OwnedFd> {
    // An error: its holder ended meanwhile, and the next collection sees it gone.
    let netns = podlab_ns::ops::open(holder, NsKind::Net).ok()?;
    match podlab_ns::net::cookie::cookie_of(netns.as_fd()) {
        Ok(Some(cookie)) if cookie != recorded => {}
        _ => return None,
    }
    let lock = super::try_lock_network_namespace_of(netns.as_fd()).ok()?;
    // Under the lock: the folder may have been claimed by its new namespace since it was read.
    Identity::read(folder)
        .is_some_and(|i| i.cookie == Some(recorded))
        .then_some(lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_file_reads_back_as_written() {
        let dir = std::env::temp_dir().join(format!("podlab-identity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let identity = Identity {
            cookie: Some(7),
            pid_namespace: 4026531836,
        };
        identity.write(&dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(FILE)).unwrap(),
            r#"{"cookie":7,"pidNamespace":4026531836}"#
        );
        assert_eq!(Identity::read(&dir), Some(identity));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
