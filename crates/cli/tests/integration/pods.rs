//! Integration tests: pods from the CLI, against the kernel. Each test has a `PODLAB_ROOT` of
//! its own ([`Root`]), so its node agent, store and sandboxes are its own; the guard stops the
//! agent, removes every sandbox and the folder, also when the test fails.
//!
//! Pods here get `lo` only (`PODLAB_NETWORK=none`) unless a test needs an address: the tests
//! of one run share a network namespace, and podlab's bridge is one per namespace.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use podlab_ns::{ops, NsKind};
use podlab_runtime::config::RuntimeConfig;
use podlab_runtime::status::{ContainerState, SandboxState};
use podlab_runtime::{ContainerId, Runtime};
use serde_json::Value;

use crate::support::{podlab, wait_until};

/// What a `podlab` command did.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn of(output: std::process::Output) -> Out {
        Out {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs `command` with `stdin` fed in, and waits for it.
    pub fn with_stdin(mut command: Command, stdin: &str) -> Out {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        Out::of(child.wait_with_output().unwrap())
    }
}

/// A private `$PODLAB_ROOT` for one test. Dropping it stops the root's node agent, removes
/// every pod from its store, lets `podlab gc` remove their sandboxes, and deletes the folder.
pub struct Root {
    pub dir: PathBuf,
    env: Vec<(String, String)>,
    /// Held by roots whose pods use the network: see [`crate::support::network_lock`].
    _network: Option<std::sync::MutexGuard<'static, ()>>,
}

impl Root {
    /// A root whose pods have no network but `lo`, and crash-loop backoffs of 1 s doubling
    /// to 8 s (so a test sees restarts without waiting kubelet's 10 s).
    pub fn new(test: &str) -> Root {
        let dir = std::env::temp_dir().join(format!("podlab-it-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Root {
            dir,
            env: vec![
                ("PODLAB_NETWORK".into(), "none".into()),
                ("PODLAB_NODE_BACKOFF".into(), "1s,8s".into()),
                // Image GC off: the test roots share the host's disk, whose use is not the
                // tests' business (pod_images.rs tests GC on a tmpfs of its own).
                ("PODLAB_NODE_IMAGE_GC".into(), "100,80".into()),
            ],
            _network: None,
        }
    }

    /// The same root with pods on podlab's default network.
    pub fn with_network(mut self) -> Root {
        self.env.retain(|(k, _)| k != "PODLAB_NETWORK");
        self._network = Some(crate::support::network_lock());
        self
    }

    /// The same root on podlab's default network, without taking the network lock: for a
    /// second root of a test that already holds it through its first.
    pub fn on_the_network_of_this_test(mut self) -> Root {
        self.env.retain(|(k, _)| k != "PODLAB_NETWORK");
        self
    }

    /// The same root with one more variable for the `podlab` processes it runs.
    pub fn with_env(mut self, key: &str, value: &str) -> Root {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = podlab();
        command.args(args).env("PODLAB_ROOT", &self.dir);
        for (k, v) in &self.env {
            command.env(k, v);
        }
        command
    }

    pub fn run(&self, args: &[&str]) -> Out {
        Out::of(
            self.command(args)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("podlab {args:?}: {e}")),
        )
    }

