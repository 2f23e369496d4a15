//! Integration tests: `podlab gc` after a `kill -9` of a pod's agent, shim, pause and
//! containers. The sandbox died while Ready, holding an address: gc hands its network namespace
//! to the plugin for a DEL before unpinning it, so that the lease is released (the built-in
//! IPAM's and host-local's alike), and the pod's status no longer says its containers run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::pods::{container, running, Root};
use crate::support::wait_until;

const LIMIT: Duration = Duration::from_secs(60);

const TWO_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: victim}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: survivor}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: busybox, command: [sleep, "1000"]}]
"#;

/// `kill -9`, then a bounded wait until the process has exited: `kill` returns before the
/// target is gone, and a `gc` run at once could still find a dying shim alive.
fn kill9(pid: i32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
    let exited = || !Path::new(&format!("/proc/{pid}")).exists() || crate::pods::is_zombie(pid);
    assert!(wait_until(LIMIT, exited), "pid {pid} outlived its SIGKILL");
}

/// The lease folder of podlab's network in this test's network namespace.
fn lease_dir() -> PathBuf {
    let inode = podlab_ns::ops::self_inode(podlab_ns::NsKind::Net).unwrap();
    let net_root = Path::new("/run/podlab-net").join(inode.to_string());
    podlab_cni::PodlabNet::podlab(&net_root).lease_dir()
}

fn pod_ip(pod: &Pod) -> String {
    pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap()
}

/// `kill -9` of every process of the pod: its shim, its pause, its containers.
fn kill_pod(root: &Root, pod: &Pod) {
    let uid = pod.metadata.uid.clone().unwrap();
    let runtime = root.runtime();
    for sandbox in runtime.list_pod_sandboxes().unwrap() {
        if sandbox.metadata.uid != uid {
            continue;
        }
        let containers = runtime
            .list_containers(&podlab_runtime::ContainerFilter {
                sandbox_id: Some(sandbox.id.clone()),
                ..Default::default()
            })
            .unwrap();
        let pids = [sandbox.shim_pid, sandbox.pause_pid]
            .into_iter()
            .chain(containers.iter().map(|c| c.pid));
        for pid in pids.flatten() {
            kill9(pid);
        }
    }
}

fn container_runs(pod: &Pod) -> bool {
    container(pod, "app")
        .state
        .is_some_and(|s| s.running.is_some())
}

#[test]
fn gc_after_kill_9_releases_the_ip_lease_and_leaves_no_pod_running() {
    for network in ["cni", "builtin"] {
        let root = Root::new(&format!("gclease-{network}"))
            .with_network()
            .with_env("PODLAB_NETWORK", network);
        let out = root.apply(TWO_PODS);
        assert_eq!(out.code, Some(0), "{out:?}");
        let victim = root.wait_pod("victim", "running", LIMIT, running);
        let survivor = root.wait_pod("survivor", "running", LIMIT, running);
        let (victim_lease, survivor_lease) = (
            lease_dir().join(pod_ip(&victim)),
            lease_dir().join(pod_ip(&survivor)),
        );
        assert!(
            victim_lease.exists() && survivor_lease.exists(),
            "{network}: leases"
        );

        let agent = podlab_kubelet::node::running_agent(&root.dir).expect("an agent runs");
        kill9(agent);
        kill_pod(&root, &victim);
        assert!(wait_until(LIMIT, || {
            podlab_kubelet::node::running_agent(&root.dir).is_none()
        }));
        let gc = root.ok(&["gc"]);
        assert!(
            gc.contains("released the network of sandbox"),
            "{network}: {gc}"
        );
        assert!(
            !victim_lease.exists(),
            "{network}: the dead sandbox's lease is left: {gc}"
        );
        assert!(
            survivor_lease.exists(),
            "{network}: the live pod lost its lease"
        );
        // The victim's status says what kubelet's would: its container vanished, not Ready.
        let victim = root.pod("victim").unwrap();
        assert!(!container_runs(&victim), "{network}: {:?}", victim.status);
        assert!(
            !running(&victim),
            "{network}: still Ready: {:?}",
            victim.status
        );
        let app = container(&victim, "app");
        let last = app
            .last_state
            .and_then(|s| s.terminated)
            .expect("lastState");
        assert_eq!(last.reason.as_deref(), Some("ContainerStatusUnknown"));
        // The survivor's containers still run: its status is left as it was.
        assert_eq!(root.pod("survivor").unwrap().status, survivor.status);

        // Then everything: no lease, no lease folder, no bridge is left.
        let survivor = root.pod("survivor").unwrap();
        kill_pod(&root, &survivor);
        let gc = root.ok(&["gc"]);
        assert!(!survivor_lease.exists(), "{network}: {gc}");
        assert!(!lease_dir().exists(), "{network}: {gc}");
        assert!(
            !container_runs(&root.pod("survivor").unwrap()),
            "{network}: {gc}"
        );
        let links = podlab_ns::net::Netlink::open().unwrap().links().unwrap();
        assert!(
            !links.iter().any(|l| l.name == "podlab0"),
            "{network}: bridge left"
        );
    }
}
