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
pub fn waiting_reason(pod: &k8s_openapi::api::core::v1::Pod, name: &str) -> Option<String> {
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

/// A sysctl as this test process's namespaces see it (the host's, for a pod).
fn host_sysctl(name: &str) -> String {
    podlab_ns::sysctl::read(name).unwrap()
}

/// A value that differs from `now` (an integer sysctl; 0 and 1 swap, for a boolean).
fn another_value(now: &str) -> String {
    let n: u64 = now.trim().parse().unwrap();
    if n == 0 { 1 } else { n - 1 }.to_string()
}

#[test]
fn safe_and_allowed_unsafe_sysctls_are_set_in_the_pods_namespaces_and_never_on_the_host() {
    let names = [
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_keepalive_time",
        "kernel.shm_rmid_forced",
        "kernel.msgmax",
        "net.core.somaxconn",
        "fs.mqueue.msg_max",
    ];
    let host_before: Vec<String> = names.iter().map(|n| host_sysctl(n)).collect();
    let port_range = if host_before[0].split_whitespace().next() == Some("20000") {
        "20001 30001"
    } else {
        "20000 30000"
    };
    let wanted: Vec<String> = std::iter::once(port_range.to_string())
        .chain(host_before[1..].iter().map(|v| another_value(v)))
        .collect();
    let root = Root::new("sysctls").with_env(
        "PODLAB_NODE_ALLOWED_UNSAFE_SYSCTLS",
        "kernel.msg*,net.core.somaxconn,fs.mqueue.*",
    );
    let sysctls: Vec<String> = names
        .iter()
        .zip(&wanted)
        .map(|(n, v)| format!("    - {{name: {n}, value: '{v}'}}\n"))
        .collect();
    let out = root.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: tuned}}\nspec:\n  securityContext:\n    sysctls:\n{}  containers:\n  - {{name: app, image: busybox, command: [sleep, '1000']}}\n",
        sysctls.concat()
    ));
    assert_eq!(out.code, Some(0), "{out:?}");
    root.wait_pod("tuned", "running", LIMIT, running);
    for (name, want) in names.iter().zip(&wanted) {
        let path = podlab_ns::sysctl::proc_path(name);
        let inside = root.ok(&["exec", "tuned", "--", "cat", &path.display().to_string()]);
        assert_eq!(
            inside.split_whitespace().collect::<Vec<_>>().join(" "),
            *want,
            "{name} inside the pod"
        );
    }
    let host_after: Vec<String> = names.iter().map(|n| host_sysctl(n)).collect();
    assert_eq!(host_after, host_before, "the host's values never move");
}

#[test]
fn an_unsafe_sysctl_the_node_does_not_allow_is_rejected_with_sysctl_forbidden() {
    let root = Root::new("sysctl-forbidden");
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: greedy}\nspec:\n  securityContext:\n    sysctls:\n    - {name: net.ipv4.tcp_syncookies, value: '1'}\n    - {name: kernel.msgmax, value: '65536'}\n  containers:\n  - {name: app, image: busybox, command: [sleep, '1000']}\n",
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("greedy", "rejected", LIMIT, |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    });
    let status = pod.status.unwrap();
    assert_eq!(status.reason.as_deref(), Some("SysctlForbidden"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted")
    );
    assert!(
        root.runtime().list_pod_sandboxes().unwrap().is_empty(),
        "no sandbox is made for a rejected pod"
    );
    let events = root.ok(&["get", "events"]);
    assert!(
        events.contains("Warning   SysctlForbidden")
            && events.contains("forbidden sysctl: \"kernel.msgmax\" not allowlisted"),
        "{events}"
    );
    let rows = root.pod_rows();
    assert_eq!(rows["greedy"][2], "SysctlForbidden", "{rows:?}");
    root.ok(&["delete", "pod", "greedy"]);
    root.assert_nothing_left();
}

#[test]
fn a_net_sysctl_with_host_network_is_refused_at_apply_with_its_field_path() {
    let root = Root::new("sysctl-hostnet");
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: hostnet}\nspec:\n  hostNetwork: true\n  securityContext:\n    sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: '0'}]\n  containers:\n  - {name: app, image: busybox}\n",
    );
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("spec.securityContext.sysctls[0].name: Invalid value: \"net.ipv4.ip_unprivileged_port_start\": may not be specified when 'hostNetwork' is true"),
        "{}",
        out.stderr
    );
    assert!(root.pod("hostnet").is_none(), "nothing stored");
    root.assert_nothing_left();
}