    /// Runs `podlab ARGS`, which must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(out.code, Some(0), "podlab {args:?} failed: {out:?}");
        out.stdout
    }

    /// `podlab apply -f -` with `manifest` on stdin.
    pub fn apply(&self, manifest: &str) -> Out {
        Out::with_stdin(self.command(&["apply", "-f", "-"]), manifest)
    }

    pub fn store(&self) -> podlab_control::Store {
        podlab_control::Store::open(self.dir.join("store")).unwrap()
    }

    pub fn runtime(&self) -> Runtime {
        Runtime::open(RuntimeConfig::with_root(&self.dir)).unwrap()
    }

    /// The first Ready sandbox of the root (the test's one pod).
    pub fn ready_sandbox(&self) -> podlab_runtime::status::SandboxStatus {
        self.runtime()
            .list_pod_sandboxes()
            .unwrap()
            .into_iter()
            .find(|s| s.state == SandboxState::Ready)
            .expect("a Ready sandbox")
    }

    /// The pod as the store holds it (None once it is gone).
    pub fn pod(&self, name: &str) -> Option<Pod> {
        match self.store().get::<Pod>("default", name) {
            Ok(pod) => Some(pod),
            Err(e) if e.is_not_found() => None,
            Err(e) => panic!("reading pod {name}: {e}"),
        }
    }

    /// Polls the pod until `cond` holds (bounded by `limit`); panics with its last status.
    pub fn wait_pod(
        &self,
        name: &str,
        what: &str,
        limit: Duration,
        cond: impl Fn(&Pod) -> bool,
    ) -> Pod {
        let start = Instant::now();
        loop {
            let pod = self.pod(name);
            if let Some(pod) = pod.as_ref().filter(|p| cond(p)) {
                return pod.clone();
            }
            if start.elapsed() > limit {
                panic!(
                    "pod {name} did not become {what} within {limit:?}; last seen: {}\nagent log: {}",
                    serde_json::to_string_pretty(&pod.map(|p| p.status)).unwrap(),
                    self.agent_log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of the node agent's log, for a failure message.
    pub fn agent_log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("node.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(15).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// The `get pods` table as rows of cells, by pod name.
    pub fn pod_rows(&self) -> BTreeMap<String, Vec<String>> {
        self.ok(&["get", "pods", "--no-headers"])
            .lines()
            .map(|l| {
                let cells: Vec<String> = split_cells(l);
                (cells[0].clone(), cells)
            })
            .collect()
    }

    /// The pid of the pause process of the pod's ready sandbox.
    pub fn pause_pid(&self, pod: &Pod) -> i32 {
        let uid = pod.metadata.uid.clone().unwrap();
        self.runtime()
            .list_pod_sandboxes()
            .unwrap()
            .into_iter()
            .filter(|s| s.metadata.uid == uid && s.state == SandboxState::Ready)
            .max_by_key(|s| s.created_at)
            .and_then(|s| s.pause_pid)
            .unwrap_or_else(|| panic!("no ready sandbox with a pause process for {uid}"))
    }

    /// The runtime's record of a container, by the id in its API status.
    pub fn record(&self, status: &ContainerStatus) -> podlab_runtime::status::ContainerStatus {
        let id = status
            .container_id
            .as_deref()
            .unwrap_or_else(|| panic!("{} has no container id", status.name));
        self.runtime()
            .container_status(&ContainerId::parse(id.trim_start_matches("podlab://")).unwrap())
            .unwrap()
    }

    /// Asserts that nothing of this root's pods is left: no mount below the root (pins,
    /// overlays, shm), no process whose cwd or root is below it, no shim or pause process of
    /// it, no sandbox, volume or log folder, no pod in the store, no cgroup. What the node
    /// removes after the command that ended the pod returned is waited for (bounded): a
    /// finished pod's delete removes it from the store at once and the agent then removes
    /// what it left, as kubelet's housekeeping does; a `run --rm` leaves the node's cgroup
    /// folders to a keeper for 1.5 s (issue 19 allows 2 s).
    pub fn assert_nothing_left(&self) {
        wait_until(Duration::from_secs(10), || self.leftovers().is_empty());
        let left = self.leftovers();
        assert!(
            left.is_empty(),
            "left below {}: {left:#?}",
            self.dir.display()
        );
    }

    /// What [`Root::assert_nothing_left`] finds, one line per kind of thing left.
    fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let mounts = podlab_ns::mnt::mounts_below(&self.dir).unwrap();
        if !mounts.is_empty() {
            left.push(format!("mounts: {mounts:?}"));
        }
        let procs = processes_of(&self.dir);
        if !procs.is_empty() {
            left.push(format!("processes: {procs:?}"));
        }
        for folder in ["sandboxes", "pods", "logs"] {
            let held: Vec<_> = std::fs::read_dir(self.dir.join(folder))
                .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
                .unwrap_or_default();
            if !held.is_empty() {
                left.push(format!("{folder}/ still holds {held:?}"));
            }
        }
        let (pods, _) = self.store().list::<Pod>(None).unwrap();
        if !pods.is_empty() {
            left.push(format!("pods in the store: {}", pods.len()));
        }
        if let Some(node) = self.runtime().cgroups() {
            let root = node.root.cgroup(&node.hierarchy);
            let cgroups: Vec<_> = root
                .unique_dirs()
                .into_iter()
                .filter(|d| d.exists())
                .collect();
            if !cgroups.is_empty() {
                left.push(format!("cgroups: {cgroups:?}"));
            }
        }
        left
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        // An agent that does not stop on SIGTERM within 5 s (one stuck in a failing test) is
        // killed, so that nothing it does races the gc below.
        let stopped = podlab_kubelet::node::stop_agent(&self.dir, Duration::from_secs(5));
        if !matches!(stopped, Ok(true)) {
            if let Some(pid) = podlab_kubelet::node::running_agent(&self.dir) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::SIGKILL,
                );
                wait_until(Duration::from_secs(10), || {
                    podlab_kubelet::node::running_agent(&self.dir).is_none()
                });
            }
        }
        // With its pods gone from the store, gc removes every sandbox they had.
        let _ = std::fs::remove_dir_all(self.dir.join("store"));
        let gc = self.run(&["gc"]);
        if gc.code != Some(0) {
            eprintln!("podlab gc in {} failed: {gc:?}", self.dir.display());
        }
        match podlab_ns::mnt::mounts_below(&self.dir) {
            Ok(mounts) if mounts.is_empty() => {
                let _ = std::fs::remove_dir_all(&self.dir);
            }
            other => eprintln!(
                "left {} in place: mounts below it: {other:?}",
                self.dir.display()
            ),
        }
    }
}

/// Cells of a kubectl table line (columns are separated by at least two spaces... or one,
/// where a cell is as wide as its column; the pod tables here have no spaces inside cells but
/// RESTARTS' `N (AGE ago)`).
pub fn split_cells(line: &str) -> Vec<String> {
    let mut cells: Vec<String> = Vec::new();
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut i = 0;
    while i < words.len() {
        if words[i].starts_with('(') && !cells.is_empty() {
            let last = cells.pop().unwrap();
            let mut joined = format!("{last} {}", words[i]);
            while !joined.ends_with(')') && i + 1 < words.len() {
                i += 1;
                joined = format!("{joined} {}", words[i]);
            }
            cells.push(joined);
        } else {
            cells.push(words[i].to_string());
        }
        i += 1;
    }
    cells
}

/// Processes tied to `root`: cwd or root below it (containers), or a shim/pause process whose
/// command line names it.
pub fn processes_of(root: &Path) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let below = |link: &str| {
            std::fs::read_link(format!("/proc/{pid}/{link}")).is_ok_and(|p| p.starts_with(root))
        };
        let helper = (cmdline.contains("podlab-shim") || cmdline.contains("podlab-pause"))
            && cmdline.contains(&root.display().to_string());
        if below("cwd") || below("root") || helper {
            found.push((pid, cmdline));
        }
    }
    found
}

