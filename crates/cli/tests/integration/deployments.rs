//! Integration tests: a Deployment rolled out from one image to another and back (`rollout
//! undo`), with RollingUpdate's promise checked all along: never fewer than replicas −
//! maxUnavailable ready pods, never more than replicas + maxSurge pods wanted by the
//! ReplicaSets, polled from the store while the controllers and the node agent work.

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
    live_pods_by_owner(root)
        .into_iter()
        .map(|(ready, image, _)| (ready, image))
        .collect()
}

/// [`live_pods`] with the name of each pod's ReplicaSet.
fn live_pods_by_owner(root: &Root) -> Vec<(bool, String, String)> {
    let (pods, _) = root.store().list::<Pod>(Some("default")).unwrap();
    pods.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let owner = p.metadata.owner_references.as_ref().unwrap()[0]
                .name
                .clone();
            let image = p.spec.unwrap().containers[0]
                .image
                .clone()
                .unwrap_or_default();
            (ready, image, owner)
        })
        .collect()
}

/// The pods that count against maxSurge, read after `pods`: each ReplicaSet's live pods up to
/// its `spec.replicas`. Kubernetes bounds the sum of the ReplicaSets' `replicas`
/// (`NewRSNewReplicas`), not the pods: a pod its ReplicaSet was just scaled down past lives
/// until the ReplicaSet controller deletes it, while the new ReplicaSet may already grow into
/// the room (regression: the test counted it, and once saw 5 pods, 2 new and 3 old, when the
/// old ReplicaSet wanted 2). Returns that count and the sum of the `replicas`.
fn surge_counted(root: &Root, pods: &[(bool, String, String)]) -> (usize, usize) {
    let (mut counted, mut wanted) = (0, 0);
    for rs in replicasets(root) {
        let name = rs.metadata.name.unwrap();
        let replicas = rs.spec.unwrap().replicas.unwrap_or(1) as usize;
        let pods = pods.iter().filter(|(_, _, owner)| *owner == name).count();
        counted += pods.min(replicas);
        wanted += replicas;
    }
    (counted, wanted)
}

