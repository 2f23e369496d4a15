//! The node agent against the kernel. Needs root; run inside the test sandbox:
//!
//! ```text
//! cargo build -p podlab-pause -p podlab-runtime --bins
//! unshare --mount --uts --ipc --net --pid --fork --mount-proc --propagation private \
//!     sh -c 'ip link set lo up && cargo test -p podlab-kubelet --test node'
//! ```
//!
//! Every test has a `$PODLAB_ROOT` of its own (below `$PODLAB_ROOT` when set, else the temp
//! folder) with an agent of its own — on a thread, or as a child process where the test kills
//! it — and a guard that stops the agent and removes every sandbox, mount and folder, also when
//! the test fails. The evidence is the kernel's and the runtime's: pids, `/proc/PID/ns/*` inode
//! ids, exit codes, the files containers wrote, the mount table; the store's statuses and events
//! are checked against them. Waits are bounded polls; nothing is timed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use podlab_control::{PodDeletion, Preconditions, Store};
use podlab_kubelet::backoff::BackoffPolicy;
use podlab_kubelet::node::{self, NodeConfig, NodeError};
use podlab_kubelet::translate;
use podlab_ns::NsKind;
use podlab_runtime::{
    ContainerFilter, ContainerState, ContainerStatus as Record, NetworkAttachment, NetworkPlugin,
    PodNetwork, Runtime, RuntimeConfig, SandboxFilter, SandboxState, SandboxStatus,
};

const WAIT: Duration = Duration::from_secs(60);
const NODE_NAME: &str = "podlab-test-node";
/// Set in the environment of a child agent: the root it serves.
const CHILD_ROOT: &str = "PODLAB_NODE_TEST_ROOT";

// ---------------------------------------------------------------------------------------------
// The test node: a root, its store, the runtime (to look), and an agent.

enum Agent {
    Thread {
        stop: Arc<AtomicBool>,
        thread: JoinHandle<Result<(), NodeError>>,
    },
    Process(Child),
}

struct TestNode {
    dir: PathBuf,
    store: Store,
    runtime: Runtime,
    agent: Option<Agent>,
}

impl TestNode {
    fn new(name: &str) -> TestNode {
        assert!(
            nix::unistd::geteuid().is_root(),
            "these tests need root (run them under unshare as the file's doc says)"
        );
        // Orphaned shims come to the test process, and the runtime reaps them.
        podlab_ns::pid::set_child_subreaper().unwrap();
        let base = std::env::var_os("PODLAB_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("node-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = config(&dir);
        podlab_image::Store::open(&config.runtime.image_root)
            .unwrap()
            .ensure_builtin_busybox()
            .unwrap();
        TestNode {
            store: Store::open(node::store_root(&dir)).unwrap(),
            runtime: Runtime::open(config.runtime.clone()).unwrap(),
            dir,
            agent: None,
        }
    }

    fn config(&self) -> NodeConfig {
        config(&self.dir)
    }

    /// An agent on a thread of the test process.
    fn start_agent(&mut self, config: NodeConfig) {
        assert!(self.agent.is_none());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || node::run(config, flag));
        self.agent = Some(Agent::Thread { stop, thread });
        self.wait_agent_up();
    }

    /// An agent in a child process (this test binary, run as [`agent_process_entry`]).
    fn start_agent_process(&mut self) -> i32 {
        assert!(self.agent.is_none());
        let child = agent_command(&self.dir).spawn().unwrap();
        let pid = child.id() as i32;
        self.agent = Some(Agent::Process(child));
        self.wait_agent_up();
        pid
    }

    fn wait_agent_up(&self) {
        wait_for("the agent to take its lock", || {
            node::running_agent(&self.dir).is_some()
        });
    }

    fn stop_agent(&mut self) {
        match self.agent.take() {
            Some(Agent::Thread { stop, thread }) => {
                stop.store(true, Ordering::SeqCst);
                thread.join().unwrap().unwrap();
            }
            Some(Agent::Process(mut child)) => {
                let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGTERM);
                let deadline = Instant::now() + WAIT;
                while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
            None => {}
        }
    }

