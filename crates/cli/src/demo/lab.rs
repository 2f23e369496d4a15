//! A pod demo's lab: a throw-away `$PODLAB_ROOT` ([`super::kit::ScratchRoot`]) whose node agent runs
//! with the demo's settings (crash-loop backoffs of a second instead of kubelet's ten, decisions
//! narrated to its log), the built-in busybox image, and what the restart, probe and sandbox
//! demos do with it: apply a manifest as `podlab apply` does, wait for a pod while narrating its
//! `get pods` row, read the runtime's records of a pod, find a rule in the agent's own log, and
//! delete the pods through the agent's termination path.
//!
//! Open it first thing in the demo: the environment is changed while the CLI is still
//! single-threaded (no agent has been started from this process yet).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::{Event, Pod};
use podlab_kubelet::node::view::PodRuntime;
use podlab_runtime::{Runtime, SandboxId};

use super::kit::ScratchRoot;
use super::say;
use crate::context::Ctx;

pub const NAMESPACE: &str = "default";

pub struct Lab {
    pub ctx: Ctx,
    // Dropped last: stops the agent, removes the sandboxes and the folder.
    scratch: ScratchRoot,
}

impl Lab {
    /// A fresh root for demo `name` whose agent gets `settings` (environment variables such
    /// as `PODLAB_NODE_BACKOFF`), with the built-in busybox image in its store.
    pub fn open(name: &str, settings: &[(&str, &str)]) -> Result<Lab> {
        let scratch = ScratchRoot::new(name, settings)?;
        let ctx = scratch.ctx()?;
        ctx.images()?.ensure_builtin_busybox()?;
        Ok(Lab { ctx, scratch })
    }

    pub fn root(&self) -> &Path {
        self.scratch.path()
    }

    /// Applies the manifest's pods and ReplicaSets as `podlab apply -f` does (and starts the
    /// agent); the names of the objects.
    pub fn apply(&self, manifest: &str, source: &str) -> Result<Vec<String>> {
        let manifests = podlab_control::manifest::decode(manifest, source)?;
        let lines = crate::apply::apply_all(&self.ctx, manifests, |line| say(format!("  {line}")))?;
        Ok(lines
            .iter()
            .filter_map(|l| l.split(' ').next()?.split_once('/'))
            .map(|(_, name)| name.to_string())
            .collect())
    }

    /// Deletes the pods (SIGTERM, grace, SIGKILL by the agent) and waits until they are gone.
    pub fn delete(&self, names: &[String]) -> Result<()> {
        for name in names {
            crate::delete::delete_pod(&self.ctx, NAMESPACE, name, None, false)?;
        }
        for name in names {
            crate::delete::wait_gone(&self.ctx, NAMESPACE, name, Duration::from_secs(60))?;
        }
        Ok(())
    }

    pub fn pod(&self, name: &str) -> Result<Pod> {
        Ok(self.ctx.store.get(NAMESPACE, name)?)
    }

    /// Polls the pod (bounded) until `cond` holds, narrating its `get pods` row as it changes.
    pub fn wait_for(
        &self,
        name: &str,
        what: &str,
        limit: Duration,
        cond: impl Fn(&Pod) -> bool,
    ) -> Result<Pod> {
        let start = Instant::now();
        let mut last = String::new();
        loop {
            let pod = self.pod(name)?;
            let row = crate::columns::pod_row(&pod, crate::columns::now(), false);
            let shown = format!("{:<8} {:<18} {}", row[1], row[2], row[3]);
            if shown != last {
                say(format!("  {name:<14} {shown}"));
                last = shown;
            }
            if cond(&pod) {
                return Ok(pod);
            }
            if start.elapsed() > limit {
                bail!(
                    "pod {name} did not become {what} within {} s (STATUS {})",
                    limit.as_secs(),
                    row[2]
                );
            }
            super::poll_pause(Duration::from_millis(100));
        }
    }

    /// The runtime's records of the pod: every sandbox it had and their containers.
    pub fn observe(&self, pod: &Pod) -> Result<PodRuntime> {
        let runtime = self.ctx.runtime()?;
        let ids = sandboxes_of(&runtime, pod)?;
        Ok(PodRuntime::observe(&runtime, &ids)?)
    }

    /// The events recorded about the pod, oldest first.
    pub fn events(&self, pod: &Pod) -> Result<Vec<Event>> {
        let (events, _) = self.ctx.store.list::<Event>(Some(NAMESPACE))?;
        let mut events: Vec<Event> = events
            .into_iter()
            .filter(|e| e.involved_object.uid == pod.metadata.uid)
            .collect();
        events.sort_by_key(|e| e.first_timestamp.as_ref().map(|t| t.0));
        Ok(events)
    }

    /// Says the first line of the agent's log about pod `name` that names `rule`, after
    /// `intro`, and returns it (None when the agent did not log it).
    pub fn show_rule(&self, name: &str, rule: &str, intro: &str) -> Option<String> {
        let first = self.agent_said(name, rule).into_iter().next();
        say(format!(
            "{intro}{}",
            first.as_deref().unwrap_or("(not in the agent's log)")
        ));
        first
    }

    /// The lines of the agent's log (it narrates its decisions with `PODLAB_NODE_VERBOSE=1`)
    /// about pod `name` that name rule `rule`.
    pub fn agent_said(&self, name: &str, rule: &str) -> Vec<String> {
        let log = std::fs::read_to_string(self.root().join("node.log")).unwrap_or_default();
        let prefix = format!("{NAMESPACE}/{name}: ");
        log.lines()
            .filter(|l| l.starts_with(&prefix) && l.contains(&format!("{rule}:")))
            .map(|l| l.trim_start_matches(&prefix).trim().to_string())
            .collect()
    }
}

/// Every sandbox the runtime has for the pod, oldest first.
pub fn sandboxes_of(runtime: &Runtime, pod: &Pod) -> Result<Vec<SandboxId>> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut sandboxes: Vec<_> = runtime
        .list_pod_sandboxes()?
        .into_iter()
        .filter(|s| s.metadata.uid == uid)
        .collect();
    sandboxes.sort_by_key(|s| s.created_at);
    Ok(sandboxes.into_iter().map(|s| s.id).collect())
}

// The pod-status readers the labs check with are the demos' too.
pub use podlab_labs::kit::pods::{container, phase};

pub fn restarts(pod: &Pod, name: &str) -> i32 {
    container(pod, name).map_or(0, |c| c.restart_count)
}

pub use podlab_labs::kit::pods::condition;

/// The STATUS column of `get pods` for the pod.
pub fn status_column(pod: &Pod) -> String {
    crate::columns::pod_row(pod, crate::columns::now(), false)[2].clone()
}

/// Prints the `podlab get pods` table, indented, after the command line.
pub fn show_pods(ctx: &Ctx) -> Result<()> {
    say("\n$ podlab get pods");
    for line in crate::get::pods_table(ctx, NAMESPACE)?.lines() {
        say(format!("  {line}"));
    }
    Ok(())
}
