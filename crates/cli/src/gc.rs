//! `podlab gc`: removes what a crashed podlab left behind, as kubelet's and containerd's
//! garbage collectors do: sandboxes whose shim or pause died (their pins, mounts and
//! processes), sandboxes of pods that are no longer in the store, the volume and log folders
//! of pods that have neither, and unreferenced image content.
//!
//! The pod network state of network namespaces that are gone (`/run/podlab-net/<inode>`) goes
//! too (see `network::identity`), and the host-port nat rules that podlab's pods left without a
//! DEL (see `network::hostports`).
//!
//! A sandbox that died while Ready has its network torn down (CNI DEL: its IP lease is
//! released). With no node agent running, the pods whose status still shows a running
//! container get the status kubelet would give them now that their sandbox is gone (their
//! containers vanished, the pod not Ready); an agent that runs does that in its next sync.
//!
//! A `podlab run --rm` has no pod in the store: its sandbox is labelled with the `run` process
//! that owns it ([`crate::run::LABEL_RUN_OWNER`]) and is left alone while that process lives.
//! Nor have the sandboxes a CRI client made through `podlab cri`: while a server serves the
//! root they are its client's and are left alone; once none does (a killed server), they are
//! what it left behind.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use podlab_kubelet::translate::{LABEL_MANAGED_BY, LABEL_POD_UID};
use podlab_runtime::SandboxStatus;

use crate::context::Ctx;
use crate::run::{run_owner_alive, MANAGED_BY_RUN};

pub fn run() -> Result<()> {
    let root = podlab_runtime::config::RuntimeConfig::from_env().root;
    if !root.exists() {
        // Nothing of a root was ever made here, and collecting must not make one.
        collect_network()?;
        println!("gc done (no podlab root at {})", root.display());
        return Ok(());
    }
    let ctx = Ctx::open()?;
    if podlab_kubelet::node::running_agent(&ctx.root).is_none() {
        // The change-notice socket of an agent that was killed.
        let _ = std::fs::remove_file(podlab_runtime::events::socket_path(&ctx.root));
    }
    let cri_notices = podlab_runtime::events::cri_socket_path(&ctx.root);
    let cri_serving = cri_notices.exists() && podlab_runtime::events::listened(&cri_notices);
    if cri_notices.exists() && !cri_serving {
        // The change-notice socket of a `podlab cri` that was killed.
        let _ = std::fs::remove_file(&cri_notices);
    }
    let runtime = ctx.runtime()?;
    // What the last one-shot pods left for the next goes first: the node's folders are then
    // collected below with the rest.
    crate::oneshot_keeper::stop(&runtime.config().root);
    let report = runtime.gc()?;
    for id in &report.sandboxes_removed {
        println!(
            "removed sandbox {} (its shim or pause had died)",
            id.short()
        );
    }
    for id in &report.sandboxes_cleaned {
        println!("cleaned stopped sandbox {}", id.short());
    }
    for pid in &report.processes_killed {
        println!("killed leftover process {pid}");
    }
    for path in &report.unmounted {
        println!("unmounted {}", path.display());
    }
    for cgroup in &report.cgroups_removed {
        println!("removed cgroup {cgroup}");
    }
    let traces = podlab_runtime::trace::remove_orphans(&ctx.root);
    if traces > 0 {
        println!("removed {traces} trace file(s) of commands that are gone");
    }
    for id in &report.busy {
        println!(
            "skipped sandbox {} (another podlab process holds its lock)",
            id.short()
        );
    }
    for id in &report.networks_released {
        println!(
            "released the network of sandbox {} (its IP lease)",
            id.short()
        );
    }
    for (id, error) in &report.network_failures {
        println!(
            "kept sandbox {}: its network teardown failed, the next gc tries again: {error}",
            id.short()
        );
    }

    // Sandboxes whose pod is gone from the store: kubelet removes those too.
    let (pods, _) = ctx.store.list::<Pod>(None)?;
    let mut live: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    for sandbox in runtime.list_pod_sandboxes()? {
        let uid = sandbox
            .labels
            .get(LABEL_POD_UID)
            .cloned()
            .unwrap_or_default();
        if live.contains(&uid) {
            continue;
        }
        if cri_serving {
            // Its CRI client (a kubelet, crictl) owns it, not this root's store.
            println!(
                "kept sandbox {} of {}/{} (a running `podlab cri` serves this root)",
                sandbox.id.short(),
                sandbox.metadata.namespace,
                sandbox.metadata.name
            );
            live.insert(uid);
            continue;
        }
        if still_owned_by_run(&sandbox) {
            println!(
                "kept sandbox {} of a running `podlab run --rm` ({})",
                sandbox.id.short(),
                sandbox.metadata.name
            );
            live.insert(uid);
            continue;
        }
        let _ = runtime.stop_pod_sandbox(&sandbox.id);
        runtime.remove_pod_sandbox(&sandbox.id)?;
        println!(
            "removed sandbox {} of pod {}/{} (not in the store)",
            sandbox.id.short(),
            sandbox.metadata.namespace,
            sandbox.metadata.name
        );
    }
    for sandbox in runtime.list_pod_sandboxes()? {
        live.extend(sandbox.labels.get(LABEL_POD_UID).cloned());
    }
    for dir in pod_dirs_without_pod(&ctx.root, &live)? {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        println!("removed {} (its pod is gone)", dir.display());
    }

    let images = ctx.images()?.gc()?;
    if images.blobs_removed + images.snapshots_removed > 0 {
        println!(
            "removed {} unreferenced blobs and {} snapshots",
            images.blobs_removed, images.snapshots_removed
        );
    }
    collect_network()?;
    if podlab_kubelet::node::running_agent(&ctx.root).is_none() {
        refresh_stale_statuses(&ctx, &runtime)?;
    }
    println!("gc done");
    if !report.network_failures.is_empty() {
        anyhow::bail!(
            "{} sandbox network(s) could not be torn down",
            report.network_failures.len()
        );
    }
    Ok(())
}

