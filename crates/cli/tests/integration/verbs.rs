//! Integration tests: kubectl's generic verbs on stored objects (`label`, `annotate`, `scale`),
//! their messages and exit statuses, and the controllers acting on what they changed.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;

use crate::pods::Root;
use crate::support::wait_until;

const LIMIT: Duration = Duration::from_secs(60);

const WEB: &str = "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: web}\nspec:\n  replicas: 0\n  \
    selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      \
    terminationGracePeriodSeconds: 1\n      containers: [{name: app, image: busybox, command: [sleep, \"1000\"]}]\n";

fn stored(root: &Root) -> ReplicaSet {
    root.store().get::<ReplicaSet>("default", "web").unwrap()
}

fn label(rs: &ReplicaSet, key: &str) -> Option<String> {
    rs.metadata.labels.as_ref()?.get(key).cloned()
}

#[test]
fn label_annotate_and_scale_speak_kubectl_and_the_controller_follows() {
    let root = Root::new("verbs");
    let out = root.apply(WEB);
    assert_eq!(out.code, Some(0), "{out:?}");

    assert_eq!(
        root.ok(&["label", "rs", "web", "env=prod"]),
        "replicaset.apps/web labeled\n"
    );
    let out = root.run(&["label", "rs", "web", "env=dev"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(
        out.stderr,
        "podlab: 'env' already has a value (prod), and --overwrite is false\n"
    );
    assert_eq!(label(&stored(&root), "env").as_deref(), Some("prod"));
    assert_eq!(
        root.ok(&["label", "replicaset/web", "env=dev", "--overwrite"]),
        "replicaset.apps/web labeled\n"
    );
    assert_eq!(label(&stored(&root), "env").as_deref(), Some("dev"));
    assert_eq!(
        root.ok(&["label", "rs", "web", "env-", "gone-"]),
        "label \"gone\" not found.\nreplicaset.apps/web unlabeled\n"
    );
    assert_eq!(label(&stored(&root), "env"), None);

    assert_eq!(
        root.ok(&["annotate", "rs", "web", "note=a"]),
        "replicaset.apps/web annotated\n"
    );
    let out = root.run(&["annotate", "rs", "web", "note=b"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("--overwrite is false but found the following declared annotation(s): 'note' already has a value (a)"),
        "{out:?}"
    );
    let annotations = stored(&root).metadata.annotations.unwrap_or_default();
    assert_eq!(annotations.get("note").map(String::as_str), Some("a"));

    // A name that is not there is reported, the others are still labeled, and the exit is 1.
    let out = root.run(&["label", "rs", "nosuch", "web", "tier=front"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert_eq!(out.stdout, "replicaset.apps/web labeled\n");
    assert!(
        out.stderr
            .contains(r#"Error from server (NotFound): replicasets "nosuch" not found"#),
        "{out:?}"
    );

    // --current-replicas is a precondition: a wrong one changes nothing.
    let out = root.run(&["scale", "rs", "web", "--replicas=1", "--current-replicas=3"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (Some(1), "podlab: Expected replicas to be 3, was 0\n")
    );
    assert_eq!(stored(&root).spec.unwrap().replicas, Some(0));
    assert_eq!(
        root.ok(&["scale", "rs", "web", "--replicas=1", "--current-replicas=0"]),
        "replicaset.apps/web scaled\n"
    );
    let owned = || {
        let (pods, _) = root.store().list::<Pod>(Some("default")).unwrap();
        pods.into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| podlab_control::controller_of(&p.metadata).is_some_and(|o| o.name == "web"))
            .count()
    };
    assert!(
        wait_until(LIMIT, || owned() == 1),
        "the controller made no pod"
    );
    // A pod's labels changed with `label` release it from its ReplicaSet, which makes another.
    let pod = root
        .store()
        .list::<Pod>(Some("default"))
        .unwrap()
        .0
        .remove(0);
    let name = pod.metadata.name.unwrap();
    assert_eq!(
        root.ok(&["label", "pods", &name, "app=debug", "--overwrite"]),
        format!("pod/{name} labeled\n")
    );
    assert!(
        wait_until(LIMIT, || {
            let released = root
                .pod(&name)
                .is_some_and(|p| podlab_control::controller_of(&p.metadata).is_none());
            released && owned() == 1
        }),
        "the relabeled pod was not released and replaced"
    );

    let out = root.run(&["scale", "pod", &name, "--replicas=2"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    let out = root.run(&["label", "pods", &name]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (Some(1), "podlab: at least one label update is required\n")
    );
    root.ok(&["scale", "rs", "web", "--replicas=0"]);
    root.ok(&["delete", "pod", &name]);
    assert!(
        wait_until(LIMIT, || root
            .store()
            .list::<Pod>(None)
            .unwrap()
            .0
            .is_empty()),
        "pods left"
    );
}
