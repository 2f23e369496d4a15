//! A lab process's cgroups, read as a student would: `/proc/PID/cgroup` names the folder of
//! each controller's hierarchy, below the node's mount of it.

use std::path::PathBuf;

use anyhow::Result;

use crate::env::Env;

/// The folder of `pid`'s cgroup for `controller` (`memory`, `cpu`), when the node has that
/// hierarchy mounted.
pub fn dir(env: &Env, pid: i32, controller: &str) -> Result<Option<PathBuf>> {
    let runtime = env.runtime()?;
    let Some(mount) = runtime.cgroups().and_then(|node| {
        node.hierarchy
            .mounts
            .iter()
            .find(|(c, _)| c.name() == controller)
            .map(|(_, mount)| mount.clone())
    }) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    Ok(text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
        names
            .split(',')
            .any(|n| n == controller)
            .then(|| mount.join(path.trim_start_matches('/')))
    }))
}

/// A number read from a cgroup file, if it reads as one.
pub fn read_i64(dir: &std::path::Path, file: &str) -> Option<i64> {
    std::fs::read_to_string(dir.join(file))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}
