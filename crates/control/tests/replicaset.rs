//! The ReplicaSet controller: the pure reconcile on hand-made pods, and the driver against a
//! real store (scale up and down, adoption, release, pods of other controllers, lookups through
//! the index only, the cascade when the ReplicaSet goes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Event, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use podlab_control::manifest::decode_replicaset;
use podlab_control::replicaset::{reconcile, Action, ControllerConfig, ReplicaSetController};
use podlab_control::{controller_of, Store};

const RS: &str = r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: busybox
        command: ["sleep", "3600"]
"#;

const SETTLE: Duration = Duration::from_secs(30);

fn replicaset(replicas: i32) -> ReplicaSet {
    let mut rs = decode_replicaset(RS, "rs.yaml").unwrap();
    rs.spec.as_mut().unwrap().replicas = Some(replicas);
    rs
}

fn labels(app: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([("app".to_string(), app.to_string())]))
}

/// A pod of the RS's shape; `owner` makes it controlled by that UID.
fn pod(name: &str, app: &str, owner: Option<&str>) -> Pod {
    let mut pod = podlab_control::replicaset::pod_from_template(&replicaset(1));
    pod.metadata = ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        labels: labels(app),
        owner_references: owner.map(|uid| {
            vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "someone".into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]
        }),
        ..Default::default()
    };
    pod
}

// ---- the pure reconcile -------------------------------------------------------------------

fn stored_rs(replicas: i32) -> ReplicaSet {
    let mut rs = replicaset(replicas);
    rs.metadata.uid = Some("rs-uid".into());
    rs.metadata.generation = Some(1);
    rs
}

fn aged(mut pod: Pod, hours: i64, now: Timestamp) -> Arc<Pod> {
    pod.metadata.uid = Some(format!("uid-{}", pod.metadata.name.as_deref().unwrap()));
    pod.metadata.creation_timestamp = Some(Time(now - SignedDuration::from_hours(hours)));
    Arc::new(pod)
}

fn summary(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::Release(p) => format!("release {}", p.name),
            Action::Adopt(p) => format!("adopt {}", p.name),
            Action::Create(p) => format!("create {}", p.metadata.generate_name.as_deref().unwrap()),
            Action::Delete(p) => format!("delete {}", p.name),
            Action::UpdateStatus(s) => format!("status {}", s.replicas),
        })
        .collect()
}

#[test]
fn reconcile_creates_what_is_missing_from_the_template() {
    let now = Timestamp::from_second(1_750_000_000).unwrap();
    let actions = reconcile(&stored_rs(3), &[], now);
    assert_eq!(
        summary(&actions),
        ["create web-", "create web-", "create web-", "status 0"]
    );
    let Action::Create(pod) = &actions[0] else {
        unreachable!()
    };
    let owner = controller_of(&pod.metadata).unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("ReplicaSet", "web", "rs-uid")
    );
    assert_eq!(owner.block_owner_deletion, Some(true));
    assert_eq!(pod.metadata.labels, labels("web"));
    assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
}

