//! Integration tests: the pod demos run end to end, each with a `PODLAB_ROOT` of its own (the
//! restarts, probes, sandbox and indexer demos make a scratch root of their own below the temp
//! folder besides), hold all their evidence, and leave nothing behind.

use crate::pods::Root;

/// Runs `podlab demo NAME`, which must exit 0 with all its evidence holding, then checks that
/// neither the root nor a scratch root of the demo is left.
fn demo_holds(name: &str) {
    let scratch = format!("podlab-demo-{name}-");
    let scratch_roots = || -> Vec<String> {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.starts_with(&scratch))
            .collect()
    };
    let before = scratch_roots();
    let root = Root::new(&format!("demo-{name}"));
    let out = root.run(&["demo", name]);
    let transcript = format!("{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.code, Some(0), "podlab demo {name}:\n{transcript}");
    assert!(
        out.stdout
            .contains(&format!("demo {name}: all evidence holds")),
        "{transcript}"
    );
    assert!(!out.stdout.contains("[FAIL]"), "{transcript}");
    crate::support::assert_reads_as_words(name, &out.stdout);
    root.assert_nothing_left();
    let left: Vec<_> = scratch_roots()
        .into_iter()
        .filter(|r| !before.contains(r))
        .collect();
    assert!(left.is_empty(), "the demo left its scratch root: {left:?}");
}

/// The check of [`crate::support::assert_reads_as_words`] finds what the demos used to print.
#[test]
fn debug_notation_is_found_in_what_the_demos_printed_before_issue_15() {
    for line in [
        "  [ ok ] the child's mountinfo has its tmpfs: Some(\"tmpfs\")",
        "  [ ok ] maps: [IdMapping { inside: 0, outside: 65534, count: 1 }]",
        "  [ ok ] SIGKILL from the host ends PID 1: Signaled(Pid(13), SIGKILL, false)",
        "cni-a: routes: [Route { dst: Some((10.88.0.0, 16)), gateway: None, ifindex: Some(2) }]",
        "  [ ok ] a replacement was made: [\"idx-orphan\", \"idx-rbrqd\"]",
        "  [ ok ] liveness: [(0, Some(0)), (1, None)]",
    ] {
        assert_eq!(crate::support::debug_notation(line), [line]);
    }
    for line in [
        "  [ ok ] the child's mountinfo has its tmpfs: a tmpfs mount",
        "  [ ok ] SIGKILL from the host ends PID 1: killed by SIGKILL",
        "  pod always (restartPolicy Always): STATUS CrashLoopBackOff, phase Running by PH-5b",
        "kubelet asks the runtime for a sandbox (RunPodSandbox) first: <none>",
    ] {
        assert!(crate::support::debug_notation(line).is_empty(), "{line}");
    }
}

#[test]
fn demo_pod_holds() {
    demo_holds("pod");
}

#[test]
fn demo_restarts_holds() {
    demo_holds("restarts");
}

#[test]
fn demo_probes_holds() {
    demo_holds("probes");
}

#[test]
fn demo_sandbox_holds() {
    demo_holds("sandbox");
}

/// Every escape of `podlab demo isolation` is blocked, each by what the demo names; the one the
/// device cgroup must block (mknod of a device node, then opening it) is left to the cgroups
/// work, whose device cgroup is not yet on containers: until then the demo itself fails on it.
#[test]
fn demo_isolation_blocks_the_escapes() {
    let root = Root::new("demo-isolation");
    let out = root.run(&["demo", "isolation"]);
    let stdout = out.stdout;
    let claims: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("  [ ok ]") || l.starts_with("  [FAIL]"))
        .collect();
    assert!(claims.len() >= 13, "{stdout}");
    for claim in claims {
        assert!(claim.starts_with("  [ ok ]"), "{claim}\n{stdout}");
    }
    assert_eq!(out.code, Some(0), "{stdout}");
}

#[test]
fn demo_indexer_holds() {
    demo_holds("indexer");
}

/// The network of the test's namespace after a CNI demo: no bridge, no veth, no lease folder.
fn assert_network_clean() {
    let out = std::process::Command::new("ip")
        .args(["-o", "link"])
        .output()
        .expect("ip link");
    let links = String::from_utf8_lossy(&out.stdout);
    let leftovers: Vec<&str> = links
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .filter(|name| name.starts_with("podlab") || name.starts_with("veth"))
        .collect();
    assert!(leftovers.is_empty(), "links left: {leftovers:?}");
    // Only this namespace's folder: /run is the host's, where other runs' namespaces have theirs.
    let inode =
        podlab_ns::ops::ns_inode(std::process::id() as i32, podlab_ns::NsKind::Net).unwrap();
    let net_root = std::path::Path::new("/run/podlab-net").join(inode.to_string());
    assert!(
        !net_root.exists(),
        "network state left: {}",
        net_root.display()
    );
}

#[test]
fn demo_cni_holds() {
    let _network = crate::support::network_lock();
    demo_holds("cni");
    assert_network_clean();
}

#[test]
fn demo_cni_failure_holds() {
    let _network = crate::support::network_lock();
    demo_holds("cni-failure");
    assert_network_clean();
}

/// How an interrupted demo is ended.
enum Ending {
    /// Ctrl-C: SIGINT to podlab.
    CtrlC,
    /// `podlab demo | head`: the reader goes away.
    ReaderGone,
}

