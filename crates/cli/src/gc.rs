//! `podlab gc`: removes what a crashed podlab left behind, as kubelet's and containerd's
//! garbage collectors do: sandboxes whose shim or pause died (their pins, mounts and
//! processes), sandboxes of pods that are no longer in the store, and unreferenced image
//! content.

use std::collections::BTreeSet;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use podlab_kubelet::translate::LABEL_POD_UID;

use crate::context::Ctx;

pub fn run() -> Result<()> {
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
    let live: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    for sandbox in runtime.list_pod_sandboxes()? {
        let uid = sandbox
            .labels
            .get(LABEL_POD_UID)
            .cloned()
            .unwrap_or_default();
        if !live.contains(&uid) {
            let _ = runtime.stop_pod_sandbox(&sandbox.id);
            runtime.remove_pod_sandbox(&sandbox.id)?;
            println!(
                "removed sandbox {} of pod {}/{} (not in the store)",
                sandbox.id.short(),
                sandbox.metadata.namespace,
                sandbox.metadata.name
            );
        }
    }
    let images = ctx.images()?.gc()?;
    if images.blobs_removed + images.snapshots_removed > 0 {
        println!(
            "removed {} unreferenced blobs and {} snapshots",
            images.blobs_removed, images.snapshots_removed
        );
    }
    println!("gc done");
    Ok(())
}
