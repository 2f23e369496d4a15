//! `cargo xtask peers`: podlab next to the real tools on this machine, in the same run.
//!
//! * `peers [--quick]` — the five side-by-side comparisons of issue 7 (a namespace set, a
//!   `/bin/true` container, a pod, scale, teardown) against runc, crun, containerd/ctr, dockerd
//!   and podman, all started as private instances in a lab of their own: installs what is
//!   missing (`scripts/peers/install.sh`, as root), builds `peers-bench` and podlab in release
//!   mode, runs it, and it writes `docs/benchmarks/<date>/peers.{csv,md}` and `peers-*.svg`.
//!   `--quick` finishes in under 3 minutes, the full run in under 20. See docs/peers.md.
//! * `peers pull` — `podlab image pull` next to containerd's `ctr image pull` of a ~50 MB,
//!   5-layer image from a private docker-registry: wall time and peak RSS, one run each
//!   (`scripts/peers/pull.sh`, with a release build of podlab).
//! * `peers pause` — resident memory of an idle `podlab-pause` next to an idle `catatonit -P`
//!   (podman's pod infra process), each started fresh and read from `/proc/PID/status` and
//!   `/proc/PID/smaps_rollup` once they sleep.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("pause") => pause(),
        Some("pull") => pull(),
        None | Some("--quick") | Some("--full") => bench(args),
        Some(other) => {
            bail!("unknown peer comparison {other:?} (expected: --quick, --full, pause or pull)")
        }
    }
}

/// `scripts/peers/pull.sh` with a release build of podlab.
fn pull() -> Result<()> {
    let root = crate::workspace_root();
    crate::cargo(&["build", "--release", "-p", "podlab"], &[])?;
    let status = Command::new("bash")
        .arg(root.join("scripts/peers/pull.sh"))
        .arg(root.join("target/release/podlab"))
        .status()
        .context("running scripts/peers/pull.sh")?;
    if !status.success() {
        bail!("the pull benchmark failed ({status})");
    }
    Ok(())
}

/// Installs the peers if needed, builds, and runs `peers-bench` with `args`.
fn bench(args: &[String]) -> Result<()> {
    let root = crate::workspace_root();
    let install = root.join("scripts/peers/install.sh");
    let status = Command::new("bash")
        .arg(&install)
        .status()
        .with_context(|| format!("running {}", install.display()))?;
    if !status.success() {
        bail!("the peers are not installed (see the line above)");
    }
    crate::cargo(
        &["build", "--release", "-p", "podlab-layers", "--bins"],
        &[],
    )?;
    // podlab itself in release mode too, so that its rows (once its commands exist) are
    // measured as the peers' optimized builds are. A podlab that does not build leaves its
    // rows pending rather than stopping the peers' measurements.
    let podlab = ["-p", "podlab", "-p", "podlab-pause", "-p", "podlab-runtime"];
    let mut build = vec!["build", "--release"];
    build.extend(podlab);
    build.push("--bins");
    if let Err(err) = crate::cargo(&build, &[]) {
        println!("xtask peers: podlab did not build ({err:#}); its rows stay pending");
    }
    let bench = root.join("target/release/peers-bench");
    let status = Command::new(&bench)
        .args(args)
        .arg("--workspace")
        .arg(&root)
        .current_dir(&root)
        .status()
        .with_context(|| format!("running {}", bench.display()))?;
    if !status.success() {
        bail!("peers-bench failed ({status})");
    }
    Ok(())
}

fn pause() -> Result<()> {
    crate::cargo(&["build", "--release", "-p", "podlab-pause"], &[])?;
    let podlab_pause = crate::workspace_root().join("target/release/podlab-pause");
    let mut rows = vec![("podlab-pause", measure(Command::new(&podlab_pause))?)];
    match which("catatonit") {
        Some(catatonit) => {
            let mut cmd = Command::new(catatonit);
            cmd.arg("-P");
            rows.push(("catatonit -P", measure(cmd)?));
        }
        None => println!(
            "catatonit is not installed (apt-get install catatonit): only podlab-pause is measured"
        ),
    }
    println!(
        "{:<14} {:>10} {:>10} {:>10}",
        "process", "VmRSS kB", "Pss kB", "VmSize kB"
    );
    for (name, m) in &rows {
        println!(
            "{name:<14} {:>10} {:>10} {:>10}",
            m.rss_kb, m.pss_kb, m.size_kb
        );
    }
    if let [(_, ours), (_, theirs)] = rows.as_slice() {
        let ratio = ours.rss_kb as f64 / theirs.rss_kb.max(1) as f64;
        println!("podlab-pause / catatonit -P resident memory: {ratio:.3}");
        if ours.rss_kb > theirs.rss_kb {
            bail!("podlab-pause uses more memory than catatonit -P");
        }
    }
    Ok(())
}

struct Memory {
    rss_kb: u64,
    pss_kb: u64,
    size_kb: u64,
}

/// Starts `cmd`, waits until it sleeps, reads its memory, and stops it.
fn measure(mut cmd: Command) -> Result<Memory> {
    let mut child: Child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting")?;
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(5);
    let memory = loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        if field(&status, "State:").is_some_and(|s| s.starts_with('S')) {
            let rollup =
                std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
            break Memory {
                rss_kb: number(&status, "VmRSS:"),
                pss_kb: number(&rollup, "Pss:"),
                size_kb: number(&status, "VmSize:"),
            };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("process {pid} did not go to sleep within 5 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = child.kill();
    let _ = child.wait();
    Ok(memory)
}

fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

fn number(text: &str, name: &str) -> u64 {
    field(text, name)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| std::path::Path::new(dir).join(name))
        .find(|p| p.exists())
}
