//! Cgroups and resources, read from the kernel: each pod's and container's cgroup where kubelet
//! and containerd put them, the values kubelet computes in their files (cpu.shares,
//! cpu.cfs_quota_us, memory.limit_in_bytes, pids.max, devices.list), the processes in
//! cgroup.procs, `oom_score_adj` by QoS class, an OOM kill reported as OOMKilled and restarted,
//! the device cgroup refusing a node made with mknod, and nothing left after delete.

use std::path::{Path, PathBuf};

use podlab_cgroups::{devices, Controller, Version};

use crate::pods::{container, running, Out, Root, LIMIT};
use crate::skip_unless;
use crate::support::wait_until;

/// The folder of `pid`'s cgroup for `controller`, from /proc/PID/cgroup (a v1 machine).
pub fn cgroup_dir(root: &Root, pid: i32, controller: Controller) -> PathBuf {
    cgroup_dir_of(&root.runtime(), pid, controller)
}

/// [`cgroup_dir`] for the cgroups `runtime` uses.
pub fn cgroup_dir_of(
    runtime: &podlab_runtime::Runtime,
    pid: i32,
    controller: Controller,
) -> PathBuf {
    let node = runtime.cgroups().expect("cgroups are on");
    let mount = node.hierarchy.mounts[&controller].clone();
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path = text
        .lines()
        .find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            names
                .split(',')
                .any(|n| n == controller.name())
                .then(|| path.trim_start_matches('/').to_string())
        })
        .unwrap_or_else(|| panic!("{controller} not in /proc/{pid}/cgroup: {text}"));
    mount.join(path)
}

pub fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
        .trim()
        .to_string()
}

fn oom_score_adj(pid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Whether this process may lower oom_score_adj (CAP_SYS_RESOURCE, which this lab's machine
/// withholds from root): without it the runtime keeps a negative value at the current one,
/// as containerd's restrict_oom_score_adj does.
fn can_lower_oom_score() -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// Cgroups are on: root on a v1 machine (the v2 path is unit-tested against a fake root).
pub fn v1_cgroups(root: &Root) -> bool {
    root.runtime()
        .cgroups()
        .is_some_and(|n| n.hierarchy.version == Version::V1)
}

#[test]
fn a_guaranteed_pod_gets_kubelets_cgroups_values_and_oom_scores() {
    let root = Root::new("cg-guaranteed");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: g}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sleep, "1000"]
    resources: {limits: {cpu: 250m, memory: 64Mi}}
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("g", "running", LIMIT, running);
    assert_eq!(
        pod.status.as_ref().unwrap().qos_class.as_deref(),
        Some("Guaranteed")
    );
    assert!(root
        .ok(&["get", "pod", "g", "-o", "yaml"])
        .contains("qosClass: Guaranteed"));
    let described = root.ok(&["describe", "pod", "g"]);
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("QoS Class:") && l.ends_with(" Guaranteed")),
        "{described}"
    );
    let uid = pod.metadata.uid.clone().unwrap();
    let pid = root.record(&container(&pod, "app")).pid.unwrap();

    let cpu = cgroup_dir(&root, pid, Controller::Cpu);
    assert!(
        cpu.parent()
            .unwrap()
            .ends_with(format!("kubepods/pod{uid}")),
        "Guaranteed pods sit straight in kubepods: {}",
        cpu.display()
    );
    assert_eq!(read(&cpu, "cpu.shares"), "256");
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "25000");
    assert_eq!(read(&cpu, "cpu.cfs_period_us"), "100000");
    let memory = cgroup_dir(&root, pid, Controller::Memory);
    assert_eq!(read(&memory, "memory.limit_in_bytes"), "67108864");
    assert!(read(&memory, "cgroup.procs")
        .lines()
        .any(|l| l == pid.to_string()));
    // The pod's cgroup: kubelet's pod-level values and the pod pids limit.
    let pod_memory = memory.parent().unwrap();
    assert_eq!(read(pod_memory, "memory.limit_in_bytes"), "67108864");
    let pids = cgroup_dir(&root, pid, Controller::Pids);
    assert_eq!(
        read(pids.parent().unwrap(), "pids.max"),
        podlab_kubelet::qos::pod_pids_limit().to_string()
    );
    let mut listed: Vec<String> =
        read(&cgroup_dir(&root, pid, Controller::Devices), "devices.list")
            .lines()
            .map(str::to_string)
            .collect();
    listed.sort();
    let mut allowed: Vec<String> = devices::DEFAULT_ALLOWED.iter().map(|r| r.line()).collect();
    allowed.sort();
    assert_eq!(listed, allowed, "deny all, then runc's default devices");

    // pause: its own cgroup in the pod's, named by the sandbox id; -998 (containerd's).
    let sandbox = root.ready_sandbox();
    let pause = sandbox.pause_pid.unwrap();
    let pause_memory = cgroup_dir(&root, pause, Controller::Memory);
    assert_eq!(pause_memory, pod_memory.join(sandbox.id.as_str()));
    if can_lower_oom_score() {
        assert_eq!(oom_score_adj(pid), -997);
        assert_eq!(oom_score_adj(pause), -998);
    } else {
        crate::support::record_skip(
            "a_guaranteed_pod_gets_kubelets_cgroups_values_and_oom_scores",
            "no CAP_SYS_RESOURCE: -997 and -998 kept at the shim's own value",
        );
        let shim = sandbox.shim_pid.unwrap();
        assert_eq!(oom_score_adj(pid), oom_score_adj(shim));
        assert_eq!(oom_score_adj(pause), oom_score_adj(shim));
    }

    root.ok(&["delete", "pod", "g"]);
    assert!(
        !memory.exists() && !pod_memory.exists(),
        "the cgroups went with the pod"
    );
    root.assert_nothing_left();
}

