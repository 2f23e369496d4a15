//! Integration tests: the node agent's own life, as kubelet's: how soon it exits when asked to,
//! and what it leaves running when it does.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};

use crate::pods::{container, running, Root, LIMIT};
use crate::support::wait_until;

/// A pod whose container ignores SIGTERM, so that a kill waits out the grace period.
const STUBBORN: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: stubborn}
spec:
  terminationGracePeriodSeconds: 120
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "trap '' TERM; while true; do sleep 1; done"]
"#;

/// Issue 13, defect 12: a node agent sent SIGTERM while a pod was in its grace period waited
/// the whole grace period out before it exited. kubelet exits at once and its pods keep
/// running; so does the agent now: the container keeps running, the pod keeps its
/// deletionTimestamp, and the next agent finishes the deletion.
#[test]
fn defect_12_a_node_agent_sent_sigterm_exits_without_waiting_out_a_grace_period() {
    let root = Root::new("agent-sigterm");
    let out = root.apply(STUBBORN);
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("stubborn", "running", LIMIT, running);
    let app_pid = root.record(&container(&pod, "app")).pid.unwrap();
    root.ok(&["delete", "pod", "stubborn", "--wait=false"]);
    // The agent is in the grace period once it has told the Killing event.
    let killing = || {
        let (events, _) = root.store().list::<Event>(Some("default")).unwrap();
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("Killing"))
    };
    assert!(
        wait_until(LIMIT, killing),
        "no Killing event; agent log: {}",
        root.agent_log()
    );
    let agent = podlab_kubelet::node::running_agent(&root.dir).expect("an agent runs");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent), nix::sys::signal::SIGTERM).unwrap();
    // 10 s is far below the 120 s grace period the agent used to wait out.
    assert!(
        wait_until(Duration::from_secs(10), || {
            podlab_kubelet::node::running_agent(&root.dir).is_none()
        }),
        "the agent still runs 10 s after SIGTERM; its log: {}",
        root.agent_log()
    );
    assert!(
        std::path::Path::new(&format!("/proc/{app_pid}")).exists()
            && !crate::pods::is_zombie(app_pid),
        "the container kept running when the agent stopped"
    );
    let pod: Pod = root.pod("stubborn").expect("the pod is still in the store");
    assert!(pod.metadata.deletion_timestamp.is_some());

    // The next agent takes the deletion up again and finishes it.
    let deleted = root.run(&["delete", "pod", "stubborn", "--now"]);
    assert_eq!(deleted.code, Some(0), "{deleted:?}");
    assert!(root.pod("stubborn").is_none());
    root.assert_nothing_left();
}

/// Issue 13, defect 9: `get` showed a container's exit up to a second after it, when the
/// agent's once-a-second relist found it. The shim now tells `<root>/events.sock` the moment
/// it records an exit; here no agent runs (`run --rm` goes straight to the runtime), so the
/// notice the test's listener gets can only be the shim's.
#[test]
fn defect_9_the_shim_tells_the_agent_of_a_container_exit_at_once() {
    let root = Root::new("exit-notice");
    let listener = podlab_runtime::events::Listener::bind(&root.dir).unwrap();
    let out = root.run(&[
        "run", "quick", "--rm", "--image", "busybox", "--", "sh", "-c", "exit 3",
    ]);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(
        listener.next(Duration::from_secs(10)).is_some(),
        "no notice from the shim"
    );
}
