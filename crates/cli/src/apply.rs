//! `podlab apply -f FILE`: Pod, ReplicaSet, Deployment, ConfigMap and Secret manifests into the object store, as
//! `kubectl apply` sends them to an API server. A pod is bound to this node (podlab is a
//! one-node cluster, so the scheduler's choice is made here) and the node agent is started.
//! Every document is decoded and validated before anything is stored: one bad document
//! creates nothing.

use std::path::Path;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use podlab_control::manifest::{decode_warned, Manifest};

use crate::context::Ctx;

pub fn run(file: &Path, trace: bool) -> Result<()> {
    let (text, source) = read_manifest(file)?;
    let manifests = decode_warned(&text, &source).map_err(|e| anyhow::anyhow!("{e}"))?;
    let ctx = Ctx::open()?;
    if trace {
        return apply_traced(&ctx, manifests);
    }
    apply_all_warned(&ctx, manifests, |line| println!("{line}"))?;
    Ok(())
}

/// Prints the API server's warnings as kubectl's default warning handler does: `Warning: `
/// and the text on stderr, each text once per command.
pub fn print_warnings(warnings: &[String], printed: &mut std::collections::HashSet<String>) {
    for warning in warnings {
        if printed.insert(warning.clone()) {
            eprintln!("Warning: {warning}");
        }
    }
}

/// `apply --trace`: each pod's trace from its store write until it is Ready (or finished),
/// printed once every pod got there.
fn apply_traced(ctx: &Ctx, manifests: Vec<(Manifest, Vec<String>)>) -> Result<()> {
    let pods: Vec<(String, String)> = manifests
        .iter()
        .filter_map(|(m, _)| match m {
            Manifest::Pod(pod) => Some((
                pod.metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                pod.metadata.name.clone().unwrap_or_default(),
            )),
            _ => None,
        })
        .collect();
    let traces: Vec<_> = pods
        .iter()
        .map(|(namespace, name)| crate::trace::Tracing::begin(&ctx.root, namespace, name, "apply"))
        .collect();
    apply_all_warned(ctx, manifests, |line| println!("{line}"))?;
    for trace in traces.iter().flatten() {
        trace.mark("store, agent start");
    }
    finish_when_ready(ctx, &pods, traces)
}

/// Waits (60 s at most) until each traced pod is Ready or finished, then prints its trace.
pub fn finish_when_ready(
    ctx: &Ctx,
    pods: &[(String, String)],
    traces: Vec<Option<crate::trace::Tracing>>,
) -> Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for ((namespace, name), trace) in pods.iter().zip(traces) {
        let condition = crate::wait::Condition::ReadyOrFinished;
        let reached = crate::wait::until(ctx, namespace, name, &condition, deadline)?;
        if let Some(trace) = trace {
            trace.mark(match reached {
                true => "Ready (or finished) seen",
                false => "gave up waiting for Ready after 60 s",
            });
            trace.finish();
        }
    }
    Ok(())
}

/// Applies decoded manifests (their busybox image made first) and starts the node agent, which
/// runs the pods and the ReplicaSet controller. `applied` gets a `kind/name outcome` line per
/// object as soon as it is stored, as kubectl prints them; the lines are returned too.
pub fn apply_all(
    ctx: &Ctx,
    manifests: Vec<Manifest>,
    applied: impl FnMut(&str),
) -> Result<Vec<String>> {
    let manifests = manifests.into_iter().map(|m| (m, Vec::new())).collect();
    apply_all_warned(ctx, manifests, applied)
}

