//! `podlab rollout status|history|undo|restart|pause|resume deployment/NAME`: kubectl's rollout commands,
//! with its messages. `status` follows the Deployment through the store's watch until the
//! rollout is done (`successfully rolled out`) or the timeout; `history` lists the revisions
//! of its ReplicaSets; `undo` copies an older revision's template back into the Deployment
//! (the previous one, or `--to-revision`), as kubectl does client-side; `restart` stamps the
//! template with `kubectl.kubernetes.io/restartedAt`, which makes a new revision; `pause` and
//! `resume` set `spec.paused` (a paused Deployment's template changes make no new ReplicaSet
//! until it is resumed; `status` keeps saying what it waits for, as kubectl's does), and
//! `undo` and `restart` refuse a paused Deployment in kubectl's words.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Subcommand;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use podlab_control::deployment::status::{get_condition, PROGRESSING, TIMED_OUT};
use podlab_control::deployment::sync::{equal_ignore_hash, revision_of, strip_hash, NOT_COPIED};
use podlab_control::{controller_of, Kind};

use crate::context::Ctx;
use crate::objects;

#[derive(clap::Args)]
pub struct Target {
    /// `deployment NAME` or `deployment/NAME`.
    #[arg(required = true, num_args = 1..=2)]
    args: Vec<String>,
    #[arg(short = 'n', long = "namespace", default_value = "default")]
    namespace: String,
}

#[derive(Subcommand)]
pub enum Rollout {
    /// Follow a rollout until it is done.
    Status {
        #[command(flatten)]
        target: Target,
        /// Follow it (default); `--watch=false` prints the state once.
        #[arg(short = 'w', long, default_value = "true", action = clap::ArgAction::Set)]
        watch: bool,
        /// Give up after this long (`0s`: never).
        #[arg(long, default_value = "0s")]
        timeout: String,
    },
    /// The revisions of a Deployment.
    History {
        #[command(flatten)]
        target: Target,
    },
    /// Go back to the previous revision, or to `--to-revision`.
    Undo {
        #[command(flatten)]
        target: Target,
        #[arg(long = "to-revision", default_value_t = 0)]
        to_revision: i64,
    },
    /// Replace every pod, one rollout's worth at a time.
    Restart {
        #[command(flatten)]
        target: Target,
    },
    /// Mark a Deployment paused: changes of its template roll out only once resumed.
    Pause {
        #[command(flatten)]
        target: Target,
    },
    /// Resume a paused Deployment.
    Resume {
        #[command(flatten)]
        target: Target,
    },
}

pub fn run(command: Rollout) -> Result<()> {
    match command {
        Rollout::Status {
            target,
            watch,
            timeout,
        } => {
            let timeout = podlab_kubelet::node::parse_duration(&timeout)
                .map_err(|e| crate::UsageError(format!("--timeout: {e}")))?;
            let (ctx, name) = open(&target)?;
            status(&ctx, &target.namespace, &name, watch, timeout)
        }
        Rollout::History { target } => {
            let (ctx, name) = open(&target)?;
            print!("{}", history(&ctx, &target.namespace, &name)?);
            Ok(())
        }
        Rollout::Undo {
            target,
            to_revision,
        } => {
            let (ctx, name) = open(&target)?;
            let message = undo(&ctx, &target.namespace, &name, to_revision)?;
            println!("deployment.apps/{name} {message}");
            Ok(())
        }
        Rollout::Restart { target } => {
            let (ctx, name) = open(&target)?;
            if is_paused(&ctx, &target.namespace, &name)? {
                bail!("deployments.apps {name:?} can't restart paused deployment (run rollout resume first)");
            }
            let stamp = crate::columns::now().to_string();
            objects::modify(&ctx, Kind::Deployment, &target.namespace, &name, |d| {
                let annotations = &mut d["spec"]["template"]["metadata"]["annotations"];
                if !annotations.is_object() {
                    *annotations = serde_json::json!({});
                }
                annotations["kubectl.kubernetes.io/restartedAt"] = stamp.clone().into();
                Ok((true, ()))
            })?;
            println!("deployment.apps/{name} restarted");
            Ok(())
        }
        Rollout::Pause { target } => set_paused(&target, true),
        Rollout::Resume { target } => set_paused(&target, false),
    }
}