#[test]
fn reconcile_claims_like_the_controller_ref_manager() {
    let now = Timestamp::from_second(1_750_000_000).unwrap();
    let candidates = vec![
        aged(pod("owned", "web", Some("rs-uid")), 5, now),
        aged(pod("relabelled", "api", Some("rs-uid")), 5, now),
        aged(pod("orphan", "web", None), 5, now),
        aged(pod("stranger", "api", None), 5, now),
        aged(pod("other-owner", "web", Some("other-uid")), 5, now),
    ];
    let actions = reconcile(&stored_rs(3), &candidates, now);
    assert_eq!(
        summary(&actions),
        [
            "release relabelled",
            "adopt orphan",
            "create web-",
            "status 2"
        ],
        "kept 1 + adopted 1 of 3: one to create; the stranger and the other's pod are left alone"
    );

    let mut deleting = stored_rs(3);
    deleting.metadata.deletion_timestamp = Some(Time(now));
    let actions = reconcile(&deleting, &candidates, now);
    assert_eq!(
        summary(&actions),
        ["status 1"],
        "a ReplicaSet being deleted only reports"
    );

    let mut finished = pod("finished", "web", None);
    finished.status = Some(PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    let actions = reconcile(&stored_rs(0), &[aged(finished, 1, now)], now);
    assert_eq!(
        summary(&actions),
        ["status 0"],
        "inactive pods are never adopted"
    );
}

#[test]
fn reconcile_deletes_the_newest_extras_first() {
    let now = Timestamp::from_second(1_750_000_000).unwrap();
    let candidates = vec![
        aged(pod("old", "web", Some("rs-uid")), 100, now),
        aged(pod("newest", "web", Some("rs-uid")), 1, now),
        aged(pod("middle", "web", Some("rs-uid")), 10, now),
        aged(pod("oldest", "web", Some("rs-uid")), 1000, now),
    ];
    let actions = reconcile(&stored_rs(2), &candidates, now);
    assert_eq!(
        summary(&actions),
        ["delete newest", "delete middle", "status 4"]
    );
}

// ---- the driver against a store ------------------------------------------------------------

struct Cluster {
    _dir: tempfile::TempDir,
    store: Store,
    controller: ReplicaSetController,
}

impl Cluster {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("store")).unwrap();
        let controller = ReplicaSetController::new(store.clone(), ControllerConfig::default());
        Cluster {
            _dir: dir,
            store,
            controller,
        }
    }

    fn settle(&mut self) -> Vec<podlab_control::replicaset::SyncReport> {
        let reports = self.controller.run_until_idle(SETTLE).unwrap();
        for report in &reports {
            assert!(report.errors.is_empty(), "{report:?}");
        }
        reports
    }

    fn pods(&self) -> Vec<Pod> {
        self.store.list::<Pod>(Some("default")).unwrap().0
    }

    fn owned_by(&self, rs: &ReplicaSet) -> Vec<Pod> {
        self.pods()
            .into_iter()
            .filter(|p| controller_of(&p.metadata).map(|o| &o.uid) == rs.metadata.uid.as_ref())
            .collect()
    }

    fn rs(&self) -> ReplicaSet {
        self.store.get("default", "web").unwrap()
    }
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect()
}

#[test]
fn scales_up_from_zero_to_three_with_generated_names_and_owner_references() {
    let mut cluster = Cluster::new();
    let rs = cluster.store.create(replicaset(3)).unwrap();
    cluster.settle();

    let pods = cluster.pods();
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let name = pod.metadata.name.as_deref().unwrap();
        assert!(
            name.starts_with("web-") && name.len() == "web-".len() + 5,
            "{name}"
        );
        let owner = controller_of(&pod.metadata).unwrap();
        assert_eq!(owner.uid, rs.metadata.uid.clone().unwrap());
        assert_eq!(owner.api_version, "apps/v1");
        assert_eq!(owner.block_owner_deletion, Some(true));
    }
    let status = cluster.rs().status.unwrap();
    assert_eq!(status.replicas, 3);
    assert_eq!(status.fully_labeled_replicas, Some(3));
    assert_eq!(status.ready_replicas, None, "no pod is ready yet");
    assert_eq!(status.observed_generation, Some(1));

    let (events, _) = cluster.store.list::<Event>(Some("default")).unwrap();
    let created: Vec<_> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("SuccessfulCreate"))
        .collect();
    assert_eq!(created.len(), 3);
    assert!(created[0]
        .message
        .as_deref()
        .unwrap()
        .starts_with("Created pod: web-"));
    assert_eq!(
        created[0].involved_object.kind.as_deref(),
        Some("ReplicaSet")
    );
}

#[test]
fn adopts_a_matching_orphan_instead_of_making_a_pod() {
    let mut cluster = Cluster::new();
    cluster.store.create(pod("orphan", "web", None)).unwrap();
    let rs = cluster.store.create(replicaset(3)).unwrap();
    cluster.settle();

    let pods = cluster.pods();
    assert_eq!(pods.len(), 3, "the orphan counts: only two are made");
    assert_eq!(cluster.owned_by(&rs).len(), 3);
    let orphan: Pod = cluster.store.get("default", "orphan").unwrap();
    let owner = controller_of(&orphan.metadata).expect("adopted");
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ReplicaSet", "web")
    );
}

#[test]
fn leaves_non_matching_orphans_and_other_controllers_pods_alone() {
    let mut cluster = Cluster::new();
    let stranger = cluster.store.create(pod("stranger", "api", None)).unwrap();
    let taken = cluster
        .store
        .create(pod("taken", "web", Some("another-controller")))
        .unwrap();
    let rs = cluster.store.create(replicaset(2)).unwrap();
    cluster.settle();

    assert_eq!(
        cluster.store.get::<Pod>("default", "stranger").unwrap(),
        stranger
    );
    assert_eq!(cluster.store.get::<Pod>("default", "taken").unwrap(), taken);
    assert_eq!(cluster.owned_by(&rs).len(), 2, "two of its own were made");
    assert_eq!(cluster.pods().len(), 4);
}

