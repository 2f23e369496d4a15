//! Which cgroup version the machine runs, and where each controller podlab uses is mounted.
//!
//! Like runc's `IsCgroup2UnifiedMode`, the machine is v2 when `/sys/fs/cgroup` itself is a
//! cgroup2 filesystem. Otherwise it is v1, and each controller is looked for at the place
//! systemd and every distribution mount it, `/sys/fs/cgroup/<name>` (a co-mounted `cpu,cpuacct`
//! is reached through its `cpu` and `cpuacct` links), checked by the filesystem's magic number;
//! one not found there is looked up in `/proc/self/mountinfo`. The conventional place comes
//! first because mountinfo grows with every pod's mounts, and opening a runtime must not.
//! A cgroup2 mount beside v1 controllers (`/sys/fs/cgroup/unified`, systemd's hybrid mode)
//! holds no controllers and is not used.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Cgroup, Error, Result};

/// Where cgroup filesystems are mounted.
pub const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// The `statfs` magic numbers of the two filesystems (linux/magic.h).
pub(crate) const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
pub(crate) const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Version {
    V1,
    V2,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

/// The controllers podlab uses. On v2 `cpuacct` is part of `cpu` and `devices` is a BPF program,
/// so a v2 cgroup has one folder for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Controller {
    Cpu,
    Cpuacct,
    Memory,
    Pids,
    Devices,
    Hugetlb,
}

impl Controller {
    pub const ALL: [Controller; 6] = [
        Controller::Cpu,
        Controller::Cpuacct,
        Controller::Memory,
        Controller::Pids,
        Controller::Devices,
        Controller::Hugetlb,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Controller::Cpu => "cpu",
            Controller::Cpuacct => "cpuacct",
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Devices => "devices",
            Controller::Hugetlb => "hugetlb",
        }
    }

    /// A file only this controller's v1 hierarchy has in its root cgroup: proof that a mount is
    /// its hierarchy. The pids controller has no file in the root cgroup; hugetlb's are named
    /// by page size.
    fn v1_marker(self) -> Option<&'static str> {
        match self {
            Controller::Cpu => Some("cpu.shares"),
            Controller::Cpuacct => Some("cpuacct.usage"),
            Controller::Memory => Some("memory.limit_in_bytes"),
            Controller::Pids | Controller::Hugetlb => None,
            Controller::Devices => Some("devices.list"),
        }
    }

    /// Whether the v1 mount at `mount` is this controller's hierarchy: it holds the controller's
    /// marker file, or (pids) the folder is named after the controllers mounted there, as
    /// systemd names them (`pids`, `cpu,cpuacct`).
    fn is_v1_mount(self, mount: &Path) -> bool {
        match self.v1_marker() {
            Some(marker) => mount.join(marker).exists(),
            None => mount
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.split(',').any(|part| part == self.name())),
        }
    }

    /// The name the v2 `cgroup.controllers` file uses, if the controller is one there.
    pub(crate) fn v2_name(self) -> Option<&'static str> {
        match self {
            Controller::Cpu => Some("cpu"),
            Controller::Memory => Some("memory"),
            Controller::Pids => Some("pids"),
            Controller::Hugetlb => Some("hugetlb"),
            Controller::Cpuacct | Controller::Devices => None,
        }
    }
}

impl std::fmt::Display for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The machine's cgroup hierarchy: its version and the mount of each controller found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hierarchy {
    pub version: Version,
    /// v1: each controller's mount point. v2: every controller at the one root.
    pub mounts: BTreeMap<Controller, PathBuf>,
    /// v2: the root's `cgroup.controllers` (what children can be given). Empty on v1.
    pub v2_controllers: Vec<String>,
}

impl Hierarchy {
    /// The machine's hierarchy, as runc finds it.
    pub fn detect() -> Result<Hierarchy> {
        let root = Path::new(CGROUP_MOUNT);
        if fs_magic(root) == Some(CGROUP2_SUPER_MAGIC) {
            return Hierarchy::v2_at(root);
        }
        let mut mounts = BTreeMap::new();
        let mut missing = Vec::new();
        for controller in Controller::ALL {
            let conventional = root.join(controller.name());
            if fs_magic(&conventional) == Some(CGROUP_SUPER_MAGIC)
                && controller.is_v1_mount(&conventional)
            {
                mounts.insert(controller, conventional);
            } else {
                missing.push(controller);
            }
        }
        // A controller that no hierarchy has (hugetlb where the kernel's config leaves it out)
        // is mounted nowhere: /proc/self/cgroup names the hierarchies in a few lines, where the
        // mount table lists every pod's pins and /dev/shm too, read by every podlab command.
        if let Ok(own) = std::fs::read_to_string("/proc/self/cgroup") {
            missing.retain(|c| in_a_v1_hierarchy(&own, *c));
        }
        if !missing.is_empty() {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
                .map_err(|e| Error::io("reading", "/proc/self/mountinfo", e))?;
            for (controller, path) in v1_mounts_in(&mountinfo, &missing) {
                mounts.entry(controller).or_insert(path);
            }
        }
        if mounts.is_empty() {
            return Err(Error::NoHierarchy(format!(
                "{CGROUP_MOUNT} is not cgroup2 and no v1 controller (cpu, memory, pids, devices) \
                 is mounted"
            )));
        }
        Ok(Hierarchy {
            version: Version::V1,
            mounts,
            v2_controllers: Vec::new(),
        })
    }

    /// A v1 hierarchy with each controller mounted in `<root>/<controller>` (a fake one in
    /// tests; `/sys/fs/cgroup` on a machine).
    pub fn v1_at(root: &Path) -> Hierarchy {
        Hierarchy {
            version: Version::V1,
            mounts: Controller::ALL
                .into_iter()
                .map(|c| (c, root.join(c.name())))
                .collect(),
            v2_controllers: Vec::new(),
        }
    }