    /// `kill -9` of a child agent.
    fn kill_agent_process(&mut self) {
        let Some(Agent::Process(mut child)) = self.agent.take() else {
            panic!("the agent is not a child process");
        };
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn apply(&self, yaml: &str) -> Pod {
        let pod = podlab_api::decode_pod(yaml, "test").unwrap();
        self.store.create(pod).unwrap()
    }

    fn pod(&self, name: &str) -> Pod {
        self.store.get::<Pod>("default", name).unwrap()
    }

    fn try_pod(&self, name: &str) -> Option<Pod> {
        self.store.get::<Pod>("default", name).ok()
    }

    /// Polls the pod until `ready` holds for it; the pod's status is shown when it never does.
    fn wait_pod(&self, name: &str, what: &str, ready: impl Fn(&Pod) -> bool) -> Pod {
        let deadline = Instant::now() + WAIT;
        loop {
            let pod = self.try_pod(name);
            if let Some(pod) = pod.as_ref().filter(|p| ready(p)) {
                return pod.clone();
            }
            if Instant::now() > deadline {
                panic!(
                    "pod {name}: {what} did not happen within {WAIT:?}; its status: {}\nevents: {:#?}",
                    pod.map(|p| serde_json::to_string_pretty(&p.status).unwrap())
                        .unwrap_or_else(|| "(gone)".into()),
                    self.event_lines(name)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn events_of(&self, pod: &Pod) -> Vec<Event> {
        let (events, _) = self.store.list::<Event>(Some("default")).unwrap();
        events
            .into_iter()
            .filter(|e| e.involved_object.uid == pod.metadata.uid)
            .collect()
    }

    fn event_lines(&self, name: &str) -> Vec<String> {
        let (events, _) = self.store.list::<Event>(Some("default")).unwrap();
        events
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .map(|e| {
                format!(
                    "{} {} x{}: {}",
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.count.unwrap_or(1),
                    e.message.unwrap_or_default()
                )
            })
            .collect()
    }

    fn has_event(&self, pod: &Pod, reason: &str, message_part: &str) -> bool {
        self.events_of(pod).iter().any(|e| {
            e.reason.as_deref() == Some(reason)
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains(message_part))
        })
    }

    fn sandboxes_of(&self, pod: &Pod) -> Vec<SandboxStatus> {
        let mut labels = BTreeMap::new();
        labels.insert(
            translate::LABEL_POD_UID.to_string(),
            pod.metadata.uid.clone().unwrap(),
        );
        self.runtime
            .list_pod_sandboxes_filtered(&SandboxFilter {
                labels,
                ..SandboxFilter::default()
            })
            .unwrap()
    }

    /// The pod's container records of `name`, oldest first.
    fn records(&self, pod: &Pod, name: &str) -> Vec<Record> {
        let mut labels = BTreeMap::new();
        labels.insert(
            translate::LABEL_POD_UID.to_string(),
            pod.metadata.uid.clone().unwrap(),
        );
        labels.insert(
            translate::LABEL_CONTAINER_NAME.to_string(),
            name.to_string(),
        );
        self.runtime
            .list_containers(&ContainerFilter {
                labels,
                ..ContainerFilter::default()
            })
            .unwrap()
    }

    fn newest_record(&self, pod: &Pod, name: &str) -> Option<Record> {
        self.records(pod, name).pop()
    }

    /// The overlay upper folder of a record: what the container wrote to its own root.
    fn upper(&self, record: &Record) -> PathBuf {
        self.runtime
            .layout()
            .sandbox(&record.sandbox_id)
            .container(&record.id)
            .upper()
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.stop_agent();
        if let Ok(sandboxes) = self.runtime.list_pod_sandboxes() {
            for sandbox in sandboxes {
                let _ = self.runtime.remove_pod_sandbox(&sandbox.id);
            }
        }
        let _ = self.runtime.gc();
        if let Ok(mounts) = podlab_ns::mnt::mounts_below(&self.dir) {
            for mount in mounts.iter().rev() {
                let _ = podlab_ns::mnt::unmount(&mount.mount_point);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The test settings: short backoffs and resync, this test's helpers and images.
fn config(dir: &Path) -> NodeConfig {
    let mut config = NodeConfig::new(dir);
    config.runtime = RuntimeConfig {
        root: dir.to_path_buf(),
        helper_dir: helper_dir(),
        image_root: dir.join("images"),
    };
    config.node_name = NODE_NAME.into();
    config.resync = Duration::from_millis(200);
    // Longer than any wait: a change the relist missed would make a test fail, not just slow.
    config.full_resync = Duration::from_secs(120);
    config.backoff = BackoffPolicy {
        initial: 1,
        max: 4,
        reset_after: 600,
    };
    config.error_backoff = Duration::from_secs(1);
    // Image GC off: the test roots share the host's disk, whose use is not the tests' business.
    config.image_gc.high_percent = 100;
    config.verbose = std::env::var_os("PODLAB_TEST_VERBOSE").is_some();
    config
}

/// target/debug, where `cargo build --bins` put podlab-pause and podlab-shim.
fn helper_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    for helper in ["podlab-pause", "podlab-shim"] {
        assert!(
            dir.join(helper).is_file(),
            "{helper} is not in {}: run `cargo build -p podlab-pause -p podlab-runtime --bins` first",
            dir.display()
        );
    }
    dir
}

/// This test binary, running only [`agent_process_entry`], as an agent for `root`.
fn agent_command(root: &Path) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "agent_process_entry",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ROOT, root)
        .stdin(Stdio::null());
    if std::env::var_os("PODLAB_TEST_VERBOSE").is_none() {
        command.stdout(Stdio::null());
    }
    command
}

/// Not a test: the body of a child agent that tests start (and kill) as a process.
#[test]
#[ignore = "the entry point of a child agent, started by the tests"]
fn agent_process_entry() {
    let Some(root) = std::env::var_os(CHILD_ROOT) else {
        return;
    };
    let stop = node::stop_on_signals().unwrap();
    let mut config = config(Path::new(&root));
    // The benchmark runs the agent at the settings a node runs with.
    if let Ok(resync) = std::env::var("PODLAB_NODE_RESYNC") {
        config.resync = node::parse_duration(&resync).unwrap();
    }
    if let Ok(full) = std::env::var("PODLAB_NODE_FULL_RESYNC") {
        config.full_resync = node::parse_duration(&full).unwrap();
    }
    node::run(config, stop).unwrap();
}

fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

fn container(pod: &Pod, name: &str) -> Option<ContainerStatus> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .chain(status.init_container_statuses.iter())
        .flatten()
        .find(|c| c.name == name)
        .cloned()
}

fn running(pod: &Pod, name: &str) -> bool {
    container(pod, name).is_some_and(|c| c.state.is_some_and(|s| s.running.is_some()))
}

fn waiting_reason(pod: &Pod, name: &str) -> Option<String> {
    container(pod, name)?.state?.waiting?.reason
}

fn restart_count(pod: &Pod, name: &str) -> i32 {
    container(pod, name).map_or(-1, |c| c.restart_count)
}

fn container_id(pod: &Pod, name: &str) -> Option<String> {
    container(pod, name)?
        .container_id
        .map(|id| id.trim_start_matches("podlab://").to_string())
}

fn alive(pid: i32) -> bool {
    match podlab_runtime::liveness::read_stat(pid) {
        Ok(Some(stat)) => stat.state != 'Z',
        _ => false,
    }
}

fn pod_yaml(name: &str, restart: &str, command: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  restartPolicy: {restart}
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", {command:?}]
"#
    )
}

// ---------------------------------------------------------------------------------------------
// Restarts.

/// RST-3..5, PH-4/5b-5e: each restart policy with a container that exits 0 and one that exits
/// 1; restartCount in the status is the runtime's attempt of the newest record.
#[test]
fn restart_policies_with_exit_0_and_exit_1() {
    let mut node = TestNode::new("restarts");
    node.start_agent(node.config());
    let cases = [
        ("always-0", "Always", 0, true, "Running"),
        ("always-1", "Always", 1, true, "Running"),
        ("onfailure-0", "OnFailure", 0, false, "Succeeded"),
        ("onfailure-1", "OnFailure", 1, true, "Running"),
        ("never-0", "Never", 0, false, "Succeeded"),
        ("never-1", "Never", 1, false, "Failed"),
    ];
    for (name, policy, code, _, _) in cases {
        node.apply(&pod_yaml(name, policy, &format!("exit {code}")));
    }
    for (name, _, code, restarts, expected_phase) in cases {
        let pod = if restarts {
            // The second restart waits 1 s, the third 2 s: in between the status holds still.
            node.wait_pod(name, "two restarts, as the runtime records them", |pod| {
                let count = restart_count(pod, "app");
                count >= 2
                    && node.newest_record(pod, "app").is_some_and(|r| {
                        r.metadata.attempt as i32 == count && r.state == ContainerState::Exited
                    })
                    && phase(pod) == expected_phase
            })
        } else {
            node.wait_pod(name, &format!("phase {expected_phase}"), |pod| {
                phase(pod) == expected_phase
            })
        };
        let records = node.records(&pod, "app");
        let newest = records.last().unwrap();
        assert_eq!(
            newest.exit_code,
            Some(code),
            "{name}: the kernel's exit code"
        );
        let status = container(&pod, "app").unwrap();
        let state = if restarts {
            status.last_state.and_then(|s| s.terminated)
        } else {
            status.state.and_then(|s| s.terminated)
        }
        .unwrap_or_else(|| panic!("{name}: no terminated state in {pod:?}"));
        assert_eq!(state.exit_code, code, "{name}");
        if !restarts {
            assert_eq!(records.len(), 1, "{name}: never restarted");
            assert_eq!(status.restart_count, 0, "{name}");
            assert_eq!(
                state.reason.as_deref(),
                Some(if code == 0 { "Completed" } else { "Error" })
            );
            // A terminal pod's sandbox is stopped: no pause process is left.
            let sandboxes = node.sandboxes_of(&pod);
            wait_for(&format!("{name}: the sandbox to stop"), || {
                node.sandboxes_of(&pod)
                    .iter()
                    .all(|s| s.state == SandboxState::NotReady && s.pause_pid.is_none())
            });
            assert_eq!(sandboxes.len(), 1);
        }
    }
}

/// BO-1, BO-2, API-5: the first crash restarts at once, the second waits its backoff and the
/// container shows waiting CrashLoopBackOff with kubelet's message, and a BackOff event.
#[test]
fn crash_loop_backoff_after_the_second_crash() {
    let mut node = TestNode::new("backoff");
    let mut config = node.config();
    config.backoff = BackoffPolicy {
        initial: 3,
        max: 6,
        reset_after: 600,
    };
    node.start_agent(config);
    node.apply(&pod_yaml("crasher", "Always", "exit 3"));
    let pod = node.wait_pod("crasher", "CrashLoopBackOff", |pod| {
        waiting_reason(pod, "app").as_deref() == Some("CrashLoopBackOff")
    });
    let status = container(&pod, "app").unwrap();
    assert_eq!(
        status.restart_count, 1,
        "the first crash restarted at once, the second waits"
    );
    let uid = pod.metadata.uid.clone().unwrap();
    let message = status.state.unwrap().waiting.unwrap().message.unwrap();
    assert_eq!(
        message,
        format!("back-off 3s restarting failed container=app pod=crasher_default({uid})")
    );
    let last = status.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 3);
    assert_eq!(node.records(&pod, "app").len(), 2, "two records: two runs");
    assert!(node.has_event(
        &pod,
        "BackOff",
        &format!("Back-off restarting failed container app in pod crasher_default({uid})")
    ));
    // When the backoff is over the container runs again: attempt 2.
    node.wait_pod("crasher", "the third run", |pod| {
        node.newest_record(pod, "app")
            .is_some_and(|r| r.metadata.attempt == 2)
    });
}

// ---------------------------------------------------------------------------------------------
// Probes.

/// PRB-W2, PRB-W3, CTR-3: an exec liveness probe that fails is run exactly failureThreshold
/// times (each run appends a line in the container's own root), then the container is killed
/// and restarted; the new one passes its probe and stays.
#[test]
fn liveness_failure_kills_after_exactly_failure_threshold_probes() {
    let mut node = TestNode::new("liveness");
    node.start_agent(node.config());
    node.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: live}
spec:
  terminationGracePeriodSeconds: 2
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", "if [ -f /data/started ]; then touch /tmp/healthy; fi; touch /data/started; exec sleep 1000"]
    volumeMounts: [{name: data, mountPath: /data}]
    livenessProbe:
      exec: {command: ["sh", "-c", "echo probe >> /tmp/probes; test -f /tmp/healthy"]}
      periodSeconds: 1
      failureThreshold: 3
"#,
    );
    let pod = node.wait_pod("live", "a restart after the liveness failure", |pod| {
        restart_count(pod, "app") == 1 && running(pod, "app")
    });
    let records = node.records(&pod, "app");
    assert_eq!(records.len(), 2);
    let first = &records[0];
    assert_eq!(first.metadata.attempt, 0);
    assert_eq!(first.state, ContainerState::Exited);
    let probes = std::fs::read_to_string(node.upper(first).join("tmp/probes")).unwrap();
    assert_eq!(
        probes.lines().count(),
        3,
        "the first container was probed exactly failureThreshold times"
    );
    assert!(node.has_event(&pod, "Unhealthy", "Liveness probe failed"));
    assert!(node.has_event(
        &pod,
        "Killing",
        "Container app failed liveness probe, will be restarted"
    ));
    // The second container is healthy: it is probed again and again and is not killed.
    let second = records[1].clone();
    wait_for("three probes of the healthy container", || {
        std::fs::read_to_string(node.upper(&second).join("tmp/probes"))
            .is_ok_and(|t| t.lines().count() >= 3)
    });
    let pod = node.pod("live");
    assert_eq!(restart_count(&pod, "app"), 1);
    assert_eq!(
        container_id(&pod, "app").as_deref(),
        Some(second.id.as_str())
    );
    assert!(alive(second.pid.unwrap()));
}