/// `uid=U gid=G groups=A,B` as busybox's `id` prints it, as numbers.
fn id_output(text: &str) -> (i64, i64, Vec<i64>) {
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {text:?}"))
    };
    let number = |s: &str| s.split('(').next().unwrap().parse::<i64>().unwrap();
    let groups = field("groups=").split(',').map(number).collect();
    (number(field("uid=")), number(field("gid=")), groups)
}

/// `(uid, gid, groups)` of a container status's `user.linux`.
fn reported_user(status: &k8s_openapi::api::core::v1::ContainerStatus) -> (i64, i64, Vec<i64>) {
    let linux = status
        .user
        .as_ref()
        .and_then(|u| u.linux.as_ref())
        .unwrap_or_else(|| panic!("no user.linux in the status of {}", status.name));
    (
        linux.uid,
        linux.gid,
        linux.supplemental_groups.clone().unwrap_or_default(),
    )
}

#[test]
fn container_statuses_report_the_user_the_kernel_gave_each_container() {
    let root = Root::new("status-user");
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ids}\nspec:\n  securityContext: {runAsUser: 1000, runAsGroup: 3000, supplementalGroups: [4000]}\n  initContainers:\n  - {name: init, image: busybox, command: [id]}\n  containers:\n  - {name: app, image: busybox, command: [sleep, '1000']}\n  - name: other\n    image: busybox\n    command: [sleep, '1000']\n    securityContext: {runAsUser: 2000, runAsGroup: 2000}\n",
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("ids", "running", LIMIT, running);
    // Running containers: what the kernel holds for their process right now.
    for name in ["app", "other"] {
        let status = container(&pod, name);
        let pid = root.record(&status).pid.unwrap();
        let first = |field: &str| {
            status_field(pid, field)
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<i64>()
                .unwrap()
        };
        let groups: Vec<i64> = status_field(pid, "Groups")
            .split_whitespace()
            .map(|g| g.parse().unwrap())
            .collect();
        assert_eq!(
            reported_user(&status),
            (first("Uid"), first("Gid"), groups),
            "{name}"
        );
    }
    assert_eq!(
        reported_user(&container(&pod, "app")),
        (1000, 3000, vec![3000, 4000])
    );
    assert_eq!(
        reported_user(&container(&pod, "other")),
        (2000, 2000, vec![2000, 4000]),
        "the container's ids win, the pod's groups stay"
    );
    // The init container has exited: what its own process said of itself.
    let said = root.ok(&["logs", "ids", "-c", "init"]);
    assert_eq!(reported_user(&container(&pod, "init")), id_output(&said));
    // An ephemeral container gets the pod's context too.
    let debug = root.run(&[
        "debug", "ids", "--image", "busybox", "-c", "dbg", "--", "id",
    ]);
    assert_eq!(debug.code, Some(0), "{debug:?}");
    let shown = root.wait_pod("ids", "showing the ephemeral container", LIMIT, |p| {
        p.status
            .as_ref()
            .and_then(|s| s.ephemeral_container_statuses.as_ref())
            .is_some_and(|e| e.iter().any(|s| s.name == "dbg" && s.user.is_some()))
    });
    assert_eq!(
        reported_user(&container(&shown, "dbg")),
        id_output(&debug.stdout)
    );
    assert_eq!(id_output(&debug.stdout), (1000, 3000, vec![3000, 4000]));
    root.ok(&["delete", "pod", "ids"]);
    root.assert_nothing_left();
}