fn is_paused(ctx: &Ctx, namespace: &str, name: &str) -> Result<bool> {
    let d = objects::fetch(ctx, Kind::Deployment, namespace, name)?;
    Ok(d["spec"]["paused"].as_bool() == Some(true))
}

/// kubectl's `ObjectPauserFn` / `ObjectResumerFn`: `spec.paused` set or cleared, refused when
/// it is so already.
fn set_paused(target: &Target, paused: bool) -> Result<()> {
    let (ctx, name) = open(target)?;
    objects::modify(&ctx, Kind::Deployment, &target.namespace, &name, |d| {
        match (d["spec"]["paused"].as_bool() == Some(true), paused) {
            (true, true) => bail!("deployments.apps {name:?} is already paused"),
            (false, false) => bail!("deployments.apps {name:?} is not paused"),
            _ => {}
        }
        d["spec"]["paused"] = paused.into();
        Ok((true, ()))
    })?;
    let done = if paused { "paused" } else { "resumed" };
    println!("deployment.apps/{name} {done}");
    Ok(())
}

fn open(target: &Target) -> Result<(Ctx, String)> {
    let (_, named) = objects::targets(&target.args)?;
    let [(kind, name)] = named.as_slice() else {
        bail!("required resource not specified");
    };
    if *kind != Kind::Deployment {
        bail!(
            "no rollout support for {} (podlab rolls out deployments)",
            objects::qualified(*kind)
        );
    }
    let ctx = Ctx::open()?;
    objects::fetch(&ctx, Kind::Deployment, &target.namespace, name)?;
    Ok((ctx, name.clone()))
}

/// kubectl's `DeploymentStatusViewer`: the line for the Deployment's state, and whether the
/// rollout is done; an exceeded progress deadline is an error.
pub fn status_line(d: &Deployment) -> Result<(String, bool)> {
    let name = d.metadata.name.clone().unwrap_or_default();
    let status = d.status.clone().unwrap_or_default();
    if d.metadata.generation.unwrap_or(0) > status.observed_generation.unwrap_or(0) {
        return Ok((
            "Waiting for deployment spec update to be observed...".into(),
            false,
        ));
    }
    if get_condition(&status, PROGRESSING).is_some_and(|c| c.reason.as_deref() == Some(TIMED_OUT)) {
        bail!("deployment {name:?} exceeded its progress deadline");
    }
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let n = |v: Option<i32>| v.unwrap_or(0);
    let (total, updated, available) = (
        n(status.replicas),
        n(status.updated_replicas),
        n(status.available_replicas),
    );
    Ok(if updated < want {
        (format!("Waiting for deployment {name:?} rollout to finish: {updated} out of {want} new replicas have been updated..."), false)
    } else if total > updated {
        (format!("Waiting for deployment {name:?} rollout to finish: {} old replicas are pending termination...", total - updated), false)
    } else if available < updated {
        (format!("Waiting for deployment {name:?} rollout to finish: {available} of {updated} updated replicas are available..."), false)
    } else {
        (format!("deployment {name:?} successfully rolled out"), true)
    })
}

fn status(ctx: &Ctx, namespace: &str, name: &str, watch: bool, timeout: Duration) -> Result<()> {
    let deadline = (!timeout.is_zero()).then(|| Instant::now() + timeout);
    let mut events = ctx.store.watch_now::<Deployment>()?;
    let mut last = String::new();
    loop {
        let d: Deployment = ctx
            .store
            .get(namespace, name)
            .map_err(|e| anyhow::anyhow!("Error from server (NotFound): {e}"))?;
        let (line, done) = status_line(&d)?;
        if line != last {
            println!("{line}");
            last = line;
        }
        if done || !watch {
            return Ok(());
        }
        let wait = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    bail!("timed out waiting for the condition");
                }
                left.min(Duration::from_secs(1))
            }
            None => Duration::from_secs(1),
        };
        // Woken by any Deployment change; re-read ours.
        let _ = events.next_timeout(wait)?;
    }
}

