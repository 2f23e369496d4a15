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
        super::poll_pause(Duration::from_millis(100));
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

/// A `$PODLAB_ROOT` of the demo's own below the temp folder. Dropped, it stops its node agent,
/// removes every sandbox and the folder; if the demo ends early (a signal, a closed stdout),
/// [`super::interrupt`] does the same. With `--keep` it is left running instead, and the
/// commands to look at it and to remove it are printed.
pub struct ScratchRoot {
    path: PathBuf,
    /// The variables it set, with their values before, to put back.
    saved: Vec<(String, Option<std::ffi::OsString>)>,
}

impl ScratchRoot {
    /// Points this (single-threaded) process, and the agent it will start, at a new root, with
    /// the given extra environment for that agent.
    pub fn new(name: &str, agent_env: &[(&str, &str)]) -> Result<ScratchRoot> {
        let path = new_folder(&format!("podlab-demo-{name}-{}", std::process::id()))?;
        super::interrupt::on_abandon(&path, remove_scratch_root);
        let mut root = ScratchRoot {
            path,
            saved: Vec::new(),
        };
        root.set_env("PODLAB_ROOT", root.path.clone());
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

/// A new folder `PREFIX-N` below the temp folder, N the first number free. Made with mkdir,
/// which fails on one that exists: two podlab processes with the same pid (in two pid
/// namespaces sharing /tmp) never share a root.
fn new_folder(prefix: &str) -> Result<PathBuf> {
    for n in 0.. {
        let path = std::env::temp_dir().join(format!("{prefix}-{n}"));
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
        }
    }
    unreachable!("a free folder name among all numbers")
}

/// Stops the root's node agent, removes every sandbox it has and then the folder.
fn remove_scratch_root(path: &Path) {
    let _ = podlab_kubelet::node::stop_agent(path, Duration::from_secs(10));
    // Ctx opens `$PODLAB_ROOT`; the CLI is single-threaded while a demo runs.
    std::env::set_var("PODLAB_ROOT", path);
    if let Ok(ctx) = Ctx::open() {
        if let Ok(runtime) = ctx.runtime() {
            for sandbox in runtime.list_pod_sandboxes().unwrap_or_default() {
                let _ = runtime.stop_pod_sandbox(&sandbox.id);
                let _ = runtime.remove_pod_sandbox(&sandbox.id);
            }
            let _ = runtime.gc();
        }
    }
    // The bridge stays while the agent runs; the agent stopped before its pods went, so it
    // goes here once no pod uses it (as `podlab gc` does).
    let _ = crate::network::gc();
    let _ = std::fs::remove_dir_all(path);
}

/// The roots `--keep` left running, for [`print_kept`] once the demo's evidence is out.
static KEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// The roots the demos kept, taken off the list.
pub fn take_kept() -> Vec<PathBuf> {
    std::mem::take(&mut *KEPT.lock().unwrap_or_else(|p| p.into_inner()))
}

/// What `--keep` prints: how to look at the pods left running in `root`, and how to remove
/// them and the root.
pub fn print_kept(root: &Path) {
    let pods: Vec<String> = podlab_control::Store::open(root.join("store"))
        .and_then(|store| Ok(store.list::<Pod>(None)?.0))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let first = pods.first().map_or("NAME", String::as_str);
    let root = root.display();
    super::say(
        "\n--keep: the demo's pods keep running, with their node agent, in a root of their own:",
    );
    super::say(format!("  export PODLAB_ROOT={root}"));
    super::say("To look at them:");
    super::say("  podlab get pods -o wide");
    super::say(format!("  podlab describe pod {first}"));
    super::say(format!("  podlab exec {first} -- ps"));
    super::say("  podlab ns ls -t net          # the POD and CONTAINER columns name each namespace's owner");
    super::say("To remove them (pods, their node agent, the root):");
    if !pods.is_empty() {
        super::say(format!("  podlab delete pod {}", pods.join(" ")));
    }
    super::say(format!(
        "  podlab node --stop && rm -r {root} && unset PODLAB_ROOT"
    ));
}

impl Drop for ScratchRoot {
    fn drop(&mut self) {
        if super::keep() {
            KEPT.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(self.path.clone());
        } else {
            remove_scratch_root(&self.path);
        }
        super::interrupt::done(&self.path);
        for (key, before) in self.saved.drain(..).rev() {
            match before {
                Some(value) => std::env::set_var(&key, value),
                None => std::env::remove_var(&key),
            }
        }
    }
}
