//! # podlab-cgroups: control groups, as kubelet's cgroupfs driver and runc's fs manager use them
//!
//! A cgroup is a folder in a cgroup filesystem; the kernel accounts and limits the processes
//! listed in its `cgroup.procs` by the values written to its files. On cgroup v1 each controller
//! (cpu, cpuacct, memory, pids, devices) has a hierarchy of its own, mounted at
//! `/sys/fs/cgroup/<controller>`, and a cgroup is one folder of the same relative path in each;
//! on v2 there is one hierarchy, and a parent's `cgroup.subtree_control` says which controllers
//! its children get. [`Hierarchy::detect`] finds which one the machine has (a hybrid machine,
//! v1 controllers plus an empty cgroup2 `unified` mount, is v1, as runc sees it).
//!
//! The layout is kubelet's with the cgroupfs driver ([`layout`]):
//!
//! ```text
//! <root>/kubepods/pod<uid>/<container id>                 Guaranteed
//! <root>/kubepods/burstable/pod<uid>/<container id>       Burstable
//! <root>/kubepods/besteffort/pod<uid>/<container id>      BestEffort
//! ```
//!
//! with `<root>` podlab's twin of kubelet's `--cgroup-root`: `podlab-<hash of the state root>`,
//! so that two podlab roots on one machine (the tests' throw-away roots) never share a cgroup.
//!
//! | module | what |
//! |---|---|
//! | [`hierarchy`] | v1 or v2, and where each controller is mounted |
//! | [`cgroup`] | one cgroup: make it, put processes in it, list, kill and remove them |
//! | [`cpu`] | `cpu.shares`/`cpu.cfs_quota_us` (v1), `cpu.weight`/`cpu.max` (v2), kubelet's conversions |
//! | [`memory`] | the memory limit, OOM kills seen by the kernel, the working set |
//! | [`pids`] | the process count limit |
//! | [`hugetlb`] | huge pages per page size (v1 `hugetlb.<size>.limit_in_bytes`, v2 `hugetlb.<size>.max`) |
//! | [`devices`] | runc's default device allow list (v1 `devices.deny`/`devices.allow`, v2 a BPF program) |
//! | [`bpf`] | the v2 device program: built from the rules, `bpf(BPF_PROG_LOAD)`, `BPF_PROG_ATTACH` |
//! | [`resources`] | the CRI's `LinuxContainerResources`, written in one go |
//! | [`layout`] | kubelet's QoS classes and cgroup names |
//!
//! Every function works on plain files and folders, allocates little, and starts no thread: the
//! runtime's shim calls them between `fork` and `execve`.

pub mod bpf;
pub mod cgroup;
pub mod cpu;
pub mod devices;
pub mod error;
pub mod hierarchy;
pub mod hugetlb;
pub mod layout;
pub mod memory;
pub mod pids;
pub mod resources;

pub use cgroup::Cgroup;
pub use error::{Error, Result};
pub use hierarchy::{Controller, Hierarchy, Version};
pub use layout::{CgroupRoot, QosClass};
pub use resources::Resources;
