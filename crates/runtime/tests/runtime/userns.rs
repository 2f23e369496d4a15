//! A pod with a user namespace of its own (CRI `userns_options` mode POD, Kubernetes'
//! `hostUsers: false`): root inside, an unprivileged user of the node outside, with the image's
//! files and the volumes seen as the pod numbers them. The evidence is the kernel's: the
//! namespace's inode, its maps, the ids `/proc/PID/status` shows the node, the owners the node
//! sees of what the container wrote.

use podlab_ns::user::IdMapping;
use podlab_runtime::config::UserNamespace;

use super::*;

/// The pod's ids 0..65536 are the node's 200000..265536, as kubelet gives a pod 65536 ids.
const HOST_ROOT: u32 = 200_000;
const LENGTH: u32 = 65_536;

fn mapping(inside: u32, outside: u32, count: u32) -> IdMapping {
    IdMapping {
        inside,
        outside,
        count,
    }
}

fn user_namespace() -> UserNamespace {
    UserNamespace {
        uids: vec![mapping(0, HOST_ROOT, LENGTH)],
        gids: vec![mapping(0, HOST_ROOT, LENGTH)],
    }
}

fn pod_with_user_namespace(name: &str) -> PodSandboxConfig {
    let mut config = pod(name);
    config.linux.security.user_namespace = Some(user_namespace());
    config
}

/// The first (real) id of `key` (`Uid:` or `Gid:`) in `/proc/PID/status`, as the node sees it.
fn node_id(pid: i32, key: &str) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap()
}

fn owner(path: &std::path::Path) -> (u32, u32) {
    let meta = std::fs::metadata(path).unwrap();
    (meta.uid(), meta.gid())
}

/// The whole check, with or without the mount template (both ways of making the rootfs).
fn root_inside_and_a_user_of_the_node_outside(root: &TestRoot) {
    let sandbox = root.sandbox(&pod_with_user_namespace("userns"));
    let volume = root.dir.join("data");
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::write(volume.join("from-node"), "node").unwrap();
    let mut config = container_config("app", &["sleep", "1000"]);
    config.security.add_capabilities = vec!["SYS_ADMIN".into()];
    config.mounts = vec![Mount {
        host_path: volume.clone(),
        container_path: "/data".into(),
        ..Mount::default()
    }];
    let id = root.runtime.create_container(&sandbox, &config).unwrap();
    root.runtime.start_container(&id).unwrap();
    let pid = pid_of(root, &id);

    // One user namespace for the pod: not the node's, pinned, and the container's.
    let pin = root
        .state_dir()
        .join("sandboxes")
        .join(sandbox.as_str())
        .join("ns/user");
    let pinned = std::fs::metadata(&pin).unwrap().ino();
    assert_eq!(inode(pid, NsKind::User), pinned);
    assert_ne!(inode(pid, NsKind::User), inode(1, NsKind::User));
    let (uid_map, gid_map) = podlab_ns::user::id_maps(pid).unwrap();
    for map in [uid_map, gid_map] {
        assert_eq!(
            podlab_ns::user::parse_id_map(&map).unwrap(),
            [mapping(0, HOST_ROOT, LENGTH)]
        );
    }

    // Root inside, the node's HOST_ROOT outside.
    assert_eq!(root.exec(&id, &["id", "-u"]), ("0\n".into(), 0));
    assert_eq!(
        (node_id(pid, "Uid:"), node_id(pid, "Gid:")),
        (HOST_ROOT, HOST_ROOT)
    );
    let status = root.runtime.container_status(&id).unwrap();
    assert_eq!(status.user.map(|u| (u.uid, u.gid)), Some((0, 0)));

    // The image's files are root's inside (idmapped layers), and what root writes is the
    // pod's root's on the node.
    assert_eq!(
        root.exec(&id, &["stat", "-c", "%u:%g", "/bin/busybox", "/"]),
        ("0:0\n0:0\n".into(), 0)
    );
    assert_eq!(root.exec(&id, &["touch", "/etc/written"]).1, 0);
    let upper = root
        .state_dir()
        .join("sandboxes")
        .join(sandbox.as_str())
        .join("containers")
        .join(id.as_str())
        .join("upper");
    assert_eq!(owner(&upper.join("etc/written")), (HOST_ROOT, HOST_ROOT));

    // The volume is idmapped both ways: the node's root's file is root's inside, and what
    // the pod's root writes there is root's on disk, as a pod without a user namespace
    // would write it (kubelet's volumes keep their owners whichever pod uses them).
    assert_eq!(
        root.exec(&id, &["stat", "-c", "%u", "/data/from-node"]),
        ("0\n".into(), 0)
    );
    assert_eq!(root.exec(&id, &["touch", "/data/from-pod"]).1, 0);
    assert_eq!(owner(&volume.join("from-pod")), (0, 0));
    // The pod's /etc files and /dev are its root's.
    assert_eq!(
        root.exec(&id, &["stat", "-c", "%u", "/etc/hosts", "/dev"]),
        ("0\n0\n".into(), 0)
    );

    // Root of the pod's user namespace only: the uts namespace is the node root's, so even
    // with CAP_SYS_ADMIN added the hostname stays.
    let (_, code) = root.exec(&id, &["hostname", "escaped"]);
    assert_ne!(code, 0, "the pod's root set the hostname");
    assert_eq!(root.exec(&id, &["hostname"]), ("userns\n".into(), 0));

    let pause_and_container = [pid];
    root.runtime.stop_pod_sandbox(&sandbox).unwrap();
    root.runtime.remove_pod_sandbox(&sandbox).unwrap();
    assert_nothing_left(root, &pause_and_container);
    assert!(!pin.exists());
}

#[test]
fn a_pod_with_a_user_namespace_is_root_inside_and_a_user_of_the_node_outside() {
    let root = TestRoot::new("userns");
    root_inside_and_a_user_of_the_node_outside(&root);
}

#[test]
fn a_pod_with_a_user_namespace_from_the_mount_template_too() {
    let mut root = TestRoot::new("userns-template");
    root.runtime.use_mount_template().unwrap();
    root_inside_and_a_user_of_the_node_outside(&root);
}

#[test]
fn user_namespaces_containerd_refuses_are_refused_and_nothing_is_made() {
    let root = TestRoot::new("userns-refused");
    let refused = |config: PodSandboxConfig, says: &str| {
        let err = root.runtime.run_pod_sandbox(&config).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
        assert!(err.to_string().contains(says), "{err}");
    };
    let mut two = pod_with_user_namespace("two-mappings");
    if let Some(user) = &mut two.linux.security.user_namespace {
        user.uids.push(mapping(0, 300_000, LENGTH));
    }
    refused(two, "exactly one mapping");
    let mut no_root = pod_with_user_namespace("no-root");
    if let Some(user) = &mut no_root.linux.security.user_namespace {
        user.uids = vec![mapping(1, HOST_ROOT, LENGTH)];
    }
    refused(no_root, "container id 0 must be mapped");
    let mut host_network = pod_with_user_namespace("host-network");
    host_network.host_network = true;
    refused(host_network, "the node's network");
    assert!(root.runtime.list_pod_sandboxes().unwrap().is_empty());
    assert_nothing_left(&root, &[]);
}