/// Pods whose stored status shows a running container the runtime no longer runs get the
/// status the agent's next sync would write (written only when it differs).
fn refresh_stale_statuses(ctx: &Ctx, runtime: &podlab_runtime::Runtime) -> Result<()> {
    let (pods, _) = ctx.store.list::<Pod>(None)?;
    for pod in pods {
        let stale = pod
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            .any(|c| !runs(runtime, c.container_id.as_deref()));
        if !stale || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let status = podlab_kubelet::node::status::status_from_runtime(runtime, &pod)?;
        if pod.status.as_ref() == Some(&status) {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let mut fresh = pod;
        fresh.status = Some(status);
        match ctx.store.update_status(fresh) {
            Ok(_) => {
                println!("updated the status of pod {namespace}/{name} (its containers are gone)")
            }
            // The pod changed or went meanwhile: whoever changed it has the newer word.
            Err(e) if e.is_conflict() || e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The pod network of this network namespace, if no pod is attached to it any more, and the
/// state folders of network namespaces that are gone.
fn collect_network() -> Result<()> {
    if crate::network::gc()? {
        println!("removed the pod network state of this network namespace (no pod was attached)");
    }
    for folder in crate::network::collect_gone()? {
        println!(
            "removed {} (its network namespace is gone)",
            folder.display()
        );
    }
    for id in crate::network::collect_host_ports()? {
        println!("removed the host-port nat rules of {id} (portmap's CNI-DN chain)");
    }
    Ok(())
}

/// Whether the runtime runs the container of this `containerID` (`podlab://<id>`).
fn runs(runtime: &podlab_runtime::Runtime, container_id: Option<&str>) -> bool {
    let Some(id) = container_id.and_then(|id| id.strip_prefix("podlab://")) else {
        return false;
    };
    podlab_runtime::ContainerId::parse(id)
        .and_then(|id| runtime.container_status(&id))
        .is_ok_and(|s| s.state == podlab_runtime::ContainerState::Running)
}

fn still_owned_by_run(sandbox: &SandboxStatus) -> bool {
    sandbox.labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_RUN)
        && run_owner_alive(&sandbox.labels)
}

/// `root/pods/<uid>` (volumes) and `root/logs/<namespace>_<name>_<uid>` (container logs) of
/// pods that are neither in the store nor have a sandbox, their volume mounts detached; a
/// folder with another mount below it is left alone (something still uses it).
fn pod_dirs_without_pod(root: &Path, live: &BTreeSet<String>) -> Result<Vec<std::path::PathBuf>> {
    let mut found = Vec::new();
    let entries = |dir: &Path| -> Vec<(std::path::PathBuf, String)> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter_map(|e| Some((e.path(), e.file_name().into_string().ok()?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    for (path, name) in entries(&root.join("pods")) {
        if !live.contains(&name) {
            // The pod's own volume mounts (a tmpfs emptyDir) go with it: nothing else mounts
            // there. What is still mounted after that keeps the folder.
            podlab_kubelet::volume::unmount_below(&path.join("volumes"));
            found.push(path);
        }
    }
    for (path, name) in entries(&root.join("logs")) {
        let uid = name.rsplit('_').next().unwrap_or_default();
        if !live.contains(uid) {
            found.push(path);
        }
    }
    let mut unused = Vec::new();
    for dir in found {
        if podlab_ns::mnt::mounts_below(&dir)?.is_empty() {
            unused.push(dir);
        }
    }
    Ok(unused)
}
