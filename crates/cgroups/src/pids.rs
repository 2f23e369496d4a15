//! The pids controller: how many processes (tasks) a cgroup may hold; `fork` fails with
//! `EAGAIN` past it. kubelet sets it on the pod's cgroup from its `podPidsLimit` option.

use crate::hierarchy::Controller;
use crate::{Cgroup, Result};

/// Sets `pids.max` (`limit` < 0: `max`, no limit).
pub fn set_max(cgroup: &Cgroup, limit: i64) -> Result<()> {
    let value = if limit < 0 {
        "max".to_string()
    } else {
        limit.to_string()
    };
    cgroup.write(Controller::Pids, "pids.max", &value)
}

/// How many tasks are in the cgroup now (`pids.current`).
pub fn current(cgroup: &Cgroup) -> Result<Option<u64>> {
    Ok(cgroup
        .read(Controller::Pids, "pids.current")?
        .and_then(|t| t.trim().parse().ok()))
}