/// [`apply_all`], with the API server's warnings for each object printed on stderr when it is
/// created (a Pod's deprecated AppArmor annotation, its fractional byte values...).
pub fn apply_all_warned(
    ctx: &Ctx,
    manifests: Vec<(Manifest, Vec<String>)>,
    mut applied: impl FnMut(&str),
) -> Result<Vec<String>> {
    for (manifest, _) in &manifests {
        for image in images_of(manifest) {
            crate::image::ensure_builtin_if_busybox(ctx, &image)?;
        }
    }
    let mut lines = Vec::new();
    let mut printed = std::collections::HashSet::new();
    for (manifest, warnings) in manifests {
        match manifest {
            Manifest::Pod(pod) => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let outcome = apply_pod(ctx, *pod)?;
                if outcome == "created" {
                    print_warnings(&warnings, &mut printed);
                }
                lines.push(format!("pod/{name} {outcome}"));
                applied(lines.last().expect("just pushed"));
            }
            Manifest::ReplicaSet(rs) => {
                let name = rs.metadata.name.clone().unwrap_or_default();
                lines.push(format!(
                    "replicaset.apps/{name} {}",
                    apply_replicaset(ctx, *rs)?
                ));
                applied(lines.last().expect("just pushed"));
            }
            Manifest::Deployment(d) => {
                let name = d.metadata.name.clone().unwrap_or_default();
                lines.push(format!(
                    "deployment.apps/{name} {}",
                    apply_deployment(ctx, *d)?
                ));
                applied(lines.last().expect("just pushed"));
            }
            Manifest::ConfigMap(map) => {
                let name = map.metadata.name.clone().unwrap_or_default();
                let outcome = apply_data(ctx, *map, |a, b| {
                    (&a.data, &a.binary_data) == (&b.data, &b.binary_data)
                })?;
                lines.push(format!("configmap/{name} {outcome}"));
                applied(lines.last().expect("just pushed"));
            }
            Manifest::Secret(secret) => {
                let name = secret.metadata.name.clone().unwrap_or_default();
                let outcome = apply_data(ctx, *secret, |a, b| {
                    (&a.data, &a.type_) == (&b.data, &b.type_)
                })?;
                lines.push(format!("secret/{name} {outcome}"));
                applied(lines.last().expect("just pushed"));
            }
        }
    }
    ctx.ensure_node()?;
    Ok(lines)
}

/// Every image a manifest's pods (or a ReplicaSet's pod template) name.
fn images_of(manifest: &Manifest) -> Vec<String> {
    let spec = match manifest {
        Manifest::Pod(pod) => pod.spec.as_ref(),
        Manifest::ReplicaSet(rs) => rs
            .spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .and_then(|t| t.spec.as_ref()),
        Manifest::Deployment(d) => d.spec.as_ref().and_then(|s| s.template.spec.as_ref()),
        Manifest::ConfigMap(_) | Manifest::Secret(_) => None,
    };
    spec.map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(&s.containers)
            .filter_map(|c| c.image.clone())
            .collect()
    })
    .unwrap_or_default()
}

/// A ConfigMap or Secret created, or replaced when its data (or labels, annotations) changed:
/// `created`, `configured` or `unchanged`.
fn apply_data<T: podlab_control::kind::StoreObject>(
    ctx: &Ctx,
    object: T,
    same_data: impl Fn(&T, &T) -> bool,
) -> Result<&'static str> {
    let meta = object.metadata();
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    let name = meta.name.clone().unwrap_or_default();
    let outcome = retry_on_conflict(|| match ctx.store.get::<T>(&namespace, &name) {
        Ok(current) => {
            let (old, new) = (current.metadata(), object.metadata());
            if same_data(&current, &object)
                && (&old.labels, &old.annotations) == (&new.labels, &new.annotations)
            {
                return Ok("unchanged");
            }
            let mut next = object.clone();
            let keep = current.metadata().clone();
            let meta = next.metadata_mut();
            meta.uid = keep.uid;
            meta.resource_version = keep.resource_version;
            meta.creation_timestamp = keep.creation_timestamp;
            ctx.store.update(next).map(|_| "configured")
        }
        Err(e) if e.is_not_found() => ctx.store.create(object.clone()).map(|_| "created"),
        Err(e) => Err(e),
    })?;
    Ok(outcome)
}

/// Runs `change` again on a fresh read while the store answers Conflict (another writer — the
/// node agent writing a status, the controller adopting — came in between), as client-go's
/// `RetryOnConflict` does.
pub fn retry_on_conflict<T>(
    mut change: impl FnMut() -> std::result::Result<T, podlab_control::Error>,
) -> std::result::Result<T, podlab_control::Error> {
    let mut attempts = 0;
    loop {
        match change() {
            Err(e) if e.is_conflict() && attempts < 10 => attempts += 1,
            other => return other,
        }
    }
}

pub fn read_manifest(file: &Path) -> Result<(String, String)> {
    if file == Path::new("-") {
        Ok((
            std::io::read_to_string(std::io::stdin()).context("reading stdin")?,
            "STDIN".into(),
        ))
    } else {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        Ok((text, file.display().to_string()))
    }
}

/// The name of this node: podlab is a one-node cluster, and its node is this host.
pub fn node_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Creates the pod, bound to this node; a pod of that name already there is the store's
/// `AlreadyExists`, as the API server answers a POST.
pub fn create_pod(ctx: &Ctx, mut pod: Pod) -> Result<Pod, podlab_control::Error> {
    bind_to_this_node(&mut pod);
    ctx.store.create(pod)
}

/// podlab is a one-node cluster: the scheduler's choice is this node.
fn bind_to_this_node(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name.get_or_insert_with(node_name);
}

