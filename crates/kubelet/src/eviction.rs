//! kubelet's eviction manager, its local-storage part (`localStorageEviction` in
//! `pkg/kubelet/eviction`, the `LocalStorageCapacityIsolation` feature), three checks in
//! kubelet's order, the first that holds evicting the pod:
//!
//! 1. `emptyDirLimitEviction`: an `emptyDir` holds more than its `sizeLimit`
//!    (`Usage of EmptyDir volume "cache" exceeds the limit "1Mi". `);
//! 2. `podEphemeralStorageLimitEviction`: the pod's ephemeral storage (its running containers'
//!    writable layers and logs, its local ephemeral volumes — `emptyDir`s on disk and
//!    `configMap`s —, its `/etc/hosts`) is more than the pod's `limits.ephemeral-storage`, the
//!    sum of its containers' (`resourcehelper.PodLimits`: the largest init container's when that
//!    is more) (`Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. `);
//! 3. `containerEphemeralStorageLimitEviction`: a running container's writable layer (podlab's
//!    overlay upper folder) plus its logs is more than its `limits.ephemeral-storage`
//!    (`Container app exceeded its local ephemeral storage limit "1Mi". `).
//!
//! The pod's phase becomes Failed with reason `Evicted` and that message, a Warning event
//! `Evicted` says the same, and its containers are killed with a grace period of 0 (raised to
//! the runtime's 2 s minimum), never to be restarted. kubelet passes no condition for these
//! three (`evictPod(pod, 0, message, nil, nil)`), so no `DisruptionTarget` is added, unlike a
//! node-pressure eviction.
//!
//! The usage is measured as kubelet's `du` measures a volume without a project quota: the
//! blocks allocated under the folder, each inode once, on its file system only. kubelet
//! measures every `evictionMonitoringPeriod` (10 s, [`MONITORING_PERIOD`]); so does each pod
//! worker for its pod, when the pod has an `emptyDir` with a limit or an `ephemeral-storage`
//! limit. A `medium: Memory` volume is a tmpfs of that size (see [`crate::volume`]), so it fills
//! up (ENOSPC) before it could be evicted; it is measured all the same, as kubelet measures it,
//! but it is no part of the pod's ephemeral storage.
//!
//! The decision ([`local_storage_eviction`]) is pure: it takes the usage as a function.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Volume};
use podlab_api::quantity::Amount;
use podlab_api::resources::EPHEMERAL_STORAGE;

use crate::model::Eviction;

/// kubelet's eviction `Reason` (the pod's `status.reason` and the event's reason).
pub const REASON: &str = "Evicted";
/// kubelet's `evictionMonitoringPeriod`.
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);

/// An `emptyDir` volume of `pod` with a positive `sizeLimit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitedEmptyDir {
    /// The volume's name.
    pub name: String,
    /// The limit in bytes.
    pub limit: u64,
    /// The limit as kubelet prints it (`Quantity.String()`).
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
                quantity: canonical(&quantity.0),
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

/// `Quantity.String()` of a quantity the API server accepted.
fn canonical(text: &str) -> String {
    podlab_api::quantity::canonical(text).unwrap_or_else(|| text.to_string())
}

