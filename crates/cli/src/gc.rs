//! `podlab gc`: removes what a crashed podlab left behind, as kubelet's and containerd's
//! garbage collectors do: sandboxes whose shim or pause died (their pins, mounts and
//! processes), sandboxes of pods that are no longer in the store, the volume and log folders
//! of pods that have neither, and unreferenced image content.
//!
//! A `podlab run --rm` has no pod in the store: its sandbox is labelled with the `run` process
//! that owns it ([`crate::run::LABEL_RUN_OWNER`]) and is left alone while that process lives.

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
        if crate::network::gc()? {
            println!(
                "removed the pod network state of this network namespace (no pod was attached)"
            );
        }
        println!("gc done (no podlab root at {})", root.display());
        return Ok(());
    }
    let ctx = Ctx::open()?;
    let runtime = ctx.runtime()?;
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
    for id in &report.busy {
        println!(
            "skipped sandbox {} (another podlab process holds its lock)",
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
    println!("gc done");
    Ok(())
}

/// The pod network of this network namespace, if no pod is attached to it any more.
fn collect_network() -> Result<()> {
    if crate::network::gc()? {
        println!("removed the pod network state of this network namespace (no pod was attached)");
    }
    Ok(())
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
