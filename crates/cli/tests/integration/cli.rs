//! Integration tests: cli. The `podlab` command's exit statuses and messages, `podlab ns ls`
//! against the kernel's inode ids, and the uts and ipc demos run end to end.

use podlab_ns::ops::{self, Holder};
use podlab_ns::NsKind;

use crate::support::podlab;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = podlab().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_unknown_demo_is_a_usage_error_naming_it() {
    let (code, _, stderr) = run(&["demo", "bogus"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.contains("\"bogus\""), "{stderr}");
}

#[test]
fn ns_ls_of_a_missing_pid_says_so() {
    let (code, stdout, stderr) = run(&["ns", "ls", "--pid", "2147483647"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("no process with pid 2147483647"),
        "{stderr}"
    );
}

#[test]
fn ns_ls_lists_our_own_net_namespace() {
    let inode = ops::ns_inode(std::process::id() as i32, NsKind::Net).unwrap();
    let (code, stdout, stderr) = run(&["ns", "ls"]);
    assert_eq!(code, Some(0), "{stderr}");
    let header: Vec<&str> = stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, crate::support::NS_LS_COLUMNS);
    let row = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(inode.to_string().as_str()))
        .unwrap_or_else(|| panic!("net:[{inode}] not listed:\n{stdout}"));
    assert_eq!(row.split_whitespace().nth(1), Some("net"), "{row}");
}

#[test]
fn ns_ls_of_a_pid_shows_its_namespaces_as_json() {
    let holder = Holder::spawn(&[NsKind::Net, NsKind::Uts], || Ok(())).unwrap();
    let pid = holder.pid.as_raw().to_string();
    let (code, stdout, stderr) = run(&["ns", "ls", "--pid", &pid, "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let listing: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = listing["namespaces"].as_array().unwrap();
    let kinds: Vec<&str> = rows.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    for kind in NsKind::ALL.iter().filter(|k| k.supported()) {
        assert!(
            kinds.contains(&kind.proc_name()),
            "{kind} missing: {kinds:?}"
        );
    }
    for kind in [NsKind::Net, NsKind::Uts] {
        let inode = holder.inode(kind).unwrap();
        let row = rows.iter().find(|r| r["kind"] == kind.proc_name()).unwrap();
        assert_eq!(row["inode"], inode, "{row}");
        assert_eq!(
            row["pid"],
            holder.pid.as_raw(),
            "the holder alone is in it: {row}"
        );
        assert_eq!(row["nprocs"], 1, "{row}");
    }
}

#[test]
fn demo_uts_holds() {
    let (code, stdout, stderr) = run(&["demo", "uts"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("demo uts: all evidence holds"), "{stdout}");
    assert!(!stdout.contains("[FAIL]"), "{stdout}");
    crate::support::assert_reads_as_words("uts", &stdout);
}

#[test]
fn demo_ipc_holds() {
    let (code, stdout, stderr) = run(&["demo", "ipc"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("demo ipc: all evidence holds"), "{stdout}");
    assert!(!stdout.contains("[FAIL]"), "{stdout}");
    crate::support::assert_reads_as_words("ipc", &stdout);
}

/// Issue 15: the namespace demos printed their evidence in Rust's debug notation
/// (`Some("tmpfs")`, `[IdMapping { inside: 0, .. }]`, `Signaled(Pid(13), SIGKILL, false)`).
#[test]
fn demo_evidence_is_words_not_rust_debug_output() {
    let (code, stdout, stderr) = run(&["demo", "namespaces"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    for demo in ["uts", "ipc", "net", "pid", "mnt", "user"] {
        assert!(
            stdout.contains(&format!("demo {demo}: all evidence holds")),
            "{stdout}"
        );
    }
    crate::support::assert_reads_as_words("namespaces", &stdout);
}

#[test]
fn ns_ls_by_type_lists_only_that_kind_and_refuses_an_unknown_one() {
    let out = podlab().args(["ns", "ls", "-t", "bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("\"bogus\""), "{err}");
    assert!(out.stdout.is_empty());

    let out = podlab()
        .args(["ns", "ls", "-t", "net", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = listing["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["kind"].as_str().unwrap())
        .collect();
    assert!(!kinds.is_empty());
    assert!(kinds.iter().all(|k| *k == "net"), "{kinds:?}");
    let own = podlab_ns::ops::ns_inode(std::process::id() as i32, podlab_ns::NsKind::Net).unwrap();
    assert!(
        listing["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["inode"] == own),
        "own netns {own} listed"
    );
}

/// Issue 15: `--keep` is for a demo's pods; on a namespace demo, or on a set of demos, it is a
/// usage error that says why and what to do instead, before anything is made.
#[test]
fn demo_keep_on_a_namespace_demo_or_a_set_is_refused_in_one_line() {
    for what in ["uts", "namespaces", "all"] {
        let (code, stdout, stderr) = run(&["demo", what, "--keep"]);
        assert_eq!(code, Some(2), "{what}: {stdout}{stderr}");
        assert!(stdout.is_empty(), "{what}: {stdout}");
        assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
        assert!(stderr.contains("--keep"), "{what}: {stderr}");
    }
}

/// Issue 13, defect 10, for a namespace demo: `podlab demo mnt | head` used to leave its
/// temporary folder (its removal ran on drop, which a closed pipe's SIGPIPE skipped).
#[test]
fn demo_mnt_piped_into_head_leaves_no_folder() {
    use std::io::BufRead;
    let mut child = podlab()
        .args(["demo", "mnt"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // The first line naming the demo's folder: it exists by then.
    let folder = lines
        .by_ref()
        .map(Result::unwrap)
        .find_map(|line| {
            let at = line.find("/podlab-demo-mnt-")?;
            let start = line[..at].rfind(' ').map_or(0, |s| s + 1);
            let end = line[at + 1..].find('/').map_or(line.len(), |e| at + 1 + e);
            Some(std::path::PathBuf::from(&line[start..end]))
        })
        .expect("the demo names its folder");
    assert!(folder.is_dir(), "{}", folder.display());
    drop(lines);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(128 + libc::SIGPIPE),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!folder.exists(), "{} is left", folder.display());
}