/// What the eviction manager measures of a pod (kubelet's summary stats of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage<'a> {
    /// An `emptyDir` volume's folder.
    EmptyDir(&'a str),
    /// A `configMap` volume's folder (on disk, as kubelet's).
    ConfigMap(&'a str),
    /// The writable layer of the container of that name: None when no such container runs
    /// (kubelet's stats leave out the containers that do not run).
    Rootfs(&'a str),
    /// The log folder of the container of that name.
    Logs(&'a str),
    /// The pod's `/etc/hosts`.
    EtcHosts,
}

/// The `limits.ephemeral-storage` of a container (its quantity text), when set.
fn storage_limit(c: &k8s_openapi::api::core::v1::Container) -> Option<&str> {
    let limits = c.resources.as_ref()?.limits.as_ref()?;
    limits.get(EPHEMERAL_STORAGE).map(|q| q.0.as_str())
}

/// A limit in bytes with the quantity kubelet prints for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageLimit {
    pub bytes: u64,
    pub quantity: String,
}

impl StorageLimit {
    fn of(text: &str) -> Option<StorageLimit> {
        let amount = Amount::parse(text).ok()?;
        Some(StorageLimit {
            bytes: u64::try_from(amount.value()).ok()?,
            quantity: canonical(text),
        })
    }
}

/// The containers (`spec.containers`, as kubelet's check reads them) with a non-zero
/// `limits.ephemeral-storage`, in spec order.
pub fn container_storage_limits(pod: &Pod) -> Vec<(String, StorageLimit)> {
    let containers = pod.spec.iter().flat_map(|s| s.containers.iter());
    containers
        .filter_map(|c| {
            let limit = StorageLimit::of(storage_limit(c)?)?;
            (limit.bytes != 0).then(|| (c.name.clone(), limit))
        })
        .collect()
}

/// The pod's `limits.ephemeral-storage` (`resourcehelper.PodLimits`): the sum of its
/// containers' limits, or the largest init container's when that is more; None when no
/// container sets one. The sum keeps the format of the first non-zero limit
/// (`Quantity.Add`), so `1Mi` + `1Mi` prints `2Mi`.
pub fn pod_storage_limit(pod: &Pod) -> Option<StorageLimit> {
    let spec = pod.spec.as_ref()?;
    let mut sum: Option<(Amount, &str)> = None;
    for text in spec.containers.iter().filter_map(storage_limit) {
        let amount = Amount::parse(text).ok()?;
        sum = Some(match sum {
            None => (amount, text),
            Some((total, _)) if total.is_zero() => (total + amount, text),
            Some((total, format)) => (total + amount, format),
        });
    }
    for text in spec
        .init_containers
        .iter()
        .flatten()
        .filter_map(storage_limit)
    {
        let amount = Amount::parse(text).ok()?;
        if sum.is_none_or(|(total, _)| amount > total) {
            sum = Some((amount, text));
        }
    }
    let (total, format) = sum?;
    let bytes = total.value();
    Some(StorageLimit {
        bytes: u64::try_from(bytes).ok()?,
        quantity: format_like(format, bytes),
    })
}

/// `bytes` printed as `Quantity.String()` prints a value in the format of the quantity
/// `like` was written in: binary (`Ki`…`Ei`), an exponent, or decimal SI.
fn format_like(like: &str, bytes: i64) -> String {
    let binary = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
        .iter()
        .any(|s| like.ends_with(s));
    let exponent = like.contains(['e', 'E']);
    if binary && bytes % 1024 == 0 && bytes != 0 {
        canonical(&format!("{}Ki", bytes / 1024))
    } else if binary && bytes.abs() >= 1024 {
        bytes.to_string()
    } else if exponent {
        canonical(&format!("{bytes}e0"))
    } else {
        canonical(&bytes.to_string())
    }
}

/// Whether kubelet's eviction manager has anything to measure for `pod`: a limited
/// `emptyDir`, or an `ephemeral-storage` limit.
pub fn has_storage_limits(pod: &Pod) -> bool {
    !limited_empty_dirs(pod).is_empty() || pod_storage_limit(pod).is_some()
}

/// kubelet's `IsLocalEphemeralVolume` among the volumes podlab has: an `emptyDir` on the
/// node's disk (no medium) and a `configMap`.
fn local_ephemeral<'a>(volume: &'a Volume) -> Option<Usage<'a>> {
    let name = volume.name.as_str();
    if let Some(dir) = &volume.empty_dir {
        return dir
            .medium
            .as_deref()
            .unwrap_or("")
            .is_empty()
            .then_some(Usage::EmptyDir(name));
    }
    volume.config_map.as_ref().map(|_| Usage::ConfigMap(name))
}

