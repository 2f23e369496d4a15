//! `cargo xtask`: podlab's build, test and demo tasks, in Rust so they run wherever cargo does.
//!
//! * `test`  — unit tests (no root needed), then every integration-test target inside fresh
//!   namespaces (`unshare --mount --uts --ipc --net --pid --fork`), so the tests cannot change
//!   the host's hostname, mounts or network, and nothing they start can outlive them.
//! * `demo [WHAT]` — builds podlab and runs `podlab demo WHAT`.
//! * `bench` — the criterion benches, then their record in `docs/benchmarks/<date>/`.
//! * `peers [--quick | pause]` — podlab next to the real peers (runc, crun, containerd, dockerd,
//!   podman, catatonit) in the same run; see `peers.rs`.
//! * `reliability churn|faults|concurrency` and `fuzz TARGET` — the long forms of the
//!   reliability tests (see `reliability.rs` and docs/reliability.md).
//! * `cri-validate [CRITEST FLAGS]` — critest (the kit beside the checkout) against `podlab cri`;
//!   see `cri_validate.rs` and docs/cri.md.
//! * `tidy` — formatting and the house rules that are checked by tests (see `tidy.rs`).
//! * `ci` — `tidy`, then `test`: what `.ci/run` runs.
//!
//! Few dependencies on purpose: this must build before anything else does.

mod cri_validate;
mod peers;
mod preflight;
mod reliability;
mod sandbox;
#[cfg(test)]
mod tidy;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<()> {
    let (task, rest) = args
        .split_first()
        .map(|(t, r)| (t.as_str(), r))
        .unwrap_or(("help", &[]));
    match task {
        "test" => test(rest),
        "demo" => demo(rest),
        "bench" => bench(rest),
        "peers" => peers::run(rest),
        "cri-validate" => cri_validate::run(rest),
        "reliability" => reliability::reliability(rest),
        "fuzz" => reliability::fuzz(rest),
        sandbox::INIT_TASK => sandbox::init(rest),
        "tidy" => tidy(),
        "ci" => {
            tidy()?;
            test(rest)
        }
        "help" | "-h" | "--help" => {
            println!("usage: cargo xtask test [FILTER] | demo [WHAT] | bench | peers [--quick|pause|pull] | cri-validate [CRITEST FLAGS] | reliability churn|faults|concurrency | fuzz TARGET|all [--seconds N] | tidy | ci");
            Ok(())
        }
        other => bail!("unknown task {other:?}; try `cargo xtask help`"),
    }
}

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn cargo(args: &[&str], extra: &[String]) -> Result<()> {
    let status = Command::new(env!("CARGO"))
        .args(args)
        .args(extra)
        .current_dir(workspace_root())
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

fn test(filter: &[String]) -> Result<()> {
    preflight::check_tools(preflight::TEST_TOOLS)?;
    // Every binary the integration tests spawn (podlab, podlab-pause, podlab-shim) first.
    cargo(&["build", "--workspace", "--bins"], &[])?;
    println!("\n== unit tests (no root needed) ==");
    // podlab-pause is a no_std binary without a test harness; the integration tests cover it.
    cargo(
        &[
            "test",
            "--workspace",
            "--exclude",
            "podlab-pause",
            "--lib",
            "--bins",
        ],
        filter,
    )?;
    println!("\n== integration tests, inside fresh namespaces ==");
    cargo(&["test", "--workspace", "--test", "*", "--no-run"], &[])?;
    sandbox::run_integration_tests(filter)
}

fn demo(what: &[String]) -> Result<()> {
    preflight::check_tools(preflight::DEMO_TOOLS)?;
    cargo(&["build", "--workspace", "--bins"], &[])?;
    let podlab = workspace_root().join("target/debug/podlab");
    let status = Command::new(&podlab).arg("demo").args(what).status()?;
    if !status.success() {
        bail!("podlab demo failed ({status})");
    }
    Ok(())
}

fn bench(args: &[String]) -> Result<()> {
    cargo(
        &[
            "bench",
            "-p",
            "podlab-benches",
            "--bench",
            "namespaces",
            "--",
        ],
        args,
    )?;
    cargo(
        &[
            "run",
            "--release",
            "-p",
            "podlab-benches",
            "--bin",
            "bench-report",
            "--",
        ],
        &[
            "namespaces",
            "baseline/fork",
            "baseline",
            "unshare",
            "clone",
            "setns",
            "pin",
        ]
        .map(String::from),
    )
}

fn tidy() -> Result<()> {
    cargo(&["fmt", "--all", "--", "--check"], &[])?;
    cargo(&["test", "-p", "xtask", "--", "tidy"], &[])
}