pub fn running(pod: &Pod) -> bool {
    let status = pod.status.clone().unwrap_or_default();
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

pub fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn statuses(pod: &Pod) -> Vec<ContainerStatus> {
    let status = pod.status.clone().unwrap_or_default();
    status
        .init_container_statuses
        .into_iter()
        .flatten()
        .chain(status.container_statuses.into_iter().flatten())
        .chain(status.ephemeral_container_statuses.into_iter().flatten())
        .collect()
}

pub fn container(pod: &Pod, name: &str) -> ContainerStatus {
    statuses(pod)
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no status for container {name}"))
}

pub const LIMIT: Duration = Duration::from_secs(60);

const KERNEL_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: kernel, labels: {test: kernel}}
spec:
  terminationGracePeriodSeconds: 2
  volumes: [{name: work, emptyDir: {}}]
  initContainers:
  - name: first
    image: busybox
    command: [sh, -c, "echo first > /work/order"]
    volumeMounts: [{name: work, mountPath: /work}]
  - name: second
    image: busybox
    command: [sh, -c, "echo second >> /work/order"]
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: a
    image: busybox
    command: [sh, -c, "cat /work/order; echo hello from a; echo to stderr >&2; exec sleep 1001"]
    volumeMounts: [{name: work, mountPath: /work}]
  - name: b
    image: busybox
    command: [sleep, "1002"]
"#;