/// kubelet's `localStorageEviction` for one pod: the eviction of the first of its three
/// checks that holds (see the module's doc); `usage` measures (None: not measured, or a
/// container that does not run).
pub fn local_storage_eviction(
    pod: &Pod,
    mut usage: impl FnMut(Usage<'_>) -> Option<u64>,
) -> Option<Eviction> {
    let evicted = |message: String| Eviction {
        reason: REASON.into(),
        message,
    };
    let by_volume = empty_dir_limit(pod, |name| usage(Usage::EmptyDir(name)));
    if by_volume.is_some() {
        return by_volume;
    }
    let spec = pod.spec.as_ref()?;
    let names: Vec<&str> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|c| c.name.as_str())
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| c.name.as_str()),
        )
        .collect();
    if let Some(limit) = pod_storage_limit(pod) {
        let containers: u64 = names
            .iter()
            .filter_map(|n| container_usage(&mut usage, n))
            .sum();
        let volumes: u64 = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(local_ephemeral)
            .filter_map(&mut usage)
            .sum();
        let total = containers + volumes + usage(Usage::EtcHosts).unwrap_or(0);
        if total > limit.bytes {
            return Some(evicted(pod_message(&limit.quantity)));
        }
    }
    container_storage_limits(pod)
        .into_iter()
        .find(|(name, limit)| container_usage(&mut usage, name).is_some_and(|u| u > limit.bytes))
        .map(|(name, limit)| evicted(container_message(&name, &limit.quantity)))
}

