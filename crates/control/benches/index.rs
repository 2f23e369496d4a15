//! `by_index(podControllerUID, key)` against a full scan of the pod cache, at 10,000 and
//! 100,000 pods: what the ReplicaSet controller's lookup of its own pods costs either way.
//!
//! The ReplicaSet looked up always has [`TARGET_PODS`] pods; the rest of the cache is pods of
//! 1,000 other ReplicaSets and orphans, so the answer stays the same size while the cache grows
//! tenfold. Both methods answer "the pods controlled by this UID in this namespace"; the scan is
//! what a controller without the index does: look at every cached pod and filter
//! ([`Indexer::select`], unsorted).

use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use podlab_control::indexes::{controller_index_key, pod_indexers, POD_CONTROLLER_UID_INDEX};
use podlab_control::{controller_of, Indexer};

const REPLICASETS: usize = 1_000;
const TARGET_PODS: usize = 5;
const TARGET: usize = REPLICASETS + 1;

/// Pod `i`: the first [`TARGET_PODS`] belong to the target, the others round-robin to the
/// other ReplicaSets, every 1,001st an orphan.
fn pod(i: usize) -> Pod {
    let owner = if i < TARGET_PODS {
        TARGET
    } else {
        i % (REPLICASETS + 1) // the slot REPLICASETS makes orphans
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{i}")),
            namespace: Some("default".into()),
            uid: Some(format!("pod-uid-{i}")),
            owner_references: (owner != REPLICASETS).then(|| {
                vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: format!("rs-{owner}"),
                    uid: format!("rs-uid-{owner}"),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]
            }),
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
        status: None,
    }
}

fn full_scan(cache: &Indexer<Pod>, namespace: &str, uid: &str) -> Vec<Arc<Pod>> {
    cache.select(|p| {
        p.metadata.namespace.as_deref() == Some(namespace)
            && controller_of(&p.metadata).is_some_and(|o| o.uid == uid)
    })
}

fn controller_lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("pods_of_one_replicaset");
    for size in [10_000usize, 100_000] {
        let cache = Indexer::with_indexers(pod_indexers());
        for i in 0..size {
            cache.add(pod(i));
        }
        let uid = format!("rs-uid-{TARGET}");
        let uid = uid.as_str();
        let key = controller_index_key("default", uid);
        let by_index = cache.by_index(POD_CONTROLLER_UID_INDEX, &key).unwrap();
        assert_eq!(by_index.len(), full_scan(&cache, "default", uid).len());
        assert_eq!(by_index.len(), TARGET_PODS);

        group.bench_with_input(BenchmarkId::new("by_index", size), &size, |b, _| {
            b.iter(|| {
                cache
                    .by_index(POD_CONTROLLER_UID_INDEX, black_box(&key))
                    .unwrap()
            })
        });
        group.bench_with_input(BenchmarkId::new("full_scan", size), &size, |b, _| {
            b.iter(|| full_scan(&cache, "default", black_box(uid)))
        });
    }
    group.finish();
}

criterion_group!(benches, controller_lookup);
criterion_main!(benches);
