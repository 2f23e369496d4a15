//! One kubelet sync pass of the pure rules (sandbox check, computePodActions, statuses, phase,
//! conditions) for a 3-container pod with nothing to do, next to the cost of building its
//! inputs (a clone of the views) measured in the same run.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use podlab_kubelet::model::{
    ContainerRecord, NetnsMode, RuntimeState, SandboxRecord, SandboxState,
};
use podlab_kubelet::{sync_pass, PassContext, PodSpecView, RestartPolicy, RuntimeView};

fn steady_pod() -> (PodSpecView, RuntimeView) {
    let pod = PodSpecView::new(RestartPolicy::Always, &["web", "client", "sidecar"]);
    let sandbox = SandboxRecord {
        id: "s1".into(),
        created: 1,
        state: SandboxState::Ready,
        netns: NetnsMode::Pod,
        ip: Some("10.88.0.2".into()),
        attempt: 0,
    };
    let containers = pod
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| ContainerRecord {
            id: format!("c{i}"),
            name: c.name.clone(),
            state: RuntimeState::Running,
            created: 2 + i as i64,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            restart_count: 0,
            sandbox_id: "s1".into(),
            hash: c.hash,
            started_at: Some(3 + i as i64),
            finished_at: None,
        })
        .collect();
    (
        pod,
        RuntimeView {
            sandboxes: vec![sandbox],
            containers,
        },
    )
}

fn sync(c: &mut Criterion) {
    let (pod, runtime) = steady_pod();
    let ctx = PassContext::default();
    let result = sync_pass(&pod, &runtime, &ctx);
    assert!(
        !result.actions.kill_pod && result.actions.containers_to_start.is_empty(),
        "the pod must have nothing to do"
    );
    let mut group = c.benchmark_group("kubelet");
    group.bench_function("inputs-clone (baseline)", |b| {
        b.iter(|| black_box((pod.clone(), runtime.clone())))
    });
    group.bench_function("sync-pass-3-containers-idle", |b| {
        b.iter(|| sync_pass(black_box(&pod), black_box(&runtime), black_box(&ctx)))
    });
    group.finish();
}

criterion_group!(benches, sync);
criterion_main!(benches);
