//! `hostUsers: false`: each such pod gets 65536 ids of the node's its own, kubelet's user
//! namespace manager (`pkg/kubelet/userns`).
//!
//! The node's ids from 65536 up (kubelet's default range, when `/etc/subuid` names no range
//! for it) are cut into ranges of 65536; a pod's ids 0..65536 are one range, the lowest free
//! one when its sandbox is first made. The choice is kept in the pod's folder,
//! `<root>/pods/<uid>/userns`, in kubelet's format, so that every sandbox of the pod gets the
//! same range (its files stay its own), and it is free again once that folder goes with the
//! pod. A lock on the pods' folder keeps two pods from taking one range.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use podlab_ns::user::IdMapping;
use podlab_runtime::config::UserNamespace;
use serde::{Deserialize, Serialize};

use crate::translate::PodDirs;

/// The ids of one pod: kubelet's `userNsLength`.
pub const RANGE: u32 = 65_536;
/// The first id of the node's that pods get: kubelet's default (the ids below are the node's).
const FIRST: u32 = RANGE;
/// How many ranges fit in the 32-bit ids from [`FIRST`] up: the one more that would end at
/// 2^32 - 1 is left out, as that id is `(uid_t) -1`, which no process may have.
const RANGES: u32 = u32::MAX / RANGE - 1;

/// The file kubelet keeps a pod's mappings in (`userns`, its JSON names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    uid_mappings: Vec<Mapping>,
    gid_mappings: Vec<Mapping>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Mapping {
    host_id: u32,
    container_id: u32,
    length: u32,
}

/// Whether the pod asks for a user namespace of its own (`spec.hostUsers: false`).
pub fn wanted(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.host_users) == Some(false)
}

/// The pod's user namespace: None when it keeps the node's; else its range, taken now if it
/// has none yet. `Err` says why none could be taken.
pub fn for_pod(pod: &Pod, dirs: &PodDirs) -> Result<Option<UserNamespace>, String> {
    if !wanted(pod) {
        return Ok(None);
    }
    let pod_dir = crate::volume::pod_dir(dirs);
    let path = pod_dir.join("userns");
    if let Some(record) = read(&path) {
        return Ok(Some(namespace_of(&record)));
    }
    let pods = pod_dir.parent().unwrap_or(pod_dir);
    make_private_dir(pods)?;
    let _lock = lock(pods)?;
    // Another sync of this pod may have taken it meanwhile.
    if let Some(record) = read(&path) {
        return Ok(Some(namespace_of(&record)));
    }
    let taken = taken_ranges(pods);
    let free = (0..RANGES)
        .find(|index| !taken.contains(index))
        .ok_or_else(|| {
            format!("every one of the node's {RANGES} user namespace ranges is taken")
        })?;
    let one = Mapping {
        host_id: FIRST + free * RANGE,
        container_id: 0,
        length: RANGE,
    };
    let record = Record {
        uid_mappings: vec![one],
        gid_mappings: vec![one],
    };
    make_private_dir(pod_dir)?;
    // Written whole, readable by root alone, as the runtime's records are.
    let bytes = serde_json::to_vec(&record).expect("a record serializes");
    podlab_runtime::state::write_atomic(&path, &bytes).map_err(|e| e.to_string())?;
    Ok(Some(namespace_of(&record)))
}

fn namespace_of(record: &Record) -> UserNamespace {
    let maps = |mappings: &[Mapping]| {
        mappings
            .iter()
            .map(|m| IdMapping {
                inside: m.container_id,
                outside: m.host_id,
                count: m.length,
            })
            .collect()
    };
    UserNamespace {
        uids: maps(&record.uid_mappings),
        gids: maps(&record.gid_mappings),
    }
}

fn read(path: &Path) -> Option<Record> {
    podlab_runtime::state::read_record(path).ok().flatten()
}

/// The range indexes the pods' `userns` files below `pods` hold.
fn taken_ranges(pods: &Path) -> std::collections::BTreeSet<u32> {
    let Ok(entries) = std::fs::read_dir(pods) else {
        return Default::default();
    };
    entries
        .flatten()
        .filter_map(|entry| read(&entry.path().join("userns")))
        .flat_map(|record| record.uid_mappings.into_iter().chain(record.gid_mappings))
        .filter_map(|m| m.host_id.checked_sub(FIRST).map(|offset| offset / RANGE))
        .collect()
}

fn make_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(crate::volume::POD_DIR_MODE)
        .create(dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()))
}

/// An exclusive `flock` on the folder `path` itself (no lock file to leave behind), held
/// while the returned descriptor is open.
fn lock(path: &Path) -> Result<std::fs::File, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    loop {
        // SAFETY: flock on a descriptor this function owns.
        let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(file);
        }
        let errno = nix::Error::last();
        if errno != nix::Error::EINTR {
            return Err(format!("flock {}: {errno}", path.display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, host_users: Option<bool>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(format!("pod-{uid}"));
        pod.metadata.namespace = Some("default".into());
        pod.metadata.uid = Some(uid.into());
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            host_users,
            ..Default::default()
        });
        pod
    }

    /// A folder of the test's own, removed even when it fails.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("podlab-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn each_pod_gets_a_range_of_its_own_kept_until_its_folder_goes() {
        let root = Scratch::new("userns-ranges");
        let dirs = |pod: &Pod| PodDirs::new(root.path(), pod);
        let host = pod("host", None);
        assert_eq!(for_pod(&host, &dirs(&host)), Ok(None));
        let (a, b) = (pod("a", Some(false)), pod("b", Some(false)));
        let first = for_pod(&a, &dirs(&a)).unwrap().unwrap();
        assert_eq!(first.uids[0].outside, 65_536);
        assert_eq!(first.check(), Ok(()));
        let second = for_pod(&b, &dirs(&b)).unwrap().unwrap();
        assert_eq!(second.uids[0].outside, 2 * 65_536);
        // Asked again, the same range: it is on disk, in kubelet's format.
        assert_eq!(for_pod(&a, &dirs(&a)).unwrap().unwrap(), first);
        let text = std::fs::read_to_string(root.path().join("pods/a/userns")).unwrap();
        assert!(
            text.contains(r#""uidMappings":[{"hostId":65536,"containerId":0,"length":65536}]"#),
            "{text}"
        );
        // The pod's folder gone, its range is the next pod's.
        std::fs::remove_dir_all(root.path().join("pods/a")).unwrap();
        let c = pod("c", Some(false));
        assert_eq!(for_pod(&c, &dirs(&c)).unwrap().unwrap(), first);
    }

    #[test]
    fn the_ranges_fill_the_ids_above_the_nodes_own() {
        let last_host_id = FIRST as u64 + (RANGES as u64) * RANGE as u64 - 1;
        assert!(last_host_id <= u32::MAX as u64);
        assert_eq!(RANGES, 65_534);
    }
}