#[test]
fn apparmor_profiles_on_a_host_without_apparmor_are_rejected_as_kubelet_rejects_them() {
    use podlab_kubelet::apparmor::Host;
    crate::skip_unless!(
        Host::detect() == Host::Disabled,
        "this host's kernel has AppArmor: the test is of a host without it"
    );
    let root = Root::new("apparmor");
    // Bad input: refused with its path, nothing stored.
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers:\n  - name: app\n    image: busybox\n    securityContext: {appArmorProfile: {type: Localhost}}\n",
    );
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("spec.containers[0].securityContext.appArmorProfile.localhostProfile: Required value: must be set when AppArmor type is Localhost"),
        "{}",
        out.stderr
    );
    assert!(root.pod("bad").is_none(), "nothing stored");
    // The field at the pod's level, and the deprecated annotation (copied into the field).
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: confined}\nspec:\n  securityContext: {appArmorProfile: {type: RuntimeDefault}}\n  containers:\n  - {name: app, image: busybox, command: [sleep, '1000']}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: annotated\n  annotations: {container.apparmor.security.beta.kubernetes.io/app: localhost/k8s-deny-write}\nspec:\n  containers:\n  - {name: app, image: busybox, command: [sleep, '1000']}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: open}\nspec:\n  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '1000']\n    securityContext: {appArmorProfile: {type: Unconfined}}\n",
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("Warning: metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]: deprecated since v1.30; use the \"appArmorProfile\" field instead\n"),
        "{}",
        out.stderr
    );
    let annotated = root.pod("annotated").unwrap();
    let field = annotated.spec.as_ref().unwrap().containers[0]
        .security_context
        .as_ref()
        .and_then(|c| c.app_armor_profile.clone())
        .expect("the annotation became the container's field");
    assert_eq!(
        (field.type_.as_str(), field.localhost_profile.as_deref()),
        ("Localhost", Some("k8s-deny-write"))
    );
    for name in ["confined", "annotated"] {
        let pod = root.wait_pod(name, "rejected", LIMIT, |p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
        });
        let status = pod.status.unwrap();
        assert_eq!(status.reason.as_deref(), Some("AppArmor"), "{name}");
        assert_eq!(
            status.message.as_deref(),
            Some("Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host"),
            "{name}"
        );
    }
    // Unconfined asks for nothing AppArmor would do: it runs.
    root.wait_pod("open", "running", LIMIT, running);
    let sandboxes = root.runtime().list_pod_sandboxes().unwrap();
    assert_eq!(
        sandboxes.len(),
        1,
        "a sandbox for the unconfined pod only: {sandboxes:?}"
    );
    let events = root.ok(&["get", "events"]);
    assert!(
        events.contains("Warning   AppArmor")
            && events.contains("Cannot enforce AppArmor: AppArmor is not enabled on the host"),
        "{events}"
    );
    let rows = root.pod_rows();
    assert_eq!(rows["confined"][2], "AppArmor", "{rows:?}");
    root.ok(&["delete", "pod", "confined", "annotated", "open"]);
    root.assert_nothing_left();
}

/// The deprecated AppArmor annotation, through `apply` and `run`: kubectl's `Warning: ...` on
/// stderr when the pod is created (the API server's `applyAppArmorVersionSkew`), none when an
/// unchanged manifest is applied again. `unconfined` asks nothing of the kernel, so the pods
/// run on any host.
#[test]
fn a_deprecated_apparmor_annotation_gets_the_api_servers_warning_from_apply_and_run() {
    let root = Root::new("aawarn");
    let warning = |name: &str| {
        format!("Warning: metadata.annotations[container.apparmor.security.beta.kubernetes.io/{name}]: deprecated since v1.30; use the \"appArmorProfile\" field instead\n")
    };
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: old\n  annotations: {container.apparmor.security.beta.kubernetes.io/app: unconfined}\nspec:\n  containers:\n  - {name: app, image: busybox, command: [sleep, '1000']}\n";
    let out = root.apply(manifest);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stderr, warning("app"), "{out:?}");
    assert_eq!(out.stdout, "pod/old created\n");
    let out = root.apply(manifest);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (Some(0), "pod/old unchanged\n", ""),
        "no create, no warning"
    );
    let out = root.run(&[
        "run",
        "once",
        "--image",
        "busybox",
        "--restart",
        "Never",
        "--rm",
        "--annotations",
        "container.apparmor.security.beta.kubernetes.io/once=unconfined",
        "--",
        "echo",
        "hi",
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "hi\n");
    assert!(out.stderr.starts_with(&warning("once")), "{out:?}");
    root.wait_pod("old", "running", LIMIT, running);
    root.ok(&["delete", "pod", "old"]);
    root.assert_nothing_left();
}

