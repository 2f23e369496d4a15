//! Runs the integration tests inside fresh namespaces.
//!
//! As root: `unshare --mount --uts --ipc --net --pid --fork --mount-proc --propagation private`.
//! As another user: the same with `--user --map-root-user` first. Inside, `lo` is brought up,
//! then `cargo test --test '*'` (every integration-test target) runs offline. When the sandbox's PID 1 ends, the kernel kills every
//! process left in it and frees its namespaces and mounts: a test that leaks cannot leak onto
//! the host. Tests that skip for a missing kernel feature append their reason to the file named
//! by `PODLAB_SKIP_LOG`; they are counted and printed at the end.

use std::process::Command;

use anyhow::{bail, Context, Result};

pub fn run_integration_tests(filter: &[String]) -> Result<()> {
    let root = crate::workspace_root();
    let skip_log = root.join("target/podlab-skips.log");
    let _ = std::fs::remove_file(&skip_log);

    let mut unshare = Command::new("unshare");
    if !is_root() {
        unshare.args(["--user", "--map-root-user"]);
        println!("(not root: the integration tests run as root of a new user namespace)");
    }
    unshare.args([
        "--mount",
        "--uts",
        "--ipc",
        "--net",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        // lo first: tests reach their servers over 127.0.0.1 inside the sandbox's netns.
        "ip link set lo up && exec \"$0\" test --workspace --test '*' --offline \"$@\"",
        env!("CARGO"),
    ]);
    unshare.args(filter);
    unshare.current_dir(&root).env("PODLAB_SKIP_LOG", &skip_log);
    let status = unshare.status().context("running unshare (util-linux)")?;

    let skips = std::fs::read_to_string(&skip_log).unwrap_or_default();
    let skips: Vec<&str> = skips.lines().filter(|l| !l.trim().is_empty()).collect();
    if !skips.is_empty() {
        println!(
            "\n{} test(s) skipped for what this kernel lacks:",
            skips.len()
        );
        for line in &skips {
            println!("  - {line}");
        }
    }
    if !status.success() {
        bail!("integration tests failed ({status})");
    }
    Ok(())
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { geteuid() == 0 }
}

extern "C" {
    fn geteuid() -> u32;
}