/// The Deployment's ReplicaSets (those it controls), by revision.
fn replicasets(ctx: &Ctx, d: &Deployment) -> Result<BTreeMap<i64, ReplicaSet>> {
    let namespace = d.metadata.namespace.as_deref();
    let uid = d.metadata.uid.clone().unwrap_or_default();
    Ok(ctx
        .store
        .list::<ReplicaSet>(namespace)?
        .0
        .into_iter()
        .filter(|rs| controller_of(&rs.metadata).is_some_and(|o| o.uid == uid))
        .map(|rs| (revision_of(&rs.metadata), rs))
        .filter(|(revision, _)| *revision > 0)
        .collect())
}

/// kubectl's history table: `REVISION  CHANGE-CAUSE`, after the `deployment.apps/NAME ` line.
pub fn history(ctx: &Ctx, namespace: &str, name: &str) -> Result<String> {
    let d: Deployment = ctx.store.get(namespace, name)?;
    let rows: Vec<Vec<String>> = replicasets(ctx, &d)?
        .into_iter()
        .map(|(revision, rs)| {
            let cause = rs
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kubernetes.io/change-cause"))
                .cloned()
                .unwrap_or_else(|| "<none>".into());
            vec![revision.to_string(), cause]
        })
        .collect();
    // kubectl's tabwriter here pads by two (its `get` tables by three).
    let width = rows
        .iter()
        .map(|r| r[0].len())
        .max()
        .unwrap_or(0)
        .max("REVISION".len())
        + 2;
    let mut table = format!("{:<width$}CHANGE-CAUSE\n", "REVISION");
    for row in rows {
        table.push_str(&format!("{:<width$}{}\n", row[0], row[1]));
    }
    Ok(format!("deployment.apps/{name} \n{table}\n"))
}

/// kubectl's `DeploymentRollbacker`: the template of the previous revision (or `to_revision`)
/// patched back into the Deployment, with that ReplicaSet's annotations.
pub fn undo(ctx: &Ctx, namespace: &str, name: &str, to_revision: i64) -> Result<String> {
    let d: Deployment = ctx.store.get(namespace, name)?;
    if d.spec.as_ref().and_then(|s| s.paused) == Some(true) {
        bail!("you cannot rollback a paused deployment; resume it first with 'podlab rollout resume' and try again");
    }
    let sets = replicasets(ctx, &d)?;
    let target = if to_revision > 0 {
        sets.get(&to_revision).ok_or_else(|| {
            anyhow::anyhow!("unable to find specified revision {to_revision} in history")
        })?
    } else {
        let mut newest_first = sets.values().rev();
        newest_first.next();
        newest_first
            .next()
            .ok_or_else(|| anyhow::anyhow!("no rollout history found for deployment {name:?}"))?
    };
    let revision = revision_of(&target.metadata);
    let template = target
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let current = d
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    if equal_ignore_hash(&template, &current) {
        return Ok(format!(
            "skipped rollback (current template already matches revision {revision})"
        ));
    }
    let template = serde_json::to_value(strip_hash(&template))?;
    let rs_annotations = target.metadata.annotations.clone().unwrap_or_default();
    objects::modify(ctx, Kind::Deployment, namespace, name, |d| {
        d["spec"]["template"] = template.clone();
        let mut annotations: BTreeMap<String, String> =
            serde_json::from_value(d["metadata"]["annotations"].clone()).unwrap_or_default();
        annotations.retain(|k, _| NOT_COPIED.contains(&k.as_str()));
        for (k, v) in &rs_annotations {
            if !NOT_COPIED.contains(&k.as_str()) {
                annotations.insert(k.clone(), v.clone());
            }
        }
        d["metadata"]["annotations"] = serde_json::to_value(&annotations)?;
        Ok((true, ()))
    })?;
    Ok("rolled back".into())
}
