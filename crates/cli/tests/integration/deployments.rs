//! Integration tests: a Deployment rolled out from one image to another and back (`rollout
//! undo`), with RollingUpdate's promise checked all along: never fewer than replicas −
//! maxUnavailable ready pods, never more than replicas + maxSurge pods, polled from the store
//! while the controllers and the node agent work.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;

use crate::pod_updates::tag_busybox;
use crate::pods::Root;
use crate::support::wait_until;

const LIMIT: Duration = Duration::from_secs(120);
const REPLICAS: usize = 3;
const MAX_UNAVAILABLE: usize = 1;
const MAX_SURGE: usize = 1;

fn manifest(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: {REPLICAS}\n  \
         strategy: {{rollingUpdate: {{maxSurge: {MAX_SURGE}, maxUnavailable: {MAX_UNAVAILABLE}}}}}\n  \
         selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      \
         terminationGracePeriodSeconds: 1\n      containers:\n      - name: app\n        image: \"{image}\"\n        \
         command: [sleep, \"1000\"]\n        readinessProbe: {{exec: {{command: [\"true\"]}}, periodSeconds: 1}}\n"
    )
}

/// The pods that are not being deleted, with whether each is Ready and its image.
fn live_pods(root: &Root) -> Vec<(bool, String)> {
    let (pods, _) = root.store().list::<Pod>(Some("default")).unwrap();
    pods.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let image = p.spec.unwrap().containers[0]
                .image
                .clone()
                .unwrap_or_default();
            (ready, image)
        })
        .collect()
}

