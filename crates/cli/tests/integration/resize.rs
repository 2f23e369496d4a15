//! In-place pod resize (`podlab patch pod --subresource resize`, KEP-1287), read from the
//! kernel: the pod's and the containers' cgroup files take the new cpu and memory values while
//! the same process runs on (`resizePolicy` NotRequired), a container whose policy is
//! RestartContainer is started again with them, a resize that does not fit stays
//! PodResizePending (Infeasible, or Deferred until another pod leaves), a memory limit is never
//! set below what the container uses (PodResizeInProgress, Error), and the API server's rules
//! refuse what a resize may not do.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use podlab_cgroups::Controller;

use crate::cgroups::{cgroup_dir, read, v1_cgroups};
use crate::pods::{container, running, Root, LIMIT};
use crate::skip_unless;

fn condition(pod: &Pod, type_: &str) -> Option<(String, String)> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)?;
    Some((
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

fn status_limit(status: &ContainerStatus, resource: &str) -> Option<String> {
    let limits = status.resources.as_ref()?.limits.as_ref()?;
    limits.get(resource).map(|q| q.0.clone())
}

fn resized(pod: &Pod) -> bool {
    condition(pod, "PodResizePending").is_none() && condition(pod, "PodResizeInProgress").is_none()
}

/// The node's cpus as kubelet's allocatable counts them (milli-CPUs).
fn node_milli_cpu() -> i64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as i64 * 1000
}

#[test]
fn a_resize_changes_cgroups_in_place_and_restarts_only_where_the_policy_asks() {
    let root = Root::new("resize-inplace");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: r}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sleep, "1000"]
    resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: 200m, memory: 64Mi}}
  - name: jvm
    image: busybox
    command: [sleep, "1001"]
    resizePolicy: [{resourceName: memory, restartPolicy: RestartContainer}]
    resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: 200m, memory: 64Mi}}
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("r", "running", LIMIT, running);
    let app = container(&pod, "app");
    assert_eq!(
        app.allocated_resources.as_ref().map(|r| r["cpu"].0.clone()),
        Some("100m".into())
    );
    assert_eq!(status_limit(&app, "cpu").as_deref(), Some("200m"));
    let app_pid = root.record(&app).pid.unwrap();
    let jvm_pid = root.record(&container(&pod, "jvm")).pid.unwrap();
    let cpu = cgroup_dir(&root, app_pid, Controller::Cpu);
    let memory = cgroup_dir(&root, app_pid, Controller::Memory);
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "20000");
    assert_eq!(read(&memory, "memory.limit_in_bytes"), "67108864");
    let pod_memory = memory.parent().unwrap().to_path_buf();
    assert_eq!(read(&pod_memory, "memory.limit_in_bytes"), "134217728");

    let out = root.run(&[
        "patch", "pod", "r", "--subresource", "resize", "-p",
        r#"{"spec":{"containers":[
            {"name":"app","resources":{"requests":{"cpu":"150m"},"limits":{"cpu":"300m","memory":"96Mi"}}},
            {"name":"jvm","resources":{"limits":{"memory":"128Mi"}}}]}}"#,
    ]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "pod/r patched\n"),
        "{out:?}"
    );
    let pod = root.wait_pod("r", "resized", LIMIT, |p| {
        let jvm = container(p, "jvm");
        resized(p)
            && status_limit(&container(p, "app"), "cpu").as_deref() == Some("300m")
            && jvm.restart_count == 1
            && jvm.state.as_ref().is_some_and(|s| s.running.is_some())
    });

    // NotRequired: the same process, its cgroup rewritten (MilliCPUToShares(150) = 153).
    let app = container(&pod, "app");
    assert_eq!(app.restart_count, 0);
    assert_eq!(root.record(&app).pid, Some(app_pid));
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "30000");
    assert_eq!(read(&cpu, "cpu.shares"), "153");
    assert_eq!(read(&memory, "memory.limit_in_bytes"), "100663296");
    assert_eq!(
        app.allocated_resources.as_ref().map(|r| r["cpu"].0.clone()),
        Some("150m".into())
    );
    // The pod's cgroup follows: 96Mi + 128Mi, 300m + 200m.
    assert_eq!(read(&pod_memory, "memory.limit_in_bytes"), "234881024");
    assert_eq!(read(cpu.parent().unwrap(), "cpu.cfs_quota_us"), "50000");
    // RestartContainer for memory: a new process, started with the new limit.
    let jvm = container(&pod, "jvm");
    let new_jvm = root.record(&jvm).pid.unwrap();
    assert_ne!(new_jvm, jvm_pid);
    let jvm_memory = cgroup_dir(&root, new_jvm, Controller::Memory);
    assert_eq!(read(&jvm_memory, "memory.limit_in_bytes"), "134217728");
    let events = root.ok(&["get", "events", "--field-selector", "involvedObject.name=r"]);
    assert!(
        events.contains("Container jvm resize requires restart"),
        "{events}"
    );

    root.ok(&["delete", "pod", "r"]);
    root.assert_nothing_left();
}

