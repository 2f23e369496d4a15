//! `cargo xtask cri-validate [CRITEST FLAGS]` (also `scripts/run cri-validate`): the critest
//! kit's `setup`, then a `podlab cri` on a socket and state root of its own, then the kit's
//! `run-critest` against it (any flag is passed on: `--ginkgo.focus=…`, `--benchmark`), then
//! every pod it left removed, the server stopped and its root deleted. The counts are critest's
//! last line (`N passed, N failed, N skipped`); docs/cri.md keeps the latest.
//!
//! The kit is `$PODLAB_CRITEST_KIT`, else `shared/critest-kit` beside the checkout. Images come
//! from the kit's registry through its containerd-style mirror config (`certs.d`), which
//! podlab's pull reads as containerd does (`PODLAB_REGISTRY_CONFIG`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{cargo, workspace_root};

pub fn run(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let kit = std::env::var_os("PODLAB_CRITEST_KIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/critest-kit"));
    if !kit.join("run-critest").exists() {
        bail!(
            "no critest kit at {} (set PODLAB_CRITEST_KIT)",
            kit.display()
        );
    }
    let critest_home = std::env::var_os("CRITEST_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".critest"));
    cargo(&["build", "--workspace", "--bins"], &[])?;
    let status = Command::new(kit.join("setup"))
        .env("CRITEST_HOME", &critest_home)
        .status()
        .context("running the kit's setup")?;
    if !status.success() {
        bail!("the kit's setup failed ({status})");
    }
    let scratch = std::env::temp_dir().join(format!("podlab-cri-validate-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let socket = scratch.join("cri.sock");
    let state = scratch.join("root");
    let podlab = root.join("target/debug/podlab");
    let log = std::fs::File::create(scratch.join("server.log"))?;
    let mut server = Command::new(&podlab)
        .args(["cri", "--listen"])
        .arg(&socket)
        .arg("--root")
        .arg(&state)
        .env(
            "PODLAB_REGISTRY_CONFIG",
            critest_home.join("mirror/certs.d"),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting podlab cri")?;
    let started = Instant::now();
    while !socket.exists() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let result = if socket.exists() {
        Command::new(kit.join("run-critest"))
            .arg(&socket)
            .args(args)
            .env("CRITEST_HOME", &critest_home)
            .status()
            .context("running the kit's run-critest")
    } else {
        Err(anyhow::anyhow!("podlab cri made no socket within 30 s"))
    };
    // What critest left (a failed test's pods) goes before the server does.
    let endpoint = format!("unix://{}", socket.display());
    let _ = Command::new(critest_home.join("bin/crictl"))
        .args(["--runtime-endpoint", &endpoint, "rmp", "-a", "-f"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let _ = server.wait();
    let _ = Command::new(&podlab)
        .arg("gc")
        .env("PODLAB_ROOT", &state)
        .stdout(Stdio::null())
        .status();
    let server_log = std::fs::read_to_string(scratch.join("server.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&scratch);
    let status = result?;
    if !status.success() {
        let tail: Vec<&str> = server_log.lines().rev().take(20).collect();
        eprintln!(
            "podlab cri's last words:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
        bail!("critest failed ({status})");
    }
    Ok(())
}
