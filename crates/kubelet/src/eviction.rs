//! kubelet's eviction manager, its local-storage part (`localStorageEviction` →
//! `emptyDirLimitEviction` in `pkg/kubelet/eviction`): a pod whose `emptyDir` holds more than the
//! volume's `sizeLimit` is evicted. Its phase becomes Failed with reason `Evicted` and kubelet's
//! message (`Usage of EmptyDir volume "cache" exceeds the limit "1Mi". `), a Warning event
//! `Evicted` says the same, a `DisruptionTarget` condition (reason `TerminationByKubelet`) is
//! added, and its containers are killed with a grace period of 0 (raised to the runtime's
//! 2 s minimum), never to be restarted.
//!
//! The usage is measured as kubelet's `du` measures a volume without a project quota: the
//! blocks allocated under the folder, each inode once, on its file system only. kubelet
//! measures every `evictionMonitoringPeriod` (10 s, [`MONITORING_PERIOD`]); so does each pod
//! worker for its pod, when the pod has an `emptyDir` with a limit. A `medium: Memory` volume
//! is a tmpfs of that size (see [`crate::volume`]), so it fills up (ENOSPC) before it could be
//! evicted; it is measured all the same, as kubelet measures it.
//!
//! The decision ([`empty_dir_limit`]) is pure: it takes the usage as a function.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::model::Eviction;

/// kubelet's eviction `Reason` (the pod's `status.reason` and the event's reason).
pub const REASON: &str = "Evicted";
/// The reason of the `DisruptionTarget` condition kubelet adds to a pod it evicts
/// (`PodReasonTerminationByKubelet`).
pub const DISRUPTION_REASON: &str = "TerminationByKubelet";
/// kubelet's `evictionMonitoringPeriod`.
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);

/// An `emptyDir` volume of `pod` with a positive `sizeLimit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitedEmptyDir {
    /// The volume's name.
    pub name: String,
    /// The limit in bytes.
    pub limit: u64,
    /// The limit as the spec writes it (kubelet prints the quantity).
    pub quantity: String,
}

/// The `emptyDir` volumes of `pod` with a positive `sizeLimit`, in spec order.
pub fn limited_empty_dirs(pod: &Pod) -> Vec<LimitedEmptyDir> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .filter_map(|volume| {
            let quantity = volume.empty_dir.as_ref()?.size_limit.as_ref()?;
            let limit = podlab_api::quantity::bytes(&quantity.0).filter(|n| *n > 0)?;
            Some(LimitedEmptyDir {
                name: volume.name.clone(),
                limit: u64::try_from(limit).ok()?,
                quantity: quantity.0.clone(),
            })
        })
        .collect()
}

/// kubelet's `emptyDirLimitEviction`: the eviction of the first limited `emptyDir` whose usage
/// (`usage` of its name, None when it cannot be measured) is above its limit.
pub fn empty_dir_limit(pod: &Pod, mut usage: impl FnMut(&str) -> Option<u64>) -> Option<Eviction> {
    limited_empty_dirs(pod).into_iter().find_map(|volume| {
        let used = usage(&volume.name)?;
        (used > volume.limit).then(|| Eviction {
            reason: REASON.into(),
            message: message(&volume.name, &volume.quantity),
        })
    })
}

/// kubelet's `emptyDirMessageFmt` (trailing space included).
pub fn message(volume: &str, quantity: &str) -> String {
    format!("Usage of EmptyDir volume {volume:?} exceeds the limit {quantity:?}. ")
}

/// The bytes allocated under `path` (`du -s -x -B1`): the blocks of each inode once (hard
/// links), on `path`'s file system only.
pub fn disk_usage(path: &Path) -> std::io::Result<u64> {
    let root = std::fs::symlink_metadata(path)?;
    let device = root.dev();
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut total = root.blocks() * 512;
    let mut folders = vec![path.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            // Removed meanwhile (the container deletes as it writes).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            if meta.dev() != device {
                continue;
            }
            if meta.nlink() > 1 && !meta.is_dir() && !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            total += meta.blocks() * 512;
            if meta.is_dir() {
                folders.push(entry.path());
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(volumes: &str) -> Pod {
        let yaml = format!(
            "{{apiVersion: v1, kind: Pod, metadata: {{name: p}}, spec: {{containers: [{{name: c, image: busybox}}], volumes: {volumes}}}}}"
        );
        podlab_api::decode_pod(&yaml, "test").unwrap()
    }

    #[test]
    fn the_first_empty_dir_over_its_limit_evicts_with_kubelets_message() {
        let p = pod("[{name: a, emptyDir: {}}, {name: b, emptyDir: {sizeLimit: 1Mi}}, {name: c, emptyDir: {medium: Memory, sizeLimit: 2Mi}}]");
        let limited = limited_empty_dirs(&p);
        assert_eq!(
            limited
                .iter()
                .map(|v| (v.name.as_str(), v.limit))
                .collect::<Vec<_>>(),
            [("b", 1 << 20), ("c", 2 << 20)],
            "a has no limit"
        );
        assert_eq!(empty_dir_limit(&p, |_| Some(1 << 20)), None, "at the limit");
        let evicted = empty_dir_limit(&p, |name| Some(if name == "c" { 3 << 20 } else { 0 }));
        assert_eq!(
            evicted,
            Some(Eviction {
                reason: "Evicted".into(),
                message: "Usage of EmptyDir volume \"c\" exceeds the limit \"2Mi\". ".into(),
            })
        );
        assert_eq!(empty_dir_limit(&p, |_| None), None, "not measured");
    }

    #[test]
    fn disk_usage_counts_blocks_and_hard_links_once() {
        let dir = std::env::temp_dir().join(format!("podlab-du-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let empty = disk_usage(&dir).unwrap();
        std::fs::write(dir.join("sub/data"), vec![1u8; 256 * 1024]).unwrap();
        std::fs::hard_link(dir.join("sub/data"), dir.join("link")).unwrap();
        // A sparse file allocates nothing for its hole.
        let sparse = std::fs::File::create(dir.join("sparse")).unwrap();
        sparse.set_len(64 << 20).unwrap();
        let used = disk_usage(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let grown = used - empty;
        assert!(
            (256 * 1024..2 * 256 * 1024).contains(&grown),
            "the data once, the hole not at all: {grown}"
        );
    }
}