/// CTR-3, BO-1..4, API-5 (issue 13, defect 4): a container its liveness probe kills again and
/// again backs off as kubelet's does and shows CrashLoopBackOff. The kill and the restart
/// happen in one pass, whose view still shows the container running: the gate must read the
/// newest exited record (kubelet's `doBackOff`), not the newest record, or it never gates.
#[test]
fn a_container_killed_by_its_liveness_probe_backs_off_into_crash_loop() {
    let mut node = TestNode::new("liveness-backoff");
    // A first backoff longer than a probe-and-kill cycle (~3 s): the third kill is gated.
    let mut config = node.config();
    config.backoff = BackoffPolicy {
        initial: 5,
        max: 10,
        reset_after: 600,
    };
    node.start_agent(config);
    node.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: unhealthy}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: ["sleep", "1000"]
    livenessProbe:
      exec: {command: ["false"]}
      periodSeconds: 1
      failureThreshold: 1
"#,
    );
    let pod = node.wait_pod(
        "unhealthy",
        "CrashLoopBackOff after liveness kills",
        |pod| waiting_reason(pod, "app").as_deref() == Some("CrashLoopBackOff"),
    );
    let status = container(&pod, "app").unwrap();
    assert!(status.restart_count >= 2, "{status:?}");
    let uid = pod.metadata.uid.clone().unwrap();
    let message = status.state.unwrap().waiting.unwrap().message.unwrap();
    assert!(
        message.starts_with("back-off ")
            && message.ends_with(&format!(
                "restarting failed container=app pod=unhealthy_default({uid})"
            )),
        "{message}"
    );
    let last = status.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 137, "killed by SIGKILL after the 1 s grace");
    // While it backs off, no process of it runs: every record has exited, its pid is gone.
    for record in node.records(&pod, "app") {
        assert_eq!(record.state, ContainerState::Exited, "{record:?}");
        assert!(!record.pid.is_some_and(alive), "{record:?}");
    }
    assert!(node.has_event(
        &pod,
        "Killing",
        "Container app failed liveness probe, will be restarted"
    ));
    assert!(node.has_event(&pod, "BackOff", "Back-off restarting failed container app"));
}

/// PRB-2, PRB-W6, CTR-4: a startup probe gates readiness (a readiness probe that always passes
/// does not make the container ready before it has started); its failure kills the container,
/// and the next one, which passes it, becomes started and ready.
#[test]
fn startup_probe_gates_readiness_and_its_failure_restarts() {
    let mut node = TestNode::new("startup");
    node.start_agent(node.config());
    node.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: slow}
