//! Integration tests: user. An unprivileged process (uid 65534, dropped to from root) makes a
//! user namespace and is root inside it, over namespaces it owns and nothing else; and the CLI
//! run as that user gets its privileges that way.

use std::os::unix::process::CommandExt;

use nix::unistd::{Gid, Uid};
use podlab_ns::child::run_in_child;
use podlab_ns::user::{self, IdMapping};
use podlab_ns::{Error, Result};

use crate::support::{SharedBinaries, SharedDir};

const NOBODY: u32 = 65534;
const NEEDS: &str = "needs root (to drop to uid 65534) and unprivileged user namespaces";

fn nobody_can_make_user_namespaces() -> bool {
    nix::unistd::geteuid().is_root() && user::unprivileged_userns_allowed()
}

/// Drops the calling process to uid and gid 65534 with no supplementary groups.
fn drop_to_nobody() -> Result<()> {
    let gid = Gid::from_raw(NOBODY);
    let uid = Uid::from_raw(NOBODY);
    nix::unistd::setgroups(&[]).map_err(|e| Error::sys("setgroups", e))?;
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| Error::sys("setresgid", e))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| Error::sys("setresuid", e))?;
    // Changing uid made the process non-dumpable, which hands its /proc files to root; a
    // user's own process (after exec) is dumpable, and must be to write its id maps.
    // SAFETY: PR_SET_DUMPABLE takes no pointers.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) } != 0 {
        return Err(Error::sys("prctl(PR_SET_DUMPABLE)", nix::Error::last()));
    }
    Ok(())
}

/// `command`, to be run as uid and gid 65534 with no supplementary groups.
fn as_nobody(mut command: std::process::Command) -> std::process::Command {
    // SAFETY: between fork and exec only async-signal-safe system calls run.
    unsafe {
        command.pre_exec(|| {
            let nobody = NOBODY as libc::gid_t;
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(nobody, nobody, nobody) != 0
                || libc::setresuid(nobody, nobody, nobody) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

/// What an unprivileged process found in the user namespace it made.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct Inside {
    uid_before: u32,
    uid: u32,
    gid: u32,
    uid_map: String,
    gid_map: String,
    setgroups: String,
    host_hostname_errno: Option<i32>,
    own_hostname_set: bool,
}

#[test]
fn an_unprivileged_process_is_root_in_its_own_user_namespace() {
    crate::skip_unless!(nobody_can_make_user_namespaces(), NEEDS);
    let inside: Inside = run_in_child(|| {
        drop_to_nobody()?;
        let uid_before = nix::unistd::getuid().as_raw();
        user::become_root_in_new_userns()?;
        let (uid_map, gid_map) = user::id_maps(std::process::id() as i32)?;
        let setgroups = std::fs::read_to_string("/proc/self/setgroups")
            .map_err(|e| Error::io("reading", "/proc/self/setgroups", e))?;
        // Root here, but the uts namespace we are in belongs to the host's user namespace.
        let host_hostname_errno = nix::unistd::sethostname("not-allowed")
            .err()
            .map(|e| e as i32);
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUTS)
            .map_err(|e| Error::sys("unshare(CLONE_NEWUTS)", e))?;
        nix::unistd::sethostname("ours").map_err(|e| Error::sys("sethostname", e))?;
        let own_hostname_set = nix::unistd::gethostname()
            .map(|name| name == "ours")
            .unwrap_or(false);
        Ok(Inside {
            uid_before,
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            uid_map,
            gid_map,
            setgroups: setgroups.trim().to_string(),
            host_hostname_errno,
            own_hostname_set,
        })
    })
    .unwrap();
    let nobody_as_root = [IdMapping {
        inside: 0,
        outside: NOBODY,
        count: 1,
    }];
    assert_eq!(inside.uid_before, NOBODY);
    assert_eq!((inside.uid, inside.gid), (0, 0), "root inside");
    assert_eq!(user::parse_id_map(&inside.uid_map).unwrap(), nobody_as_root);
    assert_eq!(user::parse_id_map(&inside.gid_map).unwrap(), nobody_as_root);
    assert_eq!(inside.setgroups, "deny");
    assert_eq!(
        inside.host_hostname_errno,
        Some(libc::EPERM),
        "not root over the host's uts namespace"
    );
    assert!(
        inside.own_hostname_set,
        "root over the uts namespace it made"
    );
}

#[test]
fn podlab_run_by_an_unprivileged_user_works_in_a_user_namespace() {
    crate::skip_unless!(nobody_can_make_user_namespaces(), NEEDS);
    let binaries = SharedBinaries::new();
    let mut podlab = as_nobody(binaries.podlab());
    podlab.args(["demo", "uts"]).env_remove("PODLAB_ROOT");
    let output = podlab.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "podlab demo uts as uid 65534: {}\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("user namespace"),
        "it says it runs in a user namespace:\n{stdout}"
    );
}

/// Issue 13, defect 1: the tests that run podlab as uid 65534 failed with EACCES when the
/// checkout sat below a folder that user cannot enter (a clone under /root, a `mktemp -d`).
/// Here the binary is put in such a folder (0700), shown unreachable, and then run through
/// [`SharedBinaries`], as every test that runs podlab as another user does.
#[test]
fn defect_1_podlab_run_as_nobody_from_a_checkout_only_root_can_enter() {
    crate::skip_unless!(
        nix::unistd::geteuid().is_root(),
        "needs root (to drop to uid 65534)"
    );
    let private = SharedDir::new("podlab-it-private", 0o700);
    let built = env!("CARGO_BIN_EXE_podlab");
    let inside = private.path().join("podlab");
    std::fs::hard_link(built, &inside)
        .or_else(|_| std::fs::copy(built, &inside).map(drop))
        .unwrap();

    let mut direct = as_nobody(std::process::Command::new(private.path().join("podlab")));
    let refused = direct.arg("--version").current_dir("/").output();
    assert_eq!(
        refused.map_err(|e| e.raw_os_error()).err(),
        Some(Some(libc::EACCES)),
        "uid 65534 cannot run a binary below a 0700 folder of root's"
    );

    let binaries = SharedBinaries::of(private.path());
    let output = as_nobody(binaries.podlab())
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        output.status.success() && String::from_utf8_lossy(&output.stdout).starts_with("podlab "),
        "the shared copy runs as uid 65534: {} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_user_namespace_error_in_a_child_reaches_the_parent() {
    let err = run_in_child::<(), _>(|| {
        user::become_root_in_new_userns()?;
        // A map can be written only once: the second write is refused.
        user::write_id_maps(std::process::id() as i32, "0 0 1", "0 0 1", false)
    })
    .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, Error::Child { .. }),
        "an error of the child: {message}"
    );
    assert!(
        message.contains("uid_map") && message.contains("EPERM"),
        "names the file and the errno: {message}"
    );
}

