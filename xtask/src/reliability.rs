//! `cargo xtask reliability WHAT` and `cargo xtask fuzz TARGET`: the long forms of the
//! reliability tests (docs/reliability.md), whose short forms run in the default suite.
//!
//! * `reliability churn [--cycles N]` — N create/delete cycles of a networked pod through the
//!   node agent (default 1000), inside the test sandbox; prints the agent's RSS and fds.
//! * `reliability faults` — a kill -9 at every fault point, then gc (the suite's test, alone).
//! * `reliability concurrency [--pods N]` — 8 clients applying, updating and deleting N pods
//!   at once (default 200).
//! * `fuzz TARGET|all [--seconds N] [--inputs N] [--seed S] ...` — builds `podlab-fuzz` with the
//!   `fuzz` profile (optimised, overflow checks on) and runs the target.

use std::process::Command;

use anyhow::{bail, Context, Result};

pub fn reliability(args: &[String]) -> Result<()> {
    let (what, rest) = args.split_first().context(
        "usage: cargo xtask reliability churn [--cycles N] | faults | concurrency [--pods N]",
    )?;
    let (filter, env): (&str, Vec<(&str, String)>) = match what.as_str() {
        "churn" => {
            let cycles = match rest {
                [] => "1000".to_string(),
                [flag, n] if flag == "--cycles" && n.parse::<u32>().is_ok() => n.clone(),
                _ => bail!("usage: cargo xtask reliability churn [--cycles N]"),
            };
            (
                "churn::churn_of_a_networked_pod",
                vec![("PODLAB_CHURN_CYCLES", cycles)],
            )
        }
        "faults" => ("faults::", Vec::new()),
        "concurrency" => {
            let pods = match rest {
                [] => "200".to_string(),
                [flag, n] if flag == "--pods" && n.parse::<u32>().is_ok() => n.clone(),
                _ => bail!("usage: cargo xtask reliability concurrency [--pods N]"),
            };
            (
                "concurrency::eight_clients",
                vec![("PODLAB_CONCURRENCY_PODS", pods)],
            )
        }
        other => bail!("unknown reliability test {other:?}: churn, faults or concurrency"),
    };
    crate::preflight::check_tools(crate::preflight::TEST_TOOLS)?;
    crate::cargo(&["build", "--workspace", "--bins"], &[])?;
    crate::cargo(&["test", "--workspace", "--test", "*", "--no-run"], &[])?;
    let filter: Vec<String> = [filter, "--", "--nocapture"].map(String::from).to_vec();
    crate::sandbox::run_integration_tests_with(&filter, &env)
}

pub fn fuzz(args: &[String]) -> Result<()> {
    let Some((target, rest)) = args.split_first() else {
        bail!("usage: cargo xtask fuzz TARGET|all [--seconds N] [--inputs N] [--seed S] [--max-len N] [--hang-ms N]");
    };
    crate::cargo(&["build", "--profile", "fuzz", "-p", "podlab-fuzz"], &[])?;
    let binary = crate::workspace_root().join("target/fuzz/podlab-fuzz");
    let targets: Vec<String> = if target == "all" {
        [
            "manifest",
            "gotemplate",
            "jsonpath",
            "cni-result",
            "image-manifest",
            "layer-tar",
        ]
        .map(String::from)
        .to_vec()
    } else {
        vec![target.clone()]
    };
    for target in targets {
        let status = Command::new(&binary)
            .arg(&target)
            .args(rest)
            .current_dir(crate::workspace_root())
            .status()
            .with_context(|| format!("running {}", binary.display()))?;
        if !status.success() {
            bail!("fuzz target {target} failed ({status})");
        }
    }
    Ok(())
}