/// Issue 13, defect 10: `podlab demo` ended mid-way, with its pod running, left its scratch
/// root, its node agent and the pod behind (their cleanup ran on drop, which a signal skips).
/// Now podlab exits with 128 + the signal after removing them all.
fn interrupted_pod_demo_leaves_nothing(ending: Ending) {
    use std::io::BufRead;
    let _network = crate::support::network_lock();
    let mut child = crate::support::podlab()
        .args(["demo", "pod"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut transcript = String::new();
    let mut scratch = None;
    // Read up to the namespace table: the pod runs, with its agent, pause and containers.
    let mut pod_pids = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        transcript += &line;
        transcript.push('\n');
        if let Some(root) = line.trim_end_matches(')').split("PODLAB_ROOT=").nth(1) {
            scratch = Some(std::path::PathBuf::from(root));
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(pid) = words
            .iter()
            .position(|w| w.parse::<i32>().is_ok())
            .filter(|_| ["pause", "web", "client"].contains(&words[0]))
            .map(|at| words[at].parse::<i32>().unwrap())
        {
            pod_pids.push(pid);
        }
        if line.starts_with("  client") {
            break;
        }
    }
    assert_eq!(pod_pids.len(), 3, "no pod table:\n{transcript}");
    let scratch = scratch.unwrap_or_else(|| panic!("the demo names no root:\n{transcript}"));
    assert!(
        scratch.starts_with(std::env::temp_dir()),
        "{}",
        scratch.display()
    );
    let agent = podlab_kubelet::node::running_agent(&scratch)
        .unwrap_or_else(|| panic!("no agent in {}:\n{transcript}", scratch.display()));
    let expected = match ending {
        Ending::CtrlC => {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGINT)
                .unwrap();
            // Read on, as a terminal would, until podlab closes its end.
            lines.for_each(drop);
            128 + libc::SIGINT
        }
        Ending::ReaderGone => {
            drop(lines);
            128 + libc::SIGPIPE
        }
    };
    let exited = crate::support::wait_until(std::time::Duration::from_secs(60), || {
        child.try_wait().unwrap().is_some()
    });
    assert!(exited, "podlab demo still runs after being interrupted");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(expected), "{stderr}");
    assert!(!scratch.exists(), "{} is left", scratch.display());
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    assert!(!alive(agent), "the node agent {agent} still runs");
    let left: Vec<i32> = pod_pids.into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "pod processes left: {left:?}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let scratch_text = scratch.display().to_string();
    let mounts: Vec<&str> = mountinfo
        .lines()
        .filter(|l| l.contains(&scratch_text))
        .collect();
    assert!(mounts.is_empty(), "mounts left: {mounts:#?}");
    assert!(
        crate::pods::processes_of(&scratch).is_empty(),
        "processes of the scratch root left"
    );
    assert_network_clean();
}

#[test]
fn demo_interrupted_by_ctrl_c_leaves_nothing_behind() {
    interrupted_pod_demo_leaves_nothing(Ending::CtrlC);
}

#[test]
fn demo_piped_into_head_leaves_nothing_behind() {
    interrupted_pod_demo_leaves_nothing(Ending::ReaderGone);
}

/// Issue 15: `podlab demo pod --keep` leaves the pod running in the demo's own root and prints
/// the commands to look at it and to remove it; those commands, run as printed, remove it all.
#[test]
fn demo_keep_leaves_the_pod_running_and_its_printed_commands_remove_it() {
    let _network = crate::support::network_lock();
    let out = crate::support::podlab()
        .args(["demo", "pod", "--keep"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    crate::support::assert_reads_as_words("pod --keep", &stdout);
    let root = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("export PODLAB_ROOT="))
        .unwrap_or_else(|| panic!("no export line:\n{stdout}"));
    let root = std::path::PathBuf::from(root);
    let removal: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("To remove them"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .collect();
    assert!(
        removal
            .iter()
            .any(|l| l.starts_with("podlab delete pod podlab-demo")),
        "{stdout}"
    );
    assert!(
        stdout.contains("podlab describe pod podlab-demo"),
        "{stdout}"
    );

    // Still running: the pod in the store, its pause process alive.
    let agent = podlab_kubelet::node::running_agent(&root).expect("the kept agent runs");
    let get = crate::support::podlab()
        .args(["get", "pods", "--no-headers"])
        .env("PODLAB_ROOT", &root)
        .output()
        .unwrap();
    let rows = String::from_utf8_lossy(&get.stdout);
    assert!(
        rows.lines()
            .any(|l| l.starts_with("podlab-demo ") && l.contains("Running")),
        "{rows}"
    );
    let pids: Vec<(i32, String)> = crate::pods::processes_of(&root);
    assert!(!pids.is_empty(), "no process of the kept pod");

    // The removal commands, as a user would paste them.
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_podlab"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!(
        "set -e\nexport PODLAB_ROOT={}\n{}\n",
        root.display(),
        removal.join("\n")
    );
    let removed = std::process::Command::new("sh")
        .args(["-c", &script])
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        removed.status.success(),
        "{script}\n{}{}",
        String::from_utf8_lossy(&removed.stdout),
        String::from_utf8_lossy(&removed.stderr)
    );
    assert!(!root.exists(), "{} is left", root.display());
    assert!(
        !std::path::Path::new(&format!("/proc/{agent}")).exists() || crate::pods::is_zombie(agent),
        "the agent still runs"
    );
    let left: Vec<_> = pids
        .into_iter()
        .filter(|(p, _)| {
            std::path::Path::new(&format!("/proc/{p}")).exists() && !crate::pods::is_zombie(*p)
        })
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
    assert_network_clean();
}
