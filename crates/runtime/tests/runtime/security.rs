//! Issue 14's escapes, each tried from inside a container as an attacker would, and each seen
//! blocked by the kernel: the error of the attempt and the mount that causes it. No attempt
//! ever writes a host value: a write is probed by opening for append and writing nothing.

use std::os::fd::OwnedFd;

use nix::fcntl::OFlag;

use super::*;

/// The mount options of `mount_point` in `/proc/PID/mountinfo` (the kernel's own record).
fn mount_options(pid: i32, mount_point: &str) -> Option<String> {
    let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    table.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        (fields.get(4) == Some(&mount_point)).then(|| fields[5].to_string())
    })
}

/// `sh -c script` in the container: (stdout, stderr, exit code).
fn shell(root: &TestRoot, id: &ContainerId, script: &str) -> (String, String, i32) {
    let result = root
        .runtime
        .exec_sync(id, &strings(&["sh", "-c", script]), WAIT)
        .unwrap();
    (
        String::from_utf8_lossy(&result.stdout).into_owned(),
        String::from_utf8_lossy(&result.stderr).into_owned(),
        result.exit_code,
    )
}

#[test]
fn proc_sys_is_read_only_so_a_container_cannot_rewrite_core_pattern() {
    let root = TestRoot::new("proc-sys-ro");
    let sandbox = root.sandbox(&pod("attacker"));
    let id = root.container(&sandbox, "app", &["sleep", "1000"]);
    let pid = pid_of(&root, &id);
    for path in podlab_runtime::masked_paths::READONLY {
        if std::path::Path::new(path).exists() {
            let options = mount_options(pid, path)
                .unwrap_or_else(|| panic!("{path} is not a mount of its own in the container"));
            assert!(options.split(',').any(|o| o == "ro"), "{path}: {options}");
        }
    }
    // Opened for appending, nothing written: the host's value stays whatever happens.
    let (_, err, code) = shell(&root, &id, ": >> /proc/sys/kernel/core_pattern");
    assert_ne!(code, 0, "core_pattern opened for writing");
    assert!(err.contains("Read-only file system"), "{err}");
    if std::path::Path::new("/proc/sysrq-trigger").exists() {
        let (_, err, code) = shell(&root, &id, ": >> /proc/sysrq-trigger");
        assert_ne!(code, 0, "sysrq-trigger opened for writing");
        assert!(err.contains("Read-only file system"), "{err}");
    }
}

#[test]
fn masked_paths_show_nothing_of_the_host() {
    let root = TestRoot::new("masked");
    let sandbox = root.sandbox(&pod("attacker"));
    let id = root.container(&sandbox, "app", &["sleep", "1000"]);
    let pid = pid_of(&root, &id);
    let mut seen = 0;
    for path in podlab_runtime::masked_paths::MASKED {
        let host = std::path::Path::new(path);
        if !host.exists() {
            continue;
        }
        seen += 1;
        assert!(
            mount_options(pid, path).is_some(),
            "{path} has no mount over it in the container"
        );
        let (out, _, code) = if host.is_dir() {
            shell(&root, &id, &format!("ls -A {path}"))
        } else {
            shell(&root, &id, &format!("head -c 64 {path}"))
        };
        assert_eq!((out.as_str(), code), ("", 0), "{path} shows something");
    }
    assert!(seen > 0, "this kernel has none of the masked paths?");
    // The folders are empty and read-only: nothing can be put there either.
    let (_, err, code) = shell(&root, &id, "mkdir /sys/firmware/x");
    assert_ne!(code, 0);
    assert!(err.contains("Read-only file system"), "{err}");
}

