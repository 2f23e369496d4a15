//! `podlab wait`: it returns when the kernel agrees. Ready means the containers' processes run
//! (checked in /proc), `--for=delete` means the pause process is gone, and a condition that
//! never comes is a timeout with kubectl's message and exit status 1.

use crate::pods::{is_zombie, phase, Root};

const POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: waited}
spec:
  containers:
  - name: app
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]
";

const NEVER: &str = "apiVersion: v1
kind: Pod
metadata: {name: never}
spec:
  containers:
  - {name: app, image: no-such-image, imagePullPolicy: Never}
";

#[test]
fn wait_returns_when_the_pod_is_ready_or_gone_and_times_out_otherwise() {
    let root = Root::new("wait");
    assert_eq!(root.apply(POD).code, Some(0));
    let out = root.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/waited",
        "--timeout=30s",
    ]);
    assert_eq!(out, "pod/waited condition met\n");
    // Ready is what the store says; the kernel must agree that pause runs with the pod's
    // container beside it.
    let pod = root.pod("waited").expect("the pod is in the store");
    assert_eq!(phase(&pod), "Running");
    let pause = root.pause_pid(&pod);
    assert!(std::path::Path::new(&format!("/proc/{pause}")).exists());
    let out = root.ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Running",
        "pod",
        "waited",
    ]);
    assert_eq!(out, "pod/waited condition met\n");

    assert_eq!(root.apply(NEVER).code, Some(0));
    let out = root.run(&["wait", "--for=condition=Ready", "pod/never", "--timeout=1s"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("timed out waiting for the condition on pods/never"),
        "{out:?}"
    );
    let out = root.run(&["wait", "--for=condition=Ready", "pod/absent"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("\"absent\" not found"), "{out:?}");
    let out = root.run(&["wait", "--for=sideways", "pod/waited"]);
    assert_eq!(out.code, Some(2), "{out:?}");

    root.ok(&["delete", "pod", "waited", "--wait=false"]);
    let out = root.ok(&["wait", "--for=delete", "pod/waited", "--timeout=30s"]);
    assert_eq!(out, "pod/waited condition met\n");
    assert!(root.pod("waited").is_none());
    // The agent deletes the object only after the pod's sandbox is stopped.
    assert!(
        !std::path::Path::new(&format!("/proc/{pause}")).exists() || is_zombie(pause),
        "pause {pause} still runs after the pod is gone"
    );
    root.ok(&["delete", "pod", "never"]);
    root.assert_nothing_left();
}