#[test]
fn containers_join_the_pause_namespaces_and_init_containers_run_first() {
    let root = Root::new("kernel").with_network();
    let applied = root.apply(KERNEL_POD);
    assert_eq!(applied.code, Some(0), "{applied:?}");
    assert_eq!(applied.stdout, "pod/kernel created\n");
    let pod = root.wait_pod("kernel", "running and ready", LIMIT, running);

    // The kernel's word: net, ipc and uts are the pause process's; pid and mnt are not.
    let pause = root.pause_pid(&pod);
    let a = root.record(&container(&pod, "a"));
    let b = root.record(&container(&pod, "b"));
    let (a_pid, b_pid) = (a.pid.unwrap(), b.pid.unwrap());
    for kind in [NsKind::Net, NsKind::Ipc, NsKind::Uts] {
        let p = ops::ns_inode(pause, kind).unwrap();
        assert_eq!(ops::ns_inode(a_pid, kind).unwrap(), p, "a's {kind}");
        assert_eq!(ops::ns_inode(b_pid, kind).unwrap(), p, "b's {kind}");
        assert_ne!(
            ops::self_inode(kind).unwrap(),
            p,
            "the pod's {kind} is the test's"
        );
    }
    for kind in [NsKind::Pid, NsKind::Mnt] {
        let p = ops::ns_inode(pause, kind).unwrap();
        let (ai, bi) = (
            ops::ns_inode(a_pid, kind).unwrap(),
            ops::ns_inode(b_pid, kind).unwrap(),
        );
        assert!(
            ai != p && bi != p && ai != bi,
            "{kind}: pause {p} a {ai} b {bi}"
        );
    }

    // Init containers ran one after the other, each to its end, before any app container.
    let first = root.record(&container(&pod, "first"));
    let second = root.record(&container(&pod, "second"));
    assert_eq!((first.exit_code, second.exit_code), (Some(0), Some(0)));
    assert!(
        first.finished_at <= second.started_at,
        "{first:?}\n{second:?}"
    );
    assert!(
        second.finished_at <= a.started_at.min(b.started_at),
        "second finished at {}, a started at {}, b at {}",
        second.finished_at,
        a.started_at,
        b.started_at
    );

    // debug --target a: the ephemeral container sees a's processes, a's pid 1 first.
    let debug = root.run(&[
        "debug", "kernel", "--image", "busybox", "--target", "a", "-c", "dbg", "--", "ps", "-o",
        "pid,args",
    ]);
    assert_eq!(debug.code, Some(0), "{debug:?}");
    let ps: Vec<Vec<&str>> = debug
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(ps[0][..], ["1", "sleep", "1001"], "{}", debug.stdout);
    assert!(
        !debug.stdout.contains("1002"),
        "b is not in a's pid namespace: {}",
        debug.stdout
    );
    let shown = root.wait_pod("kernel", "showing its ephemeral container", LIMIT, |p| {
        p.status
            .as_ref()
            .and_then(|s| s.ephemeral_container_statuses.as_ref())
            .is_some_and(|e| {
                e.iter().any(|s| {
                    s.name == "dbg"
                        && s.state
                            .as_ref()
                            .and_then(|st| st.terminated.as_ref())
                            .is_some_and(|t| t.exit_code == 0)
                })
            })
    });
    let dbg = container(&shown, "dbg");
    assert_eq!(dbg.restart_count, 0);

    // `-o json` is a v1 Pod with its status; kubectl decodes it and gives back the same.
    let json = root.ok(&["get", "pod", "kernel", "-o", "json"]);
    let value: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (value["apiVersion"].as_str(), value["kind"].as_str()),
        (Some("v1"), Some("Pod"))
    );
    let status = &value["status"];
    assert_eq!(status["phase"], "Running");
    for c in status["conditions"].as_array().unwrap() {
        assert!(c["lastTransitionTime"].is_string(), "{c}");
    }
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    for t in [
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodReadyToStartContainers",
    ] {
        assert!(types.contains(&t), "{t} missing from {types:?}");
    }
    for s in status["containerStatuses"].as_array().unwrap() {
        assert!(s["state"]["running"]["startedAt"].is_string(), "{s}");
        assert!(
            s["containerID"].as_str().unwrap().starts_with("podlab://"),
            "{s}"
        );
        assert_eq!(
            (s["ready"].as_bool(), s["started"].as_bool()),
            (Some(true), Some(true))
        );
        assert_eq!(s["restartCount"], 0);
        assert!(s["imageID"].as_str().unwrap().starts_with("sha256:"), "{s}");
    }
    for s in status["initContainerStatuses"].as_array().unwrap() {
        assert_eq!(s["state"]["terminated"]["exitCode"], 0, "{s}");
        assert_eq!(s["state"]["terminated"]["reason"], "Completed", "{s}");
    }
    for field in ["podIP", "hostIP", "startTime", "qosClass"] {
        assert!(
            status[field].is_string(),
            "status.{field} missing: {status}"
        );
    }
    let _: Pod = serde_json::from_value(value.clone()).expect("a v1 Pod");
    if installed("kubectl") {
        let kubectl = kubectl_annotate(&json, &["-o", "json"]);
        assert_eq!(kubectl.code, Some(0), "{kubectl:?}");
        let mut theirs: Value = serde_json::from_str(&kubectl.stdout).unwrap();
        // annotate's own change: it removed the (absent) annotation `x`.
        theirs["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        assert_eq!(theirs, value, "kubectl decodes and re-encodes it unchanged");
    } else {
        crate::support::record_skip(
            module_path!(),
            "kubectl is not installed: -o json not checked by it",
        );
    }

    // Logs: every stream of a container, in order; without -c the first container, with
    // kubectl's note on the choice.
    let logs = root.ok(&["logs", "kernel", "-c", "a"]);
    assert_eq!(logs, "first\nsecond\nhello from a\nto stderr\n");
    assert_eq!(root.ok(&["logs", "kernel", "-c", "first"]), "");
    let unnamed = root.run(&["logs", "kernel"]);
    assert_eq!(
        (unnamed.code, unnamed.stdout.as_str()),
        (Some(0), logs.as_str()),
        "{unnamed:?}"
    );
    assert_eq!(
        unnamed.stderr,
        "Defaulted container \"a\" out of: a, b, dbg (ephem), first (init), second (init)\n"
    );
    let unknown = root.run(&["logs", "kernel", "-c", "nope"]);
    assert_eq!(unknown.code, Some(1));
    assert_eq!(
        unknown.stderr,
        "podlab: container nope is not valid for pod kernel\n"
    );

    // exec: the command's own exit status; a bad container or command is podlab's error 1.
    let exec = root.run(&[
        "exec",
        "kernel",
        "-c",
        "b",
        "--",
        "sh",
        "-c",
        "hostname; exit 7",
    ]);
    assert_eq!(
        (exec.code, exec.stdout.as_str()),
        (Some(7), "kernel\n"),
        "{exec:?}"
    );
    assert_eq!(
        root.run(&["exec", "kernel", "-c", "nope", "--", "true"])
            .code,
        Some(1)
    );
    // A program that is not there: the shell's 127, as crictl, docker and podman exec end.
    assert_eq!(
        root.run(&["exec", "kernel", "-c", "b", "--", "/no/such"])
            .code,
        Some(127)
    );

    // The debug container was never restarted: one record of it, long after it ended.
    let pod = root.pod("kernel").unwrap();
    let dbg = container(&pod, "dbg");
    assert_eq!(dbg.restart_count, 0);
    assert!(dbg
        .state
        .and_then(|s| s.terminated)
        .is_some_and(|t| t.exit_code == 0));
    let dbg_records = root
        .runtime()
        .list_containers(&Default::default())
        .unwrap()
        .into_iter()
        .filter(|c| c.metadata.name == "dbg")
        .count();
    assert_eq!(dbg_records, 1, "the debug container ran once");
    assert_eq!(container(&pod, "a").restart_count, 0);

    // Delete: the termination path leaves nothing.
    let deleted = root.run(&["delete", "pod", "kernel"]);
    assert_eq!(
        (deleted.code, deleted.stdout.as_str()),
        (Some(0), "pod \"kernel\" deleted\n"),
        "{deleted:?}"
    );
    assert!(
        !Path::new(&format!("/proc/{pause}")).exists(),
        "pause {pause} still runs"
    );
    root.assert_nothing_left();
}

#[test]
fn a_shared_process_namespace_shows_every_container_and_pause_is_pid_1() {
    let root = Root::new("sharedpid");
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: shared}
spec:
  shareProcessNamespace: true
  terminationGracePeriodSeconds: 2
  containers:
  - {name: a, image: busybox, command: [sleep, "1001"]}
  - {name: b, image: busybox, command: [sleep, "1002"]}
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("shared", "running and ready", LIMIT, running);
    let pause = root.pause_pid(&pod);
    let a = root.record(&container(&pod, "a")).pid.unwrap();
    let b = root.record(&container(&pod, "b")).pid.unwrap();
    for kind in [NsKind::Pid, NsKind::Net, NsKind::Ipc, NsKind::Uts] {
        let p = ops::ns_inode(pause, kind).unwrap();
        assert_eq!(
            (
                ops::ns_inode(a, kind).unwrap(),
                ops::ns_inode(b, kind).unwrap()
            ),
            (p, p),
            "{kind}"
        );
    }
    assert_ne!(
        ops::ns_inode(a, NsKind::Mnt).unwrap(),
        ops::ns_inode(b, NsKind::Mnt).unwrap()
    );
    let ps = root.ok(&["exec", "shared", "-c", "a", "--", "ps", "-o", "pid,args"]);
    let rows: Vec<Vec<&str>> = ps
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][0], "1", "{ps}");
    assert!(rows[0][1].ends_with("podlab-pause"), "pause is PID 1: {ps}");
    for sleeper in ["1001", "1002"] {
        assert!(
            rows.iter().any(|r| r[1..] == ["sleep", sleeper]),
            "sleep {sleeper} not seen: {ps}"
        );
    }
    root.ok(&["delete", "pod", "shared"]);
    root.assert_nothing_left();
}

