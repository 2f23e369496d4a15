//! The memory controller: the limit the OOM killer enforces, the kills it made, the working set.
//!
//! The limit is `memory.limit_in_bytes` on v1 and `memory.max` on v2. Swap is held to the same
//! limit (v1 `memory.memsw.limit_in_bytes` when the kernel accounts swap, v2 `memory.swap.max`
//! 0), which is what kubelet asks for with its default `NoSwap` behaviour. The two v1 files are
//! written in the order the kernel accepts (memsw may never be below the memory limit), as runc
//! does.
//!
//! OOM kills are the kernel's own count for the cgroup, `oom_kill` in v1's `memory.oom_control`
//! (Linux 4.13+) or v2's `memory.events`: it grows when the OOM killer kills a process of this
//! cgroup, which is the event containerd listens for to report `OOMKilled`.

use crate::cpu::{parse_u64, stat_value};
use crate::hierarchy::{Controller, Version};
use crate::{Cgroup, Error, Result};

/// What v1 reads back for "no limit" (PAGE_COUNTER_MAX pages, rounded).
const V1_UNLIMITED_FLOOR: u64 = 1 << 62;

/// Sets the memory limit (`bytes` ≤ 0: no limit), swap held to it.
pub fn set_limit(cgroup: &Cgroup, bytes: i64) -> Result<()> {
    match cgroup.version {
        Version::V1 => set_limit_v1(cgroup, bytes),
        Version::V2 => {
            let value = if bytes > 0 {
                bytes.to_string()
            } else {
                "max".to_string()
            };
            cgroup.write(Controller::Memory, "memory.max", &value)?;
            if cgroup.has_file(Controller::Memory, "memory.swap.max") {
                let swap = if bytes > 0 { "0" } else { "max" };
                cgroup.write(Controller::Memory, "memory.swap.max", swap)?;
            }
            Ok(())
        }
    }
}

fn set_limit_v1(cgroup: &Cgroup, bytes: i64) -> Result<()> {
    let value = if bytes > 0 {
        bytes.to_string()
    } else {
        "-1".to_string()
    };
    const MEMSW: &str = "memory.memsw.limit_in_bytes";
    if !cgroup.has_file(Controller::Memory, MEMSW) {
        return cgroup.write(Controller::Memory, "memory.limit_in_bytes", &value);
    }
    let current_memsw = read_u64(cgroup, MEMSW)?.unwrap_or(u64::MAX);
    let raising = bytes <= 0 || (bytes as u64) > current_memsw;
    if raising {
        cgroup.write(Controller::Memory, MEMSW, &value)?;
        cgroup.write(Controller::Memory, "memory.limit_in_bytes", &value)
    } else {
        cgroup.write(Controller::Memory, "memory.limit_in_bytes", &value)?;
        cgroup.write(Controller::Memory, MEMSW, &value)
    }
}

/// The limit in force (None: no limit).
pub fn limit(cgroup: &Cgroup) -> Result<Option<u64>> {
    match cgroup.version {
        Version::V1 => {
            Ok(read_u64(cgroup, "memory.limit_in_bytes")?.filter(|v| *v < V1_UNLIMITED_FLOOR))
        }
        Version::V2 => match cgroup.read(Controller::Memory, "memory.max")? {
            Some(text) if text.trim() != "max" => {
                parse_u64(cgroup, Controller::Memory, "memory.max", text.trim()).map(Some)
            }
            _ => Ok(None),
        },
    }
}

/// How many processes of this cgroup the OOM killer has killed.
pub fn oom_kills(cgroup: &Cgroup) -> Result<u64> {
    let (file, text) = match cgroup.version {
        Version::V1 => (
            "memory.oom_control",
            cgroup.read(Controller::Memory, "memory.oom_control")?,
        ),
        Version::V2 => (
            "memory.events",
            cgroup.read(Controller::Memory, "memory.events")?,
        ),
    };
    let Some(text) = text else {
        return Ok(0);
    };
    match stat_value(&text, "oom_kill") {
        Some(count) => Ok(count),
        None => Err(Error::Parse {
            path: cgroup
                .dir(Controller::Memory)
                .map(|d| d.join(file))
                .unwrap_or_default(),
            what: "the oom_kill count (Linux 4.13 or later)",
            text,
        }),
    }
}

/// The working set, as cAdvisor and so `kubectl top` count it: the usage less the inactive
/// file cache, which the kernel can take back at once.
pub fn working_set_bytes(cgroup: &Cgroup) -> Result<Option<u64>> {
    let (usage_file, inactive_key) = match cgroup.version {
        Version::V1 => ("memory.usage_in_bytes", "total_inactive_file"),
        Version::V2 => ("memory.current", "inactive_file"),
    };
    let Some(usage) = read_u64(cgroup, usage_file)? else {
        return Ok(None);
    };
    let inactive = cgroup
        .read(Controller::Memory, "memory.stat")?
        .and_then(|text| stat_value(&text, inactive_key))
        .unwrap_or(0);
    Ok(Some(usage.saturating_sub(inactive)))
}

fn read_u64(cgroup: &Cgroup, file: &str) -> Result<Option<u64>> {
    match cgroup.read(Controller::Memory, file)? {
        Some(text) => parse_u64(cgroup, Controller::Memory, file, text.trim()).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::tests::scratch;
    use crate::Hierarchy;

    #[test]
    fn v1_swap_is_raised_before_and_lowered_after_the_limit() {
        let root = scratch("memsw");
        let cgroup = Hierarchy::v1_at(&root).cgroup("pod");
        cgroup.create().unwrap();
        let dir = cgroup.dir(Controller::Memory).unwrap().to_path_buf();
        std::fs::write(
            dir.join("memory.memsw.limit_in_bytes"),
            "9223372036854771712",
        )
        .unwrap();
        set_limit(&cgroup, 32 << 20).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("memory.limit_in_bytes")).unwrap(),
            "33554432"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("memory.memsw.limit_in_bytes")).unwrap(),
            "33554432"
        );
        assert_eq!(limit(&cgroup).unwrap(), Some(32 << 20));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn oom_kills_are_read_from_either_version() {
        let root = scratch("oom");
        let v1 = Hierarchy::v1_at(&root).cgroup("c");
        v1.create().unwrap();
        std::fs::write(
            v1.dir(Controller::Memory)
                .unwrap()
                .join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        assert_eq!(oom_kills(&v1).unwrap(), 2);
        std::fs::write(root.join("cgroup.controllers"), "cpu memory pids").unwrap();
        let v2 = Hierarchy::v2_at(&root).unwrap().cgroup("d");
        v2.create().unwrap();
        std::fs::write(
            v2.dir(Controller::Memory).unwrap().join("memory.events"),
            "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
        )
        .unwrap();
        assert_eq!(oom_kills(&v2).unwrap(), 1);
        std::fs::remove_dir_all(root).unwrap();
    }
}
