//! The values a cgroup is given, shaped as the CRI's `LinuxContainerResources` (which kubelet
//! also uses for its pod cgroups): a 0 field is not set and leaves the kernel's value.

use serde::{Deserialize, Serialize};

use crate::hugetlb::{self, HugepageLimit};
use crate::{cpu, memory, pids, Cgroup, Result};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// `cpu.shares` (v2: converted to `cpu.weight`).
    #[serde(default)]
    pub cpu_shares: u64,
    /// CFS quota in microseconds per `cpu_period`; 0 not set, -1 no cap.
    #[serde(default)]
    pub cpu_quota: i64,
    /// CFS period in microseconds.
    #[serde(default)]
    pub cpu_period: u64,
    /// Bytes; 0 not set, -1 no limit.
    #[serde(default)]
    pub memory_limit_in_bytes: i64,
    /// Tasks; 0 not set, -1 no limit.
    #[serde(default)]
    pub pids_limit: i64,
    /// Bytes of huge pages per page size (`hugetlb.<size>.*`); empty: not set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hugepage_limits: Vec<HugepageLimit>,
}

impl Resources {
    pub fn is_empty(&self) -> bool {
        *self == Resources::default()
    }

    /// Writes every set value to `cgroup`.
    pub fn apply(&self, cgroup: &Cgroup) -> Result<()> {
        if self.cpu_shares > 0 {
            cpu::set_shares(cgroup, self.cpu_shares)?;
        }
        if self.cpu_quota != 0 || self.cpu_period != 0 {
            cpu::set_quota(cgroup, self.cpu_quota, self.cpu_period)?;
        }
        if self.memory_limit_in_bytes != 0 {
            memory::set_limit(cgroup, self.memory_limit_in_bytes)?;
        }
        if self.pids_limit != 0 {
            pids::set_max(cgroup, self.pids_limit)?;
        }
        for limit in &self.hugepage_limits {
            hugetlb::set_limit(cgroup, limit)?;
        }
        Ok(())
    }

    /// `other`'s set fields over these (an UpdateContainerResources on what a container has).
    pub fn merged(&self, other: &Resources) -> Resources {
        let pick_u = |new: u64, old: u64| if new != 0 { new } else { old };
        let pick_i = |new: i64, old: i64| if new != 0 { new } else { old };
        Resources {
            cpu_shares: pick_u(other.cpu_shares, self.cpu_shares),
            cpu_quota: pick_i(other.cpu_quota, self.cpu_quota),
            cpu_period: pick_u(other.cpu_period, self.cpu_period),
            memory_limit_in_bytes: pick_i(other.memory_limit_in_bytes, self.memory_limit_in_bytes),
            pids_limit: pick_i(other.pids_limit, self.pids_limit),
            hugepage_limits: if other.hugepage_limits.is_empty() {
                self.hugepage_limits.clone()
            } else {
                other.hugepage_limits.clone()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::tests::scratch;
    use crate::{Controller, Hierarchy};

    fn read(cgroup: &Cgroup, controller: Controller, file: &str) -> String {
        std::fs::read_to_string(cgroup.dir(controller).unwrap().join(file)).unwrap()
    }

    const GUARANTEED: Resources = Resources {
        cpu_shares: 256,
        cpu_quota: 25_000,
        cpu_period: 100_000,
        memory_limit_in_bytes: 64 << 20,
        pids_limit: 1024,
        hugepage_limits: Vec::new(),
    };

    #[test]
    fn v1_files_get_kubelets_values() {
        let root = scratch("res-v1");
        let cgroup = Hierarchy::v1_at(&root).cgroup("kubepods/podu/c1");
        cgroup.create().unwrap();
        // A v1 cpu folder without these files has no CFS bandwidth control: quota is skipped.
        std::fs::write(
            cgroup
                .dir(Controller::Cpu)
                .unwrap()
                .join("cpu.cfs_quota_us"),
            "-1",
        )
        .unwrap();
        GUARANTEED.apply(&cgroup).unwrap();
        assert_eq!(read(&cgroup, Controller::Cpu, "cpu.shares"), "256");
        assert_eq!(
            read(&cgroup, Controller::Cpu, "cpu.cfs_period_us"),
            "100000"
        );
        assert_eq!(read(&cgroup, Controller::Cpu, "cpu.cfs_quota_us"), "25000");
        assert_eq!(
            read(&cgroup, Controller::Memory, "memory.limit_in_bytes"),
            "67108864"
        );
        assert_eq!(read(&cgroup, Controller::Pids, "pids.max"), "1024");
        with_hugepages().apply(&cgroup).unwrap();
        assert_eq!(
            read(&cgroup, Controller::Hugetlb, "hugetlb.2MB.limit_in_bytes"),
            "4194304"
        );
        assert_eq!(
            read(&cgroup, Controller::Hugetlb, "hugetlb.1GB.limit_in_bytes"),
            "0"
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    /// kubelet's list for a container limited to 4Mi of 2 MiB pages on a machine that also
    /// has 1 GiB pages.
    fn with_hugepages() -> Resources {
        Resources {
            hugepage_limits: vec![
                HugepageLimit {
                    page_size: "2MB".into(),
                    limit: 4 << 20,
                },
                HugepageLimit {
                    page_size: "1GB".into(),
                    limit: 0,
                },
            ],
            ..Resources::default()
        }
    }

    /// This machine mounts no v2 controllers: the v2 path is checked against a fake root.
    #[test]
    fn v2_files_get_weight_max_and_memory_max() {
        let root = scratch("res-v2");
        std::fs::write(
            root.join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .unwrap();
        let hierarchy = Hierarchy::v2_at(&root).unwrap();
        let cgroup = hierarchy.cgroup("podlab-x/kubepods/podu/c1");
        cgroup.create().unwrap();
        std::fs::write(
            cgroup
                .dir(Controller::Memory)
                .unwrap()
                .join("memory.swap.max"),
            "max",
        )
        .unwrap();
        GUARANTEED.apply(&cgroup).unwrap();
        assert_eq!(read(&cgroup, Controller::Cpu, "cpu.weight"), "10");
        assert_eq!(read(&cgroup, Controller::Cpu, "cpu.max"), "25000 100000");
        assert_eq!(read(&cgroup, Controller::Memory, "memory.max"), "67108864");
        assert_eq!(read(&cgroup, Controller::Memory, "memory.swap.max"), "0");
        assert_eq!(read(&cgroup, Controller::Pids, "pids.max"), "1024");
        // No limit: the CFS cap is lifted with `max`.
        Resources {
            cpu_quota: -1,
            cpu_period: 100_000,
            ..Resources::default()
        }
        .apply(&cgroup)
        .unwrap();
        assert_eq!(read(&cgroup, Controller::Cpu, "cpu.max"), "max 100000");
        assert!(
            cgroup.v2_enable.contains("+hugetlb"),
            "{}",
            cgroup.v2_enable
        );
        with_hugepages().apply(&cgroup).unwrap();
        assert_eq!(
            read(&cgroup, Controller::Hugetlb, "hugetlb.2MB.max"),
            "4194304"
        );
        assert_eq!(read(&cgroup, Controller::Hugetlb, "hugetlb.1GB.max"), "0");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn updates_keep_what_they_do_not_set() {
        let update = Resources {
            memory_limit_in_bytes: 128 << 20,
            ..Resources::default()
        };
        let merged = GUARANTEED.merged(&update);
        assert_eq!(merged.memory_limit_in_bytes, 128 << 20);
        assert_eq!(merged.cpu_shares, 256);
    }
}