#[test]
fn dev_has_only_the_default_devices_and_no_kmsg() {
    let root = TestRoot::new("dev");
    let sandbox = root.sandbox(&pod("attacker"));
    let id = root.container(&sandbox, "app", &["sleep", "1000"]);
    let (listing, _, _) = shell(&root, &id, "ls -A /dev | sort | tr '\\n' ' '");
    let mut expected = vec![
        "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
        "stdout", "tty", "urandom", "zero",
    ];
    if !listing.contains("mqueue") {
        // Only where the kernel lets this caller mount an mqueue (see mnt::mount_dev).
        expected.retain(|d| *d != "mqueue");
    }
    assert_eq!(
        listing.trim_end(),
        expected.join(" "),
        "no host device but the defaults (no kmsg, no disks)"
    );
    // Made with mknod, as runc makes them outside a user namespace: the host's numbers, and no
    // mount of their own in the container's table; bound from the host's in a user namespace.
    let made = podlab_ns::user::in_initial_userns();
    let pid = pid_of(&root, &id);
    let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        let inside = format!("/dev/{name}");
        let mounted = table
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(inside.as_str()));
        assert_eq!(mounted, !made, "{inside} made with mknod: {made}\n{table}");
        let (numbers, _, code) = shell(&root, &id, &format!("stat -c '%F %t,%T %a' {inside}"));
        let host = std::fs::metadata(&inside).unwrap();
        use std::os::unix::fs::MetadataExt;
        let (major, minor) = (libc::major(host.rdev()), libc::minor(host.rdev()));
        assert_eq!(
            (numbers.trim(), code),
            (
                format!("character special file {major:x},{minor:x} 666").as_str(),
                0
            ),
            "{inside}"
        );
    }
}

/// CVE-2019-5736's way in: a process entering the container is a copy of the runtime's
/// binary; while it has not yet `execve`d, the container could open its `/proc/PID/exe`.
/// Here the entering process runs [`podlab_runtime::init::run_child`] (what every exec and
/// container start runs) and stops inside it, in the container's pid namespace and with the
/// container's capabilities (as just before its `execve`); the
/// container then tries to read its exe and is refused, while the same read of its own PID 1
/// works (so the attempt itself is sound).
#[test]
fn a_process_entering_the_container_hides_the_runtime_binary() {
    let root = TestRoot::new("exe");
    let sandbox = root.sandbox(&pod("attacker"));
    let id = root.container(&sandbox, "app", &["sleep", "1000"]);
    let pid = pid_of(&root, &id);
    let pid_ns = std::fs::File::open(format!("/proc/{pid}/ns/pid")).unwrap();
    // Close-on-exec: the shims other tests start at the same time must not hold them.
    let pipe = || nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
    let (hold_r, hold_w) = pipe();
    let (pid_r, pid_w) = pipe();
    let (report_r, report_w) = pipe();
    // SAFETY: the child only makes system calls and forks once more; it never returns.
    let outer = match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => {
            drop(hold_w);
            enter_and_hold(&pid_ns, hold_r, pid_w, report_w)
        }
        nix::unistd::ForkResult::Parent { child } => child,
    };
    drop((hold_r, pid_w, report_w));
    let mut bytes = [0u8; 4];
    nix::unistd::read(&pid_r, &mut bytes).unwrap();
    let entering = i32::from_ne_bytes(bytes);
    // Its number in the container's pid namespace: the last of NSpid.
    let status = std::fs::read_to_string(format!("/proc/{entering}/status")).unwrap();
    let inside: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|ids| ids.split_whitespace().last())
        .unwrap()
        .parse()
        .unwrap();

    let attempt = shell(&root, &id, &format!("head -c 4 /proc/{inside}/exe"));
    let control = shell(&root, &id, "head -c 4 /proc/1/exe");
    drop(hold_w);
    let _ = podlab_ns::child::wait_for(outer);
    drop(report_r);
    assert_eq!(
        (control.0.as_str(), control.2),
        ("\x7fELF", 0),
        "the container reads its own PID 1's binary"
    );
    assert_ne!(attempt.2, 0, "read the entering process's binary");
    assert!(attempt.1.contains("Permission denied"), "{}", attempt.1);
}