const STATUS_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: init-waits}
spec:
  terminationGracePeriodSeconds: 1
  initContainers: [{name: wait, image: busybox, command: [sleep, "1000"]}]
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: init-fails}
spec:
  restartPolicy: Never
  initContainers: [{name: fail, image: busybox, command: [sh, -c, "exit 1"]}]
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: initializing}
spec:
  terminationGracePeriodSeconds: 1
  initContainers: [{name: quick, image: busybox, command: ["true"]}]
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: completes}
spec:
  restartPolicy: Never
  containers: [{name: app, image: busybox, command: ["true"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: errs}
spec:
  restartPolicy: Never
  containers: [{name: app, image: busybox, command: [sh, -c, "exit 1"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: crashes}
spec:
  containers: [{name: app, image: busybox, command: [sh, -c, "echo crash; exit 1"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: restarts}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: state, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "n=$(cat /state/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/n; echo run $n; [ $n -ge 2 ] && exec sleep 1000; exit 1"]
    volumeMounts: [{name: state, mountPath: /state}]
---
apiVersion: v1
kind: Pod
metadata: {name: lingers}
spec:
  terminationGracePeriodSeconds: 30
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
"#;

#[test]
fn get_pods_status_reads_as_kubectl_prints_it_and_logs_previous_shows_the_last_run() {
    let root = Root::new("status");
    // A watch from the start sees every status the agent writes, the short-lived ones too.
    let mut watch = root
        .command(&["get", "pods", "-w", "--no-headers"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let watch_out = watch.stdout.take().unwrap();
    let collector =
        std::thread::spawn(move || std::io::read_to_string(watch_out).unwrap_or_default());
    let out = root.apply(STATUS_PODS);
    assert_eq!(out.code, Some(0), "{out:?}");

    let is = |want: &'static str| move |p: &Pod| phase(p) == want;
    root.wait_pod("completes", "Succeeded", LIMIT, is("Succeeded"));
    root.wait_pod("errs", "Failed", LIMIT, is("Failed"));
    root.wait_pod("init-fails", "Failed", LIMIT, is("Failed"));
    root.wait_pod("initializing", "running", LIMIT, running);
    root.wait_pod("lingers", "running", LIMIT, running);
    root.wait_pod("init-waits", "initializing", LIMIT, |p| {
        container(p, "wait").state.and_then(|s| s.running).is_some()
    });
    root.wait_pod("crashes", "crash-looping", LIMIT, |p| {
        let s = container(p, "app");
        s.restart_count >= 1
            && s.state
                .and_then(|st| st.waiting)
                .and_then(|w| w.reason)
                .as_deref()
                == Some("CrashLoopBackOff")
    });
    let restarted = root.wait_pod("restarts", "running its second run", LIMIT, |p| {
        running(p) && container(p, "app").restart_count == 1
    });
    let deleted = root.run(&["delete", "pod", "lingers", "--wait=false"]);
    assert_eq!(deleted.code, Some(0), "{deleted:?}");

    let expected = [
        ("init-waits", "0/1", "Init:0/1"),
        ("init-fails", "0/1", "Init:Error"),
        ("initializing", "1/1", "Running"),
        ("completes", "0/1", "Completed"),
        ("errs", "0/1", "Error"),
        ("crashes", "0/1", "CrashLoopBackOff"),
        ("restarts", "1/1", "Running"),
        ("lingers", "1/1", "Terminating"),
    ];
    // A crash-looping container is Running, then Error, then CrashLoopBackOff again, round
    // after round: the table is read until it shows every pod as expected at once.
    let shows = |rows: &BTreeMap<String, Vec<String>>| {
        expected.iter().all(|(pod, ready, status)| {
            rows.get(*pod)
                .is_some_and(|r| r[1] == *ready && r[2] == *status)
        })
    };
    let mut rows = root.pod_rows();
    let start = Instant::now();
    while !shows(&rows) && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(50));
        rows = root.pod_rows();
    }
    assert!(shows(&rows), "want {expected:?}, get pods shows {rows:#?}");
    let cell = |pod: &str, i: usize| rows[pod][i].clone();
    assert!(
        cell("restarts", 3).starts_with("1 ("),
        "RESTARTS with the age of the last: {rows:?}"
    );
    assert_eq!(cell("completes", 3), "0");

    // logs and --previous: the run before the restart, and the current one.
    assert_eq!(root.ok(&["logs", "restarts"]), "run 2\n");
    assert_eq!(root.ok(&["logs", "restarts", "--previous"]), "run 1\n");
    let previous = container(&restarted, "app")
        .last_state
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(previous.exit_code, 1);
    assert_eq!(
        root.record(&container(&restarted, "app")).metadata.attempt,
        1
    );
    let none = root.run(&["logs", "completes", "--previous"]);
    assert_eq!(none.code, Some(1), "no previous run: {none:?}");
    // A crash-looping container's logs are its last run's.
    assert!(root.ok(&["logs", "crashes"]).starts_with("crash\n"));

    let _ = watch.kill();
    let _ = watch.wait();
    let seen = collector.join().unwrap();
    let statuses_of = |pod: &str| -> Vec<String> {
        seen.lines()
            .map(split_cells)
            .filter(|c| c[0] == pod)
            .map(|c| c[2].clone())
            .collect()
    };
    let initializing = statuses_of("initializing");
    assert!(
        initializing.iter().any(|s| s == "PodInitializing"),
        "between its init container and its app container: {initializing:?}"
    );
    let order: Vec<&String> = initializing
        .iter()
        .filter(|s| s.as_str() != "Pending")
        .collect();
    assert_eq!(
        order.last().map(|s| s.as_str()),
        Some("Running"),
        "{initializing:?}"
    );
}

#[test]
fn delete_and_gc_leave_nothing_even_after_kill_9() {
    let root = Root::new("gc");
    // A pod whose agent and shim are killed: gc cleans the sandbox, delete finishes the pod.
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: victim}
spec:
  terminationGracePeriodSeconds: 2
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("victim", "running", LIMIT, running);
    let app_pid = root.record(&container(&pod, "app")).pid.unwrap();
    let sandbox = root.ready_sandbox();
    let agent = podlab_kubelet::node::running_agent(&root.dir).expect("an agent runs");
    kill9(agent);
    kill9(sandbox.shim_pid.unwrap());
    assert!(wait_until(Duration::from_secs(10), || {
        podlab_kubelet::node::running_agent(&root.dir).is_none()
    }));
    let gc = root.ok(&["gc"]);
    assert!(
        gc.contains(&format!("removed sandbox {}", sandbox.id.short())),
        "{gc}"
    );
    assert!(
        !Path::new(&format!("/proc/{app_pid}")).exists() || is_zombie(app_pid),
        "the container survived gc"
    );
    assert!(podlab_ns::mnt::mounts_below(&root.dir.join("sandboxes"))
        .unwrap()
        .is_empty());
    let deleted = root.run(&["delete", "pod", "victim", "--now"]);
    assert_eq!(deleted.code, Some(0), "{deleted:?}");
    root.assert_nothing_left();

    // A `run --rm` is kept by gc while its CLI lives, and cleaned once it is killed.
    let mut cli = root
        .command(&[
            "run", "held", "--rm", "--image", "busybox", "--", "sleep", "1000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let container_pid = wait_for_running_container(&root, "held");
    let gc = root.ok(&["gc"]);
    assert!(gc.contains("kept sandbox"), "{gc}");
    assert!(
        Path::new(&format!("/proc/{container_pid}")).exists(),
        "gc killed a live run"
    );
    kill9(cli.id() as i32);
    let _ = cli.wait();
    let gc = root.ok(&["gc"]);
    assert!(gc.contains("removed sandbox"), "{gc}");
    root.assert_nothing_left();

    // kill -9 of a `run --rm`'s shim: the CLI fails, cleans what it can, and gc the rest.
    let cli = root
        .command(&[
            "run", "orphaned", "--rm", "--image", "busybox", "--", "sleep", "1000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_running_container(&root, "orphaned");
    let shim = root.runtime().list_pod_sandboxes().unwrap()[0]
        .shim_pid
        .unwrap();
    kill9(shim);
    let failed = Out::of(cli.wait_with_output().unwrap());
    assert_ne!(failed.code, Some(0), "{failed:?}");
    root.ok(&["gc"]);
    root.assert_nothing_left();
}

/// A `kill -9` of `run --rm` while the shim it started ahead waits for its arguments (at the
/// fault point after the sandbox's folder): the shim reads the end of its stdin and exits by
/// itself, and gc removes the folder, which has no record. Twice: in a fresh root (the shim
/// started once the state folder is made) and in one with state (started before the pod is
/// even decoded).
#[test]
fn a_run_killed_while_its_shim_waits_for_its_arguments_leaves_nothing_after_gc() {
    let root = Root::new("run-ahead-killed");
    let log = root.dir.join("fault.log");
    for round in ["a fresh root", "a root with state"] {
        let _ = std::fs::remove_file(&log);
        let killed = Out::of(
            root.command(&[
                "run",
                "ahead",
                "--rm",
                "--image",
                "busybox",
                "--restart",
                "Never",
                "--command",
                "--",
                "true",
            ])
            .env(podlab_fault::ENV, "sandbox.after-folder")
            .env(podlab_fault::LOG_ENV, &log)
            .stdin(Stdio::null())
            .output()
            .unwrap(),
        );
        assert_eq!(
            killed.code, None,
            "{round}: killed at the point: {killed:?}"
        );
        let reached = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            reached.starts_with("sandbox.after-folder "),
            "{round}: {reached:?}"
        );
        let folders: Vec<_> = std::fs::read_dir(root.dir.join("sandboxes"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(folders.len(), 1, "{round}: {folders:?}");
        assert!(
            folders[0].join("shim.log").exists(),
            "{round}: the shim was started before the point (its log is opened at its spawn)"
        );
        assert!(
            wait_until(LIMIT, || processes_of(&root.dir).is_empty()),
            "{round}: the waiting shim outlived its caller: {:?}",
            processes_of(&root.dir)
        );
        let gc = root.ok(&["gc"]);
        assert!(gc.contains("removed sandbox"), "{round}: {gc}");
        root.assert_nothing_left();
    }
}

fn kill9(pid: i32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).unwrap();
}

/// Whether `pid` has exited and waits to be reaped.
pub fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

/// Waits until the runtime has a running container of sandbox `pod`; its pid.
pub fn wait_for_running_container(root: &Root, pod: &str) -> i32 {
    let mut pid = None;
    let found = wait_until(LIMIT, || {
        let runtime = root.runtime();
        pid = runtime
            .list_containers(&Default::default())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.state == ContainerState::Running)
            .find(|c| c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some(pod))
            .and_then(|c| c.pid);
        pid.is_some()
    });
    assert!(found, "no running container for {pod}");
    pid.unwrap()
}

#[test]
fn run_rm_prints_the_output_and_returns_the_exit_code() {
    let root = Root::new("runrm");
    let out = root.run(&[
        "run",
        "once",
        "--rm",
        "--restart",
        "Never",
        "--image",
        "busybox",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 3",
    ]);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "err\n");
    let out = root.run(&[
        "run",
        "cmd",
        "--rm",
        "--image",
        "busybox",
        "--command",
        "--",
        "hostname",
    ]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (Some(0), "cmd\n"),
        "{out:?}"
    );
    root.assert_nothing_left();
}

#[test]
fn bad_manifests_are_refused_with_the_field_path_and_nothing_is_created() {
    let root = Root::new("badmanifest");
    let good = "apiVersion: v1\nkind: Pod\nmetadata: {name: good}\nspec:\n  containers: [{name: a, image: busybox}]\n";
    let cases: [(&str, String, &str); 6] = [
        ("YAML syntax", "apiVersion: v1\nkind: Pod\nmetadata: {name: x\n".into(), "line"),
        (
            "wrong type",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  terminationGracePeriodSeconds: soon\n  containers: [{name: a, image: busybox}]\n".into(),
            "spec.terminationGracePeriodSeconds",
        ),
        (
            "unknown field",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: a, image: busybox, imagePulPolicy: Never}]\n".into(),
            "spec.containers[0].imagePulPolicy",
        ),
        (
            "duplicate container names",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: a, image: busybox}, {name: a, image: busybox}]\n".into(),
            "spec.containers[1].name",
        ),
        (
            "missing image",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: a}]\n".into(),
            "spec.containers[0].image",
        ),
        (
            "a good document before a bad one",
            format!("{good}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: x}}\nspec:\n  containers: [{{name: a}}]\n"),
            "spec.containers[0].image",
        ),
    ];
    for (what, manifest, path) in cases {
        let out = root.apply(&manifest);
        assert_eq!(out.code, Some(1), "{what}: {out:?}");
        assert!(out.stdout.is_empty(), "{what}: {out:?}");
        assert!(
            out.stderr.contains(path),
            "{what}: the error names {path}: {}",
            out.stderr
        );
        assert_eq!(
            out.stderr.trim_end().lines().count(),
            1,
            "{what}: one line: {}",
            out.stderr
        );
    }
    assert!(
        podlab_kubelet::node::running_agent(&root.dir).is_none(),
        "no agent was started"
    );
    assert!(!root.dir.join("sandboxes").exists(), "no sandbox was made");
    let listed = root.run(&["get", "pods"]);
    assert_eq!(
        (listed.stdout.as_str(), listed.stderr.as_str()),
        ("", "No resources found in default namespace.\n")
    );
    root.assert_nothing_left();
}

