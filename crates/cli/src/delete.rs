//! `podlab delete`: kubectl's delete. Objects are named as `TYPE NAME...`, `TYPE/NAME...`,
//! `-f FILE` (the objects its documents name), or picked by `TYPE -l SELECTOR` /
//! `TYPE --all`. A pod is deleted gracefully as the API server and kubelet do it: the store
//! marks it (deletionTimestamp = now + grace); the node agent runs the termination path
//! (SIGTERM, grace period, SIGKILL, CNI DEL, unpin, remove) and then removes the object. Like
//! kubectl, the command waits until every pod it deleted is gone (`--wait=false` does not).
//! `--grace-period`, `--now` and `--force` combine as kubectl's do (`--grace-period=0` is 1
//! unless `--force`; `--force` removes the object at once, and the agent then kills what
//! runs). A name that is not there is reported and the others are still deleted; the
//! command then exits 1.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use podlab_control::{Kind, PodDeletion, Preconditions};

use crate::context::Ctx;
use crate::objects;

#[derive(clap::Args)]
pub struct DeleteArgs {
    /// `TYPE NAME...`, `TYPE/NAME...`, or a lone `TYPE` with `-l` or `--all`.
    args: Vec<String>,
    /// A manifest (`-` for stdin) whose objects are deleted; repeatable.
    #[arg(short = 'f', long = "filename")]
    files: Vec<PathBuf>,
    /// Delete the objects of the type that match this label selector.
    #[arg(short = 'l', long = "selector")]
    selector: Option<String>,
    /// Delete the objects of the type whose fields match (`metadata.name=web`).
    #[arg(long = "field-selector")]
    field_selector: Option<String>,
    /// Delete every object of the type in the namespace.
    #[arg(long)]
    all: bool,
    /// Seconds a pod gets to end (-1: its own terminationGracePeriodSeconds; 0 with --force:
    /// removed at once).
    #[arg(long = "grace-period", default_value_t = -1, allow_negative_numbers = true)]
    grace_period: i64,
    /// Grace period 1: end the pod at once.
    #[arg(long)]
    now: bool,
    /// Remove the object at once, without waiting for its pod to end (with --grace-period=0).
    #[arg(long)]
    force: bool,
    /// Wait until the pods are gone (default true, as kubectl).
    #[arg(long, default_value = "true", action = clap::ArgAction::Set)]
    wait: bool,
    /// Print what each phase of the pod's termination took.
    #[arg(long)]
    trace: bool,
    /// A name that is not there is no error.
    #[arg(long = "ignore-not-found")]
    ignore_not_found: bool,
    #[arg(short = 'n', long = "namespace", default_value = "default")]
    namespace: String,
}

/// kubectl's `Complete` and `Validate` of the grace flags: the grace period to ask for (None:
/// the pod's own), and whether the deletion is forced.
pub fn grace(grace_period: i64, now: bool, force: bool) -> Result<(Option<i64>, bool)> {
    let mut grace = grace_period;
    if now {
        if grace != -1 {
            bail!("--now and --grace-period cannot be specified together");
        }
        grace = 1;
    }
    if grace == 0 && !force {
        // kubectl: "to preserve backwards compatibility, but prevent accidental data loss".
        grace = 1;
    }
    if force && grace < 0 {
        grace = 0;
    }
    if force && grace > 0 {
        bail!("--force and --grace-period greater than 0 cannot be specified together");
    }
    Ok(((grace >= 0).then_some(grace), force && grace == 0))
}

/// One object to delete, and the manifest that named it (for kubectl's `error when deleting
/// "FILE"`).
struct Target {
    kind: Kind,
    namespace: String,
    name: String,
    file: Option<String>,
}