#[test]
fn burstable_and_best_effort_pods_get_their_qos_folders_and_oom_scores() {
    let root = Root::new("cg-qos");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: b}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: app, image: busybox, command: [sleep, "1000"], resources: {requests: {cpu: 100m, memory: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: be}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: app, image: busybox, command: [sleep, "1000"]}
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let burstable = root.wait_pod("b", "running", LIMIT, running);
    let best_effort = root.wait_pod("be", "running", LIMIT, running);
    assert_eq!(
        burstable.status.as_ref().unwrap().qos_class.as_deref(),
        Some("Burstable")
    );
    let b_pid = root.record(&container(&burstable, "app")).pid.unwrap();
    let be_pid = root.record(&container(&best_effort, "app")).pid.unwrap();
    let b_cpu = cgroup_dir(&root, b_pid, Controller::Cpu);
    assert!(
        b_cpu.to_string_lossy().contains("/kubepods/burstable/pod"),
        "{}",
        b_cpu.display()
    );
    assert_eq!(read(&b_cpu, "cpu.shares"), "102");
    assert_eq!(
        read(&b_cpu, "cpu.cfs_quota_us"),
        "-1",
        "no cpu limit, no quota"
    );
    assert_eq!(read(b_cpu.parent().unwrap(), "cpu.shares"), "102");
    let be_cpu = cgroup_dir(&root, be_pid, Controller::Cpu);
    assert!(
        be_cpu
            .to_string_lossy()
            .contains("/kubepods/besteffort/pod"),
        "{}",
        be_cpu.display()
    );
    assert_eq!(read(&be_cpu, "cpu.shares"), "2");
    assert_eq!(
        read(be_cpu.parent().unwrap().parent().unwrap(), "cpu.shares"),
        "2"
    );

    let capacity = podlab_kubelet::qos::memory_capacity();
    let want =
        podlab_kubelet::qos::oom_score_adj(podlab_cgroups::QosClass::Burstable, 1 << 30, capacity);
    assert_eq!(oom_score_adj(b_pid), want, "1000 - 1000 × 1Gi / {capacity}");
    assert_eq!(oom_score_adj(be_pid), 1000);
    root.ok(&["delete", "pod", "b"]);
    root.ok(&["delete", "pod", "be"]);
    root.assert_nothing_left();
}

