//! What a pod's cgroups cost: the pod's cgroup with kubelet's values, the pause container's and
//! one container's below it with theirs and runc's device rules (what RunPodSandbox and
//! CreateContainer make), then their removal. Target: made in ≤ 1 ms. Needs root and cgroup v1
//! or v2; skipped otherwise. Each sample uses a cgroup root of its own, removed at the end.

use criterion::{criterion_group, criterion_main, Criterion};
use podlab_cgroups::{devices, CgroupRoot, Hierarchy, QosClass, Resources};

fn pod_cgroups(c: &mut Criterion) {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: making cgroups needs root");
        return;
    }
    let Ok(hierarchy) = Hierarchy::detect() else {
        eprintln!("skipped: no cgroup hierarchy");
        return;
    };
    let root = CgroupRoot {
        name: format!("podlab-bench-{}", std::process::id()),
    };
    let pod_values = Resources {
        cpu_shares: 256,
        cpu_quota: 25_000,
        cpu_period: 100_000,
        memory_limit_in_bytes: 64 << 20,
        pids_limit: 1024,
        hugepage_limits: Vec::new(),
    };
    let container_values = Resources {
        pids_limit: 0,
        ..pod_values.clone()
    };
    let mut n = 0u64;
    let mut group = c.benchmark_group("cgroups");
    group.bench_function(
        "make a Guaranteed pod's cgroups (pod, pause, one container)",
        |b| {
            b.iter_custom(|iters| {
                let mut made = std::time::Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    let start = std::time::Instant::now();
                    let pod = hierarchy.cgroup(&root.pod(QosClass::Guaranteed, &format!("u{n}")));
                    pod.create().unwrap();
                    pod_values.apply(&pod).unwrap();
                    for id in ["pause", "app"] {
                        let child = pod.child(id);
                        child.create().unwrap();
                        container_values.apply(&child).unwrap();
                        devices::apply_default(&child).unwrap();
                    }
                    made += start.elapsed();
                    pod.remove().unwrap();
                }
                made
            })
        },
    );
    group.finish();
    hierarchy.cgroup(&root.name).remove().unwrap();
}

criterion_group!(benches, pod_cgroups);
criterion_main!(benches);
