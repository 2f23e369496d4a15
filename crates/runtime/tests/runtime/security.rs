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
                };
                podlab_runtime::init::run_child(stdio, report, |_| {
                    // Where the window is widest: the capabilities are already the
                    // container's, so the kernel's "no more capable than the reader" rule
                    // no longer protects it; only non-dumpability does.
                    podlab_runtime::capabilities::drop_bounding().unwrap();
                    podlab_runtime::capabilities::limit_root_sets().unwrap();
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