#[test]
fn a_resize_that_does_not_fit_stays_pending_until_room_is_made() {
    let root = Root::new("resize-pending");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    let capacity = node_milli_cpu();
    let big = capacity - 800;
    let out = root.apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: big}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: app, image: busybox, command: [sleep, "1000"], resources: {{requests: {{cpu: {big}m}}}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: small}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: app, image: busybox, command: [sleep, "1000"], resources: {{requests: {{cpu: 100m}}, limits: {{cpu: 200m}}}}}}
"#
    ));
    assert_eq!(out.code, Some(0), "{out:?}");
    root.wait_pod("big", "running", LIMIT, running);
    let pod = root.wait_pod("small", "running", LIMIT, running);
    let pid = root.record(&container(&pod, "app")).pid.unwrap();
    let cpu = cgroup_dir(&root, pid, Controller::Cpu);

    let resize = |cpu: &str| {
        let patch = format!(
            r#"{{"spec":{{"containers":[{{"name":"app","resources":{{"requests":{{"cpu":"{cpu}"}},"limits":{{"cpu":"{cpu}"}}}}}}]}}}}"#
        );
        let out = root.run(&[
            "patch",
            "pod",
            "small",
            "--subresource",
            "resize",
            "-p",
            &patch,
        ]);
        assert_eq!(out.code, Some(0), "{out:?}");
    };
    // More than the node has: Infeasible, never tried again.
    resize("1000");
    let pod = root.wait_pod("small", "Infeasible", LIMIT, |p| {
        condition(p, "PodResizePending").is_some_and(|(r, _)| r == "Infeasible")
    });
    assert_eq!(
        condition(&pod, "PodResizePending").unwrap().1,
        format!("Node didn't have enough capacity: cpu, requested: 1000000, capacity: {capacity}")
    );
    // It fits the node, not beside the other pod: Deferred.
    resize("1");
    let pod = root.wait_pod("small", "Deferred", LIMIT, |p| {
        condition(p, "PodResizePending").is_some_and(|(r, _)| r == "Deferred")
    });
    assert_eq!(
        condition(&pod, "PodResizePending").unwrap().1,
        format!("Node didn't have enough resource: cpu, requested: 1000, used: {big}, capacity: {capacity}")
    );
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "20000", "nothing actuated");
    assert_eq!(
        container(&pod, "app").allocated_resources.unwrap()["cpu"].0,
        "100m"
    );

    // The other pod leaves: the Deferred resize is admitted and actuated.
    root.ok(&["delete", "pod", "big"]);
    let pod = root.wait_pod("small", "resized", LIMIT, |p| {
        resized(p) && status_limit(&container(p, "app"), "cpu").as_deref() == Some("1")
    });
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "100000");
    assert_eq!(read(cpu.parent().unwrap(), "cpu.cfs_quota_us"), "100000");
    assert_eq!(container(&pod, "app").restart_count, 0);
    assert_eq!(root.record(&container(&pod, "app")).pid, Some(pid));

    // Down again: the container's quota first, then the pod's (the kernel refuses a child's
    // cfs quota above its parent's).
    resize("200m");
    let pod = root.wait_pod("small", "resized down", LIMIT, |p| {
        resized(p) && status_limit(&container(p, "app"), "cpu").as_deref() == Some("200m")
    });
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "20000");
    assert_eq!(read(cpu.parent().unwrap(), "cpu.cfs_quota_us"), "20000");
    assert_eq!(root.record(&container(&pod, "app")).pid, Some(pid));

    root.ok(&["delete", "pod", "small"]);
    root.assert_nothing_left();
}