/// Polls until every live pod is ready and runs `image` and the Deployment says it is done,
/// asserting RollingUpdate's bounds at every look.
fn roll_to(root: &Root, image: &str) -> (usize, usize) {
    let start = Instant::now();
    let (mut fewest_ready, mut most_pods) = (usize::MAX, 0);
    loop {
        let owned = live_pods_by_owner(root);
        let (counted, wanted) = surge_counted(root, &owned);
        let pods: Vec<(bool, String)> = owned.into_iter().map(|(r, i, _)| (r, i)).collect();
        let ready = pods.iter().filter(|(r, _)| *r).count();
        fewest_ready = fewest_ready.min(ready);
        most_pods = most_pods.max(counted);
        assert!(
            ready >= REPLICAS - MAX_UNAVAILABLE,
            "only {ready} ready pods during the rollout to {image}: {pods:?}"
        );
        assert!(
            counted <= REPLICAS + MAX_SURGE && wanted <= REPLICAS + MAX_SURGE,
            "{counted} pods counted ({} live), {wanted} wanted by the ReplicaSets, during the \
             rollout to {image}: {pods:?}",
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
    // Never a new pod while an old one has not ended, counting the ones still terminating: the
    // deployment controller's `oldPodsRunning` leaves out old pods in a terminal phase, which
    // may still be in the store (regression: the test counted those too, and failed when an
    // old pod that had Succeeded was not yet removed as the new ones came).
    let start = Instant::now();
    loop {
        let (pods, _) = root.store().list::<Pod>(Some("default")).unwrap();
        let image = |p: &Pod| p.spec.clone().unwrap().containers[0].image.clone().unwrap();
        let ended = |p: &Pod| {
            matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        };
        let images: Vec<String> = pods.iter().map(image).collect();
        let old = images.iter().filter(|i| *i == "busybox").count();
        let old_not_ended = pods
            .iter()
            .filter(|p| image(p) == "busybox" && !ended(p))
            .count();
        let new = images.len() - old;
        assert!(
            new == 0 || old_not_ended == 0,
            "a new pod while an old one has not ended: {images:?}"
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

/// A two-replica Deployment `name` whose pods run `sleep`; `ready` says whether its readiness
/// probe passes.
fn small(name: &str, ready: bool, extra: &str) -> String {
    let probe = if ready { "true" } else { "false" };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  replicas: 2\n{extra}  \
         strategy: {{rollingUpdate: {{maxSurge: 1, maxUnavailable: 0}}}}\n  \
         selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      \
         terminationGracePeriodSeconds: 1\n      containers:\n      - name: app\n        image: busybox\n        \
         command: [sleep, \"1000\"]\n        readinessProbe: {{exec: {{command: [\"{probe}\"]}}, periodSeconds: 1}}\n"
    )
}

fn deployment(root: &Root, name: &str) -> Deployment {
    root.store().get("default", name).unwrap()
}

/// The ReplicaSets the Deployment `uid` controls, as (spec.replicas, desired-replicas,
/// max-replicas), sorted.
fn sizes(root: &Root, uid: &str) -> Vec<(i32, String, String)> {
    let mut sets: Vec<(i32, String, String)> = replicasets(root)
        .into_iter()
        .filter(|rs| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid)
        })
        .map(|rs| {
            let a = rs.metadata.annotations.clone().unwrap_or_default();
            (
                rs.spec.unwrap().replicas.unwrap_or(0),
                a.get("deployment.kubernetes.io/desired-replicas")
                    .cloned()
                    .unwrap_or_default(),
                a.get("deployment.kubernetes.io/max-replicas")
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect();
    sets.sort();
    sets
}

#[test]
fn scaled_in_the_middle_of_a_rollout_the_replicasets_grow_in_proportion() {
    let root = Root::new("proportional");
    assert_eq!(root.apply(&small("web", true, "")).code, Some(0));
    root.ok(&["rollout", "status", "deploy/web", "--timeout=120s"]);
    let uid = deployment(&root, "web").metadata.uid.unwrap();
    // A new template whose pods never become ready: with maxUnavailable 0 the rollout stops
    // at 2 old and 1 new pod (2 + maxSurge 1).
    let out = root.apply(&small("web", false, ""));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        wait_until(LIMIT, || sizes(&root, &uid)
            == [(1, "2".into(), "3".into()), (2, "2".into(), "3".into())]),
        "{:?} {}",
        sizes(&root, &uid),
        root.ok(&["get", "deploy,rs", "-o", "yaml"]),
    );
    // Scaled to 4 (5 allowed, 2 more): 2·5/3 → 3 for the old, 1·5/3 → 2 for the new, as
    // kube-controller-manager's proportional scaling; no rollout step in between.
    assert_eq!(
        root.ok(&["scale", "deploy/web", "--replicas=4"]),
        "deployment.apps/web scaled\n"
    );
    assert!(
        wait_until(LIMIT, || sizes(&root, &uid)
            == [(2, "4".into(), "5".into()), (3, "4".into(), "5".into())]),
        "{:?}",
        sizes(&root, &uid)
    );
    root.ok(&["delete", "deployment", "web"]);
    assert!(wait_until(LIMIT, || replicasets(&root).is_empty()
        && root.store().list::<Pod>(None).unwrap().0.is_empty()));
}

#[test]
fn a_paused_deployment_rolls_out_nothing_until_resumed() {
    let root = Root::new("paused");
    assert_eq!(root.apply(&small("web", true, "")).code, Some(0));
    root.ok(&["rollout", "status", "deploy/web", "--timeout=120s"]);
    assert_eq!(
        root.ok(&["rollout", "pause", "deployment/web"]),
        "deployment.apps/web paused\n"
    );
    let out = root.run(&["rollout", "pause", "deploy/web"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            Some(1),
            "podlab: deployments.apps \"web\" is already paused\n"
        )
    );
    // A new template: observed, said to be paused, and no new ReplicaSet.
    let env = r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","env":[{"name":"X","value":"1"}]}]}}}}"#;
    root.ok(&["patch", "deploy", "web", "-p", env]);
    assert!(wait_until(LIMIT, || {
        let d = deployment(&root, "web");
        let status = d.status.clone().unwrap_or_default();
        status.observed_generation == d.metadata.generation
            && status.conditions.iter().flatten().any(|c| {
                c.type_ == "Progressing"
                    && c.status == "Unknown"
                    && c.reason.as_deref() == Some("DeploymentPaused")
            })
    }));
    assert_eq!(replicasets(&root).len(), 1);
    // rollout status says what it waits for, as kubectl's does; undo and restart refuse.
    assert_eq!(
        root.ok(&["rollout", "status", "deploy/web", "--watch=false"]),
        "Waiting for deployment \"web\" rollout to finish: 0 out of 2 new replicas have been updated...\n"
    );
    for (args, error) in [
        (
            &["rollout", "undo", "deploy/web"][..],
            "you cannot rollback a paused deployment; resume it first with 'podlab rollout resume' and try again",
        ),
        (
            &["rollout", "restart", "deploy/web"][..],
            "deployments.apps \"web\" can't restart paused deployment (run rollout resume first)",
        ),
    ] {
        let out = root.run(args);
        assert_eq!(
            (out.code, out.stderr),
            (Some(1), format!("podlab: {error}\n")),
            "{args:?}"
        );
    }
    // Resumed: the rollout happens.
    assert_eq!(
        root.ok(&["rollout", "resume", "deploy/web"]),
        "deployment.apps/web resumed\n"
    );
    let out = root.run(&["rollout", "resume", "deploy/web"]);
    assert_eq!(
        out.stderr,
        "podlab: deployments.apps \"web\" is not paused\n"
    );
    let out = root.run(&["rollout", "status", "deploy/web", "--timeout=120s"]);
    assert!(
        out.stdout
            .ends_with("deployment \"web\" successfully rolled out\n"),
        "{out:?}"
    );
    assert_eq!(replicasets(&root).len(), 2);
    root.ok(&["delete", "deployment", "web"]);
    assert!(wait_until(LIMIT, || replicasets(&root).is_empty()
        && root.store().list::<Pod>(None).unwrap().0.is_empty()));
}

#[test]
fn an_orphan_replicaset_is_adopted_by_selector_and_released_when_it_no_longer_matches() {
    let root = Root::new("adopt");
    // An orphan ReplicaSet whose template is the Deployment's.
    let orphan = "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: orphan, labels: {app: web}}\nspec:\n  \
        replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      \
        terminationGracePeriodSeconds: 1\n      containers:\n      - name: app\n        image: busybox\n        \
        command: [sleep, \"1000\"]\n        readinessProbe: {exec: {command: [\"true\"]}, periodSeconds: 1}\n";
    assert_eq!(root.apply(orphan).code, Some(0));
    assert_eq!(root.apply(&small("web", true, "")).code, Some(0));
    let uid = deployment(&root, "web").metadata.uid.unwrap();
    let controller = |root: &Root| -> Option<String> {
        let rs: ReplicaSet = root.store().get("default", "orphan").ok()?;
        rs.metadata
            .owner_references?
            .into_iter()
            .find(|o| o.controller == Some(true))
            .map(|o| format!("{}/{}/{}", o.kind, o.name, o.uid))
    };
    // Adopted, and it is the new ReplicaSet: no other is made.
    assert!(
        wait_until(LIMIT, || controller(&root)
            == Some(format!("Deployment/web/{uid}"))),
        "{:?}",
        controller(&root)
    );
    root.ok(&["rollout", "status", "deploy/web", "--timeout=120s"]);
    assert_eq!(replicasets(&root).len(), 1);
    // Its labels changed so that the selector no longer matches: released.
    root.ok(&["label", "rs", "orphan", "app=other", "--overwrite"]);
    assert!(
        wait_until(LIMIT, || controller(&root).is_none()),
        "{:?}",
        controller(&root)
    );
    root.ok(&["delete", "deployment", "web"]);
    root.ok(&["delete", "rs", "orphan"]);
    assert!(wait_until(LIMIT, || replicasets(&root).is_empty()
        && root.store().list::<Pod>(None).unwrap().0.is_empty()));
}

#[test]
fn exec_and_port_forward_take_a_workload_as_kubectl_does() {
    let root = Root::new("typename");
    assert_eq!(root.apply(&small("web", true, "")).code, Some(0));
    root.ok(&["rollout", "status", "deploy/web", "--timeout=120s"]);
    let (pods, _) = root.store().list::<Pod>(Some("default")).unwrap();
    let names: Vec<String> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let rs = replicasets(&root)[0].metadata.name.clone().unwrap();
    // The hostname in a pod is its name: the pod chosen is one of the workload's.
    for target in [
        "deploy/web",
        "deployment/web",
        &format!("rs/{rs}"),
        &format!("replicaset/{rs}"),
    ] {
        let out = root.ok(&["exec", target, "--", "hostname"]);
        assert!(names.contains(&out.trim().to_string()), "{target}: {out}");
    }
    let out = root.ok(&["exec", &format!("pod/{}", names[0]), "--", "hostname"]);
    assert_eq!(out.trim(), names[0]);
    // kubectl's errors.
    root.apply("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {k: v}\n");
    let zero = "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: none}\nspec:\n  replicas: 0\n  \
        selector: {matchLabels: {app: none}}\n  template:\n    metadata: {labels: {app: none}}\n    spec:\n      \
        containers: [{name: app, image: busybox}]\n";
    assert_eq!(root.apply(zero).code, Some(0));
    for (args, error) in [
        (
            &["exec", "deploy/nosuch", "--", "true"][..],
            "Error from server (NotFound): deployments.apps \"nosuch\" not found",
        ),
        (
            &["exec", "pod/nosuch", "--", "true"][..],
            "Error from server (NotFound): pods \"nosuch\" not found",
        ),
        (
            &["exec", "cm/cm", "--", "true"][..],
            "cannot attach to *v1.ConfigMap: selector for *v1.ConfigMap not implemented",
        ),
        (
            &[
                "port-forward",
                "rs/none",
                "8080",
                "--pod-running-timeout=1s",
            ][..],
            "timed out waiting for the condition",
        ),
        (
            &["attach", "rs/none", "--pod-running-timeout=1s"][..],
            "timed out waiting for the condition",
        ),
    ] {
        let out = root.run(args);
        assert_eq!(
            (out.code, out.stderr),
            (Some(1), format!("podlab: {error}\n")),
            "{args:?}"
        );
    }
    let out = root.run(&["exec", "foo/x", "--", "true"]);
    assert!(
        out.stderr
            .starts_with("podlab: the server doesn't have a resource type \"foo\""),
        "{out:?}"
    );
    root.ok(&["delete", "deployment", "web"]);
    root.ok(&["delete", "rs", "none"]);
    assert!(wait_until(LIMIT, || replicasets(&root).is_empty()
        && root.store().list::<Pod>(None).unwrap().0.is_empty()));
}
