//! What the pod demos share: a throw-away `$PODLAB_ROOT` for a demo that needs a node agent
//! of its own (other network settings, short backoffs; its agent is stopped and the folder
//! removed when the demo ends, also on error), bounded waits on a pod, and exec into a
//! container.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use podlab_runtime::id::ContainerId;
use podlab_runtime::Runtime;

use crate::context::Ctx;

/// Polls the pod every 100 ms until `done` says so, at most `limit`; `done` sees the pod, or
/// None once it is gone from the store.
pub fn wait_pod(
    ctx: &Ctx,
    name: &str,
    limit: Duration,
    what: &str,
    mut done: impl FnMut(Option<&Pod>) -> bool,
) -> Result<Option<Pod>> {
    let start = Instant::now();
    loop {
        let pod = match ctx.store.get::<Pod>("default", name) {
            Ok(pod) => Some(pod),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e.into()),
        };
        if done(pod.as_ref()) {
            return Ok(pod);
        }
        if start.elapsed() > limit {
            bail!(
                "pod {name}: {what} did not happen within {} s; see `podlab describe pod {name}`",
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the pod is Running with its Ready condition True.
pub fn is_ready(pod: Option<&Pod>) -> bool {
    let Some(status) = pod.and_then(|p| p.status.as_ref()) else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The runtime id of container `name` of the pod, from its status.
pub fn container_id(pod: &Pod, name: &str) -> Result<ContainerId> {
    let status = pod.status.clone().unwrap_or_default();
    let id = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .chain(status.ephemeral_container_statuses.iter().flatten())
        .find(|s| s.name == name)
        .and_then(|s| s.container_id.clone())
        .with_context(|| format!("container {name} has no id yet"))?;
    Ok(ContainerId::parse(id.trim_start_matches("podlab://"))?)
}

/// Runs `cmd` in the container and returns its stdout; a non-zero exit is an error.
pub fn exec_text(runtime: &Runtime, id: &ContainerId, cmd: &[&str]) -> Result<String> {
    let cmd: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
    let result = runtime.exec_sync(id, &cmd, Some(Duration::from_secs(10)))?;
    if result.exit_code != 0 {
        bail!(
            "{} exited {}: {}",
            cmd.join(" "),
            result.exit_code,
            String::from_utf8_lossy(&result.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&result.stdout).into_owned())
}

pub struct ScratchRoot {
    path: PathBuf,
    /// The variables it set, with their values before, to put back.
    saved: Vec<(String, Option<std::ffi::OsString>)>,
}

impl ScratchRoot {
    /// Points this (single-threaded) process, and the agent it will start, at a new root, with
    /// the given extra environment for that agent.
    pub fn new(name: &str, agent_env: &[(&str, &str)]) -> Result<ScratchRoot> {
        let path = std::env::temp_dir().join(format!("podlab-demo-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut root = ScratchRoot {
            path,
            saved: Vec::new(),
        };
        root.set_env("PODLAB_ROOT", &root.path.clone());
        for (key, value) in agent_env {
            root.set_env(key, value);
        }
        Ok(root)
    }

    /// Sets a variable for this process and the agent it starts, until the demo ends.
    pub fn set_env(&mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) {
        self.saved.push((key.to_string(), std::env::var_os(key)));
        // The CLI process has a single thread while a demo sets it up.
        std::env::set_var(key, value);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn ctx(&self) -> Result<Ctx> {
        Ctx::open()
    }
}

impl Drop for ScratchRoot {
    fn drop(&mut self) {
        let _ = podlab_kubelet::node::stop_agent(&self.path, Duration::from_secs(10));
        if let Ok(ctx) = Ctx::open() {
            if let Ok(runtime) = ctx.runtime() {
                for sandbox in runtime.list_pod_sandboxes().unwrap_or_default() {
                    let _ = runtime.stop_pod_sandbox(&sandbox.id);
                    let _ = runtime.remove_pod_sandbox(&sandbox.id);
                }
                let _ = runtime.gc();
            }
        }
        let _ = std::fs::remove_dir_all(&self.path);
        for (key, before) in self.saved.drain(..).rev() {
            match before {
                Some(value) => std::env::set_var(&key, value),
                None => std::env::remove_var(&key),
            }
        }
    }
}