#[test]
fn a_container_past_its_memory_limit_is_oom_killed_and_restarted() {
    let root = Root::new("cg-oom");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: hog
    image: busybox
    command: [dd, "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"]
    resources: {limits: {memory: 32Mi}}
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("hog", "restarted after an OOM kill", LIMIT, |pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|list| list.iter().find(|c| c.name == "hog"))
            .and_then(|c| c.last_state.as_ref())
            .is_some_and(|s| s.terminated.is_some())
    });
    let status = container(&pod, "hog");
    let last = status.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.reason.as_deref(), Some("OOMKilled"), "{last:?}");
    assert_eq!(last.exit_code, 137);
    assert!(status.restart_count >= 1);
    root.ok(&["delete", "pod", "hog"]);
    root.assert_nothing_left();
}

#[test]
fn the_device_cgroup_refuses_a_device_node_made_with_mknod() {
    let root = Root::new("cg-devices");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    // mknod is allowed (runc's `c *:* m`), opening the host's /dev/kmsg through it is not.
    let out = root.run(&[
        "run",
        "dev",
        "--rm",
        "--image",
        "busybox",
        "--",
        "sh",
        "-c",
        "mknod /tmp/kmsg c 1 11 && head -c 1 /tmp/kmsg; echo exit=$?; head -c 1 /dev/zero | wc -c",
    ]);
    assert!(
        out.stdout.contains("exit=1") && out.stdout.contains("\n1\n"),
        "{out:?}"
    );
    assert!(
        out.stderr.contains("Operation not permitted")
            || out.stdout.contains("Operation not permitted"),
        "{out:?}"
    );
    root.assert_nothing_left();
}

#[test]
fn a_privileged_container_may_open_the_hosts_devices() {
    let root = Root::new("cg-privileged");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    skip_unless!(
        Path::new("/dev/kmsg").exists(),
        "the host has no /dev/kmsg to open"
    );
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: priv}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sleep, "1000"]
    securityContext: {privileged: true}
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("priv", "running", LIMIT, running);
    let pid = root.record(&container(&pod, "app")).pid.unwrap();
    // containerd's `a *:* rwm`: the kernel lists every device as allowed.
    assert_eq!(
        read(&cgroup_dir(&root, pid, Controller::Devices), "devices.list"),
        "a *:* rwm"
    );
    // Opened for reading, nothing read.
    let opened = root.ok(&[
        "exec",
        "priv",
        "--",
        "sh",
        "-c",
        "true < /dev/kmsg && echo opened",
    ]);
    assert_eq!(opened.trim(), "opened");
    root.ok(&["delete", "pod", "priv"]);
    root.assert_nothing_left();
}

#[test]
fn limits_below_requests_are_refused_with_the_field_path_and_nothing_is_made() {
    let root = Root::new("cg-invalid");
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  containers:
  - {name: app, image: busybox, resources: {requests: {memory: 128Mi}, limits: {memory: 64Mi, cpu: 2x}}}
"#,
    );
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("spec.containers[0].resources.requests[memory]: Invalid value: \"128Mi\": must be less than or equal to memory limit of 64Mi"),
        "{out:?}"
    );
    assert!(
        out.stderr
            .contains("spec.containers[0].resources.limits[cpu]: Invalid value: \"2x\""),
        "{out:?}"
    );
    assert!(root.pod("bad").is_none());
    root.assert_nothing_left();
}