#[test]
fn a_memory_limit_is_not_set_below_what_the_container_uses() {
    let root = Root::new("resize-usage");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    // 32 MB written to the pod's /dev/shm (tmpfs: charged to the container, never reclaimed).
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: m}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sh, -c, 'head -c 33554432 /dev/zero > /dev/shm/held; sleep 1000']
    resources: {requests: {memory: 64Mi}, limits: {memory: 128Mi}}
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("m", "running", LIMIT, running);
    let app = container(&pod, "app");
    let pid = root.record(&app).pid.unwrap();
    let memory = cgroup_dir(&root, pid, Controller::Memory);
    let start = std::time::Instant::now();
    while read(&memory, "memory.usage_in_bytes")
        .parse::<u64>()
        .unwrap()
        < 32 << 20
    {
        assert!(start.elapsed() < LIMIT, "the container never held 32 MB");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = root.run(&[
        "patch", "pod", "m", "--subresource", "resize", "-p",
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"memory":"16Mi"},"limits":{"memory":"16Mi"}}}]}}"#,
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("m", "resize in error", LIMIT, |p| {
        condition(p, "PodResizeInProgress").is_some_and(|(r, _)| r == "Error")
    });
    let (_, message) = condition(&pod, "PodResizeInProgress").unwrap();
    assert!(
        message.starts_with(
            "attempting to set container \"app\" memory limit (16777216) below current usage ("
        ),
        "{message}"
    );
    assert_eq!(read(&memory, "memory.limit_in_bytes"), "134217728");
    let app = container(&pod, "app");
    assert_eq!(app.restart_count, 0, "not OOM-killed");
    assert_eq!(status_limit(&app, "memory").as_deref(), Some("128Mi"));

    // Back to a limit above its use: the resize completes and the error is gone.
    let out = root.run(&[
        "patch", "pod", "m", "--subresource", "resize", "-p",
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"memory":"64Mi"},"limits":{"memory":"96Mi"}}}]}}"#,
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    root.wait_pod("m", "resized", LIMIT, |p| {
        resized(p) && status_limit(&container(p, "app"), "memory").as_deref() == Some("96Mi")
    });
    assert_eq!(read(&memory, "memory.limit_in_bytes"), "100663296");

    root.ok(&["delete", "pod", "m"]);
    root.assert_nothing_left();
}

#[test]
fn the_api_server_refuses_what_a_resize_may_not_do() {
    let root = Root::new("resize-refused");
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: q}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: app, image: busybox, command: [sleep, "1000"], resources: {requests: {cpu: 100m}, limits: {cpu: 200m}}}
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let stored = root.pod("q").unwrap();
    let refused = |args: &[&str], expected: &str| {
        let out = root.run(args);
        assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
        assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
    };
    let resize = ["patch", "pod", "q", "--subresource", "resize", "-p"];
    refused(
        &[&resize[..], &[r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"1","memory":"1Gi"},"limits":{"cpu":"1","memory":"1Gi"}}}]}}"#]].concat(),
        "The Pod \"q\" is invalid: spec: Invalid value: \"Burstable\": Pod QOS Class may not change as a result of resizing",
    );
    refused(
        &[
            &resize[..],
            &[
                r#"[{"op":"remove","path":"/spec/containers/0/resources/limits/cpu"}]"#,
                "--type",
                "json",
            ],
        ]
        .concat(),
        "spec.containers[0].resources.limits: Forbidden: resource limits cannot be removed",
    );
    refused(
        &[&resize[..], &[r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"300m"}}}]}}"#]].concat(),
        "spec.containers[0].resources.requests[cpu]: Invalid value: \"300m\": must be less than or equal to cpu limit of 200m",
    );
    // Without the subresource, resources stay fixed as before.
    refused(
        &[
            "patch",
            "pod",
            "q",
            "-p",
            r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"300m"}}}]}}"#,
        ],
        "spec: Forbidden: pod updates may not change fields other than",
    );
    refused(
        &["patch", "pod", "q", "--subresource", "scale", "-p", "{}"],
        "the server could not find the requested resource",
    );
    // What a resize may not change is dropped, as the API server drops it.
    let out = root.run(&[&resize[..], &[r#"{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"app","image":"other"}]}}"#]].concat());
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "pod/q patched (no change)\n"),
        "{out:?}"
    );
    let now = root.pod("q").unwrap();
    assert_eq!(now.metadata.labels, stored.metadata.labels);
    assert_eq!(now.spec, stored.spec);

    root.ok(&["delete", "pod", "q"]);
    root.assert_nothing_left();
}