/// In the forked child: join the container's pid namespace, fork the entering process (which
/// runs `run_child` and waits in it until `hold` closes), tell the parent its pid, reap it.
fn enter_and_hold(pid_ns: &std::fs::File, hold: OwnedFd, tell: OwnedFd, report: OwnedFd) -> ! {
    use std::os::fd::AsFd;
    let code = (|| {
        nix::sched::setns(pid_ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWPID).ok()?;
        // SAFETY: this process is single-threaded.
        match unsafe { nix::unistd::fork() }.ok()? {
            nix::unistd::ForkResult::Child => {
                let stdio = podlab_runtime::init::Stdio {
                    stdin: 0,
                    stdout: 1,
                    stderr: 2,
                    console: None,
                };
                podlab_runtime::init::run_child(stdio, report, |_| {
                    // Where the window is widest: the capabilities are already the
                    // container's, so the kernel's "no more capable than the reader" rule
                    // no longer protects it; only non-dumpability does.
                    let keep = podlab_runtime::capabilities::default_set();
                    podlab_runtime::capabilities::drop_bounding(&keep).unwrap();
                    podlab_runtime::capabilities::limit_root_sets(&keep).unwrap();
                    let mut byte = [0u8; 1];
                    let _ = nix::unistd::read(&hold, &mut byte);
                    Err(podlab_runtime::init::failure(
                        "held",
                        None,
                        None,
                        "released".into(),
                    ))
                })
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop(hold);
                nix::unistd::write(&tell, &child.as_raw().to_ne_bytes()).ok()?;
                let _ = nix::sys::wait::waitpid(child, None);
                Some(0)
            }
        }
    })()
    .unwrap_or(1);
    // SAFETY: leave without running the test harness's exit handlers.
    unsafe { libc::_exit(code) }
}

/// A field of `/proc/self/status` as the container's process sees it.
fn status_field(root: &TestRoot, id: &ContainerId, field: &str) -> String {
    let (out, _, _) = shell(root, id, &format!("grep '^{field}:' /proc/self/status"));
    out.split_whitespace().nth(1).unwrap_or("").to_string()
}

/// The built-in busybox with one more layer on top: an `/etc/group` that lists root in group
/// 10, as many images list root in `wheel`.
struct WithGroupFile {
    inner: podlab_runtime::StoreImages,
    layer: PathBuf,
}

impl podlab_runtime::ImageService for WithGroupFile {
    fn resolve(&self, name: &str) -> podlab_runtime::Result<podlab_runtime::ResolvedImage> {
        let mut image = self.inner.resolve(name)?;
        image.lowerdirs.insert(0, self.layer.clone());
        Ok(image)
    }
}

#[test]
fn strict_supplemental_groups_leave_out_the_images_group_memberships() {
    let mut root = TestRoot::new("groups-policy");
    let layer = root.dir.join("group-layer");
    std::fs::create_dir_all(layer.join("etc")).unwrap();
    std::fs::write(
        layer.join("etc/group"),
        "root:x:0:\nwheel:x:10:root\nnobody:x:65534:\n",
    )
    .unwrap();
    let config = RuntimeConfig {
        root: root.dir.join("state"),
        helper_dir: helper_dir(),
        image_root: root.dir.join("images"),
    };
    let inner = podlab_runtime::StoreImages::open(&config.image_root).unwrap();
    let images = Arc::new(WithGroupFile { inner, layer });
    root.runtime = Runtime::with_images(config, images).unwrap();
    let sandbox = root.sandbox(&pod("groups"));
    let groups = |name: &str, strict: bool| {
        let mut config = container_config(name, &["sleep", "1000"]);
        config.security.supplemental_groups = vec![4000];
        config.security.strict_supplemental_groups = strict;
        let id = start(&root, &sandbox, config);
        let (out, _, _) = shell(&root, &id, "grep '^Groups:' /proc/self/status");
        // The status reports what the container's own process got, as the kernel has it.
        let status = root.runtime.container_status(&id).unwrap();
        let pid = status.pid.expect("running");
        let kernel = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = |key: &str| {
            kernel
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap()
                .to_string()
        };
        let user = status.user.expect("the user is recorded at start");
        let listed = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
        assert_eq!(
            line("Groups:").trim_end(),
            format!("Groups:\t{}", listed(&user.supplemental_groups))
        );
        assert!(line("Uid:").starts_with(&format!("Uid:\t{}\t", user.uid)));
        assert!(line("Gid:").starts_with(&format!("Gid:\t{}\t", user.gid)));
        (out.trim().to_string(), user.supplemental_groups)
    };
    assert_eq!(
        groups("merge", false),
        ("Groups:\t0 10 4000".to_string(), vec![0, 10, 4000]),
        "Merge: the image's membership of root in group 10 as well"
    );
    assert_eq!(
        groups("strict", true),
        ("Groups:\t0 4000".to_string(), vec![0, 4000]),
        "Strict: the primary group and the pod's groups only"
    );
}