spec:
  terminationGracePeriodSeconds: 2
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", "if [ -f /data/started ]; then touch /tmp/up; fi; touch /data/started; exec sleep 1000"]
    volumeMounts: [{name: data, mountPath: /data}]
    startupProbe:
      exec: {command: ["test", "-f", "/tmp/up"]}
      periodSeconds: 1
      failureThreshold: 2
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 1
"#,
    );
    let first = node.wait_pod("slow", "the first container running", |p| {
        running(p, "app") && restart_count(p, "app") == 0
    });
    let status = container(&first, "app").unwrap();
    assert_eq!(
        (status.started, status.ready),
        (Some(false), false),
        "not started, so not ready"
    );
    let pod = node.wait_pod("slow", "a restart that starts and becomes ready", |p| {
        restart_count(p, "app") == 1
            && container(p, "app").is_some_and(|c| c.started == Some(true) && c.ready)
            && condition(p, "Ready").as_deref() == Some("True")
    });
    assert!(node.has_event(
        &pod,
        "Killing",
        "Container app failed startup probe, will be restarted"
    ));
    assert!(node.has_event(&pod, "Unhealthy", "Startup probe failed"));
    assert_eq!(node.records(&pod, "app")[0].state, ContainerState::Exited);
}

/// PRB-3, COND-CR-3/4, COND-READY-1/3: a readiness probe that tests for a file flips Ready and
/// ContainersReady when the file is made and removed inside the container.
#[test]
fn readiness_flips_ready_both_ways() {
    let mut node = TestNode::new("readiness");
    node.start_agent(node.config());
    node.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: ready}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: busybox
    command: ["sleep", "1000"]
    readinessProbe:
      exec: {command: ["test", "-f", "/tmp/ready"]}
      periodSeconds: 1
      failureThreshold: 1
"#,
    );
    let ready = |pod: &Pod, want: &str| {
        condition(pod, "Ready").as_deref() == Some(want)
            && condition(pod, "ContainersReady").as_deref() == Some(want)
    };
    let pod = node.wait_pod("ready", "running, not ready", |pod| {
        running(pod, "app") && ready(pod, "False")
    });
    assert!(!container(&pod, "app").unwrap().ready);
    let id = podlab_runtime::ContainerId::parse(&container_id(&pod, "app").unwrap()).unwrap();
    let exec = |cmd: &[&str]| {
        let cmd: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        let result = node
            .runtime
            .exec_sync(&id, &cmd, Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(result.exit_code, 0);
    };
    exec(&["touch", "/tmp/ready"]);
    let pod = node.wait_pod("ready", "Ready", |pod| ready(pod, "True"));
    assert!(container(&pod, "app").unwrap().ready);
    exec(&["rm", "/tmp/ready"]);
    let pod = node.wait_pod("ready", "not Ready again", |pod| ready(pod, "False"));
    assert_eq!(
        restart_count(&pod, "app"),
        0,
        "readiness failures never kill"
    );
    assert!(node.has_event(&pod, "Unhealthy", "Readiness probe failed"));
}

/// Section 6.3: httpGet and tcpSocket probes reach the container inside the pod's network
/// namespace (its loopback; the same port on the node's is closed): a served path is Ready, a
/// 404 is `HTTP probe failed with statuscode: 404`; a tcpSocket liveness probe on the listening
/// port passes, on a closed port it fails and restarts the container.
#[test]
fn http_and_tcp_probes_reach_the_pod_network_namespace() {
    let mut node = TestNode::new("socket-probes");
    node.start_agent(node.config());
    let server = |name: &str, path: &str, live_port: u16| {
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: busybox
    command: ["sh", "-c", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{{name: http, containerPort: 8080}}]
    readinessProbe:
      httpGet: {{path: {path}, port: http}}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      tcpSocket: {{port: {live_port}}}
      periodSeconds: 1
      failureThreshold: 3
"#
        )
    };
    node.apply(&server("served", "/index.html", 8080));
    node.apply(&server("missing", "/nothing-here", 8081));
    let served = node.wait_pod("served", "Ready through httpGet", |p| {
        condition(p, "Ready").as_deref() == Some("True")
    });
    // Nothing listens on 8080 in the node's own network namespace: the probe went into the pod's.
    assert!(std::net::TcpStream::connect(("127.0.0.1", 8080)).is_err());
    let missing = node.wait_pod("missing", "a 404, then a liveness restart", |p| {
        restart_count(p, "web") >= 1
            && node.has_event(
                p,
                "Unhealthy",
                "Readiness probe failed: HTTP probe failed with statuscode: 404",
            )
    });
    assert!(node.has_event(
        &missing,
        "Unhealthy",
        "Liveness probe failed: dial tcp 127.0.0.1:8081: connect: connection refused"
    ));
    assert_eq!(condition(&missing, "Ready").as_deref(), Some("False"));
    // Meanwhile the same number of liveness probes passed on the listening port.
    let served_now = node.pod("served");
    assert_eq!(restart_count(&served_now, "web"), 0);
    assert!(!node.has_event(&served, "Unhealthy", "Liveness probe failed"));
    assert_eq!(
        container_id(&served_now, "web"),
        container_id(&served, "web")
    );
}

/// A process the test started, killed and reaped when the test ends, also when it fails.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 13, defect 11: an httpGet probe with `scheme: HTTPS` speaks TLS and, as kubelet's,
/// does not verify the certificate: a self-signed one naming another host passes. An HTTPS
/// probe of a plain HTTP server fails in Go's words. The TLS server is the host's
/// `openssl s_server`, run in the pod's network namespace (busybox has none): nothing listens
/// on its port in the node's namespace, so the probe went into the pod's.
#[test]
fn https_probes_skip_certificate_verification_and_fail_on_plain_http() {
    let mut node = TestNode::new("https-probes");
    node.start_agent(node.config());
    let (cert, key) = (node.dir.join("cert.pem"), node.dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=not-the-pod.example"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl (the openssl package) makes the test's certificate");
    assert!(made.success());
    let pod = |name: &str, command: &str, port: u16| {
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: busybox
    command: ["sh", "-c", {command:?}]
    readinessProbe:
      httpGet: {{path: /, port: {port}, scheme: HTTPS}}
      periodSeconds: 1
      failureThreshold: 1
"#
        )
    };
    node.apply(&pod("tls", "exec sleep 1000", 8443));
    node.apply(&pod(
        "plain",
        "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www",
        8080,
    ));
    let tls = node.wait_pod("tls", "running", |p| running(p, "web"));
    let pause = node.sandboxes_of(&tls)[0].pause_pid.unwrap();
    let _server = KillOnDrop(
        Command::new("nsenter")
            .arg(format!("--net=/proc/{pause}/ns/net"))
            .args(["openssl", "s_server", "-www", "-accept", "127.0.0.1:8443"])
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    node.wait_pod("tls", "Ready through an HTTPS probe", |p| {
        condition(p, "Ready").as_deref() == Some("True")
    });
    assert!(std::net::TcpStream::connect(("127.0.0.1", 8443)).is_err());

    let plain = node.wait_pod("plain", "an HTTPS probe of plain HTTP failing", |p| {
        node.has_event(
            p,
            "Unhealthy",
            "Readiness probe failed: Get \"https://127.0.0.1:8080/\": http: server gave HTTP response to HTTPS client",
        )
    });
    assert!(running(&plain, "web"));
    assert_eq!(
        condition(&node.pod("plain"), "Ready").as_deref(),
        Some("False")
    );
}