    /// A v2 hierarchy rooted at `root`, its controllers read from `<root>/cgroup.controllers`.
    pub fn v2_at(root: &Path) -> Result<Hierarchy> {
        let path = root.join("cgroup.controllers");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io("reading", &path, e))?;
        let v2_controllers: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        let mounts = Controller::ALL
            .into_iter()
            .filter(|c| match c.v2_name() {
                Some(name) => v2_controllers.iter().any(|have| have == name),
                // cpuacct's numbers are in cpu.stat of every v2 cgroup.
                None => *c == Controller::Cpuacct,
            })
            .map(|c| (c, root.to_path_buf()))
            .collect();
        Ok(Hierarchy {
            version: Version::V2,
            mounts,
            v2_controllers,
        })
    }

    pub fn has(&self, controller: Controller) -> bool {
        self.mounts.contains_key(&controller)
    }

    /// The cgroup at `relative` (a `/`-separated path below every controller's root).
    pub fn cgroup(&self, relative: &str) -> Cgroup {
        Cgroup::new(self, relative)
    }

    /// The v2 root folder (None on v1).
    pub fn v2_root(&self) -> Option<&Path> {
        match self.version {
            Version::V2 => self.mounts.values().next().map(PathBuf::as_path),
            Version::V1 => None,
        }
    }
}

// The type's width is the libc's (`long` in glibc's statfs, `unsigned long` in musl's).
#[allow(clippy::unnecessary_cast)]
pub(crate) fn fs_magic(path: &Path) -> Option<i64> {
    nix::sys::statfs::statfs(path)
        .ok()
        .map(|s| s.filesystem_type().0 as i64)
}

/// Whether `/proc/self/cgroup`'s text (`ID:CONTROLLERS:PATH` lines; v2's is `0::PATH`) has a
/// v1 hierarchy with `controller`.
fn in_a_v1_hierarchy(proc_self_cgroup: &str, controller: Controller) -> bool {
    proc_self_cgroup.lines().any(|line| {
        line.split(':')
            .nth(1)
            .is_some_and(|controllers| controllers.split(',').any(|c| c == controller.name()))
    })
}

/// The v1 controllers of mountinfo's `cgroup` mounts and their mount points: each mount is the
/// hierarchy of the controllers whose files it holds.
fn v1_mounts_in(mountinfo: &str, wanted: &[Controller]) -> Vec<(Controller, PathBuf)> {
    let mounts = podlab_ns::mnt::parse_mountinfo(mountinfo).unwrap_or_default();
    let mut found = Vec::new();
    for mount in mounts.iter().filter(|m| m.fs_type == "cgroup") {
        // Only the controllers still looked for: each marker is a stat of every mount.
        for &controller in wanted {
            if controller.is_v1_mount(&mount.mount_point) {
                found.push((controller, mount.mount_point.clone()));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_is_in_a_hierarchy_only_when_proc_self_cgroup_names_it() {
        let hybrid =
            "12:pids:/user.slice\n4:cpu,cpuacct:/\n1:name=systemd:/init.scope\n0::/init.scope\n";
        assert!(in_a_v1_hierarchy(hybrid, Controller::Pids));
        assert!(in_a_v1_hierarchy(hybrid, Controller::Cpu));
        assert!(in_a_v1_hierarchy(hybrid, Controller::Cpuacct));
        assert!(!in_a_v1_hierarchy(hybrid, Controller::Hugetlb));
        assert!(!in_a_v1_hierarchy(hybrid, Controller::Memory));
        // cgroup2 alone names no controller; systemd's named hierarchy is none either.
        assert!(!in_a_v1_hierarchy("0::/user.slice\n", Controller::Pids));
        assert!(!in_a_v1_hierarchy("1:name=systemd:/\n", Controller::Memory));
    }

    #[test]
    fn mountinfo_v1_controllers_are_found_by_their_files_and_cgroup2_ignored() {
        let root = crate::cgroup::tests::scratch("mountinfo");
        for (dir, marker) in [
            ("cpu,cpuacct", "cpu.shares"),
            ("cpu,cpuacct", "cpuacct.usage"),
            ("my pids", "pids.max"),
            ("unified", "cgroup.controllers"),
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
            std::fs::write(root.join(dir).join(marker), "").unwrap();
        }
        let r = root.display().to_string();
        let mountinfo = format!(
            "31 25 0:27 / {r}/unified rw,nosuid - cgroup2 cgroup2 rw\n\
             33 25 0:29 / {r}/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n\
             35 25 0:31 / {r}/pids rw - cgroup cgroup rw,pids\n"
        );
        assert_eq!(
            v1_mounts_in(&mountinfo, &Controller::ALL),
            vec![
                (Controller::Cpu, root.join("cpu,cpuacct")),
                (Controller::Cpuacct, root.join("cpu,cpuacct")),
                (Controller::Pids, root.join("pids")),
            ]
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn this_machine_is_detected() {
        // Whatever the machine has, detection must say so without error where cgroups exist.
        if !Path::new(CGROUP_MOUNT).exists() {
            eprintln!("skipped: no {CGROUP_MOUNT} on this machine");
            return;
        }
        let hierarchy = Hierarchy::detect().unwrap();
        match hierarchy.version {
            Version::V1 => {
                assert!(hierarchy.has(Controller::Memory) || hierarchy.has(Controller::Cpu))
            }
            Version::V2 => assert!(hierarchy.v2_root().is_some()),
        }
    }
}