fn start(root: &TestRoot, sandbox: &SandboxId, config: ContainerConfig) -> ContainerId {
    let id = root.runtime.create_container(sandbox, &config).unwrap();
    root.runtime.start_container(&id).unwrap();
    id
}

#[test]
fn capabilities_add_and_drop_reach_the_kernels_sets() {
    let root = TestRoot::new("caps");
    let sandbox = root.sandbox(&pod("caps"));
    let default = root.container(&sandbox, "default", &["sleep", "1000"]);
    let mut config = container_config("changed", &["sleep", "1000"]);
    config.security.add_capabilities = vec!["NET_ADMIN".into()];
    config.security.drop_capabilities = vec!["NET_RAW".into(), "chown".into()];
    let changed = start(&root, &sandbox, config);
    let mut config = container_config("none", &["sleep", "1000"]);
    config.security.drop_capabilities = vec!["ALL".into()];
    let none = start(&root, &sandbox, config);

    let bits =
        |id: &ContainerId| u64::from_str_radix(&status_field(&root, id, "CapEff"), 16).unwrap();
    let bit = |cap: u32| 1u64 << cap;
    // containerd's 14 (CAP_CHOWN 0, CAP_NET_RAW 13, CAP_NET_ADMIN 12).
    assert_eq!(bits(&default), 0x00000000a80425fb);
    assert_eq!(
        bits(&changed),
        (0x00000000a80425fb | bit(12)) & !bit(13) & !bit(0)
    );
    assert_eq!(bits(&none), 0);
    assert_eq!(status_field(&root, &none, "CapBnd"), "0000000000000000");
    // What it costs the process: without CAP_CHOWN root cannot give a file away.
    let (_, err, code) = shell(&root, &none, "touch /tmp/f && chown 1:1 /tmp/f");
    assert_ne!(code, 0);
    assert!(err.contains("Operation not permitted"), "{err}");
}

#[test]
fn an_unknown_capability_is_refused_before_anything_is_made() {
    let root = TestRoot::new("badcap");
    let sandbox = root.sandbox(&pod("badcap"));
    let mut config = container_config("app", &["true"]);
    config.security.add_capabilities = vec!["NET_ADMINN".into()];
    let err = root
        .runtime
        .create_container(&sandbox, &config)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "container \"app\": unknown capability \"NET_ADMINN\""
    );
    assert!(root
        .runtime
        .list_containers(&ContainerFilter::default())
        .unwrap()
        .is_empty());
}

#[test]
fn no_new_privs_and_the_runtime_default_seccomp_profile_hold_in_the_kernel() {
    let root = TestRoot::new("seccomp");
    let sandbox = root.sandbox(&pod("seccomp"));
    let plain = root.container(&sandbox, "plain", &["sleep", "1000"]);
    let mut config = container_config("hardened", &["sleep", "1000"]);
    config.security.no_new_privs = true;
    config.security.seccomp = podlab_runtime::seccomp::SeccompProfile::RuntimeDefault;
    let hardened = start(&root, &sandbox, config);
    assert_eq!(status_field(&root, &plain, "Seccomp"), "0");
    assert_eq!(status_field(&root, &plain, "NoNewPrivs"), "0");
    assert_eq!(status_field(&root, &hardened, "Seccomp"), "2");
    assert_eq!(status_field(&root, &hardened, "NoNewPrivs"), "1");
    // An exec runs under the same filter.
    let pid = pid_of(&root, &hardened);
    let host_view = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(host_view.contains("Seccomp:\t2"), "{host_view}");
    // unshare(CLONE_NEWUSER) needs no capability at all, so only seccomp stops it; busybox's
    // unshare reports the EPERM.
    let (_, err, code) = shell(&root, &hardened, "unshare -U true");
    assert_ne!(code, 0);
    assert!(err.contains("Operation not permitted"), "{err}");
    let (_, _, code) = shell(&root, &plain, "unshare -U true");
    assert_eq!(code, 0, "without the filter the same call works");
}

