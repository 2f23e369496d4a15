//! `podlab cp` (a file's and a folder's bytes round-trip through tar in the container, kubectl's
//! errors) and `podlab logs`' flags (`--tail`, `--since`, `--timestamps`, `-l`,
//! `--all-containers`, `--prefix`).

use std::time::Duration;

use crate::pods::Root;
use crate::support::wait_until;
use crate::terminals::running_pod;

#[test]
fn cp_round_trips_a_files_bytes_and_a_folder_both_ways() {
    let root = Root::new("cp");
    running_pod(&root, "box");
    let local = root.dir.join("local");
    std::fs::create_dir_all(local.join("tree/sub")).unwrap();
    // Every byte value, and more than a pipe's buffer of them.
    let blob: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(local.join("blob"), &blob).unwrap();
    std::fs::write(local.join("tree/sub/leaf"), b"leaf\n").unwrap();

    let blob_path = local.join("blob");
    root.ok(&["cp", blob_path.to_str().unwrap(), "box:/tmp/blob"]);
    let size = root.ok(&["exec", "box", "--", "wc", "-c", "/tmp/blob"]);
    assert!(size.starts_with("300000 "), "{size}");
    let back = local.join("back");
    root.ok(&["cp", "box:/tmp/blob", back.to_str().unwrap()]);
    assert_eq!(
        std::fs::read(&back).unwrap(),
        blob,
        "the bytes came back as they went"
    );

    // A folder into a folder of the container (its name is kept), and back.
    root.ok(&["cp", local.join("tree").to_str().unwrap(), "box:/tmp"]);
    assert_eq!(
        root.ok(&["exec", "box", "--", "cat", "/tmp/tree/sub/leaf"]),
        "leaf\n"
    );
    let tree = local.join("tree-back");
    root.ok(&["cp", "box:/tmp/tree", tree.to_str().unwrap()]);
    assert_eq!(std::fs::read(tree.join("sub/leaf")).unwrap(), b"leaf\n");

    // kubectl's errors.
    let out = root.run(&["cp", "/nonexistent-podlab", "box:/tmp/x"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("/nonexistent-podlab doesn't exist in local filesystem"),
        "{out:?}"
    );
    let out = root.run(&["cp", "box:/nonexistent", local.join("x").to_str().unwrap()]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("command terminated with exit code 1"),
        "{out:?}"
    );
    let out = root.run(&["cp", "/a", "/b"]);
    assert!(
        out.stderr
            .contains("one of src or dest must be a remote file specification"),
        "{out:?}"
    );
    let out = root.run(&["cp", blob_path.to_str().unwrap(), "nosuch:/tmp"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("\"nosuch\" not found"), "{out:?}");
}

const CHATTY: &str = "
apiVersion: v1
kind: Pod
metadata:
  name: chatty
  labels: {app: chat}
spec:
  restartPolicy: Never
  containers:
  - name: a
    image: busybox
    command: [sh, -c, 'for i in 1 2 3 4 5; do echo a$i; done; sleep 999']
  - name: b
    image: busybox
    command: [sh, -c, 'echo b1; echo b2 >&2; sleep 999']
---
apiVersion: v1
kind: Pod
metadata:
  name: quiet
  labels: {app: chat}
spec:
  restartPolicy: Never
  containers:
  - name: q
    image: busybox
    command: [sh, -c, 'echo q1; sleep 999']
";

#[test]
fn logs_take_kubectls_tail_since_timestamps_selector_all_containers_and_prefix() {
    let root = Root::new("logflags");
    let out = root.apply(CHATTY);
    assert_eq!(out.code, Some(0), "{out:?}");
    for pod in ["pod/chatty", "pod/quiet"] {
        root.ok(&["wait", pod, "--for=condition=Ready", "--timeout=60s"]);
    }
    assert!(
        wait_until(Duration::from_secs(30), || {
            root.ok(&["logs", "chatty", "-c", "a"]).lines().count() == 5
                && root.ok(&["logs", "chatty", "-c", "b"]).lines().count() == 2
        }),
        "the containers wrote their lines"
    );
    assert_eq!(
        root.ok(&["logs", "chatty", "-c", "a", "--tail", "2"]),
        "a4\na5\n"
    );
    assert_eq!(root.ok(&["logs", "chatty", "-c", "a", "--tail=0"]), "");
    assert_eq!(
        root.ok(&["logs", "chatty", "-c", "a", "--since", "1h"])
            .lines()
            .count(),
        5
    );
    let out = root.run(&["logs", "chatty", "-c", "a", "--since", "soon"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("invalid argument \"soon\" for \"--since\""),
        "{out:?}"
    );

    let stamped = root.ok(&["logs", "chatty", "-c", "a", "--timestamps", "--tail", "1"]);
    let (stamp, text) = stamped.trim_end().split_once(' ').unwrap();
    assert_eq!(text, "a5");
    assert!(
        stamp.len() == 30 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
        "an RFC3339Nano timestamp: {stamp}"
    );

    assert_eq!(
        root.ok(&[
            "logs",
            "chatty",
            "--all-containers",
            "--prefix",
            "--tail",
            "1"
        ]),
        "[pod/chatty/a] a5\n[pod/chatty/b] b2\n"
    );
    // -l: each matching pod's default container, its last 10 lines by default.
    let out = root.run(&["logs", "-l", "app=chat", "--prefix"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("[pod/chatty/a] a1\n"), "{out:?}");
    assert!(out.stdout.contains("[pod/quiet/q] q1\n"), "{out:?}");
    let out = root.run(&["logs", "-l", "app=none"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out
        .stderr
        .contains("No resources found in default namespace."));
    let out = root.run(&["logs", "chatty", "-l", "app=chat"]);
    assert!(
        out.stderr
            .contains("only a selector (-l) or a POD name is allowed"),
        "{out:?}"
    );
}
