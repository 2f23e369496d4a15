//! The store against its contract: CRUD with the API server's rules and words, optimistic
//! concurrency, generateName, watch, and several processes sharing one store folder.

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use podlab_control::{EventType, PodDeletion, Preconditions, Store};

const CHILD_ENV: &str = "PODLAB_CONTROL_TEST_CHILD";

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("busybox".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("store")).unwrap();
    (dir, store)
}

/// A second process: this test binary again, running only [`child_process`].
struct ChildProcess(Child);

impl ChildProcess {
    fn spawn(role: &str, root: &std::path::Path) -> Self {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_process", "--ignored", "--test-threads=1"])
            .env(CHILD_ENV, format!("{role}|{}", root.display()))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        ChildProcess(child)
    }

    fn wait_success(mut self) {
        let status = self.0.wait().unwrap();
        assert!(status.success(), "child failed: {status}");
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// What a second process does, chosen by the parent test through the environment.
#[test]
#[ignore = "run by the cross-process tests as their second process"]
fn child_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (role, root) = spec.split_once('|').unwrap();
    let store = Store::open(root).unwrap();
    let words: Vec<&str> = role.split(':').collect();
    match words.as_slice() {
        ["create", prefix, count] => {
            for i in 0..count.parse::<usize>().unwrap() {
                store.create(pod(&format!("{prefix}-{i}"))).unwrap();
            }
        }
        ["increment", count] => {
            for _ in 0..count.parse::<usize>().unwrap() {
                increment_counter(&store);
            }
        }
        other => panic!("unknown child role {other:?}"),
    }
}

/// Read, add one to the `count` annotation, write with the read resourceVersion; on Conflict
/// read again. Lost updates would show as a final count below the number of increments.
fn increment_counter(store: &Store) {
    loop {
        let mut counter: Pod = store.get("default", "counter").unwrap();
        let annotations = counter
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        let count: u64 = annotations.get("count").map_or(0, |c| c.parse().unwrap());
        annotations.insert("count".into(), (count + 1).to_string());
        match store.update(counter) {
            Ok(_) => return,
            Err(e) if e.is_conflict() => continue,
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn create_assigns_what_the_api_server_assigns() {
    let (_dir, store) = store();
    let created = store.create(pod("web")).unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert_eq!(meta.resource_version.as_deref(), Some("1"));
    assert_eq!(meta.generation, Some(1));
    assert_eq!(meta.uid.as_ref().unwrap().len(), 36);
    assert!(meta.creation_timestamp.is_some());
    let status = created.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
    assert_eq!(store.get::<Pod>("default", "web").unwrap(), created);
    let file = store.root().join("pods/default/web.json");
    let on_disk: Pod = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    assert_eq!(on_disk, created);
    assert_eq!(store.resource_version().unwrap(), 1);
}

#[test]
fn errors_use_kubectls_words() {
    let (_dir, store) = store();
    store.create(pod("web")).unwrap();
    let e = store.create(pod("web")).unwrap_err();
    assert!(e.is_already_exists());
    assert_eq!(e.to_string(), r#"pods "web" already exists"#);
    let e = store.get::<Pod>("default", "nope").unwrap_err();
    assert_eq!(e.to_string(), r#"pods "nope" not found"#);
    let e = store.delete::<ReplicaSet>("default", "nope").unwrap_err();
    assert_eq!(e.to_string(), r#"replicasets "nope" not found"#);
    let e = store.create(pod("Bad_Name")).unwrap_err();
    assert!(
        e.to_string().contains("metadata.name: Invalid value"),
        "{e}"
    );
    let mut unnamed = pod("x");
    unnamed.metadata.name = None;
    let e = store.create(unnamed).unwrap_err();
    assert!(
        e.to_string().contains("name or generateName is required"),
        "{e}"
    );
    let mut with_rv = pod("x");
    with_rv.metadata.resource_version = Some("7".into());
    let e = store.create(with_rv).unwrap_err();
    assert!(
        e.to_string().contains("resourceVersion should not be set"),
        "{e}"
    );
    assert_eq!(
        store.resource_version().unwrap(),
        1,
        "failed calls commit nothing"
    );
}

#[test]
fn a_stale_resource_version_is_a_conflict() {
    let (_dir, store) = store();
    let first = store.create(pod("web")).unwrap();
    let mut a = first.clone();
    a.metadata.labels = Some(BTreeMap::from([("app".into(), "a".into())]));
    let a = store.update(a).unwrap();
    assert_eq!(a.metadata.resource_version.as_deref(), Some("2"));

    let mut stale = first.clone();
    stale.metadata.labels = Some(BTreeMap::from([("app".into(), "b".into())]));
    let e = store.update(stale).unwrap_err();
    assert!(e.is_conflict());
    assert_eq!(
        e.to_string(),
        r#"Operation cannot be fulfilled on pods "web": the object has been modified; please apply your changes to the latest version and try again"#
    );
    assert_eq!(store.get::<Pod>("default", "web").unwrap(), a);

    let mut unconditional = first;
    unconditional.metadata.resource_version = None;
    let b = store.update(unconditional).unwrap();
    assert_eq!(b.metadata.resource_version.as_deref(), Some("3"));
}

#[test]
fn generation_follows_the_spec_and_status_is_a_subresource() {
    let (_dir, store) = store();
    let created = store.create(pod("web")).unwrap();

    let mut relabeled = created.clone();
    relabeled.metadata.labels = None;
    let relabeled = store.update(relabeled).unwrap();
    assert_eq!(
        relabeled.metadata.generation,
        Some(1),
        "metadata is not spec"
    );

    let mut respec = relabeled.clone();
    respec.spec.as_mut().unwrap().containers[0].image = Some("busybox:2".into());
    respec.status = Some(PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    });
    let respec = store.update(respec).unwrap();
    assert_eq!(respec.metadata.generation, Some(2));
    assert_eq!(
        respec.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending"),
        "a plain update keeps the stored status"
    );
    assert_eq!(respec.metadata.uid, created.metadata.uid);
    assert_eq!(
        respec.metadata.creation_timestamp,
        created.metadata.creation_timestamp
    );

    let mut running = respec.clone();
    running.status.as_mut().unwrap().phase = Some("Running".into());
    running.spec.as_mut().unwrap().containers[0].image = Some("ignored".into());
    let running = store.update_status(running).unwrap();
    assert_eq!(
        running.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert_eq!(
        running.spec.as_ref().unwrap().containers[0]
            .image
            .as_deref(),
        Some("busybox:2"),
        "a status update keeps the stored spec"
    );
    assert_eq!(running.metadata.generation, Some(2));

    let rv = store.resource_version().unwrap();
    let same = store.update(running.clone()).unwrap();
    assert_eq!(same, running);
    assert_eq!(
        store.resource_version().unwrap(),
        rv,
        "a no-op update commits nothing"
    );
}

#[test]
fn generate_name_makes_unique_names_like_the_api_server() {
    let (_dir, store) = store();
    let mut names = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let mut p = pod("x");
        p.metadata.name = None;
        p.metadata.generate_name = Some("web-".into());
        let created = store.create(p).unwrap();
        let name = created.metadata.name.unwrap();
        assert_eq!(name.len(), "web-".len() + 5, "{name}");
        assert!(name.starts_with("web-"));
        names.insert(name);
    }
    assert_eq!(names.len(), 20);
    let (pods, _) = store.list::<Pod>(Some("default")).unwrap();
    assert_eq!(pods.len(), 20);
}

#[test]
fn delete_returns_the_object_and_list_reads_a_consistent_version() {
    let (_dir, store) = store();
    store.create(pod("b")).unwrap();
    store.create(pod("a")).unwrap();
    let mut other = pod("c");
    other.metadata.namespace = Some("other".into());
    store.create(other).unwrap();

    let (all, rv) = store.list::<Pod>(None).unwrap();
    let names: Vec<_> = all
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(rv, 3);
    let (default, _) = store.list::<Pod>(Some("default")).unwrap();
    assert_eq!(default.len(), 2);
    assert!(store.list::<ReplicaSet>(None).unwrap().0.is_empty());

    let gone: Pod = store.delete("default", "a").unwrap();
    assert_eq!(gone.metadata.name.as_deref(), Some("a"));
    assert!(store.get::<Pod>("default", "a").unwrap_err().is_not_found());
    assert!(!store.root().join("pods/default/a.json").exists());

    let b: Pod = store.get("default", "b").unwrap();
    let wrong_uid = Preconditions {
        uid: Some("not-the-uid".into()),
        ..Default::default()
    };
    let e = store
        .delete_with::<Pod>("default", "b", &wrong_uid)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("Precondition failed: UID in precondition"),
        "{e}"
    );
    let right_uid = Preconditions {
        uid: b.metadata.uid.clone(),
        ..Default::default()
    };
    store
        .delete_with::<Pod>("default", "b", &right_uid)
        .unwrap();
}

#[test]
fn pods_on_a_node_terminate_gracefully_others_go_at_once() {
    let (_dir, store) = store();
    store.create(pod("unscheduled")).unwrap();
    let mut scheduled = pod("scheduled");
    scheduled.spec.as_mut().unwrap().node_name = Some("node-1".into());
    store.create(scheduled).unwrap();

    let none = Preconditions::default();
    let outcome = store
        .delete_pod_gracefully("default", "unscheduled", None, &none)
        .unwrap();
    assert!(matches!(outcome, PodDeletion::Deleted(_)));

    let PodDeletion::Terminating(pod) = store
        .delete_pod_gracefully("default", "scheduled", None, &none)
        .unwrap()
    else {
        panic!("a pod on a node must terminate first");
    };
    assert_eq!(pod.metadata.deletion_grace_period_seconds, Some(30));
    assert!(pod.metadata.deletion_timestamp.is_some());
    assert_eq!(pod.metadata.generation, Some(2));
    let again = store
        .delete_pod_gracefully("default", "scheduled", Some(0), &none)
        .unwrap();
    assert!(
        matches!(again, PodDeletion::Deleted(_)),
        "grace 0 finishes it"
    );
}

#[test]
fn watch_streams_changes_after_a_resource_version_in_order() {
    let (_dir, store) = store();
    store.create(pod("before")).unwrap();
    let from = store.resource_version().unwrap();
    let created = store.create(pod("web")).unwrap();
    let mut changed = created.clone();
    changed.metadata.labels = None;
    store.update(changed).unwrap();
    let mut rs = ReplicaSet::default();
    rs.metadata.name = Some("rs".into());
    store.create(rs).unwrap();
    store.delete::<Pod>("default", "web").unwrap();

    let mut watch = store.watch::<Pod>(from).unwrap();
    let mut seen = Vec::new();
    while let Some(event) = watch.next_timeout(Duration::from_millis(50)).unwrap() {
        seen.push((
            event.event_type,
            event.resource_version,
            event.object.metadata.name.unwrap(),
        ));
    }
    assert_eq!(
        seen,
        [
            (EventType::Added, 2, "web".to_string()),
            (EventType::Modified, 3, "web".to_string()),
            (EventType::Deleted, 5, "web".to_string()),
        ],
        "the ReplicaSet at rv 4 is another kind"
    );
    assert_eq!(watch.resource_version(), 5);
}

#[test]
fn a_watch_in_one_process_sees_the_writes_of_another() {
    let (_dir, store) = store();
    let mut watch = store
        .watch::<Pod>(store.resource_version().unwrap())
        .unwrap();
    let child = ChildProcess::spawn("create:child:5", store.root());
    let mut names = Vec::new();
    let mut last_rv = 0;
    while names.len() < 5 {
        let event = watch
            .next_timeout(Duration::from_secs(30))
            .unwrap()
            .expect("the child's pods arrive");
        assert_eq!(event.event_type, EventType::Added);
        assert!(event.resource_version > last_rv);
        last_rv = event.resource_version;
        names.push(event.object.metadata.name.unwrap());
    }
    child.wait_success();
    assert_eq!(
        names,
        ["child-0", "child-1", "child-2", "child-3", "child-4"]
    );
}

#[test]
fn writers_in_several_processes_are_serialised() {
    let (_dir, store) = store();
    store.create(pod("counter")).unwrap();
    let children = [
        ChildProcess::spawn("increment:40", store.root()),
        ChildProcess::spawn("increment:40", store.root()),
        ChildProcess::spawn("create:other:20", store.root()),
    ];
    for _ in 0..40 {
        increment_counter(&store);
    }
    for child in children {
        child.wait_success();
    }
    let counter: Pod = store.get("default", "counter").unwrap();
    let count = &counter.metadata.annotations.as_ref().unwrap()["count"];
    assert_eq!(count, "120", "no update was lost");
    assert_eq!(store.list::<Pod>(None).unwrap().0.len(), 21);

    // The log numbers every change once, 1..=N without gaps, and the head agrees.
    let log = std::fs::read_to_string(store.root().join("changes.log")).unwrap();
    let rvs: Vec<u64> = log
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["rv"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let expected: Vec<u64> = (1..=rvs.len() as u64).collect();
    assert_eq!(rvs, expected);
    assert_eq!(rvs.len(), 1 + 120 + 20);
    assert_eq!(store.resource_version().unwrap(), rvs.len() as u64);
}

#[test]
fn a_commit_cut_short_by_a_crash_is_redone_or_dropped() {
    let (_dir, store) = store();
    let created = store.create(pod("web")).unwrap();
    // A writer that died after appending its log line (the commit) but before the object file
    // and head.json, followed by one that died half way through its line.
    let mut changed = serde_json::to_value(&created).unwrap();
    changed["metadata"]["resourceVersion"] = "2".into();
    changed["metadata"]["labels"] = serde_json::json!({"app": "redone"});
    let line = serde_json::json!({"rv": 2, "type": "MODIFIED", "kind": "Pod", "object": changed});
    let log = store.root().join("changes.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(format!("{line}\n").as_bytes());
    let whole = bytes.len() as u64;
    bytes.extend_from_slice(br#"{"rv":3,"type":"ADDED","kind":"Pod","obj"#);
    std::fs::write(&log, bytes).unwrap();

    let reopened = Store::open(store.root()).unwrap();
    let web: Pod = reopened.get("default", "web").unwrap();
    assert_eq!(web.metadata.labels.unwrap()["app"], "redone");
    assert_eq!(reopened.resource_version().unwrap(), 2);
    assert_eq!(std::fs::metadata(&log).unwrap().len(), whole);
    let next = reopened.create(pod("next")).unwrap();
    assert_eq!(next.metadata.resource_version.as_deref(), Some("3"));
}

#[test]
fn a_watch_from_now_and_a_list_and_watch_miss_nothing_and_repeat_nothing() {
    let (_dir, store) = store();
    store.create(pod("before")).unwrap();
    let mut now = store.watch_now::<Pod>().unwrap();
    let (listed, mut informer) = store.list_and_watch::<Pod>(None).unwrap();
    assert_eq!(listed.len(), 1);
    store.create(pod("after")).unwrap();
    for watch in [&mut now, &mut informer] {
        let event = watch
            .next_timeout(Duration::from_secs(5))
            .unwrap()
            .expect("the change after the watch began");
        assert_eq!(event.object.metadata.name.as_deref(), Some("after"));
        assert_eq!(event.event_type, EventType::Added);
        assert!(watch.try_next().unwrap().is_none(), "nothing else");
    }
}
