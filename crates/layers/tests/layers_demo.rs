//! The layers demo end to end with the real daemons: private containerd and dockerd in a lab,
//! a container through each stack and a CRI-style pod, and the demo's own evidence checked
//! (the shim is the container's parent, the namespaces, the overlay's layer folders). Skips,
//! with the reason recorded in `PODLAB_SKIP_LOG`, only when a peer binary is missing or the
//! test is not root.

use podlab_layers::demo::Outcome;
use podlab_layers::{run_layers_demo, tools};

fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
    if let Some(log) = std::env::var_os("PODLAB_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "layers_demo: {reason}");
        }
    }
}

#[test]
fn layers_demo_with_real_daemons() {
    let missing = tools::missing(tools::DEMO_TOOLS);
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|t| t.binary).collect();
        skip(&format!(
            "{} not installed ({})",
            names.join(", "),
            tools::install_line(&missing)
        ));
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        skip("the layers demo starts containerd and dockerd: needs root");
        return;
    }
    let mut out = Vec::new();
    let result = run_layers_demo(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    println!("{text}");
    let outcome = result.unwrap_or_else(|err| panic!("layers demo failed: {err}\n{text}"));
    let Outcome::Live { checks } = outcome else {
        panic!("everything is installed, yet the demo did not run live:\n{text}");
    };
    assert!(checks.len() >= 10, "too few checks: {checks:?}");
    assert!(checks.iter().all(|c| c.holds), "{checks:?}");
    for claim in [
        "docker container's parent is a containerd-shim-runc-v2",
        "ctr container's / is an overlay whose lowerdirs and upperdir are containerd snapshot folders",
        "pod container joined the sandbox's net, ipc and uts",
        "docker container's / is an overlay whose lowerdirs are dockerd's overlay2",
    ] {
        assert!(
            checks.iter().any(|c| c.claim.contains(claim)),
            "no check for {claim:?}"
        );
    }
    // Issue 15: evidence in words, not Rust's debug notation (`Some([..])`, `["/tmp/..`).
    let debug: Vec<&str> = text
        .lines()
        .filter(|l| {
            ["Some(", "None", "Ok(", "Err(", "[\""]
                .iter()
                .any(|p| l.contains(p))
        })
        .collect();
    assert!(debug.is_empty(), "debug notation: {debug:#?}");
    assert!(text.contains("ctr snapshots ls"));
    assert!(text.contains("The lab is gone"));
    // Nothing of the lab is left on this host: no peer process with the lab's folder.
    let leftovers: Vec<_> = podlab_layers::procs::Table::read()
        .procs
        .into_values()
        .filter(|p| p.state != 'Z' && p.command_text().contains("/podlab-peers."))
        .map(|p| format!("{} {}", p.pid, p.command_text()))
        .collect();
    assert!(leftovers.is_empty(), "left running: {leftovers:?}");
}