/// EPH-1, EPH-2, EPH-4: an ephemeral container added to a running pod (what `podlab debug`
/// does) is started once, shares the pod's network namespace and the target container's pid
/// namespace, is never restarted, and shows in ephemeralContainerStatuses.
#[test]
fn an_ephemeral_container_joins_its_target_and_is_never_restarted() {
    let mut node = TestNode::new("ephemeral");
    node.start_agent(node.config());
    node.apply(&pod_yaml("debugged", "Always", "exec sleep 1000"));
    let mut pod = node.wait_pod("debugged", "running", |p| running(p, "app"));
    let app = node.newest_record(&pod, "app").unwrap();
    let eph: k8s_openapi::api::core::v1::EphemeralContainer =
        serde_json::from_value(serde_json::json!({
            "name": "debugger",
            "image": "busybox",
            "command": ["sh", "-c", "sleep 1; exit 7"],
            "targetContainerName": "app",
        }))
        .unwrap();
    pod.spec.as_mut().unwrap().ephemeral_containers = Some(vec![eph]);
    node.store.update(pod).unwrap();
    let pod = node.wait_pod("debugged", "the debugger to run and exit", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.ephemeral_container_statuses.as_ref())
            .and_then(|list| list.first().cloned())
            .and_then(|s| s.state?.terminated)
            .is_some_and(|t| t.exit_code == 7)
    });
    let records = node.records(&pod, "debugger");
    assert_eq!(records.len(), 1, "EPH-2: never restarted");
    let debugger = &records[0];
    let sandbox = node.sandboxes_of(&pod).remove(0);
    assert_eq!(
        debugger.namespaces.get(&NsKind::Net),
        Some(&podlab_ns::ops::ns_inode(sandbox.pause_pid.unwrap(), NsKind::Net).unwrap())
    );
    assert_eq!(
        debugger.namespaces.get(&NsKind::Pid),
        Some(&podlab_ns::ops::ns_inode(app.pid.unwrap(), NsKind::Pid).unwrap()),
        "EPH-4: the target container's pid namespace"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(node.records(&pod, "debugger").len(), 1);
    assert_eq!(restart_count(&node.pod("debugged"), "app"), 0);
}

/// INIT-6, INIT-5, ACT-6: init containers run one after the other, each to its end, before the
/// app container starts (the runtime's start and finish times, and the order of what they wrote).
#[test]
fn init_containers_run_in_order_before_the_app() {
    let mut node = TestNode::new("init");
    node.start_agent(node.config());
    node.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: init}
spec:
  terminationGracePeriodSeconds: 2
  volumes: [{name: work, emptyDir: {}}]
  initContainers:
  - {name: first, image: busybox, command: ["sh", "-c", "sleep 0.3; echo first >> /work/log"], volumeMounts: [{name: work, mountPath: /work}]}
  - {name: second, image: busybox, command: ["sh", "-c", "sleep 0.3; echo second >> /work/log"], volumeMounts: [{name: work, mountPath: /work}]}
  containers:
  - {name: app, image: busybox, command: ["sh", "-c", "echo app >> /work/log; exec sleep 1000"], volumeMounts: [{name: work, mountPath: /work}]}
"#,
    );
    let pod = node.wait_pod("init", "the app running", |pod| {
        running(pod, "app") && condition(pod, "Initialized").as_deref() == Some("True")
    });
    let first = node.newest_record(&pod, "first").unwrap();
    let second = node.newest_record(&pod, "second").unwrap();
    let app = node.newest_record(&pod, "app").unwrap();
    assert_eq!(first.exit_code, Some(0));
    assert_eq!(second.exit_code, Some(0));
    assert!(
        first.finished_at <= second.started_at,
        "{first:?} {second:?}"
    );
    assert!(second.finished_at <= app.started_at, "{second:?} {app:?}");
    let uid = pod.metadata.uid.clone().unwrap();
    let log = node
        .dir
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/work/log");
    assert_eq!(
        std::fs::read_to_string(log).unwrap(),
        "first\nsecond\napp\n"
    );
    let init = pod
        .status
        .as_ref()
        .unwrap()
        .init_container_statuses
        .clone()
        .unwrap();
    assert_eq!(
        init.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["first", "second"]
    );
    for status in init {
        let done = status.state.unwrap().terminated.unwrap();
        assert_eq!(
            (done.exit_code, done.reason.as_deref()),
            (0, Some("Completed"))
        );
    }
    assert_eq!(phase(&pod), "Running");
}

// ---------------------------------------------------------------------------------------------
// Sandboxes.

fn namespaces(pid: i32) -> Vec<u64> {
    [NsKind::Net, NsKind::Ipc, NsKind::Uts]
        .iter()
        .map(|kind| podlab_ns::ops::ns_inode(pid, *kind).unwrap())
        .collect()
}

/// SBX-3, ACT-1, ACT-6, 2.6: kill -9 of the pause process gives a new sandbox (attempt 1) with a
/// new pause process and new namespaces, a SandboxChanged event, and the container restarted
/// inside it. Under Never (ACT-2) the pod is only killed: no new sandbox.
#[test]
fn killing_pause_recreates_the_sandbox_except_under_never() {
    let mut node = TestNode::new("pause");
    node.start_agent(node.config());
    node.apply(&pod_yaml("always", "Always", "exec sleep 1000"));
    node.apply(&pod_yaml("never", "Never", "exec sleep 1000"));
    let mut old = BTreeMap::new();
    for name in ["always", "never"] {
        let pod = node.wait_pod(name, "running", |pod| running(pod, "app"));
        let sandboxes = node.sandboxes_of(&pod);
        assert_eq!(sandboxes.len(), 1);
        let pause = sandboxes[0].pause_pid.unwrap();
        let app = node.newest_record(&pod, "app").unwrap();
        assert_eq!(namespaces(app.pid.unwrap()), namespaces(pause));
        old.insert(name, (pod, sandboxes[0].clone(), namespaces(pause)));
    }
    // Namespace inode ids are recycled once a namespace is freed: holding the old ones open
    // keeps them alive, so a new namespace cannot be given an old id.
    let held: Vec<std::fs::File> = old
        .values()
        .flat_map(|(_, sandbox, _)| {
            let pid = sandbox.pause_pid.unwrap();
            ["net", "ipc", "uts"]
                .map(|kind| std::fs::File::open(format!("/proc/{pid}/ns/{kind}")).unwrap())
        })
        .collect();
    for (_, sandbox, _) in old.values() {
        let pause = nix::unistd::Pid::from_raw(sandbox.pause_pid.unwrap());
        nix::sys::signal::kill(pause, nix::sys::signal::SIGKILL).unwrap();
    }

    let (pod, old_sandbox, old_ns) = &old["always"];
    let pod = node.wait_pod("always", "a new sandbox with the app restarted", |p| {
        running(p, "app")
            && restart_count(p, "app") == 1
            && node
                .sandboxes_of(pod)
                .iter()
                .any(|s| s.metadata.attempt == 1 && s.state == SandboxState::Ready)
    });
    let new_sandbox = node
        .sandboxes_of(&pod)
        .into_iter()
        .find(|s| s.metadata.attempt == 1)
        .unwrap();
    assert_ne!(new_sandbox.id, old_sandbox.id);
    let new_pause = new_sandbox.pause_pid.unwrap();
    assert_ne!(Some(new_pause), old_sandbox.pause_pid);
    let new_ns = namespaces(new_pause);
    for (new, old) in new_ns.iter().zip(old_ns) {
        assert_ne!(new, old, "every pod namespace is new");
    }
    let app = node.newest_record(&pod, "app").unwrap();
    assert_eq!(app.sandbox_id, new_sandbox.id);
    assert_eq!(app.metadata.attempt, 1);
    assert_eq!(
        namespaces(app.pid.unwrap()),
        new_ns,
        "the restarted container joined the new sandbox"
    );
    assert!(node.has_event(
        &pod,
        "SandboxChanged",
        "Pod sandbox changed, it will be killed and re-created."
    ));
    drop(held);

    let (never, _, _) = &old["never"];
    let pod = node.wait_pod("never", "killed, and Failed", |p| phase(p) == "Failed");
    let app = node.newest_record(&pod, "app").unwrap();
    assert_eq!(app.state, ContainerState::Exited);
    let sandboxes = node.sandboxes_of(never);
    assert_eq!(sandboxes.len(), 1, "ACT-2: no new sandbox under Never");
    assert_eq!(sandboxes[0].metadata.attempt, 0);
    assert_eq!(restart_count(&pod, "app"), 0);
}

