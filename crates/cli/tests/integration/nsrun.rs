//! Integration tests: nsrun. `podlab ns run`, podlab's `unshare --fork`, checked from inside the
//! command it runs (the namespace inode ids it is in, its pid, its hostname, its `lo`, its mount
//! table) and from outside (the exit status, the processes left).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nix::mount::MsFlags;
use podlab_ns::child::run_in_child;
use podlab_ns::{ops, uts, NsKind};

use crate::support::{podlab, wait_until};

const BUSYBOX: &str = "/bin/busybox";
/// The kinds whose ids CMD prints (`/proc/self/ns/NAME`).
const KINDS: [&str; 6] = ["uts", "ipc", "net", "pid", "mnt", "user"];

fn busybox() -> &'static str {
    assert!(
        Path::new(BUSYBOX).exists(),
        "{BUSYBOX} missing: install busybox-static"
    );
    BUSYBOX
}

/// `podlab ns run FLAGS -- ARGS...`.
fn ns_run(flags: &[&str], args: &[&str]) -> Command {
    let mut cmd = podlab();
    cmd.args(["ns", "run"]).args(flags).arg("--").args(args);
    cmd
}

/// `podlab ns run FLAGS -- busybox sh -c SCRIPT`, run to its end.
fn ns_run_sh(flags: &[&str], script: &str) -> Output {
    ns_run(flags, &[busybox(), "sh", "-c", script])
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Checks that podlab exited with `code`, showing its output when not.
fn assert_status(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The inode id in a `/proc/PID/ns/*` link's text, `net:[4026531840]`.
fn inode_of_link(link: &str) -> (String, u64) {
    let (kind, rest) = link.trim().split_once(":[").expect("KIND:[INODE]");
    let inode = rest.trim_end_matches(']').parse().expect("a number");
    (kind.to_string(), inode)
}

/// The namespace ids CMD is in, as it reads them itself.
fn inside_ids(flags: &[&str]) -> BTreeMap<String, u64> {
    let script = KINDS
        .map(|kind| format!("readlink /proc/self/ns/{kind}"))
        .join("; ");
    let out = ns_run_sh(flags, &script);
    assert_status(&out, 0);
    text(&out.stdout).lines().map(inode_of_link).collect()
}

fn own_id(kind: &str) -> u64 {
    std::fs::metadata(format!("/proc/self/ns/{kind}"))
        .unwrap()
        .ino()
}

#[test]
fn the_namespaces_asked_for_are_new_and_the_others_are_shared() {
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["--uts", "--ipc", "--net", "--pid", "--mount"],
            &["uts", "ipc", "net", "pid", "mnt"],
        ),
        (&["--uts", "--net"], &["uts", "net"]),
        (&["-i", "-p"], &["ipc", "pid"]),
        (&["--mount"], &["mnt"]),
        (&["--user", "--map-root-user", "--net"], &["user", "net"]),
    ];
    for (flags, new) in cases {
        let inside = inside_ids(flags);
        for kind in KINDS {
            let (inner, outer) = (inside[kind], own_id(kind));
            if new.contains(&kind) {
                assert_ne!(inner, outer, "{flags:?}: {kind} should be a new namespace");
            } else {
                assert_eq!(inner, outer, "{flags:?}: {kind} should be the caller's");
            }
        }
    }
}

#[test]
fn with_pid_the_command_is_pid_1_and_with_mount_proc_shows_only_its_namespace() {
    // Only shell built-ins, so that the shell is the one process of the namespace.
    let out = ns_run_sh(
        &["--pid", "--mount"],
        "echo $$; for p in /proc/[0-9]*; do echo ${p#/proc/}; done",
    );
    assert_status(&out, 0);
    assert_eq!(text(&out.stdout), "1\n1\n", "PID 1, alone in /proc");

    // Without --mount the new pid namespace has no /proc of its own: the test's pid is in it.
    let me = std::process::id();
    let out = ns_run_sh(
        &["--pid"],
        &format!("echo $$; test -d /proc/{me} && echo old"),
    );
    assert_status(&out, 0);
    assert_eq!(text(&out.stdout), "1\nold\n");
}

#[test]
fn the_hostname_is_set_inside_only() {
    let before = uts::hostname().unwrap();
    let out = ns_run(
        &["--uts", "--hostname", "podlab-it-nsrun"],
        &[busybox(), "hostname"],
    )
    .output()
    .unwrap();
    assert_status(&out, 0);
    assert_eq!(text(&out.stdout).trim_end(), "podlab-it-nsrun");
    assert_eq!(uts::hostname().unwrap(), before, "the caller keeps its own");
}

#[test]
fn hostname_without_uts_and_no_namespace_at_all_are_usage_errors() {
    let out = ns_run(&["--net", "--hostname", "x"], &["/bin/true"])
        .output()
        .unwrap();
    assert_status(&out, 2);
    assert!(text(&out.stderr).contains("--uts"), "{}", text(&out.stderr));
    let out = ns_run(&[], &["/bin/true"]).output().unwrap();
    assert_status(&out, 2);
    assert!(
        text(&out.stderr).contains("--uts, --ipc, --net"),
        "{}",
        text(&out.stderr)
    );
}