#[test]
fn a_process_that_changed_uid_without_exec_is_told_why_its_maps_are_refused() {
    crate::skip_unless!(nobody_can_make_user_namespaces(), NEEDS);
    let err = run_in_child::<(), _>(|| {
        drop_to_nobody()?;
        // SAFETY: PR_SET_DUMPABLE takes no pointers.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };
        user::become_root_in_new_userns()
    })
    .unwrap_err();
    assert!(
        err.to_string().contains("EACCES") && err.to_string().contains("PR_SET_DUMPABLE"),
        "{err}"
    );
}

/// The pid, mnt and user demos hold all their evidence for an unprivileged user too, where
/// every mount is made inside a user namespace (overlay with userxattr, /dev by bind mounts).
#[test]
fn the_pid_mnt_and_user_demos_hold_when_run_by_an_unprivileged_user() {
    crate::skip_unless!(nobody_can_make_user_namespaces(), NEEDS);
    let binaries = SharedBinaries::new();
    for demo in ["pid", "mnt", "user"] {
        assert_demo_holds(as_nobody(binaries.podlab()), demo);
    }
}

/// Runs `podlab demo DEMO` and asserts that it exits 0 with every claim holding.
pub(crate) fn assert_demo_holds(mut podlab: std::process::Command, demo: &str) {
    let output = podlab.args(["demo", demo]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success()
            && stdout.contains(&format!("demo {demo}: all evidence holds"))
            && !stdout.contains("[FAIL]"),
        "podlab demo {demo}: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn podlab_demo_user_holds_all_its_evidence() {
    crate::user::assert_demo_holds(crate::support::podlab(), "user");
}

/// Issue 13, defect 6: `run` and `apply` by a user who is not root failed with a raw
/// `lchown: EPERM` and left `/tmp/podlab-UID` behind. Now every pod command says in one line
/// that pods need root, exits 2, and makes nothing: no state root under `$XDG_RUNTIME_DIR`
/// or under /tmp.
#[test]
fn defect_6_a_non_root_run_or_apply_says_pods_need_root_and_leaves_nothing() {
    crate::skip_unless!(
        nix::unistd::geteuid().is_root(),
        "needs root (to drop to uid 65534)"
    );
    use std::io::Write;
    let binaries = SharedBinaries::new();
    // A runtime folder uid 65534 could write in, so that nothing but podlab's refusal keeps
    // a state root from being made there.
    let runtime_dir = SharedDir::new("podlab-it-xdg", 0o777);
    let tmp_root = std::path::Path::new("/tmp/podlab-65534");
    let tmp_root_was_there = tmp_root.exists();
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: rootless\nspec:\n  containers:\n  - name: c\n    image: busybox\n";
    let commands: [&[&str]; 6] = [
        &["run", "rootless", "--image", "busybox"],
        &[
            "run", "rootless", "--rm", "--image", "busybox", "--", "true",
        ],
        &["apply", "-f", "-"],
        &["get", "pods"],
        &["image", "ls"],
        &["node"],
    ];
    for args in commands {
        for xdg in [Some(runtime_dir.path()), None] {
            let mut podlab = as_nobody(binaries.podlab());
            podlab.args(args).env_remove("PODLAB_ROOT");
            match xdg {
                Some(dir) => podlab.env("XDG_RUNTIME_DIR", dir),
                None => podlab.env_remove("XDG_RUNTIME_DIR"),
            };
            let mut child = podlab
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let _ = child.stdin.take().unwrap().write_all(manifest.as_bytes());
            let output = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(2),
                "podlab {args:?} as uid 65534: {stderr}"
            );
            assert!(
                stderr.starts_with("podlab: pods need root (")
                    && stderr.contains("run as root")
                    && stderr.lines().count() == 1,
                "one line saying what is needed: {stderr}"
            );
            assert!(!stderr.contains("EPERM"), "{stderr}");
        }
        let made: Vec<_> = std::fs::read_dir(runtime_dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            made.is_empty(),
            "podlab {args:?} made {made:?} in $XDG_RUNTIME_DIR"
        );
        assert!(
            tmp_root_was_there || !tmp_root.exists(),
            "podlab {args:?} made {}",
            tmp_root.display()
        );
    }
}