/// kill -9 of the pod's shim: its containers become Unknown and its sandbox NotReady (SBX-3);
/// the old processes are killed with the old sandbox and the pod comes back in a new one.
#[test]
fn killing_the_shim_brings_the_pod_back_in_a_new_sandbox() {
    let mut node = TestNode::new("shim-kill");
    node.start_agent(node.config());
    node.apply(&pod_yaml("shimless", "Always", "exec sleep 1000"));
    let pod = node.wait_pod("shimless", "running", |p| running(p, "app"));
    let sandbox = node.sandboxes_of(&pod).remove(0);
    let old_app = node.newest_record(&pod, "app").unwrap().pid.unwrap();
    let old_pause = sandbox.pause_pid.unwrap();
    let shim = nix::unistd::Pid::from_raw(sandbox.shim_pid.unwrap());
    nix::sys::signal::kill(shim, nix::sys::signal::SIGKILL).unwrap();
    let pod = node.wait_pod("shimless", "running in a new sandbox", |p| {
        running(p, "app")
            && node
                .sandboxes_of(&pod)
                .iter()
                .any(|s| s.metadata.attempt == 1 && s.state == SandboxState::Ready)
    });
    assert!(
        !alive(old_app) && !alive(old_pause),
        "the old pod's processes are gone"
    );
    let app = node.newest_record(&pod, "app").unwrap();
    assert_eq!(app.metadata.attempt, 1);
    assert!(alive(app.pid.unwrap()));
    assert!(node.has_event(&pod, "SandboxChanged", "Pod sandbox changed"));
}

/// Issue 19: at 1000 idle pods, each pod's once-a-minute resync read the runtime again (the
/// stamps of its records, its shim's and pause's `/proc/PID/stat`) and had the PLEG watch it
/// anew, about 30 system calls a pass. A resync of a pod in which the PLEG's watches saw
/// nothing works from the last read. Here resyncs come every 200 ms (the relist's period, the
/// shortest allowed): the kernel's counts for the pod's worker thread show it running passes
/// without a `read(2)`, and a change still reaches the status (the app, killed, restarts).
#[test]
fn regression_each_resync_of_an_idle_pod_read_the_runtime_again() {
    let mut node = TestNode::new("resync");
    let mut config = node.config();
    config.full_resync = config.resync;
    node.start_agent(config);
    // The worker thread's name: "pod-" and the pod's name, 15 bytes in all.
    node.apply(&pod_yaml("idle-resync", "Always", "exec sleep 1000"));
    node.wait_pod("idle-resync", "running", |p| running(p, "app"));
    let worker = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|task| {
            std::fs::read_to_string(task.join("comm")).is_ok_and(|c| c.trim() == "pod-idle-resync")
        })
        .expect("the pod's worker thread");
    // (read(2) calls, times scheduled) of the worker thread.
    let counts = || {
        let io = std::fs::read_to_string(worker.join("io")).unwrap();
        let reads = io
            .lines()
            .find_map(|l| l.strip_prefix("syscr: "))
            .unwrap()
            .parse::<u64>()
            .unwrap();
        let sched = std::fs::read_to_string(worker.join("schedstat")).unwrap();
        let runs = sched
            .split(' ')
            .nth(2)
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap();
        (reads, runs)
    };
    // Once the PLEG watches the pod (a relist after the last read), a second in which the
    // worker ran at least three passes and read nothing.
    let deadline = Instant::now() + WAIT;
    let mut windows = Vec::new();
    loop {
        let (reads, runs) = counts();
        std::thread::sleep(Duration::from_secs(1));
        let (reads_after, runs_after) = counts();
        windows.push((reads_after - reads, runs_after - runs));
        if reads_after == reads && runs_after - runs >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no second of resyncs without a read; (reads, runs) each second: {windows:?}"
        );
    }
    let pod = node.pod("idle-resync");
    let app = node.newest_record(&pod, "app").unwrap().pid.unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(app), nix::sys::signal::SIGKILL).unwrap();
    let pod = node.wait_pod("idle-resync", "restarted after its kill", |p| {
        running(p, "app") && restart_count(p, "app") == 1
    });
    assert_ne!(node.newest_record(&pod, "app").unwrap().pid, Some(app));
}

/// A network plugin whose ADD fails while `fail` is set (as host-local does with its range
/// used up), and succeeds with 10.88.0.9 after; it records when each ADD came.
struct FlakyNetwork {
    fail: AtomicBool,
    attempts: std::sync::Mutex<Vec<Instant>>,
}

impl FlakyNetwork {
    fn failing() -> FlakyNetwork {
        FlakyNetwork {
            fail: AtomicBool::new(true),
            attempts: Default::default(),
        }
    }
}

impl NetworkPlugin for FlakyNetwork {
    fn name(&self) -> &str {
        "flaky"
    }
    fn set_up(
        &self,
        _: &PodNetwork<'_>,
    ) -> Result<NetworkAttachment, podlab_runtime::network::PluginError> {
        self.attempts.lock().unwrap().push(Instant::now());
        if self.fail.load(Ordering::SeqCst) {
            return Err("no IP addresses available in range set: 10.88.0.2-10.88.0.2".into());
        }
        Ok(NetworkAttachment {
            ips: vec!["10.88.0.9".into()],
            result: None,
        })
    }
    fn tear_down(
        &self,
        _: &PodNetwork<'_>,
        _: Option<&serde_json::Value>,
    ) -> Result<(), podlab_runtime::network::PluginError> {
        Ok(())
    }
}