#[test]
fn hugepages_are_validated_as_the_api_server_does_and_set_on_the_hugetlb_cgroup() {
    let root = Root::new("cg-hugepages");
    // Huge pages alone, and a request without its equal limit: refused, nothing stored.
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  containers:
  - {name: a, image: busybox, resources: {limits: {hugepages-2Mi: 2Mi}}}
  - {name: b, image: busybox, resources: {requests: {memory: 8Mi, hugepages-2Mi: 2Mi}}}
"#,
    );
    assert_ne!(out.code, Some(0));
    for line in [
        "spec.containers[0].resources: Forbidden: HugePages require cpu or memory",
        "spec.containers[1].resources.limits: Required value: Limit must be set for non overcommitable resources",
    ] {
        assert!(out.stderr.contains(line), "{line}\n{out:?}");
    }
    assert!(root.pod("bad").is_none());

    let hugetlb = root
        .runtime()
        .cgroups()
        .is_some_and(|n| n.hierarchy.has(Controller::Hugetlb));
    let page_sizes = podlab_cgroups::hugetlb::page_sizes();
    skip_unless!(
        hugetlb && v1_cgroups(&root) && page_sizes.contains(&(2 << 20)),
        "the node's cgroup hierarchy has no hugetlb controller (this lab's hybrid machine binds \
         it to the cgroup2 `unified` mount, which holds no other controller; kubelet skips it \
         there too) or the kernel has no 2 MiB pages"
    );
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: huge}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sleep, "1000"]
    resources: {limits: {memory: 64Mi, hugepages-2Mi: 4Mi}}
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("huge", "running", LIMIT, running);
    let pid = root.record(&container(&pod, "app")).pid.unwrap();
    let dir = cgroup_dir(&root, pid, Controller::Hugetlb);
    let file = podlab_cgroups::hugetlb::limit_file(Version::V1, "2MB");
    assert_eq!(
        read(&dir, &file),
        (4u64 << 20).to_string(),
        "the container's"
    );
    assert_eq!(
        read(dir.parent().unwrap(), &file),
        (4u64 << 20).to_string(),
        "the pod's"
    );
    root.ok(&["delete", "pod", "huge"]);
    root.assert_nothing_left();
}

#[test]
fn top_pod_containers_shows_each_containers_own_cgroup_usage() {
    let root = Root::new("cg-top");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: t}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: filler
    image: busybox
    command: [sh, -c, "head -c 33554432 /dev/zero > /dev/shm/fill && touch /tmp/filled && sleep 1000"]
  - name: idle
    image: busybox
    command: [sleep, "1000"]
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    root.ok(&["wait", "pod/t", "--for=condition=Ready", "--timeout=60s"]);
    assert!(crate::support::wait_until(LIMIT, || root
        .run(&[
            "exec",
            "t",
            "-c",
            "filler",
            "--",
            "test",
            "-e",
            "/tmp/filled"
        ])
        .code
        == Some(0)));
    let table = root.ok(&["top", "pod", "t", "--containers"]);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"],
        "{table}"
    );
    assert_eq!(rows.len(), 3, "{table}");
    let mebibytes = |row: &[&str]| -> u64 { row[3].trim_end_matches("Mi").parse().unwrap() };
    assert_eq!((rows[1][0], rows[1][1]), ("t", "filler"));
    assert!(
        mebibytes(&rows[1]) >= 32,
        "the 32 MiB the filler wrote to /dev/shm are its: {table}"
    );
    assert_eq!((rows[2][0], rows[2][1]), ("t", "idle"));
    assert!(mebibytes(&rows[2]) < 32, "{table}");
    assert!(
        rows[1][2].ends_with('m') && rows[2][2].ends_with('m'),
        "{table}"
    );
    let out = root.run(&["top", "pod", "nosuch", "--containers"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("pods \"nosuch\" not found"), "{out:?}");
}

