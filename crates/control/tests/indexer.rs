//! The indexer's invariant, checked after every operation of long random sequences: an object
//! is under exactly the values its index functions return, and nothing else is in any index.
//! The informer on top: list + watch into the cache, handlers, indexes added after the start.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use podlab_control::indexes::{
    controller_index_key, orphan_index_key, pod_indexers, NAMESPACE_INDEX,
    POD_CONTROLLER_UID_INDEX, POD_NODE_NAME_INDEX,
};
use podlab_control::{
    index_func, object_key, HandlerFuncs, IndexError, IndexFunc, Indexer, Indexers, Informer, Store,
};

const LABEL_INDEX: &str = "labels";

/// A multi-valued index: one value per `key=value` label (none for an unlabelled pod).
fn label_index() -> IndexFunc<Pod> {
    index_func(|pod: &Pod| {
        pod.metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    })
}

fn owner(uid: &str, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: format!("rs-{uid}"),
        uid: uid.into(),
        controller: Some(controller),
        block_owner_deletion: Some(true),
    }
}

fn random_pod(rng: &mut fastrand::Rng) -> Pod {
    let namespace = ["ns-a", "ns-b"][rng.usize(..2)];
    let node = [None, Some("n1"), Some("n2"), Some("n3")][rng.usize(..4)];
    let mut owners = Vec::new();
    if let Some(uid) = [None, Some("uid-1"), Some("uid-2"), Some("uid-3")][rng.usize(..4)] {
        owners.push(owner(uid, true));
    }
    if rng.bool() {
        owners.push(owner("uid-x", false)); // an owner that is not the controller
    }
    let mut labels = BTreeMap::new();
    for key in ["app", "tier"] {
        if rng.bool() {
            labels.insert(key.to_string(), ["a", "b", "c"][rng.usize(..3)].to_string());
        }
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("p{}", rng.usize(..30))),
            namespace: Some(namespace.into()),
            labels: (!labels.is_empty()).then_some(labels),
            owner_references: (!owners.is_empty()).then_some(owners),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(String::from),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Recomputes every index of `model` from scratch and compares it with the indexer's.
fn check_invariant(
    indexer: &Indexer<Pod>,
    functions: &Indexers<Pod>,
    model: &HashMap<String, Pod>,
    step: usize,
) {
    assert_eq!(indexer.len(), model.len(), "step {step}: size");
    assert_eq!(
        indexer.list_keys(),
        model
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    for (name, function) in functions {
        let mut expected: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (key, pod) in model {
            for value in function(pod) {
                expected.entry(value).or_default().insert(key.clone());
            }
        }
        assert_eq!(
            indexer.list_index_func_values(name),
            expected.keys().cloned().collect::<Vec<_>>(),
            "step {step}: values of index {name}"
        );
        for (value, keys) in &expected {
            let got_keys: BTreeSet<String> = indexer
                .index_keys(name, value)
                .unwrap()
                .into_iter()
                .collect();
            assert_eq!(&got_keys, keys, "step {step}: {name}={value}");
            let got_objects: Vec<Pod> = indexer
                .by_index(name, value)
                .unwrap()
                .iter()
                .map(|p| (**p).clone())
                .collect();
            let want_objects: Vec<Pod> = keys.iter().map(|k| model[k].clone()).collect();
            assert_eq!(
                got_objects, want_objects,
                "step {step}: objects {name}={value}"
            );
        }
        assert!(indexer.by_index(name, "no-such-value").unwrap().is_empty());
    }
}

#[test]
fn indexes_match_a_brute_force_recomputation_after_every_operation() {
    for seed in 1..=6u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let indexer = Indexer::with_indexers(pod_indexers());
        let mut functions = pod_indexers();
        let mut model: HashMap<String, Pod> = HashMap::new();
        for step in 0..1500 {
            if step == 400 {
                // Added while the cache is full: the existing objects are indexed at once.
                indexer
                    .add_indexers(Indexers::from([(LABEL_INDEX.to_string(), label_index())]))
                    .unwrap();
                functions.insert(LABEL_INDEX.to_string(), label_index());
            }
            match rng.u8(..10) {
                0..=5 => {
                    let pod = random_pod(&mut rng);
                    model.insert(object_key(&pod.metadata), pod.clone());
                    if rng.bool() {
                        indexer.add(pod);
                    } else {
                        indexer.update(pod);
                    }
                }
                6..=8 => {
                    let pod = random_pod(&mut rng); // a random key, present or not
                    let key = object_key(&pod.metadata);
                    let removed = indexer.delete(&pod).map(|p| (*p).clone());
                    assert_eq!(removed, model.remove(&key), "seed {seed} step {step}");
                }
                _ => {
                    let fresh: Vec<Pod> =
                        (0..rng.usize(..8)).map(|_| random_pod(&mut rng)).collect();
                    model = fresh
                        .iter()
                        .map(|p| (object_key(&p.metadata), p.clone()))
                        .collect();
                    let unique: HashMap<String, Pod> = model.clone();
                    indexer.replace(unique.into_values().collect());
                }
            }
            check_invariant(&indexer, &functions, &model, step);
        }
    }
}

#[test]
fn index_registration_and_lookup_errors_are_client_gos() {
    let indexer: Indexer<Pod> = Indexer::with_indexers(pod_indexers());
    let again = Indexers::from([
        (NAMESPACE_INDEX.to_string(), label_index()),
        (LABEL_INDEX.to_string(), label_index()),
    ]);
    let e = indexer.add_indexers(again).unwrap_err();
    assert_eq!(e, IndexError::Conflict(vec![NAMESPACE_INDEX.to_string()]));
    assert!(
        !indexer.has_index(LABEL_INDEX),
        "a conflicting call adds nothing"
    );
    let e = indexer.by_index("nope", "x").unwrap_err();
    assert_eq!(e.to_string(), "Index with name nope does not exist");
    assert!(indexer.list_index_func_values("nope").is_empty());
    podlab_control::indexes::add_pod_controller_uid_indexer(&indexer).unwrap();
    assert_eq!(
        indexer.index_names(),
        [
            NAMESPACE_INDEX,
            POD_CONTROLLER_UID_INDEX,
            POD_NODE_NAME_INDEX
        ]
    );
}

#[test]
fn the_controller_index_keys_owned_pods_by_uid_and_orphans_by_namespace() {
    let indexer: Indexer<Pod> = Indexer::with_indexers(pod_indexers());
    let mut rng = fastrand::Rng::with_seed(7);
    let mut owned = random_pod(&mut rng);
    owned.metadata.namespace = Some("ns-a".into());
    owned.metadata.owner_references = Some(vec![owner("uid-9", true), owner("uid-x", false)]);
    let mut orphan = random_pod(&mut rng);
    orphan.metadata.name = Some("orphan".into());
    orphan.metadata.namespace = Some("ns-a".into());
    orphan.metadata.owner_references = Some(vec![owner("uid-x", false)]);
    indexer.add(owned.clone());
    indexer.add(orphan);
    assert_eq!(
        indexer.list_index_func_values(POD_CONTROLLER_UID_INDEX),
        ["_ORPHAN_POD/ns-a", "ns-a/uid-9"]
    );
    assert_eq!(
        indexer
            .index_keys(POD_CONTROLLER_UID_INDEX, &orphan_index_key("ns-a"))
            .unwrap(),
        ["ns-a/orphan"]
    );
    let by_uid = indexer
        .by_index(
            POD_CONTROLLER_UID_INDEX,
            &controller_index_key("ns-a", "uid-9"),
        )
        .unwrap();
    assert_eq!(*by_uid[0], owned);
}

fn pod(name: &str, node: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(String::from),
            containers: vec![Default::default()],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn an_informer_lists_then_watches_into_its_cache_and_calls_handlers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.create(pod("listed", Some("n1"))).unwrap();

    let mut informer: Informer<Pod> = Informer::with_indexers(store.clone(), pod_indexers());
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (a, u, d) = (log.clone(), log.clone(), log.clone());
    informer.add_event_handler(
        HandlerFuncs::new()
            .on_add(move |p: &Pod| a.lock().unwrap().push(format!("add {}", name(p))))
            .on_update(move |old: &Pod, new: &Pod| {
                u.lock()
                    .unwrap()
                    .push(format!("update {} {}", node(old), node(new)))
            })
            .on_delete(move |p: &Pod| d.lock().unwrap().push(format!("delete {}", name(p)))),
    );
    informer.sync().unwrap();
    let indexer = informer.indexer();
    assert_eq!(indexer.len(), 1);

    let created = store.create(pod("watched", Some("n1"))).unwrap();
    let mut moved = created.clone();
    moved.spec.as_mut().unwrap().node_name = Some("n2".into());
    let moved = store.update(moved).unwrap();
    store.delete::<Pod>("default", "listed").unwrap();
    let last = store.resource_version().unwrap();
    assert!(informer.wait_for(last, Duration::from_secs(10)).unwrap());

    assert_eq!(
        *log.lock().unwrap(),
        ["add listed", "add watched", "update n1 n2", "delete listed"]
    );
    assert_eq!(indexer.len(), 1);
    assert!(indexer
        .by_index(POD_NODE_NAME_INDEX, "n1")
        .unwrap()
        .is_empty());
    assert_eq!(
        *indexer.by_index(POD_NODE_NAME_INDEX, "n2").unwrap()[0],
        moved
    );

    // An index added to a running informer covers what is cached already.
    informer
        .add_indexers(Indexers::from([(LABEL_INDEX.to_string(), label_index())]))
        .unwrap();
    let mut labelled = moved;
    labelled.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
    store.update(labelled).unwrap();
    informer
        .wait_for(store.resource_version().unwrap(), Duration::from_secs(10))
        .unwrap();
    assert_eq!(
        indexer.index_keys(LABEL_INDEX, "app=web").unwrap(),
        ["default/watched"]
    );

    // A handler added late hears about every cached object first.
    let late = Arc::new(Mutex::new(Vec::new()));
    let l = late.clone();
    informer.add_event_handler(
        HandlerFuncs::new().on_add(move |p: &Pod| l.lock().unwrap().push(name(p))),
    );
    assert_eq!(*late.lock().unwrap(), ["watched"]);
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn node(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}