#[test]
fn a_localhost_profile_is_loaded_and_a_missing_one_refused() {
    let root = TestRoot::new("localhost");
    let sandbox = root.sandbox(&pod("localhost"));
    let profile = root.dir.join("no-mkdir.json");
    std::fs::write(
        &profile,
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
            {"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}"#,
    )
    .unwrap();
    let mut config = container_config("app", &["sleep", "1000"]);
    config.security.seccomp = podlab_runtime::seccomp::SeccompProfile::Localhost(profile);
    let id = start(&root, &sandbox, config);
    let (_, err, code) = shell(&root, &id, "mkdir /tmp/d");
    assert_ne!(code, 0);
    assert!(
        err.contains("Permission denied"),
        "EACCES from the profile: {err}"
    );
    assert_eq!(status_field(&root, &id, "Seccomp"), "2");

    let mut config = container_config("missing", &["true"]);
    let missing = root.dir.join("nope.json");
    config.security.seccomp = podlab_runtime::seccomp::SeccompProfile::Localhost(missing);
    let err = root
        .runtime
        .create_container(&sandbox, &config)
        .unwrap_err();
    assert!(
        err.to_string().contains("cannot load seccomp profile"),
        "{err}"
    );
}

#[test]
fn a_privileged_container_gets_everything_containerd_gives_it() {
    let root = TestRoot::new("privileged");
    let sandbox = root.sandbox(&pod("privileged"));
    let mut config = container_config("app", &["sleep", "1000"]);
    config.security.privileged = true;
    config.security.seccomp = podlab_runtime::seccomp::SeccompProfile::RuntimeDefault;
    let id = start(&root, &sandbox, config);
    let pid = pid_of(&root, &id);
    let all = std::fs::read_to_string("/proc/self/status").unwrap();
    let bounding = all
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .unwrap()
        .trim();
    assert_eq!(status_field(&root, &id, "CapEff"), bounding);
    assert_eq!(status_field(&root, &id, "Seccomp"), "0", "no filter");
    assert!(
        mount_options(pid, "/proc/sys").is_none(),
        "no read-only /proc/sys"
    );
    assert!(
        mount_options(pid, "/proc/kcore").is_none() && mount_options(pid, "/proc/keys").is_none()
    );
    let sys = mount_options(pid, "/sys").unwrap();
    assert!(sys.split(',').any(|o| o == "rw"), "{sys}");
    // The host's devices (here: whatever char device the host has beyond the defaults).
    if std::path::Path::new("/dev/kmsg").exists() {
        let (_, _, code) = shell(&root, &id, "test -c /dev/kmsg");
        assert_eq!(code, 0, "the host's /dev/kmsg");
        // ... and its device cgroup lets it open them (containerd's `a *:* rwm`): opened for
        // reading, nothing read.
        let (out, err, code) = shell(&root, &id, "true < /dev/kmsg && echo opened");
        assert_eq!((out.trim(), code), ("opened", 0), "{err}");
    }
}

#[test]
fn supplemental_groups_are_added_to_the_process() {
    let root = TestRoot::new("groups");
    let sandbox = root.sandbox(&pod("groups"));
    let mut config = container_config("app", &["sleep", "1000"]);
    config.run_as_user = Some(1000);
    config.run_as_group = Some(3000);
    config.security.supplemental_groups = vec![4000, 5000];
    let id = start(&root, &sandbox, config);
    assert_eq!(status_field(&root, &id, "Uid"), "1000");
    let (groups, _, _) = shell(&root, &id, "grep '^Groups:' /proc/self/status");
    assert_eq!(groups.trim(), "Groups:\t3000 4000 5000");
}

/// The pause process as containerd starts its sandbox container: PID 1 of a pid namespace of
/// its own, a mount namespace of its own whose read-only root holds only the pause binary, no
/// effective capability (the pause image's user 65535), no_new_privs and the pod's seccomp
/// profile; with and without the node agent's mount template.
#[test]
fn the_pause_process_has_its_own_pid_and_mount_namespaces_a_read_only_root_and_no_privileges() {
    for with_template in [false, true] {
        let mut root = TestRoot::new(if with_template { "pause-tpl" } else { "pause" });
        if with_template {
            root.runtime.use_mount_template().unwrap();
        }
        let mut config = pod("hardened-pause");
        config.linux.security.seccomp = podlab_runtime::seccomp::SeccompProfile::RuntimeDefault;
        let sandbox = root.sandbox(&config);
        let status = root.runtime.pod_sandbox_status(&sandbox).unwrap();
        let pause = status.pause_pid.unwrap();
        let me = std::process::id() as i32;
        for kind in [NsKind::Pid, NsKind::Mnt] {
            assert_ne!(inode(pause, kind), inode(me, kind), "{kind} of the node's");
        }
        assert_eq!(
            podlab_ns::pid::pid_in_own_ns(pause).unwrap().last(),
            Some(&1),
            "pause is PID 1 of its pid namespace"
        );
        // Its whole mount table: a read-only tmpfs root and the binary bound read-only on it.
        let table = std::fs::read_to_string(format!("/proc/{pause}/mountinfo")).unwrap();
        let mounts: Vec<Vec<&str>> = table.lines().map(|l| l.split(' ').collect()).collect();
        assert_eq!(mounts.len(), 2, "{table}");
        let mut points: Vec<&str> = mounts.iter().map(|m| m[4]).collect();
        points.sort();
        assert_eq!(points, ["/", "/podlab-pause"], "{table}");
        assert!(
            table
                .lines()
                .any(|l| l.contains(" / / ") && l.contains(" - tmpfs ")),
            "{table}"
        );
        for mount in &mounts {
            assert!(mount[5].split(',').any(|o| o == "ro"), "{table}");
        }
        let listing: Vec<String> = std::fs::read_dir(format!("/proc/{pause}/root"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(listing, ["podlab-pause"]);
        // Even root gets EROFS writing there; and above its root (`..` of /proc/PID/root
        // leaves a chroot) is nothing of the node's: its own root again after pivot_root, the
        // template's empty, read-only tmpfs after chroot.
        let above: Vec<String> = std::fs::read_dir(format!("/proc/{pause}/root/.."))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let expected = if with_template {
            "rootfs"
        } else {
            "podlab-pause"
        };
        assert_eq!(above, [expected]);
        for path in ["x", "../x"] {
            let err = std::fs::File::create(format!("/proc/{pause}/root/{path}")).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{path}: {err}");
        }
        // no_new_privs, the filter, no effective capability, containerd's bounding set, the
        // pause image's user.
        let status = std::fs::read_to_string(format!("/proc/{pause}/status")).unwrap();
        for line in [
            "NoNewPrivs:\t1",
            "Seccomp:\t2",
            "CapEff:\t0000000000000000",
            "CapBnd:\t00000000a80425fb",
            "Uid:\t65535\t65535\t65535\t65535",
        ] {
            assert!(status.lines().any(|l| l == line), "{line:?} in {status}");
        }
        // It still is what the pod's containers join.
        let app = root.container(&sandbox, "app", &["sleep", "1000"]);
        assert_eq!(
            inode(pid_of(&root, &app), NsKind::Net),
            inode(pause, NsKind::Net)
        );
    }
}

/// runc's CVE-2024-21626 ("Leaky Vessels"): a descriptor of a node folder still open in the
/// process entering the container lets `workingDir: /proc/self/fd/N` start the program with its
/// working directory on the node, outside its root. For each N the start either fails or the
/// program's `getcwd` is a path in its root (never the kernel's "(unreachable)"), and the
/// program holds no descriptor but its stdio; an exec into a container holds none either.
#[test]
fn a_working_dir_through_a_leaked_descriptor_never_lands_outside_the_root() {
    let root = TestRoot::new("leaky-fd");
    let sandbox = root.sandbox(&pod("leaky"));
    let mut started = 0;
    for n in 3..=40 {
        let mut config =
            container_config(&format!("fd{n}"), &["sh", "-c", "pwd -P; ls /proc/$$/fd"]);
        config.working_dir = Some(format!("/proc/self/fd/{n}"));
        let id = root.runtime.create_container(&sandbox, &config).unwrap();
        if let Err(e) = root.runtime.start_container(&id) {
            let e = e.to_string();
            assert!(!e.contains("(unreachable)"), "fd {n}: {e}");
            continue;
        }
        started += 1;
        let status = root.runtime.wait_container(&id, WAIT).unwrap();
        let text: Vec<String> = podlab_runtime::cri_log::read_log(&status.log_path)
            .unwrap()
            .into_iter()
            .map(|l| String::from_utf8_lossy(&l.content).into_owned())
            .collect();
        assert!(
            text.first().is_some_and(|cwd| cwd.starts_with('/')),
            "fd {n}: the program's working directory is outside its root: {text:?}"
        );
        let fds: Vec<&str> = text[1..].iter().map(String::as_str).collect();
        assert_eq!(
            fds,
            ["0", "1", "2"],
            "fd {n}: descriptors the program holds"
        );
    }
    eprintln!("{started} of 38 starts through /proc/self/fd/N went ahead, all inside the root");
    let app = root.container(&sandbox, "app", &["sleep", "1000"]);
    let (out, _, code) = shell(&root, &app, "ls /proc/$$/fd; pwd -P");
    assert_eq!((out.as_str(), code), ("0\n1\n2\n/\n", 0));
}

/// How long the kernel takes to install each compiled profile (`seccomp(2)` with no_new_privs,
/// in a forked child, medians of 200): the compiled program's length is paid at every
/// container's start, in the checks, the JIT and the per-call cache the kernel fills by running
/// the filter for each call number of both ABIs.
#[test]
#[ignore = "a measurement, not a check: run with --ignored --nocapture"]
fn measure_the_install_of_each_seccomp_profile() {
    use podlab_runtime::seccomp;
    let caps = podlab_runtime::capabilities::default_names();
    for (name, profile) in [
        ("runtime default", seccomp::runtime_default(&caps)),
        ("pause", seccomp::pause_default(&caps)),
    ] {
        let filters = seccomp::compile(&profile).unwrap();
        let length: usize = filters.iter().map(Vec::len).sum();
        let mut times: Vec<Duration> = (0..200)
            .map(|_| {
                let (read, write) = nix::unistd::pipe().unwrap();
                // SAFETY: the child only makes system calls and exits.
                match unsafe { nix::unistd::fork() }.unwrap() {
                    nix::unistd::ForkResult::Child => {
                        // SAFETY: prctl with constant arguments.
                        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
                        let start = std::time::Instant::now();
                        let installed = seccomp::install(&filters).is_ok();
                        let nanos = start.elapsed().as_nanos() as u64;
                        let report = if installed { nanos } else { u64::MAX };
                        let _ = nix::unistd::write(&write, &report.to_ne_bytes());
                        // SAFETY: ends the forked child without running the parent's exit code.
                        unsafe { libc::_exit(0) }
                    }
                    nix::unistd::ForkResult::Parent { child } => {
                        drop(write);
                        let mut bytes = [0u8; 8];
                        nix::unistd::read(&read, &mut bytes).unwrap();
                        nix::sys::wait::waitpid(child, None).unwrap();
                        let nanos = u64::from_ne_bytes(bytes);
                        assert_ne!(nanos, u64::MAX, "{name}: the install failed");
                        Duration::from_nanos(nanos)
                    }
                }
            })
            .collect();
        println!(
            "PODLAB-SECCOMP-INSTALL: {name}: {} filter(s), {length} instructions, {:.3} ms",
            filters.len(),
            median_ms(&mut times)
        );
    }
}