#[test]
fn top_chooses_pods_by_selector_and_sorts_them_as_kubectl_top() {
    let root = Root::new("cg-topsort");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    let pod = |name: &str, tier: &str, command: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{tier: {tier}}}}}\nspec:\n  \
             terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: busybox\n    \
             command: [sh, -c, \"{command}\"]\n"
        )
    };
    let fill = "head -c 33554432 /dev/zero > /dev/shm/fill && touch /tmp/filled && sleep 1000";
    for (name, tier, command) in [
        ("b-fill", "web", fill),
        ("a-idle", "web", "sleep 1000"),
        ("c-other", "db", "sleep 1000"),
    ] {
        let out = root.apply(&pod(name, tier, command));
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    for name in ["b-fill", "a-idle", "c-other"] {
        root.ok(&[
            "wait",
            &format!("pod/{name}"),
            "--for=condition=Ready",
            "--timeout=60s",
        ]);
    }
    assert!(crate::support::wait_until(LIMIT, || root
        .run(&["exec", "b-fill", "--", "test", "-e", "/tmp/filled"])
        .code
        == Some(0)));
    let rows = |table: &str| -> Vec<Vec<String>> {
        table
            .lines()
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect()
    };
    let names =
        |rows: &[Vec<String>]| -> Vec<String> { rows.iter().map(|r| r[0].clone()).collect() };

    // -l chooses by the pods' labels; without --sort-by, by name.
    let table = rows(&root.ok(&["top", "pod", "-l", "tier=web"]));
    assert_eq!(table[0], ["NAME", "CPU(cores)", "MEMORY(bytes)"]);
    assert_eq!(names(&table[1..]), ["a-idle", "b-fill"]);
    // --sort-by=memory: the largest first (the 32 MiB the filler wrote).
    let table = rows(&root.ok(&["top", "pod", "-l", "tier in (web)", "--sort-by=memory"]));
    assert_eq!(names(&table[1..]), ["b-fill", "a-idle"]);
    // --sort-by=cpu over every pod: the column never grows down the table.
    let table = rows(&root.ok(&["top", "pod", "--sort-by", "cpu", "--no-headers"]));
    assert_eq!(table.len(), 3, "{table:?}");
    let milli: Vec<u64> = table
        .iter()
        .map(|r| r[1].trim_end_matches('m').parse().unwrap())
        .collect();
    assert!(milli.windows(2).all(|w| w[0] >= w[1]), "{table:?}");
    // --field-selector, -A with its NAMESPACE column, --containers sorted alike.
    let table = rows(&root.ok(&[
        "top",
        "pod",
        "-A",
        "--field-selector",
        "metadata.name!=c-other",
        "--containers",
        "--sort-by=memory",
    ]));
    assert_eq!(
        table[0],
        ["NAMESPACE", "POD", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    );
    assert_eq!(
        table[1..]
            .iter()
            .map(|r| (r[0].as_str(), r[1].as_str()))
            .collect::<Vec<_>>(),
        [("default", "b-fill"), ("default", "a-idle")]
    );
    // Nothing chosen: kubectl's words, status 0.
    let out = root.run(&["top", "pod", "-l", "tier=none"]);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (Some(0), "", "No resources found in default namespace.\n")
    );
    // Bad input, in kubectl's words.
    for (args, error) in [
        (
            &["top", "pod", "a-idle", "-l", "tier=web"][..],
            "only one of NAME or selector can be provided",
        ),
        (
            &["top", "pod", "--sort-by=name"][..],
            "--sort-by accepts only cpu or memory",
        ),
        (
            &["top", "node", "--sort-by=disk"][..],
            "--sort-by accepts only cpu or memory",
        ),
        (
            &["top", "node", "-l", "kubernetes.io/os=windows"][..],
            "metrics not available yet",
        ),
        (
            &["top", "node", "nosuch-node"][..],
            "Error from server (NotFound): nodemetrics.metrics.k8s.io \"nosuch-node\" not found",
        ),
    ] {
        let out = root.run(args);
        assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
        assert_eq!(out.stderr, format!("podlab: {error}\n"), "{args:?}");
    }
    // top node: chosen by its kubelet labels, one row.
    let table = rows(&root.ok(&[
        "top",
        "node",
        "-l",
        "kubernetes.io/os=linux",
        "--sort-by=memory",
        "--no-headers",
    ]));
    assert_eq!(table.len(), 1, "{table:?}");
    assert!(
        table[0][1].ends_with('m') && table[0][3].ends_with("Mi"),
        "{table:?}"
    );
    for name in ["a-idle", "b-fill", "c-other"] {
        root.ok(&["delete", "pod", name, "--now"]);
    }
    root.assert_nothing_left();
}