/// Section 7: a failing RunPodSandbox (here the network plugin's ADD) is FailedCreatePodSandBox
/// with the error, the pod stays Pending with ContainerCreating, and the next try after the error
/// backoff succeeds; the plugin's IP becomes the pod IP. An image that is not in the store, with
/// `imagePullPolicy: Never`, is ErrImageNeverPull.
#[test]
fn failed_sandbox_creation_is_retried_and_missing_images_are_err_image_never_pull() {
    let mut node = TestNode::new("sandbox-fail");
    let plugin = Arc::new(FlakyNetwork::failing());
    let mut config = node.config();
    config.network = Some(plugin.clone());
    node.start_agent(config);
    node.apply(&pod_yaml("net", "Always", "exec sleep 1000"));
    let pod = node.wait_pod("net", "FailedCreatePodSandBox and a status", |pod| {
        pod.status.is_some()
            && node.has_event(pod, "FailedCreatePodSandBox", "no IP addresses available")
    });
    assert_eq!(phase(&pod), "Pending");
    assert_eq!(
        waiting_reason(&pod, "app").as_deref(),
        Some("ContainerCreating")
    );
    assert_eq!(
        condition(&pod, "PodReadyToStartContainers").as_deref(),
        Some("False")
    );
    assert!(
        node.sandboxes_of(&pod).is_empty(),
        "a failed RunPodSandbox leaves nothing"
    );
    plugin.fail.store(false, Ordering::SeqCst);
    let pod = node.wait_pod("net", "running", |p| running(p, "app"));
    assert_eq!(
        pod.status.as_ref().unwrap().pod_ip.as_deref(),
        Some("10.88.0.9")
    );

    node.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: noimage}
spec:
  containers:
  - {name: app, image: "registry.example/absent:1.0", imagePullPolicy: Never}
"#,
    );
    let pod = node.wait_pod("noimage", "ErrImageNeverPull", |pod| {
        waiting_reason(pod, "app").as_deref() == Some("ErrImageNeverPull")
    });
    assert_eq!(phase(&pod), "Pending");
    assert!(node.has_event(&pod, "Failed", "Error: ErrImageNeverPull"));
    assert!(node.has_event(
        &pod,
        "ErrImageNeverPull",
        "Container image \"registry.example/absent:1.0\" is not present with pull policy of Never"
    ));
}

/// Issue 13: a sandbox that keeps failing is retried as kubelet's pod worker retries a failed
/// sync, after `backOffPeriod` (the test's 1 s) plus up to 50 % jitter, never at once, whatever
/// wakes the worker meanwhile (its own status writes, the events, the relist).
#[test]
fn a_sandbox_that_keeps_failing_is_retried_after_the_pod_worker_backoff() {
    let mut node = TestNode::new("sandbox-backoff");
    let plugin = Arc::new(FlakyNetwork::failing());
    let mut config = node.config();
    config.network = Some(plugin.clone());
    let backoff = config.error_backoff;
    node.start_agent(config);
    node.apply(&pod_yaml("failing", "Always", "exec sleep 1000"));
    wait_for("four RunPodSandbox attempts", || {
        plugin.attempts.lock().unwrap().len() >= 4
    });
    let attempts = plugin.attempts.lock().unwrap().clone();
    let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|gap| *gap >= backoff),
        "RunPodSandbox retried sooner than the {backoff:?} backoff: gaps {gaps:?}"
    );
    let pod = node.pod("failing");
    assert!(node.has_event(&pod, "FailedCreatePodSandBox", "no IP addresses available"));
    assert_eq!(phase(&pod), "Pending");
    assert!(node.sandboxes_of(&pod).is_empty());
}

// ---------------------------------------------------------------------------------------------
// The agent's own death, and pod deletion.

/// kill -9 of the agent: the pods keep running (their pause and container processes stay), and
/// a new agent picks them up without restarting anything healthy.
#[test]
fn killing_the_agent_loses_no_pod_and_restarts_nothing() {
    let mut node = TestNode::new("agent-kill");
    node.start_agent_process();
    node.apply(&pod_yaml("one", "Always", "exec sleep 1000"));
    node.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: two}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: busybox
    command: ["sleep", "1000"]
    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
"#,
    );
    let mut before = BTreeMap::new();
    for name in ["one", "two"] {
        let pod = node.wait_pod(name, "running and ready", |p| {
            running(p, "app") && condition(p, "Ready").as_deref() == Some("True")
        });
        let record = node.newest_record(&pod, "app").unwrap();
        let pause = node.sandboxes_of(&pod)[0].pause_pid.unwrap();
        before.insert(name, (record, pause));
    }
    node.kill_agent_process();
    assert_eq!(
        node::running_agent(&node.dir),
        None,
        "the kernel dropped its lock"
    );
    for (record, pause) in before.values() {
        assert!(alive(*pause) && alive(record.pid.unwrap()));
    }

    node.start_agent(node.config());
    // A pod made now runs only once the new agent has gone through its pods.
    node.apply(&pod_yaml("three", "Always", "exec sleep 1000"));
    node.wait_pod("three", "running", |p| running(p, "app"));
    node.wait_pod("two", "ready under the new agent", |p| {
        condition(p, "Ready").as_deref() == Some("True")
    });
    for (name, (record, pause)) in &before {
        let pod = node.pod(name);
        assert_eq!(phase(&pod), "Running");
        assert_eq!(
            container_id(&pod, "app").as_deref(),
            Some(record.id.as_str()),
            "{name}"
        );
        assert_eq!(restart_count(&pod, "app"), 0, "{name}");
        assert_eq!(node.records(&pod, "app").len(), 1, "{name}: no new record");
        let sandboxes = node.sandboxes_of(&pod);
        assert_eq!(sandboxes.len(), 1, "{name}: SBX-6 kept the sandbox");
        assert_eq!(sandboxes[0].pause_pid, Some(*pause));
        assert!(alive(record.pid.unwrap()));
    }
}

/// The termination path: `delete` (a deletionTimestamp) gets Killing events and SIGTERM, the
/// sandbox stopped and removed, the pod's folders removed, and the pod leaves the store; nothing
/// of it is left on the machine.
#[test]
fn delete_leaves_nothing_behind() {
    let mut node = TestNode::new("delete");
    node.start_agent(node.config());
    node.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: gone}
spec:
  terminationGracePeriodSeconds: 10
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: polite
    image: busybox
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]
    volumeMounts: [{name: data, mountPath: /data}]
  - {name: stubborn, image: busybox, command: ["sleep", "1000"]}