#[test]
fn releases_a_pod_whose_labels_stop_matching_and_replaces_it() {
    let mut cluster = Cluster::new();
    let rs = cluster.store.create(replicaset(3)).unwrap();
    cluster.settle();

    let mut moved = cluster.owned_by(&rs).remove(0);
    let moved_name = moved.metadata.name.clone().unwrap();
    moved.metadata.labels = labels("debug");
    cluster.store.update(moved).unwrap();
    cluster.settle();

    let released: Pod = cluster.store.get("default", &moved_name).unwrap();
    assert!(released.metadata.owner_references.is_none(), "{released:?}");
    assert_eq!(cluster.owned_by(&rs).len(), 3, "a replacement was made");
    assert_eq!(
        cluster.pods().len(),
        4,
        "the released pod lives on, unowned"
    );
}

#[test]
fn scales_down_by_deleting_the_pods_ranked_first() {
    let mut cluster = Cluster::new();
    cluster.store.create(replicaset(3)).unwrap();
    cluster.settle();

    // One pod becomes Running and Ready: the not-ready ones rank before it for deletion.
    let mut keeper = cluster.pods().remove(1);
    let keeper_name = keeper.metadata.name.clone().unwrap();
    keeper.status = Some(PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some(podlab_control::names::now()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    cluster.store.update_status(keeper).unwrap();
    cluster.settle();
    let status = cluster.rs().status.unwrap();
    assert_eq!(
        (status.ready_replicas, status.available_replicas),
        (Some(1), Some(1))
    );

    let mut rs = cluster.rs();
    rs.spec.as_mut().unwrap().replicas = Some(1);
    let rs = cluster.store.update(rs).unwrap();
    assert_eq!(rs.metadata.generation, Some(2));
    cluster.settle();

    assert_eq!(names(&cluster.pods()), [keeper_name]);
    let status = cluster.rs().status.unwrap();
    assert_eq!(status.replicas, 1);
    assert_eq!(status.observed_generation, Some(2));
    let (events, _) = cluster.store.list::<Event>(Some("default")).unwrap();
    let deleted = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("SuccessfulDelete"))
        .count();
    assert_eq!(deleted, 2);
}

#[test]
fn finds_its_pods_through_the_index_without_scanning_the_cache() {
    let mut cluster = Cluster::new();
    // 300 pods that are not this ReplicaSet's business: another controller's, and orphans in
    // another namespace that would match the selector.
    for i in 0..200 {
        cluster
            .store
            .create(pod(
                &format!("other-{i}"),
                "web",
                Some("another-controller"),
            ))
            .unwrap();
    }
    for i in 0..100 {
        let mut far = pod(&format!("far-{i}"), "web", None);
        far.metadata.namespace = Some("elsewhere".into());
        cluster.store.create(far).unwrap();
    }
    cluster
        .store
        .create(pod("near-orphan", "web", None))
        .unwrap();
    cluster.store.create(replicaset(3)).unwrap();
    let reports = cluster.settle();

    let first = reports.iter().find(|r| r.key == "default/web").unwrap();
    assert_eq!(
        first.pods_examined, 1,
        "the only candidate is the near orphan"
    );
    assert_eq!(first.pods_cached, 301);
    let last = reports
        .iter()
        .rev()
        .find(|r| r.key == "default/web")
        .unwrap();
    assert_eq!(last.pods_examined, 3, "its own three pods, nothing else");
    assert_eq!(last.pods_cached, 303);
    let far: Vec<Pod> = cluster.store.list(Some("elsewhere")).unwrap().0;
    assert!(far.iter().all(|p| p.metadata.owner_references.is_none()));
}

#[test]
fn deleting_the_replicaset_deletes_its_pods() {
    let mut cluster = Cluster::new();
    cluster.store.create(pod("bystander", "api", None)).unwrap();
    cluster.store.create(replicaset(2)).unwrap();
    cluster.settle();
    assert_eq!(cluster.pods().len(), 3);

    cluster
        .store
        .delete::<ReplicaSet>("default", "web")
        .unwrap();
    cluster.settle();
    assert_eq!(names(&cluster.pods()), ["bystander"]);
}