#[test]
fn pod_level_resources_cap_the_pod_cgroup_and_its_containers_share_the_budget() {
    let root = Root::new("cg-podlevel");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: budget}
spec:
  terminationGracePeriodSeconds: 1
  resources: {limits: {cpu: 500m, memory: 96Mi}}
  containers:
  - name: app
    image: busybox
    command: [sleep, "1000"]
    env:
    - name: MEMORY_LIMIT
      valueFrom: {resourceFieldRef: {resource: limits.memory}}
  - name: helper
    image: busybox
    command: [sleep, "1001"]
    resources: {limits: {memory: 32Mi}}
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("budget", "running", LIMIT, running);
    // The pod-level resources decide the class, and the requests were defaulted from them
    // (helper's 32Mi request is the only container request: the pod's memory request is it).
    let status = pod.status.as_ref().unwrap();
    assert_eq!(status.qos_class.as_deref(), Some("Burstable"));
    let requests = pod.spec.as_ref().unwrap().resources.as_ref().unwrap();
    let requests = requests.requests.as_ref().unwrap();
    assert_eq!(
        (requests["cpu"].0.as_str(), requests["memory"].0.as_str()),
        ("500m", "32Mi")
    );

    let app = root.record(&container(&pod, "app")).pid.unwrap();
    let memory = cgroup_dir(&root, app, Controller::Memory);
    let cpu = cgroup_dir(&root, app, Controller::Cpu);
    let pod_memory = memory.parent().unwrap();
    assert!(
        pod_memory.ends_with(format!(
            "kubepods/burstable/pod{}",
            pod.metadata.uid.as_deref().unwrap()
        )),
        "{}",
        pod_memory.display()
    );
    assert_eq!(read(pod_memory, "memory.limit_in_bytes"), "100663296");
    assert_eq!(read(cpu.parent().unwrap(), "cpu.cfs_quota_us"), "50000");
    assert_eq!(read(cpu.parent().unwrap(), "cpu.shares"), "512");
    // app sets no limit of its own: the pod's budget bounds it, its own cgroup does not.
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "-1");
    assert!(
        read(&memory, "memory.limit_in_bytes")
            .parse::<u64>()
            .unwrap()
            > 1 << 40
    );
    let helper = root.record(&container(&pod, "helper")).pid.unwrap();
    let helper_memory = cgroup_dir(&root, helper, Controller::Memory);
    assert_eq!(read(&helper_memory, "memory.limit_in_bytes"), "33554432");
    // The downward API reads the pod's limit for a container without its own.
    let environ = std::fs::read(format!("/proc/{app}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ.split('\0').any(|v| v == "MEMORY_LIMIT=100663296"),
        "{environ}"
    );

    // A container may not ask for more than the pod has.
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: over}
spec:
  resources: {limits: {memory: 64Mi}}
  containers: [{name: a, image: busybox, resources: {limits: {memory: 128Mi}}}]
"#,
    );
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("spec.resources.containers[0][memory].limits: Invalid value: \"128Mi\": must be less than or equal to pod limits of 64Mi"),
        "{}",
        out.stderr
    );
    assert!(root.pod("over").is_none(), "nothing stored");

    root.ok(&["delete", "pod", "budget"]);
    root.assert_nothing_left();
}

/// The processes that keep what `root`'s one-shot pods leave for the next (named
/// `podlab-oneshot`, started by a `run --rm` with `PODLAB_ROOT` set to the root's folder).
fn oneshot_keepers(root: &Root) -> Vec<i32> {
    let wanted = format!("PODLAB_ROOT={}", root.dir.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "podlab-oneshot")
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == wanted.as_bytes()))
        })
        .collect()
}

