//! Reliability: clients applying, updating and deleting pods at once while the node agent
//! writes their statuses. Every pod must end as its client asked (kept ones Running with the
//! client's last label, deleted ones gone from the store and the node), and no update may be
//! lost: `apply` retries a resourceVersion conflict on a fresh read, as kubectl does.
//!
//! The suite runs 8 clients × 3 pods; `cargo xtask reliability concurrency --pods 200` runs
//! the same test with 8 clients and `PODLAB_CONCURRENCY_PODS` pods in all.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use podlab_runtime::status::SandboxState;

use crate::pods::{running, Root};
use crate::support::wait_until;

const CLIENTS: usize = 8;
const SUITE_PODS: usize = 24;

fn manifest(name: &str, revision: usize) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{revision: "{revision}"}}}}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "trap 'exit 0' TERM; sleep 1000 & wait"]
"#
    )
}

fn revision(pod: &Pod) -> Option<String> {
    pod.metadata.labels.as_ref()?.get("revision").cloned()
}

#[test]
fn eight_clients_applying_and_deleting_pods_at_once_leave_each_pod_as_asked() {
    let pods: usize = std::env::var("PODLAB_CONCURRENCY_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SUITE_PODS);
    let root = Root::new("concurrency");
    let per_client = pods.div_ceil(CLIENTS);
    // Client c owns pods c-0, c-1, ...: it creates each, updates it twice (racing the agent's
    // status writes), and deletes every other one.
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let root = &root;
                scope.spawn(move || {
                    let mut failures = Vec::new();
                    for j in 0..per_client {
                        let name = format!("c{client}-{j}");
                        for revision in 1..=3 {
                            let out = root.apply(&manifest(&name, revision));
                            if out.code != Some(0) {
                                failures.push(format!("apply {name} r{revision}: {out:?}"));
                            }
                        }
                        if j % 2 == 1 {
                            let out = root.run(&["delete", "pod", &name, "--wait=false"]);
                            if out.code != Some(0) {
                                failures.push(format!("delete {name}: {out:?}"));
                            }
                        }
                    }
                    failures
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let kept: BTreeSet<String> = (0..CLIENTS)
        .flat_map(|c| {
            (0..per_client)
                .filter(|j| j % 2 == 0)
                .map(move |j| format!("c{c}-{j}"))
        })
        .collect();
    let limit = Duration::from_secs(60 + 2 * pods as u64);
    let mut last = Vec::new();
    let settled = wait_until(limit, || {
        let (stored, _) = root.store().list::<Pod>(None).unwrap();
        last = stored
            .iter()
            .filter(|p| {
                !kept.contains(p.metadata.name.as_deref().unwrap_or_default())
                    || !running(p)
                    || revision(p).as_deref() != Some("3")
            })
            .map(|p| {
                format!(
                    "{:?} {:?} {:?}",
                    p.metadata.name,
                    revision(p),
                    p.status.as_ref().and_then(|s| s.phase.clone())
                )
            })
            .collect();
        let names: BTreeSet<String> = stored
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names == kept && last.is_empty()
    });
    assert!(
        settled,
        "the store did not settle to the {} kept pods, Running at revision 3; off: {last:#?}\nagent log: {}",
        kept.len(),
        root.agent_log()
    );

    // The store's word agrees with itself: distinct resourceVersions, the CLI lists the same.
    let (stored, _) = root.store().list::<Pod>(None).unwrap();
    let versions: BTreeSet<String> = stored
        .iter()
        .filter_map(|p| p.metadata.resource_version.clone())
        .collect();
    assert_eq!(
        versions.len(),
        stored.len(),
        "two pods share a resourceVersion"
    );
    let listed: BTreeSet<String> = root
        .ok(&["get", "pods", "-o", "name"])
        .lines()
        .map(|l| l.trim_start_matches("pod/").to_string())
        .collect();
    assert_eq!(listed, kept);
    // And the node's: one ready sandbox per kept pod, none of a deleted one.
    let settled = wait_until(limit, || {
        let sandboxes = root.runtime().list_pod_sandboxes().unwrap();
        let ready: Vec<String> = sandboxes
            .iter()
            .filter(|s| s.state == SandboxState::Ready)
            .map(|s| s.metadata.name.clone())
            .collect();
        let distinct: BTreeSet<String> = ready.iter().cloned().collect();
        ready.len() == kept.len() && distinct == kept && sandboxes.len() == kept.len()
    });
    assert!(settled, "the node's sandboxes do not match the kept pods");
}
