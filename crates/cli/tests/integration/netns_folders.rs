//! Integration tests: defect 12 of issue 13, the `/run/podlab-net/<inode>` folder (a network
//! namespace's conflist and leases) of a namespace that is gone. After a `kill -9` of the agent
//! that kept it, the folder stayed for ever; and since the kernel hands a gone namespace's inode
//! number to the next namespace, a later namespace could inherit an earlier one's leases.
//!
//! Each test runs its pods in a network namespace of its own (a [`Holder`]), so that it can
//! make that namespace go; the kernel says whether it is gone (no process in it) and what its
//! cookie is (`SO_NETNS_COOKIE` on a socket made in it, `podlab_ns::net::cookie`).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::Duration;

use podlab_ns::ops::Holder;
use podlab_ns::NsKind;

use crate::pods::{running, Out, Root};
use crate::support::wait_until;

const LIMIT: Duration = Duration::from_secs(60);

/// One test at a time: the namespace one test makes go would otherwise hand its inode number to
/// the other's next one.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
"#;

/// A fresh network namespace, its inode, an open file of it, and its cookie; `None` (after
/// logging the skip) on a kernel without netns cookies.
fn namespace(test: &str) -> Option<(Holder, u64, OwnedFd, u64)> {
    let holder = Holder::spawn(&[NsKind::Net], || Ok(())).unwrap();
    let inode = podlab_ns::ops::ns_inode(holder.pid.as_raw(), NsKind::Net).unwrap();
    let netns = podlab_ns::ops::open_pid(holder.pid.as_raw(), NsKind::Net).unwrap();
    let Some(cookie) = podlab_ns::net::cookie::cookie_of(netns.as_fd()).unwrap() else {
        crate::support::record_skip(test, "this kernel lacks SO_NETNS_COOKIE (Linux 5.14)");
        return None;
    };
    Some((holder, inode, netns, cookie))
}

fn folder(inode: u64) -> PathBuf {
    PathBuf::from("/run/podlab-net").join(inode.to_string())
}

/// The cookie the folder records.
fn recorded_cookie(inode: u64) -> Option<u64> {
    let text = std::fs::read_to_string(folder(inode).join("netns.json")).ok()?;
    serde_json::from_str::<serde_json::Value>(&text).ok()?["cookie"].as_u64()
}

/// Whether a process of this pid namespace is in the network namespace `inode` (the kernel's
/// word, from every `/proc/PID/ns/net` and `/proc/PID/task/TID/ns/net`).
fn has_a_process(inode: u64) -> bool {
    let pids = std::fs::read_dir("/proc").unwrap().flatten();
    pids.filter(|e| {
        e.file_name()
            .to_str()
            .is_some_and(|n| n.parse::<u32>().is_ok())
    })
    .flat_map(|e| {
        std::fs::read_dir(e.path().join("task"))
            .into_iter()
            .flatten()
    })
    .flatten()
    .any(|task| {
        std::fs::metadata(task.path().join("ns/net"))
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == inode)
    })
}

/// `podlab ARGS` of `root`, run inside the network namespace `netns` (`stdin` fed in).
fn run_in(root: &Root, netns: &OwnedFd, args: &[&str], stdin: &str) -> String {
    let mut command = root.command(args);
    let fd = netns.as_raw_fd();
    // SAFETY: setns is async-signal-safe; the forked child is single-threaded.
    unsafe {
        command.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = Out::with_stdin(command, stdin);
    assert_eq!(out.code, Some(0), "podlab {args:?}: {out:?}");
    format!("{}{}", out.stdout, out.stderr)
}

fn kill9_agent(root: &Root) {
    let agent = podlab_kubelet::node::running_agent(&root.dir).expect("an agent runs");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent), nix::sys::signal::SIGKILL);
    assert!(wait_until(LIMIT, || {
        podlab_kubelet::node::running_agent(&root.dir).is_none()
    }));
}

#[test]
fn defect_12_gc_removes_the_network_folder_of_a_namespace_that_is_gone() {
    let test = "defect_12_gc_removes_the_network_folder_of_a_namespace_that_is_gone";
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((holder, inode, netns, cookie)) = namespace(test) else {
        return;
    };
    let root = Root::new("defect12-gone").on_the_network_of_this_test();
    run_in(&root, &netns, &["apply", "-f", "-"], POD);
    root.wait_pod("web", "running", LIMIT, running);
    assert_eq!(
        recorded_cookie(inode),
        Some(cookie),
        "the folder records its namespace's cookie"
    );
    // The pod goes; then the agent that keeps the bridge and the folder is killed.
    root.ok(&["delete", "pod", "web"]);
    kill9_agent(&root);
    assert!(folder(inode).exists());

    // While the namespace lives, its folder stays.
    let gc = root.ok(&["gc"]);
    assert!(
        folder(inode).exists(),
        "removed while its namespace lives: {gc}"
    );

    drop(netns);
    drop(holder);
    assert!(
        wait_until(LIMIT, || !has_a_process(inode)),
        "the namespace outlived its holder"
    );
    let gc = root.ok(&["gc"]);
    assert!(
        !folder(inode).exists(),
        "the gone namespace's folder is left: {gc}"
    );
    assert!(
        gc.contains(&format!(
            "removed /run/podlab-net/{inode} (its network namespace is gone)"
        )),
        "{gc}"
    );
}

#[test]
fn defect_12_a_reused_inode_number_does_not_inherit_an_earlier_namespaces_folder() {
    let test = "defect_12_a_reused_inode_number_does_not_inherit_an_earlier_namespaces_folder";
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((holder, inode, netns, cookie)) = namespace(test) else {
        return;
    };
    let own_pid_namespace = podlab_ns::ops::self_inode(NsKind::Pid).unwrap();
    // What an earlier namespace with the same number would have left: its identity and a lease.
    let earlier = || {
        let dir = folder(inode);
        std::fs::create_dir_all(&dir).unwrap();
        let identity = serde_json::json!({
            "cookie": cookie.wrapping_add(1_000_000),
            "pidNamespace": own_pid_namespace,
        });
        std::fs::write(dir.join("netns.json"), identity.to_string()).unwrap();
        std::fs::write(dir.join("stale-lease"), "10.88.0.99").unwrap();
    };

    // A pod attached in the new namespace claims the folder: the earlier state goes.
    earlier();
    let root = Root::new("defect12-reused").on_the_network_of_this_test();
    run_in(&root, &netns, &["apply", "-f", "-"], POD);
    root.wait_pod("web", "running", LIMIT, running);
    assert!(!folder(inode).join("stale-lease").exists());
    assert_eq!(recorded_cookie(inode), Some(cookie));
    let gc = root.ok(&["gc"]);
    assert!(
        folder(inode).exists(),
        "a live namespace's folder removed: {gc}"
    );
    // The agent removes its network when it stops with no pod left.
    root.ok(&["delete", "pod", "web"]);
    run_in(&root, &netns, &["node", "--stop"], "");
    assert!(!folder(inode).exists());

    // gc removes an earlier namespace's folder whose number a live namespace now has.
    earlier();
    let gc = root.ok(&["gc"]);
    assert!(!folder(inode).exists(), "{gc}");
    assert!(
        gc.contains(&format!(
            "removed /run/podlab-net/{inode} (its network namespace is gone)"
        )),
        "{gc}"
    );
    assert!(has_a_process(inode), "the new namespace still lives");
    drop(holder);
}