/// Whether `program` is on the PATH.
pub fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// `kubectl annotate --local -f - x- ARGS` on `json`: kubectl's own printers on our object.
pub fn kubectl_annotate(json: &str, args: &[&str]) -> Out {
    let mut child = Command::new("kubectl")
        .args(["annotate", "--local", "-f", "-", "x-"])
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl (installed at /usr/bin/kubectl)");
    // kubectl refuses a bad template before it reads stdin, so it may be gone before the object
    // is written: a broken pipe then is its answer, judged by its exit status and stderr.
    match child.stdin.take().unwrap().write_all(json.as_bytes()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            panic!("kubectl's stdin: {err}")
        }
        _ => {}
    }
    Out::of(child.wait_with_output().unwrap())
}

#[test]
fn an_image_built_with_umoci_and_copied_by_skopeo_imports_and_runs() {
    crate::skip_unless!(
        installed("umoci") && installed("skopeo"),
        "umoci and skopeo are not both installed"
    );
    let root = Root::new("image");
    let work = root.dir.join("build");
    std::fs::create_dir_all(&work).unwrap();
    let layout = work.join("layout");
    let sh = |script: &str| {
        let out = Command::new("sh")
            .args(["-ec", script])
            .current_dir(&work)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // An image of two layers: busybox, then a script; its CMD runs the script.
    sh("umoci init --layout layout && umoci new --image layout:v1 \
        && umoci unpack --image layout:v1 bundle \
        && mkdir -p bundle/rootfs/bin && cp /bin/busybox bundle/rootfs/bin/busybox \
        && for t in sh echo cat; do ln -s busybox bundle/rootfs/bin/$t; done \
        && umoci repack --image layout:v1 bundle \
        && printf '#!/bin/sh\\necho made by umoci, run by podlab\\n' > bundle/rootfs/hello \
        && chmod 755 bundle/rootfs/hello \
        && umoci repack --image layout:v1 bundle \
        && umoci config --image layout:v1 --config.cmd /hello");
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o755)).unwrap();
    sh("skopeo copy --quiet oci:layout:v1 oci-archive:umoci.tar:umoci-hello:v1");

    let imported = root.ok(&[
        "image",
        "import",
        layout.to_str().unwrap(),
        "--name",
        "umoci-hello:v1",
    ]);
    assert!(imported.contains("umoci-hello:v1"), "{imported}");
    let imported = root.ok(&[
        "image",
        "import",
        work.join("umoci.tar").to_str().unwrap(),
        "--name",
        "archived:v1",
    ]);
    assert!(imported.contains("archived:v1"), "{imported}");
    let listed = root.ok(&["image", "ls"]);
    assert!(
        listed.contains("umoci-hello") && listed.contains("archived"),
        "{listed}"
    );

    let ran = root.run(&["run", "hello", "--rm", "--image", "umoci-hello:v1"]);
    assert_eq!(
        (ran.code, ran.stdout.as_str()),
        (Some(0), "made by umoci, run by podlab\n"),
        "{ran:?}"
    );
    let ran = root.run(&[
        "run",
        "hello2",
        "--rm",
        "--image",
        "archived:v1",
        "--command",
        "--",
        "cat",
        "/hello",
    ]);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert!(ran.stdout.contains("echo made by umoci"), "{ran:?}");
    std::fs::remove_dir_all(&work).unwrap();
    root.assert_nothing_left();
}

