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
    root.assert_nothing_left();
    let left: Vec<_> = scratch_roots()
        .into_iter()
        .filter(|r| !before.contains(r))
        .collect();
    assert!(left.is_empty(), "the demo left its scratch root: {left:?}");
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
    let net_root = std::path::Path::new("/run/podlab-net");
    let left: Vec<_> = std::fs::read_dir(net_root)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "network state left: {left:?}");
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
