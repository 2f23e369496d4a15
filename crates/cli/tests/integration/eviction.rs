//! kubelet's eviction manager against the kernel: an emptyDir written past its `sizeLimit` by
//! a busybox container gets its pod evicted in kubelet's words, and every process of it gone.

use std::path::Path;
use std::time::Duration;

use crate::pods::{wait_for_running_container, Root};
use crate::support::wait_until;

const LIMIT: Duration = Duration::from_secs(60);

/// The container waits for the test's word (a file the test makes in the volume's host
/// folder), so that its pid is known before it writes 2 MiB into a 1 MiB emptyDir.
const GREEDY: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: greedy}
spec:
  terminationGracePeriodSeconds: 30
  volumes: [{name: scratch, emptyDir: {sizeLimit: 1Mi}}]
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "until [ -e /scratch/go ]; do sleep 0.1; done; dd if=/dev/urandom of=/scratch/big bs=65536 count=32; exec sleep 1000"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
"#;

#[test]
fn an_empty_dir_past_its_size_limit_gets_its_pod_evicted_in_kubelets_words() {
    let root = Root::new("evict").with_env("PODLAB_NODE_EVICTION_PERIOD", "200ms");
    let out = root.apply(GREEDY);
    assert_eq!(out.code, Some(0), "{out:?}");
    let pid = wait_for_running_container(&root, "greedy");
    let uid = root.pod("greedy").unwrap().metadata.uid.unwrap();
    let volume = root
        .dir
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/scratch");
    std::fs::write(volume.join("go"), b"").unwrap();

    let pod = root.wait_pod("greedy", "evicted", LIMIT, |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    });
    let status = pod.status.unwrap();
    let message = "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ";
    assert_eq!(status.reason.as_deref(), Some("Evicted"));
    assert_eq!(status.message.as_deref(), Some(message));
    let disruption = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("a DisruptionTarget condition");
    assert_eq!(
        (
            disruption.status.as_str(),
            disruption.reason.as_deref(),
            disruption.message.as_deref()
        ),
        ("True", Some("TerminationByKubelet"), Some(message))
    );
    let events = root.ok(&["get", "events"]);
    assert!(
        events.contains("Warning   Evicted") && events.contains(message.trim_end()),
        "{events}"
    );

    // The kernel's view: the container's process is gone (killed, not left to its 30 s
    // grace), its sandbox is stopped, and nothing is started again.
    assert!(
        wait_until(LIMIT, || !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))),
        "the container's process {pid} still runs"
    );
    assert!(
        wait_until(LIMIT, || root
            .runtime()
            .list_pod_sandboxes()
            .unwrap()
            .iter()
            .all(
                |s| s.state == podlab_runtime::SandboxState::NotReady && s.pause_pid.is_none()
            )),
        "the sandbox was not stopped"
    );
    // The final status shows the container terminated, never restarted.
    let pod = root.wait_pod("greedy", "stopped", LIMIT, |p| {
        let statuses = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref());
        statuses.is_some_and(|s| {
            s[0].state
                .as_ref()
                .is_some_and(|st| st.terminated.is_some())
        })
    });
    let status = pod.status.unwrap();
    assert_eq!(
        (status.reason.as_deref(), status.message.as_deref()),
        (Some("Evicted"), Some(message)),
        "kept with the final states"
    );
    let statuses = status.container_statuses.unwrap();
    assert_eq!(statuses[0].restart_count, 0, "{statuses:?}");
    root.ok(&["delete", "pod", "greedy"]);
    // A Failed pod leaves the store at once (the API server's grace period 0 for a terminal
    // pod); the agent then removes what it left on the node.
    let empty = |folder: &str| {
        std::fs::read_dir(root.dir.join(folder)).map_or(true, |mut d| d.next().is_none())
    };
    assert!(
        wait_until(LIMIT, || empty("sandboxes")
            && empty("pods")
            && empty("logs")),
        "the evicted pod's sandbox, volumes and logs were not removed"
    );
    root.assert_nothing_left();
}
