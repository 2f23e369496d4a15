//! `podlab delete pod NAME`: graceful deletion as the API server and kubelet do it. The store
//! marks the pod (deletionTimestamp = now + grace); the node agent runs the termination path
//! (SIGTERM, grace period, SIGKILL, CNI DEL, unpin, remove) and then removes the object. Like
//! kubectl, the command waits until the pod is gone.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use k8s_openapi::api::apps::v1::ReplicaSet;
use podlab_control::{PodDeletion, Preconditions};

use crate::context::Ctx;
use crate::get::Resource;

pub fn run(
    resource: Resource,
    names: &[String],
    namespace: &str,
    grace: Option<i64>,
    wait: bool,
    trace: bool,
) -> Result<()> {
    let ctx = Ctx::open()?;
    // As kubectl: a name that is not there is reported and the others are still deleted;
    // the command then exits 1.
    let mut not_found = Vec::new();
    match resource {
        Resource::Pods => {
            // As kubectl: every pod is marked first, then the command waits for them all.
            let mut terminating = Vec::new();
            for name in names {
                let tracing = trace
                    .then(|| crate::trace::Tracing::begin(&ctx.root, namespace, name, "delete"))
                    .flatten();
                match request_pod_deletion(&ctx, namespace, name, grace) {
                    Ok(Some(limit)) => {
                        crate::trace::mark(&tracing, "deletion stored, agent start");
                        terminating.push((name, limit, tracing))
                    }
                    Ok(None) => {}
                    Err(e) if is_not_found(&e) => {
                        not_found.push(e);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
                println!("pod {name:?} deleted");
            }
            for (name, limit, tracing) in terminating {
                if wait {
                    wait_gone(&ctx, namespace, name, limit)?;
                    crate::trace::mark(&tracing, "gone seen");
                }
                if let Some(tracing) = tracing {
                    tracing.finish();
                }
            }
        }
        Resource::ReplicaSets => {
            for name in names {
                match ctx.store.delete::<ReplicaSet>(namespace, name) {
                    Ok(_) => println!("replicaset.apps {name:?} deleted"),
                    Err(e) if e.is_not_found() => not_found.push(e.into()),
                    Err(e) => return Err(e.into()),
                }
            }
        }
        other => bail!("podlab delete takes pods or replicasets, not {other:?}"),
    }
    if not_found.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = not_found
        .iter()
        .map(|e| format!("Error from server (NotFound): {e}"))
        .collect();
    bail!("{}", lines.join("\n"))
}

fn is_not_found(e: &anyhow::Error) -> bool {
    e.downcast_ref::<podlab_control::Error>()
        .is_some_and(|e| e.is_not_found())
}

/// Deletes the pod and, unless `wait` is false, waits until the node agent has finished it.
pub fn delete_pod(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    grace: Option<i64>,
    wait: bool,
) -> Result<()> {
    if let Some(limit) = request_pod_deletion(ctx, namespace, name, grace)? {
        if wait {
            wait_gone(ctx, namespace, name, limit)?;
        }
    }
    println!("pod {name:?} deleted");
    Ok(())
}

/// The API server's part of a pod delete: a pod on a node is marked (deletionTimestamp) and
/// its agent started to finish it; returns how long to wait for that (grace + 30 s), or None
/// when the pod was removed at once.
fn request_pod_deletion(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    grace: Option<i64>,
) -> Result<Option<Duration>> {
    match ctx
        .store
        .delete_pod_gracefully(namespace, name, grace, &Preconditions::default())?
    {
        PodDeletion::Deleted(_) => Ok(None),
        PodDeletion::Terminating(pod) => {
            ctx.ensure_node()?;
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .unwrap_or(30)
                .max(0) as u64;
            Ok(Some(Duration::from_secs(grace + 30)))
        }
    }
}

/// Waits until the node agent has finished the pod and removed it from the store.
pub fn wait_gone(ctx: &Ctx, namespace: &str, name: &str, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    if !crate::wait::until(
        ctx,
        namespace,
        name,
        &crate::wait::Condition::Delete,
        deadline,
    )? {
        bail!(
            "pod {name:?} is still terminating after {} s; see `podlab describe pod {name}`",
            limit.as_secs()
        );
    }
    Ok(())
}