/// Creates the pod, or updates it where the API server allows an update (the images of its
/// containers and init containers; labels and annotations), and says which: `created`,
/// `configured` or `unchanged`.
pub fn apply_pod(ctx: &Ctx, mut pod: Pod) -> Result<&'static str> {
    bind_to_this_node(&mut pod);
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = pod.metadata.name.clone().unwrap_or_default();
    let outcome = retry_on_conflict(|| match ctx.store.get::<Pod>(&namespace, &name) {
        Err(e) if e.is_not_found() => ctx.store.create(pod.clone()).map(|_| Ok("created")),
        Err(e) => Err(e),
        Ok(mut existing) => {
            let old = existing.spec.clone().unwrap_or_default();
            let mut new = pod.spec.clone().unwrap_or_default();
            // Ephemeral containers come only through `podlab debug` (their own subresource):
            // a manifest neither adds nor removes them.
            new.ephemeral_containers = old.ephemeral_containers.clone();
            if old == new
                && existing.metadata.labels == pod.metadata.labels
                && existing.metadata.annotations == pod.metadata.annotations
            {
                return Ok(Ok("unchanged"));
            }
            let errors = podlab_api::update::validate_pod_spec_update(&old, &new);
            if !errors.is_empty() {
                let list: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                return Ok(Err(anyhow::anyhow!(
                    "The Pod {name:?} is invalid: {} (delete the pod and apply it again)",
                    list.join(", ")
                )));
            }
            existing.spec = Some(new);
            existing.metadata.labels = pod.metadata.labels.clone();
            existing.metadata.annotations = pod.metadata.annotations.clone();
            ctx.store.update(existing).map(|_| Ok("configured"))
        }
    })?;
    outcome
}

/// Creates the ReplicaSet, or updates its spec and labels (as far as validation allows),
/// and says which: `created`, `configured` or `unchanged`.
pub fn apply_replicaset(ctx: &Ctx, rs: ReplicaSet) -> Result<&'static str> {
    let namespace = rs
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = rs.metadata.name.clone().unwrap_or_default();
    let outcome = retry_on_conflict(|| match ctx.store.get::<ReplicaSet>(&namespace, &name) {
        Err(e) if e.is_not_found() => ctx.store.create(rs.clone()).map(|_| Ok("created")),
        Err(e) => Err(e),
        Ok(mut existing) => {
            if existing.spec == rs.spec && existing.metadata.labels == rs.metadata.labels {
                return Ok(Ok("unchanged"));
            }
            let errors = podlab_control::manifest::validate_replicaset_update(&existing, &rs);
            if !errors.is_empty() {
                let list: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                return Ok(Err(anyhow::anyhow!(
                    "ReplicaSet {name:?} is invalid: {}",
                    list.join(", ")
                )));
            }
            existing.spec = rs.spec.clone();
            existing.metadata.labels = rs.metadata.labels.clone();
            ctx.store.update(existing).map(|_| Ok("configured"))
        }
    })?;
    outcome
}

/// Creates the Deployment, or updates its spec, labels and annotations (as far as validation
/// allows: the selector is immutable), and says which: `created`, `configured` or
/// `unchanged`. The annotations the controller keeps (the revision) are kept.
pub fn apply_deployment(ctx: &Ctx, d: Deployment) -> Result<&'static str> {
    let namespace = d
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = d.metadata.name.clone().unwrap_or_default();
    let outcome = retry_on_conflict(|| match ctx.store.get::<Deployment>(&namespace, &name) {
        Err(e) if e.is_not_found() => ctx.store.create(d.clone()).map(|_| Ok("created")),
        Err(e) => Err(e),
        Ok(mut existing) => {
            let mut annotations = existing.metadata.annotations.clone().unwrap_or_default();
            let controller_keeps = podlab_control::deployment::sync::NOT_COPIED;
            annotations.retain(|k, _| controller_keeps.contains(&k.as_str()));
            annotations.extend(d.metadata.annotations.clone().unwrap_or_default());
            let annotations = (!annotations.is_empty()).then_some(annotations);
            if existing.spec == d.spec
                && existing.metadata.labels == d.metadata.labels
                && existing.metadata.annotations == annotations
            {
                return Ok(Ok("unchanged"));
            }
            let errors =
                podlab_control::deployment::manifest::validate_deployment_update(&existing, &d);
            if !errors.is_empty() {
                let list: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                return Ok(Err(anyhow::anyhow!(
                    "Deployment.apps {name:?} is invalid: {}",
                    list.join(", ")
                )));
            }
            existing.spec = d.spec.clone();
            existing.metadata.labels = d.metadata.labels.clone();
            existing.metadata.annotations = annotations;
            ctx.store.update(existing).map(|_| Ok("configured"))
        }
    })?;
    outcome
}