pub fn run(args: DeleteArgs) -> Result<()> {
    let (grace, forced) = grace(args.grace_period, args.now, args.force)?;
    if args.all && args.selector.is_some() {
        bail!("cannot set --all and --selector at the same time");
    }
    if args.all && args.field_selector.is_some() {
        bail!("cannot set --all and --field-selector at the same time");
    }
    if forced {
        eprintln!("Warning: Immediate deletion does not wait for confirmation that the running resource has been terminated. The resource may continue to run on the cluster indefinitely.");
    }
    let trace = crate::trace::requested(args.trace);
    let ctx = Ctx::open()?;
    let targets = targets(&ctx, &args)?;
    let Some(targets) = targets else {
        println!("No resources found");
        return Ok(());
    };
    // As kubectl: a name that is not there is reported and the others are still deleted;
    // the command then exits 1. Every pod is marked first, then the command waits for them.
    let mut errors = Vec::new();
    let mut terminating = Vec::new();
    for target in &targets {
        let what = objects::qualified(target.kind);
        let (namespace, name) = (target.namespace.as_str(), target.name.as_str());
        let outcome = match target.kind {
            Kind::Pod => {
                let tracing = trace
                    .then(|| crate::trace::Tracing::begin(&ctx.root, namespace, name, "delete"))
                    .flatten();
                request_pod_deletion(&ctx, namespace, name, grace).map(|limit| match limit {
                    Some(limit) => {
                        crate::trace::mark(&tracing, "deletion stored, agent start");
                        terminating.push((namespace, name, limit, tracing));
                    }
                    None => {
                        if let Some(tracing) = tracing {
                            tracing.finish();
                        }
                    }
                })
            }
            kind => objects::delete(&ctx, kind, namespace, name),
        };
        match outcome {
            Ok(()) if forced => println!("{what} {name:?} force deleted"),
            Ok(()) => println!("{what} {name:?} deleted"),
            Err(e) if is_not_found(&e) && args.ignore_not_found => {}
            Err(e) if is_not_found(&e) => errors.push(match &target.file {
                Some(file) => {
                    format!("Error from server (NotFound): error when deleting {file:?}: {e}")
                }
                None => format!("Error from server (NotFound): {e}"),
            }),
            Err(e) => return Err(e),
        }
    }
    for (namespace, name, limit, tracing) in terminating {
        if args.wait {
            wait_gone(&ctx, namespace, name, limit)?;
            crate::trace::mark(&tracing, "gone seen");
        }
        if let Some(tracing) = tracing {
            tracing.finish();
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    bail!("{}", errors.join("\n"))
}

/// What the arguments name; None when a selector or `--all` picked nothing.
fn targets(ctx: &Ctx, args: &DeleteArgs) -> Result<Option<Vec<Target>>> {
    let mut found = Vec::new();
    for file in &args.files {
        let (text, source) = crate::apply::read_manifest(file)?;
        for value in podlab_api::manifest::documents(&text, &source)? {
            let kind_word = value["kind"].as_str().unwrap_or_default();
            let kind = Kind::parse(kind_word).ok_or_else(|| {
                anyhow::anyhow!(
                    "unable to recognize {source:?}: no matches for kind {kind_word:?} in version {:?}",
                    value["apiVersion"].as_str().unwrap_or_default()
                )
            })?;
            let name = value["metadata"]["name"].as_str().unwrap_or_default();
            if name.is_empty() {
                bail!("error when deleting {source:?}: resource name may not be empty");
            }
            found.push(Target {
                kind,
                namespace: value["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or(&args.namespace)
                    .to_string(),
                name: name.to_string(),
                file: Some(source.clone()),
            });
        }
    }
    if !args.files.is_empty() {
        if !args.args.is_empty() {
            bail!("Unexpected args: {:?}", args.args);
        }
        return Ok(Some(found));
    }
    if args.args.is_empty() {
        bail!("You must provide one or more resources by argument or filename.\nExample resource specifications include:\n   '-f rsrc.yaml'\n   '--filename=rsrc.json'\n   '<resource> <name>'\n   '<resource>'");
    }
    let (kind_alone, named) = objects::targets(&args.args)?;
    let picking = args.all || args.selector.is_some() || args.field_selector.is_some();
    let target = |kind: Kind, name: String| Target {
        kind,
        namespace: args.namespace.clone(),
        name,
        file: None,
    };
    if !picking {
        if named.is_empty() {
            bail!("resource(s) were provided, but no name was specified");
        }
        return Ok(Some(named.into_iter().map(|(k, n)| target(k, n)).collect()));
    }
    let Some(kind) = kind_alone.filter(|_| named.is_empty()) else {
        bail!("name cannot be provided when a selector is specified");
    };
    let query = crate::output::Query {
        namespace: Some(args.namespace.clone()),
        selector: args.selector.clone(),
        field_selector: args.field_selector.clone(),
        ..Default::default()
    };
    let items = query.filter(
        kind.name(),
        objects::list(ctx, kind, Some(&args.namespace))?,
    )?;
    let picked: Vec<Target> = items
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .map(|name| target(kind, name.to_string()))
        .collect();
    Ok((!picked.is_empty()).then_some(picked))
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
