//! securityContext through the whole node: a manifest applied, the node agent's kubelet rules,
//! the runtime, and the kernel's answer read in `/proc/PID/status` of the container's process.

use std::time::Duration;

use crate::pods::{container, running, Root};

const LIMIT: Duration = Duration::from_secs(60);

/// `Field:\tvalue` of /proc/PID/status.
fn status_field(pid: i32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// The reason a container of `pod` is waiting for, if it has a status and waits.
fn waiting_reason(pod: &k8s_openapi::api::core::v1::Pod, name: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .find(|s| s.name == name)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

#[test]
fn a_default_container_runs_under_the_runtime_default_seccomp_profile() {
    let root = Root::new("seccomp-default");
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: plain}\nspec:\n  containers:\n  - {name: app, image: busybox, command: [sleep, '1000']}\n  - name: open\n    image: busybox\n    command: [sleep, '1000']\n    securityContext: {seccompProfile: {type: Unconfined}, allowPrivilegeEscalation: false}\n",
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("plain", "running", LIMIT, running);
    let pid = |name: &str| root.record(&container(&pod, name)).pid.unwrap();
    assert_eq!(
        status_field(pid("app"), "Seccomp"),
        "2",
        "seccompDefault is on"
    );
    assert_eq!(status_field(pid("app"), "NoNewPrivs"), "0");
    assert_eq!(
        status_field(pid("open"), "Seccomp"),
        "0",
        "Unconfined asked for"
    );
    assert_eq!(status_field(pid("open"), "NoNewPrivs"), "1");
}

#[test]
fn run_as_non_root_on_a_root_image_is_refused_with_kubelets_reason_and_message() {
    let root = Root::new("nonroot");
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: strict}\nspec:\n  securityContext: {runAsNonRoot: true}\n  containers:\n  - {name: app, image: busybox, command: [sleep, '1000']}\n",
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("strict", "refused", LIMIT, |p| {
        waiting_reason(p, "app").as_deref() == Some("CreateContainerConfigError")
    });
    let status = container(&pod, "app");
    let waiting = status.state.unwrap().waiting.unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    assert_eq!(
        waiting.message.unwrap(),
        format!("container has runAsNonRoot and image will run as root (pod: \"strict_default({uid})\", container: app)")
    );
    assert!(status.container_id.is_none(), "no container was created");
}

#[test]
fn an_unknown_capability_is_refused_at_apply_with_its_field_path() {
    let root = Root::new("badcap");
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: caps}\nspec:\n  containers:\n  - name: app\n    image: busybox\n    securityContext: {capabilities: {add: [NET_ADMINN]}}\n",
    );
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("spec.containers[0].securityContext.capabilities.add[0]: Unsupported value: \"NET_ADMINN\""),
        "{}",
        out.stderr
    );
    assert!(root.pod("caps").is_none(), "nothing stored");
    root.assert_nothing_left();
}

#[test]
fn a_missing_localhost_profile_is_refused_with_its_field_path() {
    let root = Root::new("nolocal");
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: local}\nspec:\n  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '1000']\n    securityContext: {seccompProfile: {type: Localhost, localhostProfile: profiles/none.json}}\n",
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("local", "refused", LIMIT, |p| {
        waiting_reason(p, "app").as_deref() == Some("CreateContainerError")
    });
    let waiting = container(&pod, "app").state.unwrap().waiting.unwrap();
    let message = waiting.message.unwrap();
    assert!(
        message.starts_with("spec.containers[0].securityContext.seccompProfile.localhostProfile: cannot load seccomp profile"),
        "{message}"
    );
    assert!(message.contains("seccomp/profiles/none.json"), "{message}");
}