"#,
    );
    let pod = node.wait_pod("gone", "both running", |p| {
        running(p, "polite") && running(p, "stubborn")
    });
    let uid = pod.metadata.uid.clone().unwrap();
    let sandbox = node.sandboxes_of(&pod).remove(0);
    let sandbox_dir = node.runtime.layout().sandbox(&sandbox.id).dir;
    let pids: Vec<i32> = ["polite", "stubborn"]
        .iter()
        .map(|c| node.newest_record(&pod, c).unwrap().pid.unwrap())
        .chain(sandbox.pause_pid)
        .chain(sandbox.shim_pid)
        .collect();
    let volumes = node.dir.join("pods").join(&uid);
    let logs = node.dir.join("logs").join(format!("default_gone_{uid}"));
    assert!(volumes.is_dir() && logs.is_dir());
    assert!(!podlab_ns::mnt::mounts_below(&sandbox_dir)
        .unwrap()
        .is_empty());

    let deletion = node
        .store
        .delete_pod_gracefully("default", "gone", Some(3), &Preconditions::default())
        .unwrap();
    assert!(matches!(deletion, PodDeletion::Terminating(_)));
    wait_for("the pod to leave the store", || {
        node.try_pod("gone").is_none()
    });

    assert!(node.has_event(&pod, "Killing", "Stopping container polite"));
    assert!(node.has_event(&pod, "Killing", "Stopping container stubborn"));
    assert!(node.sandboxes_of(&pod).is_empty(), "no sandbox record");
    assert!(!sandbox_dir.exists(), "no sandbox folder");
    assert!(
        podlab_ns::mnt::mounts_below(&node.dir).unwrap().is_empty(),
        "no pin or mount left: {:?}",
        podlab_ns::mnt::mounts_below(&node.dir).unwrap()
    );
    for pid in pids {
        assert!(!alive(pid), "process {pid} still runs");
    }
    assert!(!volumes.exists(), "no volume folder");
    assert!(!logs.exists(), "no log folder");
}

/// Pods removed from the store without the termination path — forced while the agent runs, or
/// while no agent ran — have what they left on the node removed: processes, sandboxes, folders.
/// Stopping the agent itself leaves the pods running.
#[test]
fn pods_gone_from_the_store_are_cleaned_up() {
    let mut node = TestNode::new("orphans");
    node.start_agent(node.config());
    node.apply(&pod_yaml("forced", "Always", "exec sleep 1000"));
    node.apply(&pod_yaml("orphan", "Always", "exec sleep 1000"));
    let left = |name: &str| {
        let pod = node.wait_pod(name, "running", |p| running(p, "app"));
        let sandbox = node.sandboxes_of(&pod).remove(0);
        let pids = vec![
            node.newest_record(&pod, "app").unwrap().pid.unwrap(),
            sandbox.pause_pid.unwrap(),
            sandbox.shim_pid.unwrap(),
        ];
        let uid = pod.metadata.uid.clone().unwrap();
        let dirs = vec![
            node.runtime.layout().sandbox(&sandbox.id).dir,
            node.dir.join("pods").join(&uid),
            node.dir.join("logs").join(format!("default_{name}_{uid}")),
        ];
        (pids, dirs)
    };
    let (forced_pids, forced_dirs) = left("forced");
    let (orphan_pids, orphan_dirs) = left("orphan");
    node.stop_agent();
    assert!(
        orphan_pids.iter().chain(&forced_pids).all(|&p| alive(p)),
        "a stopped agent leaves its pods running"
    );
    node.store.delete::<Pod>("default", "orphan").unwrap();
    node.start_agent(node.config());
    let cleaned = |pids: &[i32], dirs: &[PathBuf]| {
        pids.iter().all(|&p| !alive(p)) && dirs.iter().all(|d| !d.exists())
    };
    wait_for("the orphan to be cleaned up at the agent's start", || {
        cleaned(&orphan_pids, &orphan_dirs)
    });
    assert!(
        forced_pids.iter().all(|&p| alive(p)),
        "the other pod is left alone"
    );
    node.store.delete::<Pod>("default", "forced").unwrap();
    wait_for("the forced deletion to be cleaned up", || {
        cleaned(&forced_pids, &forced_dirs)
    });
    assert!(node.runtime.list_pod_sandboxes().unwrap().is_empty());
    assert!(podlab_ns::mnt::mounts_below(&node.dir).unwrap().is_empty());
}

/// One agent per root: ensure_running starts a detached one when none runs and finds the running
/// one afterwards; stop_agent ends it.
#[test]
fn ensure_running_starts_one_agent_per_root() {
    let node = TestNode::new("ensure");
    let pid = node::ensure_running_with(agent_command(&node.dir), &node.dir).unwrap();
    assert!(alive(pid));
    assert_eq!(node::running_agent(&node.dir), Some(pid));
    let again = node::ensure_running_with(agent_command(&node.dir), &node.dir).unwrap();
    assert_eq!(again, pid, "no second agent");
    match node::run(node.config(), Arc::new(AtomicBool::new(true))) {
        Err(NodeError::AlreadyRunning { pid: Some(p), .. }) => assert_eq!(p, pid),
        other => panic!("a second agent ran: {other:?}"),
    }
    // The detached agent is in a session of its own.
    let session = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid))).unwrap();
    assert_eq!(session.as_raw(), pid);
    assert!(node::stop_agent(&node.dir, WAIT).unwrap());
    assert_eq!(node::running_agent(&node.dir), None);
    wait_for("the agent process to end", || !alive(pid));
}

// ---------------------------------------------------------------------------------------------
// Benchmark (run by hand: `... --test node -- --ignored bench_ --nocapture`).

/// The agent's CPU with 100 idle pods (pause + one `sleep` container each) at steady state:
/// utime + stime of the agent process over 30 s, as a share of one core. Target: under 2 %.
#[test]
#[ignore = "a benchmark: about a minute and 200 processes"]
fn bench_agent_cpu_with_100_idle_pods() {
    const PODS: usize = 100;
    let measure = Duration::from_secs(
        std::env::var("PODLAB_BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    );
    let mut node = TestNode::new("bench");
    let agent = node.start_agent_process();
    for i in 0..PODS {
        node.apply(&pod_yaml(
            &format!("idle-{i}"),
            "Always",
            "exec sleep 100000",
        ));
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    loop {
        let (pods, _) = node.store.list::<Pod>(Some("default")).unwrap();
        let up = pods.iter().filter(|p| running(p, "app")).count();
        if up == PODS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {up} of {PODS} pods came up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("{PODS} pods running after {:?}", started.elapsed());
    // Let the start-up settle (statuses written, probe-less pods idle).
    std::thread::sleep(Duration::from_secs(5));
    let ticks = || {
        let stat = std::fs::read_to_string(format!("/proc/{agent}/stat")).unwrap();
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        // utime and stime are fields 14 and 15 of the whole line.
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .unwrap()
        .unwrap() as f64;
    let (before, at) = (ticks(), Instant::now());
    std::thread::sleep(measure);
    let (after, elapsed) = (ticks(), at.elapsed());
    let cpu = (after - before) as f64 / hz;
    let share = cpu / elapsed.as_secs_f64() * 100.0;
    println!(
        "agent CPU with {PODS} idle pods: {cpu:.2} s over {:.1} s = {share:.2} % of one core",
        elapsed.as_secs_f64()
    );
    let (pods, _) = node.store.list::<Pod>(Some("default")).unwrap();
    assert!(
        pods.iter()
            .all(|p| running(p, "app") && restart_count(p, "app") == 0),
        "every pod stayed up"
    );
}