/// Polls until every live pod is ready and runs `image` and the Deployment says it is done,
/// asserting RollingUpdate's bounds at every look.
fn roll_to(root: &Root, image: &str) -> (usize, usize) {
    let start = Instant::now();
    let (mut fewest_ready, mut most_pods) = (usize::MAX, 0);
    loop {
        let pods = live_pods(root);
        let ready = pods.iter().filter(|(r, _)| *r).count();
        fewest_ready = fewest_ready.min(ready);
        most_pods = most_pods.max(pods.len());
        assert!(
            ready >= REPLICAS - MAX_UNAVAILABLE,
            "only {ready} ready pods during the rollout to {image}: {pods:?}"
        );
        assert!(
            pods.len() <= REPLICAS + MAX_SURGE,
            "{} pods during the rollout to {image}: {pods:?}",
            pods.len()
        );
        let d: Deployment = root.store().get("default", "web").unwrap();
        let status = d.status.unwrap_or_default();
        let done = pods.len() == REPLICAS
            && pods.iter().all(|(r, i)| *r && i == image)
            && status.updated_replicas == Some(REPLICAS as i32)
            && status.available_replicas == Some(REPLICAS as i32)
            && status.replicas == Some(REPLICAS as i32);
        if done {
            return (fewest_ready, most_pods);
        }
        assert!(
            start.elapsed() < LIMIT,
            "the rollout to {image} did not finish within {LIMIT:?}: {pods:?}, {status:?}\n{}",
            root.agent_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn replicasets(root: &Root) -> Vec<ReplicaSet> {
    root.store().list::<ReplicaSet>(Some("default")).unwrap().0
}

fn revision(rs: &ReplicaSet) -> String {
    rs.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"].clone()
}

#[test]
fn a_rolling_update_keeps_enough_pods_ready_and_undo_comes_back() {
    let root = Root::new("rollout");
    let out = root.apply(&manifest("busybox"));
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "deployment.apps/web created\n"),
        "{out:?}"
    );
    let out = root.run(&["rollout", "status", "deployment/web", "--timeout=120s"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout
            .ends_with("deployment \"web\" successfully rolled out\n"),
        "{out:?}"
    );
    assert!(wait_until(LIMIT, || live_pods(&root)
        .iter()
        .filter(|(r, _)| *r)
        .count()
        == REPLICAS));
    let first = replicasets(&root);
    assert_eq!(first.len(), 1);
    let first_name = first[0].metadata.name.clone().unwrap();
    let hash = first[0].metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    assert_eq!(first_name, format!("web-{hash}"));
    assert_eq!(revision(&first[0]), "1");

    tag_busybox(&root, "busybox:1.36");
    let out = root.apply(&manifest("busybox:1.36"));
    assert_eq!(out.stdout, "deployment.apps/web configured\n", "{out:?}");
    let (fewest, most) = roll_to(&root, "busybox:1.36");
    eprintln!("rollout to B: at least {fewest} ready, at most {most} pods");
    let sets = replicasets(&root);
    assert_eq!(sets.len(), 2, "{sets:?}");
    let new = sets
        .iter()
        .find(|rs| rs.metadata.name.as_deref() != Some(&first_name))
        .unwrap();
    assert_eq!(revision(new), "2");
    assert_eq!(
        root.ok(&["rollout", "history", "deploy/web"]),
        "deployment.apps/web \nREVISION  CHANGE-CAUSE\n1         <none>\n2         <none>\n\n"
    );

    assert_eq!(
        root.ok(&["rollout", "undo", "deployment", "web"]),
        "deployment.apps/web rolled back\n"
    );
    let (fewest, most) = roll_to(&root, "busybox");
    eprintln!("undo: at least {fewest} ready, at most {most} pods");
    // The first ReplicaSet is the new one again, under a new revision.
    let back: ReplicaSet = root.store().get("default", &first_name).unwrap();
    assert_eq!(back.spec.as_ref().unwrap().replicas, Some(REPLICAS as i32));
    assert_eq!(revision(&back), "3");
    let row = root.ok(&["get", "deploy", "web", "--no-headers"]);
    assert_eq!(
        crate::pods::split_cells(&row)[..4],
        ["web", "3/3", "3", "3"],
        "{row}"
    );
    let out = root.run(&["rollout", "undo", "deploy/web", "--to-revision=7"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            Some(1),
            "podlab: unable to find specified revision 7 in history\n"
        )
    );

    // Deleting the Deployment takes its ReplicaSets and their pods with it.
    root.ok(&["delete", "deployment", "web"]);
    assert!(
        wait_until(LIMIT, || replicasets(&root).is_empty()
            && root.store().list::<Pod>(None).unwrap().0.is_empty()),
        "replicasets or pods left after the deployment was deleted"
    );
}

#[test]
fn recreate_stops_every_old_pod_before_starting_new_ones() {
    let root = Root::new("recreate");
    let recreate = |image: &str| {
        manifest(image).replace(
            &format!("strategy: {{rollingUpdate: {{maxSurge: {MAX_SURGE}, maxUnavailable: {MAX_UNAVAILABLE}}}}}"),
            "strategy: {type: Recreate}",
        )
    };
    assert_eq!(root.apply(&recreate("busybox")).code, Some(0));
    root.ok(&["rollout", "status", "deploy/web", "--timeout=120s"]);
    tag_busybox(&root, "busybox:1.36");
    assert_eq!(root.apply(&recreate("busybox:1.36")).code, Some(0));
    // Never an old and a new pod at once, counting the ones still terminating.
    let start = Instant::now();
    loop {
        let (pods, _) = root.store().list::<Pod>(Some("default")).unwrap();
        let images: Vec<String> = pods
            .iter()
            .map(|p| p.spec.clone().unwrap().containers[0].image.clone().unwrap())
            .collect();
        let old = images.iter().filter(|i| *i == "busybox").count();
        assert!(
            old == 0 || old == images.len(),
            "old and new pods at once: {images:?}"
        );
        if images.len() == REPLICAS && old == 0 && live_pods(&root).iter().all(|(r, _)| *r) {
            break;
        }
        assert!(
            start.elapsed() < LIMIT,
            "recreate did not finish: {images:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    root.ok(&["delete", "deploy", "web"]);
    assert!(wait_until(LIMIT, || root
        .store()
        .list::<Pod>(None)
        .unwrap()
        .0
        .is_empty()));
}