#[test]
fn selinux_options_are_accepted_and_ignored_without_selinux_but_a_bad_level_is_refused() {
    crate::skip_unless!(
        !std::path::Path::new("/sys/fs/selinux").exists(),
        "this host has SELinux: the test is of a host without it"
    );
    let root = Root::new("selinux");
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: labelled}\nspec:\n  securityContext:\n    seLinuxChangePolicy: MountOption\n    seLinuxOptions: {type: spc_t, level: 's0:c1,c2'}\n  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '1000']\n    securityContext: {seLinuxOptions: {user: system_u, role: system_r}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: badlevel}\nspec:\n  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '1000']\n    securityContext: {seLinuxOptions: {level: high}}\n",
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let pod = root.wait_pod("labelled", "running", LIMIT, running);
    // No label anywhere: the kernel has no SELinux, so no process has an SELinux context.
    let pid = root.record(&container(&pod, "app")).pid.unwrap();
    let current = std::fs::read_to_string(format!("/proc/{pid}/attr/current"));
    assert!(
        current
            .as_deref()
            .map_or(true, |c| c.trim_end_matches('\0').trim().is_empty()
                || c.contains("unconfined")
                || c.contains("kernel")),
        "{current:?}"
    );
    let pod = root.wait_pod("badlevel", "refused", LIMIT, |p| {
        waiting_reason(p, "app").as_deref() == Some("CreateContainerError")
    });
    let status = container(&pod, "app");
    assert_eq!(
        status.state.unwrap().waiting.unwrap().message.as_deref(),
        Some("failed to generate container spec: the format of 'level' \"high\" is not correct")
    );
    assert!(status.container_id.is_none(), "no container was created");
    // Bad input at apply: the change policy's values are the API server's.
    let out = root.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  securityContext: {seLinuxChangePolicy: Always}\n  containers:\n  - {name: app, image: busybox}\n",
    );
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("spec.securityContext.seLinuxChangePolicy: Unsupported value: \"Always\": supported values: \"MountOption\", \"Recursive\""),
        "{}",
        out.stderr
    );
    assert!(root.pod("bad").is_none(), "nothing stored");
    root.ok(&["delete", "pod", "labelled", "badlevel"]);
    root.assert_nothing_left();
}

#[test]
fn host_users_false_makes_the_pod_root_inside_and_a_range_of_the_nodes_ids_outside() {
    let root = Root::new("host-users");
    let manifest = |name: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  hostUsers: false\n  containers:\n  - {{name: app, image: busybox, command: [sleep, '1000']}}\n")
    };
    for name in ["first", "second"] {
        let out = root.apply(&manifest(name));
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let mut ranges = Vec::new();
    for name in ["first", "second"] {
        let pod = root.wait_pod(name, "running", LIMIT, running);
        let pid = root.record(&container(&pod, "app")).pid.unwrap();
        // The kernel's word: one map line, the pod's 65536 ids at a range of the node's.
        let (uid_map, _) = podlab_ns::user::id_maps(pid).unwrap();
        let map = podlab_ns::user::parse_id_map(&uid_map).unwrap();
        assert_eq!(map.len(), 1, "{uid_map}");
        assert_eq!((map[0].inside, map[0].count), (0, 65536), "{uid_map}");
        assert!(map[0].outside >= 65536, "{uid_map}");
        let outside = map[0].outside.to_string();
        assert_eq!(
            status_field(pid, "Uid"),
            [outside.as_str(); 4].join("\t"),
            "root inside is the range's first id outside"
        );
        // Pause is in the same user namespace.
        let pause = root.pause_pid(&pod);
        assert_eq!(
            podlab_ns::ops::ns_inode(pause, podlab_ns::NsKind::User).unwrap(),
            podlab_ns::ops::ns_inode(pid, podlab_ns::NsKind::User).unwrap()
        );
        assert_eq!(root.ok(&["exec", name, "--", "id", "-u"]).trim(), "0");
        ranges.push(map[0].outside);
    }
    assert_ne!(ranges[0], ranges[1], "two pods, two ranges");
    root.ok(&["delete", "pod", "first", "second"]);
    root.assert_nothing_left();
}