/// Issue 15: `podlab ns ls` names the pod and container of each namespace podlab made: the
/// pause process's net, ipc and uts are the pod's `(sandbox)` namespaces, a container's own mnt
/// is that container's; the host's own namespaces have neither (`-`).
#[test]
fn ns_ls_shows_the_pod_and_container_of_podlab_namespaces() {
    let root = Root::new("nsls-owners");
    let out = root.run(&["run", "owned", "--image", "busybox", "--", "sleep", "600"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("owned", "Running", LIMIT, running);
    let pause = root.pause_pid(&pod);
    let app = root
        .record(&container(&pod, "owned"))
        .pid
        .expect("the container's pid");

    let listing = root.ok(&["ns", "ls"]);
    let header: Vec<&str> = listing.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, crate::support::NS_LS_COLUMNS);
    let row_of = |inode: u64| -> Vec<&str> {
        listing
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|cells| cells[0] == inode.to_string())
            .unwrap_or_else(|| panic!("{inode} not listed:\n{listing}"))
    };
    for kind in [NsKind::Net, NsKind::Ipc, NsKind::Uts] {
        let row = row_of(ops::ns_inode(pause, kind).unwrap());
        assert_eq!(row[1], kind.proc_name());
        assert_eq!(row[5..7], ["default/owned", "(sandbox)"], "{kind}: {row:?}");
    }
    let mnt = row_of(ops::ns_inode(app, NsKind::Mnt).unwrap());
    assert_eq!(mnt[5..7], ["default/owned", "owned"], "{mnt:?}");
    let own = row_of(ops::ns_inode(std::process::id() as i32, NsKind::Net).unwrap());
    assert_eq!(own[5..7], ["-", "-"], "{own:?}");
    root.ok(&["delete", "pod", "owned", "--now"]);
}

