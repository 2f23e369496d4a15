//! The hugetlb controller: how many bytes of huge pages of each size a cgroup may fault in.
//!
//! One file per page size the kernel offers (`/sys/kernel/mm/hugepages/hugepages-<N>kB`),
//! named by runc's and kubelet's unit form of the size (`2MB`, `1GB`): v1
//! `hugetlb.<size>.limit_in_bytes`, v2 `hugetlb.<size>.max`. kubelet writes a value for every
//! size the machine has: the pod's sum of `hugepages-<size>` requests on the pod's cgroup, the
//! container's limit on the container's, 0 for each size not asked for. Where the controller is
//! not mounted (a v1 machine without a hugetlb hierarchy, a v2 root whose `cgroup.controllers`
//! lacks it) kubelet skips it ("Optional subsystem not supported: hugetlb"), and so does
//! [`set_limit`]: the cgroup has no hugetlb folder.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::hierarchy::{Controller, Version};
use crate::{Cgroup, Error, Result};

/// Where the kernel lists the huge page sizes it offers.
pub const HUGEPAGES_DIR: &str = "/sys/kernel/mm/hugepages";

/// One limit: the page size in kubelet's unit form (`2MB`) and the bytes allowed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HugepageLimit {
    pub page_size: String,
    pub limit: u64,
}

/// kubelet's `HugePageUnitSizeFromByteSize`: `2097152` → `2MB`, `1073741824` → `1GB`.
pub fn unit_size(bytes: u64) -> Option<String> {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let mut size = bytes;
    let mut unit = 0;
    while size >= 1024 && size.is_multiple_of(1024) && unit < UNITS.len() - 1 {
        size /= 1024;
        unit += 1;
    }
    (bytes > 0 && (size < 1024 || unit == UNITS.len() - 1))
        .then(|| format!("{size}{}", UNITS[unit]))
}

/// The page sizes the kernel offers, in bytes, smallest first (runc's `HugePageSizes`): the
/// `hugepages-<N>kB` folders of [`HUGEPAGES_DIR`]. None on a kernel without hugetlbfs.
pub fn page_sizes() -> Vec<u64> {
    page_sizes_in(Path::new(HUGEPAGES_DIR))
}

fn page_sizes_in(dir: &Path) -> Vec<u64> {
    let mut sizes: Vec<u64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let kb: u64 = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            Some(kb * 1024)
        })
        .collect();
    sizes.sort_unstable();
    sizes
}

/// The file that holds the limit of `page_size` (`2MB`) on this cgroup's version.
pub fn limit_file(version: Version, page_size: &str) -> String {
    match version {
        Version::V1 => format!("hugetlb.{page_size}.limit_in_bytes"),
        Version::V2 => format!("hugetlb.{page_size}.max"),
    }
}

/// Writes the limit of `limit.page_size`. Nothing happens where the cgroup has no hugetlb
/// controller; a page size the kernel lacks is refused by the kernel (no such file).
pub fn set_limit(cgroup: &Cgroup, limit: &HugepageLimit) -> Result<()> {
    if !cgroup.has(Controller::Hugetlb) {
        return Ok(());
    }
    if limit.page_size.contains('/') || limit.page_size.is_empty() {
        return Err(Error::Parse {
            path: cgroup
                .dir(Controller::Hugetlb)
                .unwrap_or(Path::new(""))
                .to_path_buf(),
            what: "a huge page size",
            text: limit.page_size.clone(),
        });
    }
    cgroup.write(
        Controller::Hugetlb,
        &limit_file(cgroup.version, &limit.page_size),
        &limit.limit.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_kubelet_names_them() {
        assert_eq!(unit_size(2 << 20).as_deref(), Some("2MB"));
        assert_eq!(unit_size(1 << 30).as_deref(), Some("1GB"));
        assert_eq!(unit_size(64 << 10).as_deref(), Some("64KB"));
        assert_eq!(unit_size(0), None);
        let root = crate::cgroup::tests::scratch("hugepages");
        for dir in ["hugepages-1048576kB", "hugepages-2048kB", "other"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        assert_eq!(page_sizes_in(&root), vec![2 << 20, 1 << 30]);
        std::fs::remove_dir_all(root).unwrap();
    }
}