/// A running container's usage as kubelet's `addContainerUsage` and the container check add
/// it: its writable layer plus its logs; None when it does not run.
fn container_usage(usage: &mut impl FnMut(Usage<'_>) -> Option<u64>, name: &str) -> Option<u64> {
    let rootfs = usage(Usage::Rootfs(name))?;
    Some(rootfs + usage(Usage::Logs(name)).unwrap_or(0))
}

/// kubelet's `podEphemeralStorageMessageFmt` (trailing space included).
pub fn pod_message(quantity: &str) -> String {
    format!("Pod ephemeral local storage usage exceeds the total limit of containers {quantity}. ")
}

/// kubelet's `containerEphemeralStorageMessageFmt` (trailing space included).
pub fn container_message(container: &str, quantity: &str) -> String {
    format!("Container {container} exceeded its local ephemeral storage limit {quantity:?}. ")
}

/// The bytes allocated under `path` (`du -s -x -B1`): the blocks of each inode once (hard
/// links), on `path`'s file system only; a file's own blocks when `path` is a file.
pub fn disk_usage(path: &Path) -> std::io::Result<u64> {
    let root = std::fs::symlink_metadata(path)?;
    let device = root.dev();
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut total = root.blocks() * 512;
    if !root.is_dir() {
        return Ok(total);
    }
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

    fn storage_pod(containers: &str, volumes: &str) -> Pod {
        let volumes = match volumes {
            "[]" => String::new(),
            some => format!(", volumes: {some}"),
        };
        let yaml = format!(
            "{{apiVersion: v1, kind: Pod, metadata: {{name: p}}, spec: {{containers: {containers}{volumes}}}}}"
        );
        podlab_api::decode_pod(&yaml, "test").unwrap()
    }

    const MI: u64 = 1 << 20;

    fn evicted(message: &str) -> Option<Eviction> {
        Some(Eviction {
            reason: "Evicted".into(),
            message: message.into(),
        })
    }

    #[test]
    fn a_container_past_its_limit_evicts_with_kubelets_message() {
        // Two containers with 1Mi each: the pod's limit is 2Mi, so one container at 1Mi
        // and a few bytes is past its own limit but not the pod's.
        let p = storage_pod(
            "[{name: a, image: busybox, resources: {limits: {ephemeral-storage: 1Mi}}}, {name: b, image: busybox, resources: {limits: {ephemeral-storage: 1024Ki}}}, {name: c, image: busybox}]",
            "[]",
        );
        assert_eq!(
            container_storage_limits(&p)
                .iter()
                .map(|(n, l)| (n.as_str(), l.bytes, l.quantity.as_str()))
                .collect::<Vec<_>>(),
            [("a", MI, "1Mi"), ("b", MI, "1Mi")]
        );
        // The writable layer and the logs add up; at the limit is not past it.
        let at = |target: Usage<'_>| match target {
            Usage::Rootfs("a") => Some(MI - 4096),
            Usage::Logs("a") => Some(4096),
            _ => Some(0),
        };
        assert_eq!(local_storage_eviction(&p, at), None);
        let past = |target: Usage<'_>| match target {
            Usage::Rootfs("b") => Some(MI),
            Usage::Logs("b") => Some(4096),
            _ => Some(0),
        };
        assert_eq!(
            local_storage_eviction(&p, past),
            evicted("Container b exceeded its local ephemeral storage limit \"1Mi\". ")
        );
        // A container that does not run is not in kubelet's stats: its logs do not count.
        let stopped = |target: Usage<'_>| match target {
            Usage::Rootfs("b") => None,
            Usage::Logs("b") => Some(8 * MI),
            _ => Some(0),
        };
        assert_eq!(local_storage_eviction(&p, stopped), None);
    }

    #[test]
    fn the_pod_total_counts_disk_volumes_and_is_checked_before_the_containers() {
        let p = storage_pod(
            "[{name: a, image: busybox, resources: {limits: {ephemeral-storage: 1Mi}}}, {name: b, image: busybox, resources: {limits: {ephemeral-storage: 1Mi}}}]",
            "[{name: disk, emptyDir: {}}, {name: ram, emptyDir: {medium: Memory}}, {name: cfg, configMap: {name: x}}]",
        );
        assert_eq!(
            pod_storage_limit(&p),
            Some(StorageLimit {
                bytes: 2 * MI,
                quantity: "2Mi".into()
            })
        );
        // Each container within its limit, the disk emptyDir tipping the pod over.
        let usage = |target: Usage<'_>| match target {
            Usage::Rootfs(_) => Some(MI / 2),
            Usage::EmptyDir("disk") => Some(MI + 1),
            Usage::EmptyDir("ram") => panic!("a memory volume is not ephemeral storage"),
            _ => Some(0),
        };
        assert_eq!(
            local_storage_eviction(&p, usage),
            evicted(
                "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. "
            )
        );
        // A container past its own limit and the pod past its total: the pod's message.
        let both = |target: Usage<'_>| match target {
            Usage::Rootfs("a") => Some(3 * MI),
            _ => Some(0),
        };
        assert!(local_storage_eviction(&p, both)
            .unwrap()
            .message
            .starts_with("Pod ephemeral"));
        // The configMap and /etc/hosts count too.
        let small = |target: Usage<'_>| match target {
            Usage::Rootfs(_) => Some(MI - 4096),
            Usage::ConfigMap("cfg") => Some(4096),
            Usage::EtcHosts => Some(8192),
            _ => Some(0),
        };
        assert!(local_storage_eviction(&p, small).is_some());
    }

    #[test]
    fn the_pod_limit_is_the_sum_or_the_largest_init_container_in_kubelets_format() {
        let limit = |containers: &str, init: &str| {
            let init = match init {
                "[]" => String::new(),
                some => format!("initContainers: {some}, "),
            };
            let yaml = format!(
                "{{apiVersion: v1, kind: Pod, metadata: {{name: p}}, spec: {{{init}containers: {containers}}}}}"
            );
            pod_storage_limit(&podlab_api::decode_pod(&yaml, "test").unwrap())
                .map(|l| (l.bytes, l.quantity))
        };
        let c = |name: &str, q: &str| {
            format!("{{name: {name}, image: busybox, resources: {{limits: {{ephemeral-storage: '{q}'}}}}}}")
        };
        assert_eq!(limit("[{name: a, image: busybox}]", "[]"), None);
        assert_eq!(
            limit(&format!("[{}, {}]", c("a", "1Mi"), c("b", "500Ki")), "[]"),
            Some((MI + 500 * 1024, "1524Ki".into()))
        );
        assert_eq!(
            limit(&format!("[{}, {}]", c("a", "1M"), c("b", "1M")), "[]"),
            Some((2_000_000, "2M".into()))
        );
        assert_eq!(
            limit(&format!("[{}, {}]", c("a", "1Mi"), c("b", "1000")), "[]"),
            Some((MI + 1000, "1049576".into()))
        );
        assert_eq!(
            limit(
                &format!("[{}]", c("a", "1Mi")),
                &format!("[{}]", c("i", "3Mi"))
            ),
            Some((3 * MI, "3Mi".into())),
            "an init container asking for more than the sum"
        );
        assert_eq!(
            limit(
                &format!("[{}, {}]", c("a", "1Gi"), c("b", "1Gi")),
                &format!("[{}]", c("i", "1Gi"))
            ),
            Some((2 << 30, "2Gi".into()))
        );
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