/// Issue 15: `podlab node -v --pod NAME` follows one pod: its passes are narrated with their
/// rule IDs, another pod's and the node's own lines are not.
#[test]
fn node_verbose_with_pod_narrates_that_pod_alone() {
    use std::io::Read;
    let root = Root::new("node-follow");
    let mut agent = root
        .command(&["node", "-v", "--pod", "followed"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(LIMIT, || podlab_kubelet::node::running_agent(&root.dir)
            .is_some()),
        "the foreground agent did not start"
    );
    for name in ["followed", "other"] {
        let out = root.run(&["run", name, "--image", "busybox", "--", "sleep", "600"]);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    for name in ["followed", "other"] {
        root.wait_pod(name, "Running", LIMIT, running);
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.id() as i32),
        nix::sys::signal::SIGTERM,
    )
    .unwrap();
    let mut narration = String::new();
    agent
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut narration)
        .unwrap();
    agent.wait().unwrap();
    let lines: Vec<&str> = narration.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("default/followed: ") && l.contains("SBX-1")),
        "no narration of the followed pod's first sandbox:\n{narration}"
    );
    let others: Vec<&&str> = lines
        .iter()
        .filter(|l| !l.starts_with("default/followed"))
        .collect();
    assert!(
        others.is_empty(),
        "lines not about the followed pod: {others:#?}"
    );
}

/// Found by the fault-point test, whose roots have long names: fsconfig(2) takes at most 255
/// bytes per value, so a `$PODLAB_ROOT` deeper than ~45 characters made every container of
/// the node agent fail with `fsconfig(overlay) lowerdir: EINVAL`. Here the root is deep enough
/// for the upper directory alone to pass that limit.
#[test]
fn a_deep_podlab_root_still_starts_containers_on_an_overlay() {
    let root = Root::new(&format!("deep-{}", "d".repeat(120)));
    assert!(root.dir.join("sandboxes/0123456789012345678901234567890123456789012345678901234567890123/containers/0123456789012345678901234567890123456789012345678901234567890123/upper").as_os_str().len() > 255);
    let out = root.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: deep}
spec:
  terminationGracePeriodSeconds: 2
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
"#,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("deep", "running", LIMIT, running);
    let pid = root.record(&container(&pod, "app")).pid.unwrap();
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let rootfs = mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .unwrap_or_else(|| panic!("no / in the container's mountinfo:\n{mountinfo}"));
    assert!(rootfs.contains(" - overlay "), "{rootfs}");
    let deleted = root.run(&["delete", "pod", "deep", "--now"]);
    assert_eq!(deleted.code, Some(0), "{deleted:?}");
    root.assert_nothing_left();
}
