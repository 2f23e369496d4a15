//! `peers-bench [--quick] [--out DIR] [--workspace DIR]`: runs the five comparisons of
//! `cargo xtask peers` (see `podlab_layers::bench::suite`) and writes `DIR/peers.csv`,
//! `DIR/peers.md` and `DIR/peers-*.svg` (`peers-quick.*` for `--quick`; default DIR:
//! `docs/benchmarks/<today>`).
//!
//! It becomes a child subreaper first, so that every process the peers leave behind (shims and
//! conmon double-fork away from their parents) is re-parented to it, killed by pid and reaped
//! at the end; Ctrl-C stops the run and takes everything down the same way.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use podlab_layers::bench::podlab::Podlab;
use podlab_layers::bench::report::{self, Header};
use podlab_layers::bench::suite::{self, Options, Plan};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("peers-bench: {err:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn run() -> Result<()> {
    let mut plan = Plan::full();
    let mut out: Option<PathBuf> = None;
    let mut workspace = std::env::current_dir()?;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => plan = Plan::quick(),
            "--full" => plan = Plan::full(),
            "--out" => out = Some(args.next().context("--out needs a folder")?.into()),
            "--workspace" => workspace = args.next().context("--workspace needs a folder")?.into(),
            other => bail!(
                "unknown argument {other:?} (expected --quick, --full, --out DIR, --workspace DIR)"
            ),
        }
    }
    if !nix::unistd::geteuid().is_root() {
        bail!("the peers run as root: run `sudo cargo xtask peers`");
    }
    podlab_layers::interrupt::install()?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) } != 0 {
        bail!(
            "prctl(PR_SET_CHILD_SUBREAPER): {}",
            std::io::Error::last_os_error()
        );
    }
    let date = today()?;
    let out = out.unwrap_or_else(|| suite::record_dir(&workspace, &date));
    let ns_helper = std::env::current_exe()?
        .parent()
        .context("the folder of peers-bench")?
        .join("podlab-ns-true");
    let options = Options {
        plan: plan.clone(),
        podlab: Podlab::find(&workspace),
        ns_helper,
    };
    println!(
        "peers-bench: {} run; podlab binary: {}",
        plan.name,
        options
            .podlab
            .binary
            .as_ref()
            .map_or("(not built)".into(), |b| b.display().to_string())
    );
    let outcome = suite::run_all(&options)?;
    reap_adopted();
    let ours: Vec<_> = outcome.host_changes.iter().filter(|c| c.ours).collect();
    let others: Vec<_> = outcome.host_changes.iter().filter(|c| !c.ours).collect();
    let mut host_check = Vec::new();
    if ours.is_empty() {
        host_check.push(
            "unchanged: no new network link (docker0, cni bridges, veths), no iptables/nftables \
             rule added or removed, ip_forward and ipv6 forwarding as before, no mount, cgroup, \
             netns pin or default state path (/var/lib/docker, /run/containerd, ...) left, no \
             peer process still running"
                .to_string(),
        );
    }
    host_check.extend(ours.iter().map(|c| format!("CHANGED: {}", c.text)));
    host_check.extend(
        others
            .iter()
            .map(|c| format!("changed meanwhile, not by the peers: {}", c.text)),
    );
    let header = Header {
        date,
        plan: plan.name.into(),
        machine: report::machine(),
        versions: outcome.versions.clone(),
        seconds: outcome.seconds,
        host_check: host_check.clone(),
        notes: outcome.notes.clone(),
    };
    let prefix = if plan.name == "quick" {
        "peers-quick"
    } else {
        "peers"
    };
    report::write(&out, prefix, &header, &outcome.rows)?;
    println!(
        "\nwrote {}/{prefix}.{{csv,md}} and {prefix}-*.svg ({:.0} s)",
        out.display(),
        outcome.seconds
    );
    for line in &host_check {
        println!("host: {line}");
    }
    if !ours.is_empty() {
        bail!("the host was left changed (see above)");
    }
    Ok(())
}

fn today() -> Result<String> {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Reaps every child that ended (the orphans this subreaper adopted).
fn reap_adopted() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}