/// The network namespaces `pid` holds by a descriptor (`net:[INODE]`), other than its own.
fn held_netns(pid: i32) -> Vec<String> {
    let own = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap_or_default();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter(|link| link.to_string_lossy().starts_with("net:[") && *link != own)
                .map(|link| link.to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `podlab run NAME --rm` of a container that prints its network namespace, with `env`.
fn run_rm_reading_netns(root: &Root, name: &str, env: &[(&str, &str)]) -> Out {
    let mut command = root.command(&[
        "run",
        name,
        "--rm",
        "--restart",
        "Never",
        "--image",
        "busybox",
        "--command",
        "--",
        "readlink",
        "/proc/self/ns/net",
    ]);
    for (key, value) in env {
        command.env(key, value);
    }
    Out::of(command.stdin(std::process::Stdio::null()).output().unwrap())
}

/// Issue 19: `run --rm` removes its pod's cgroup but leaves the node's folders above it
/// (podlab's root, `kubepods`, `besteffort`) to one keeper for the next one-shot pod, and
/// (`PODLAB_NETWORK=none`) an empty network namespace that the next pod runs in; the keeper
/// removes the folders when its wait is over, at once on SIGTERM or `podlab gc`; with
/// `PODLAB_ONESHOT_KEEPER=0` they go with the pod, before the command's stderr closes, and
/// `PODLAB_WARM_NETNS=0` makes no namespace ahead.
#[test]
fn run_rm_leaves_the_node_folders_and_a_namespace_to_one_keeper_that_removes_them() {
    let root = Root::new("cg-keep-node");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    let node = root.runtime().cgroups().cloned().unwrap();
    let podlab_root = node.root.cgroup(&node.hierarchy);
    let besteffort = node
        .hierarchy
        .cgroup(&format!("{}/besteffort", node.root.kubepods()));
    let existing = |cgroup: &podlab_cgroups::Cgroup| -> Vec<PathBuf> {
        cgroup
            .unique_dirs()
            .into_iter()
            .filter(|d| d.is_dir())
            .map(Path::to_path_buf)
            .collect()
    };
    let run_rm = |name: &str, env: &[(&str, &str)]| -> String {
        let out = run_rm_reading_netns(&root, name, env);
        assert_eq!(out.code, Some(0), "{out:?}");
        out.stdout.trim().to_string()
    };
    let lasting = [("PODLAB_ONESHOT_KEEPER", "600")];

    run_rm("first", &lasting);
    let all = besteffort.unique_dirs().len();
    assert_eq!(
        existing(&besteffort).len(),
        all,
        "the QoS folder was not kept"
    );
    assert!(
        besteffort.children().unwrap().is_empty(),
        "the pod's folder is left: {:?}",
        besteffort.children().unwrap()
    );
    let keepers = oneshot_keepers(&root);
    assert_eq!(keepers.len(), 1, "one keeper expected: {keepers:?}");
    let held = held_netns(keepers[0]);
    assert_eq!(held.len(), 1, "the keeper holds one namespace: {held:?}");

    // The next pod runs in that namespace, finds the folders made and leaves them to the same
    // keeper, which makes the next namespace.
    assert_eq!(run_rm("second", &lasting), held[0]);
    assert_eq!(oneshot_keepers(&root), keepers);
    assert_eq!(existing(&besteffort).len(), all);
    assert!(besteffort.children().unwrap().is_empty());
    assert!(
        wait_until(LIMIT, || held_netns(keepers[0]).len() == 1),
        "no namespace made for the next pod"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(keepers[0]),
        nix::sys::signal::SIGTERM,
    )
    .unwrap();
    assert!(
        wait_until(LIMIT, || existing(&podlab_root).is_empty()
            && oneshot_keepers(&root).is_empty()),
        "after SIGTERM: folders {:?}, keepers {:?}",
        existing(&podlab_root),
        oneshot_keepers(&root)
    );

    // `podlab gc` ends the keeper before it collects: nothing is left when it returns.
    run_rm("collected", &lasting);
    assert_eq!(oneshot_keepers(&root).len(), 1);
    root.ok(&["gc"]);
    assert!(existing(&podlab_root).is_empty(), "left after gc");
    assert!(oneshot_keepers(&root).is_empty(), "a keeper outlived gc");

    run_rm("off", &[("PODLAB_ONESHOT_KEEPER", "0")]);
    assert!(existing(&podlab_root).is_empty(), "kept though off");
    assert!(oneshot_keepers(&root).is_empty());

    // No namespace ahead when warm namespaces are off; the default wait ends by itself.
    run_rm("default", &[("PODLAB_WARM_NETNS", "0")]);
    let keepers = oneshot_keepers(&root);
    assert!(keepers.len() <= 1, "{keepers:?}");
    assert!(keepers.iter().all(|k| held_netns(*k).is_empty()));
    assert!(
        wait_until(LIMIT, || existing(&podlab_root).is_empty()
            && oneshot_keepers(&root).is_empty()),
        "the keeper's wait did not end: folders {:?}",
        existing(&podlab_root)
    );
    root.assert_nothing_left();
}

/// The keeper's name taken by another user's process (any process of the network namespace
/// may bind an abstract name): the removal finds no keeper of its own behind it and removes
/// the node's folders itself, instead of leaving them to no one.
#[test]
fn run_rm_removes_the_node_folders_itself_when_another_user_holds_the_keepers_name() {
    use std::hash::{Hash, Hasher};
    let root = Root::new("cg-keeper-squatted");
    skip_unless!(
        v1_cgroups(&root),
        "no writable cgroup v1 hierarchy (needs root)"
    );
    let runtime = root.runtime();
    let node = runtime.cgroups().cloned().unwrap();
    let podlab_root = node.root.cgroup(&node.hierarchy);
    let mut hash = std::hash::DefaultHasher::new();
    runtime.config().root.hash(&mut hash);
    let name = format!("podlab-oneshot/{:016x}", hash.finish());
    let address = nix::sys::socket::UnixAddr::new_abstract(name.as_bytes()).unwrap();
    let (ready_r, ready_w) = nix::unistd::pipe().unwrap();
    // SAFETY: the child makes raw system calls only, then waits to be killed.
    let squatter = match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => {
            use nix::sys::socket::{
                bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType,
            };
            let bound = nix::unistd::setuid(nix::unistd::Uid::from_raw(65534)).is_ok()
                && socket(
                    AddressFamily::Unix,
                    SockType::SeqPacket,
                    SockFlag::empty(),
                    None,
                )
                .is_ok_and(|fd| {
                    let ok = bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &address).is_ok()
                        && listen(&fd, Backlog::new(1).unwrap()).is_ok();
                    std::mem::forget(fd);
                    ok
                });
            let _ = nix::unistd::write(&ready_w, &[u8::from(bound)]);
            loop {
                nix::unistd::pause();
            }
        }
        nix::unistd::ForkResult::Parent { child } => child,
    };
    drop(ready_w);
    let mut bound = [0u8];
    let _ = nix::unistd::read(&ready_r, &mut bound);
    let out = run_rm_reading_netns(&root, "squatted", &[("PODLAB_ONESHOT_KEEPER", "600")]);
    let left: Vec<_> = podlab_root
        .unique_dirs()
        .into_iter()
        .filter(|d| d.exists())
        .map(Path::to_path_buf)
        .collect();
    let _ = nix::sys::signal::kill(squatter, nix::sys::signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(squatter, None);
    assert_eq!(bound, [1], "the squatter could not take the name");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        left.is_empty(),
        "left to a keeper that is not there: {left:?}"
    );
    root.assert_nothing_left();
}