/// iproute2's `ip`, or busybox's when it is missing.
fn ip_command() -> Vec<String> {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .map_or_else(
            || vec![busybox().to_string(), "ip".to_string()],
            |path| vec![path.to_string()],
        )
}

#[test]
fn with_net_lo_is_up_inside() {
    let mut args = ip_command();
    args.extend(["-o", "link", "show", "lo"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ns_run(&["--net"], &args).output().unwrap();
    assert_status(&out, 0);
    // `1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 ...`
    let line = text(&out.stdout);
    let flags = line
        .split_once('<')
        .and_then(|(_, rest)| rest.split_once('>'))
        .map(|(flags, _)| flags.split(',').collect::<Vec<_>>())
        .unwrap_or_else(|| panic!("no <FLAGS> in {line:?}"));
    assert!(flags.contains(&"LOOPBACK"), "{line}");
    assert!(flags.contains(&"UP"), "lo is down inside: {line}");
}

#[test]
fn the_exit_status_is_the_commands_as_a_shell_gives_it() {
    let status = |flags: &[&str], args: &[&str]| ns_run(flags, args).output().unwrap();
    assert_status(&status(&["--uts"], &["/bin/true"]), 0);
    assert_status(&status(&["--pid", "--mount"], &[busybox(), "true"]), 0);
    assert_status(&status(&["--uts"], &[busybox(), "sh", "-c", "exit 3"]), 3);
    assert_status(&status(&["--pid"], &[busybox(), "sh", "-c", "exit 3"]), 3);
    // 128 + SIGTERM. Not as PID 1, which the kernel keeps from its own unhandled signals.
    assert_status(
        &status(&["--uts"], &[busybox(), "sh", "-c", "kill -TERM $$"]),
        143,
    );

    let missing = status(&["--uts", "--net"], &["podlab-it-no-such-command"]);
    assert_status(&missing, 127);
    assert!(
        text(&missing.stderr).contains("podlab-it-no-such-command: command not found"),
        "{}",
        text(&missing.stderr)
    );

    let script = NotExecutable::new("podlab-it-nsrun-noexec");
    let refused = status(&["--uts"], &[script.0.to_str().unwrap()]);
    assert_status(&refused, 126);
    assert!(
        text(&refused.stderr).contains("Permission denied"),
        "{}",
        text(&refused.stderr)
    );
}

/// A file without execute permission, removed on drop.
struct NotExecutable(PathBuf);

impl NotExecutable {
    fn new(name: &str) -> NotExecutable {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        NotExecutable(path)
    }
}

impl Drop for NotExecutable {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_command_is_looked_up_in_path() {
    let out = ns_run(&["--uts"], &["busybox", "true"])
        .env("PATH", "/nonexistent-podlab-it:/bin")
        .output()
        .unwrap();
    assert_status(&out, 0);
}

/// Every process whose network namespace is `netns`, as the `/proc` of the test sees them.
fn processes_in_netns(netns: u64) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| ops::ns_inode(*pid, NsKind::Net).ok() == Some(netns))
        .collect()
}

/// Kills whatever is still in a network namespace when the test ends, so that a failing test
/// leaves nothing running.
struct KillNetnsOnDrop(u64);

impl Drop for KillNetnsOnDrop {
    fn drop(&mut self) {
        for pid in processes_in_netns(self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Waits (bounded) until no process is left in `netns`; fails with `what` and who is left.
fn assert_netns_empties(netns: u64, what: &str) {
    let empty = wait_until(Duration::from_secs(10), || {
        processes_in_netns(netns).is_empty()
    });
    assert!(empty, "{what}: {:?}", processes_in_netns(netns));
}

#[test]
fn nothing_is_left_after_the_command_ends() {
    // A background process outlives the shell, PID 1: the kernel ends it with its namespace.
    let out = ns_run_sh(
        &["--pid", "--net"],
        &format!("readlink /proc/self/ns/net; {BUSYBOX} sleep 1000 >/dev/null 2>&1 & exit 0"),
    );
    assert_status(&out, 0);
    let (_, netns) = inode_of_link(&text(&out.stdout));
    let _cleanup = KillNetnsOnDrop(netns);
    assert_netns_empties(netns, "left in the command's namespaces");
}

#[test]
fn the_command_dies_with_podlab() {
    let mut running = ns_run(
        &["--pid", "--net"],
        &[
            busybox(),
            "sh",
            "-c",
            &format!("readlink /proc/self/ns/net; exec {BUSYBOX} sleep 1000"),
        ],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(running.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let (_, netns) = inode_of_link(&line);
    let _cleanup = KillNetnsOnDrop(netns);
    assert!(!processes_in_netns(netns).is_empty(), "the command runs");
    running.kill().unwrap();
    running.wait().unwrap();
    assert_netns_empties(netns, "the command outlived podlab");
}

#[test]
fn with_map_root_user_the_caller_is_root_inside() {
    let uid = nix::unistd::getuid().as_raw();
    let out = ns_run_sh(
        &["--map-root-user", "--uts"],
        "id -u; id -g; cat /proc/self/uid_map /proc/self/setgroups",
    );
    assert_status(&out, 0);
    let stdout = text(&out.stdout);
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["0"], "{stdout}");
    assert_eq!(lines[1], ["0"], "{stdout}");
    assert_eq!(lines[2], ["0", &uid.to_string(), "1"], "{stdout}");
    assert_eq!(lines[3], ["deny"], "{stdout}");
}

/// Runs podlab in a forked child that first made a mount namespace of its own and changed it
/// with `prepare`, so that the test's own mounts stay as they are. Returns podlab's status,
/// stdout and stderr.
fn in_own_mount_ns(
    prepare: impl FnOnce() -> podlab_ns::Result<()>,
    flags: &[&str],
    args: &[&str],
) -> (Option<i32>, String, String) {
    let mut cmd = ns_run(flags, args);
    run_in_child(move || {
        ops::create(&[NsKind::Mnt])?;
        podlab_ns::mnt::make_rprivate(Path::new("/"))?;
        prepare()?;
        let out = cmd
            .output()
            .map_err(|e| podlab_ns::Error::io("running", "podlab", e))?;
        Ok((out.status.code(), text(&out.stdout), text(&out.stderr)))
    })
    .unwrap()
}

#[test]
fn with_mount_every_mount_is_private_inside() {
    // The caller's mounts shared, as on a systemd host: the new namespace's copies must not be.
    let make_shared = || {
        nix::mount::mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| podlab_ns::Error::sys("mount(make-rshared)", e))?;
        let outside = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| podlab_ns::Error::io("reading", "/proc/self/mountinfo", e))?;
        if !outside.contains(" shared:") {
            return Err(podlab_ns::Error::Invalid(
                "no shared mount outside".to_string(),
            ));
        }
        Ok(())
    };
    let (code, mountinfo, stderr) = in_own_mount_ns(
        make_shared,
        &["--mount"],
        &[busybox(), "cat", "/proc/self/mountinfo"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(mountinfo.lines().count() > 1, "{mountinfo}");
    let shared: Vec<&str> = mountinfo
        .lines()
        .filter(|line| line.contains(" shared:") || line.contains(" master:"))
        .collect();
    assert!(shared.is_empty(), "not private inside: {shared:#?}");
}

#[test]
fn a_failed_mount_in_the_child_is_reported_with_its_namespace_and_call() {
    crate::skip_unless!(NsKind::User.supported(), "no user namespaces");
    // A file system over a non-empty folder of /proc hides part of it, and the kernel refuses a
    // new procfs to a user namespace that could see below it through that (EPERM).
    let mask_proc_sys = || {
        nix::mount::mount(
            Some("tmpfs"),
            "/proc/sys",
            Some("tmpfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .map_err(|e| podlab_ns::Error::sys("mount(tmpfs on /proc/sys)", e))
    };
    let (code, _, stderr) = in_own_mount_ns(
        mask_proc_sys,
        &["--map-root-user", "--pid", "--mount"],
        &["/bin/true"],
    );
    assert_eq!(code, Some(1), "{stderr}");
    for words in ["mounting /proc", "mount(proc)", "mnt namespace", "EPERM"] {
        assert!(stderr.contains(words), "{words:?} missing in: {stderr}");
    }
}

/// `podlab ns run` as the unprivileged user nobody (`setpriv`), from a copy of the binary that
/// user can reach wherever the checkout is.
fn ns_run_as_nobody(flags: &[&str], args: &[&str]) -> Output {
    let binaries = crate::support::SharedBinaries::new();
    let podlab = binaries.podlab();
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(podlab.get_program())
        .current_dir("/")
        .args(["ns", "run"])
        .args(flags)
        .arg("--")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn an_unprivileged_user_is_told_about_map_root_user_and_can_use_it() {
    crate::skip_unless!(
        Path::new("/usr/bin/setpriv").exists(),
        "no setpriv (util-linux)"
    );
    let refused = ns_run_as_nobody(&["--uts"], &["/bin/true"]);
    assert_status(&refused, 1);
    let stderr = text(&refused.stderr);
    for words in ["clone (uts namespaces)", "EPERM", "--map-root-user"] {
        assert!(stderr.contains(words), "{words:?} missing in: {stderr}");
    }

    crate::skip_unless!(
        podlab_ns::user::unprivileged_userns_allowed(),
        "unprivileged user namespaces are disabled"
    );
    let out = ns_run_as_nobody(
        &[
            "-r",
            "--uts",
            "--pid",
            "--mount",
            "--hostname",
            "podlab-it-rootless",
        ],
        &[busybox(), "sh", "-c", "id -u; hostname; echo $$"],
    );
    assert_status(&out, 0);
    assert_eq!(text(&out.stdout), "0\npodlab-it-rootless\n1\n");
}
