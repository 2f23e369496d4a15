//! `cargo xtask cri-validate [--release] [--trace] [--containerd] [CRITEST FLAGS]` (also
//! `scripts/run cri-validate`): the critest kit's `setup`, then a `podlab cri` on a socket and
//! state root of its own, then the kit's `run-critest` against it (any other flag is passed on:
//! `--ginkgo.focus=…`, `--benchmark`), then every pod it left removed, the server stopped and
//! its root deleted. The server serves NRI (`--nri-socket`) and critest is given its socket,
//! so that critest's NRI specs run too (containerd 1.6's baseline has no NRI: they skip there).
//! The counts are critest's last line (`N passed, N failed, N skipped`); docs/cri.md keeps the
//! latest.
//!
//! - `--release`: a release build of podlab serves (what benchmarks are measured on).
//! - `--trace`: the server runs with `--trace`; its log (each RPC, its time, its steps) is kept
//!   as `server.log` in the run's report folder.
//! - `--containerd`: the kit's `containerd-baseline` runs the same critest flags right after,
//!   in the same command on the same machine (issue 17's side-by-side). With `--benchmark`,
//!   `scripts/cri-bench-report.py` then writes both runs' medians side by side with the ratios
//!   and targets (`cri-bench.{md,csv,svg}` in podlab's report folder), and `cri-roundtrip`
//!   measures `Version` and the status and list calls on one connection against each runtime.
//!   Both runs get the same `--ginkgo.seed` (one is chosen and printed unless given): ginkgo
//!   shuffles the order of critest's specs, and which images the store still holds when the
//!   image benchmark pulls (a layer shared with one of them is not fetched and unpacked again)
//!   depends on that order, which swings PullImage between about 15 and 45 ms.
//!
//! The kit is `$PODLAB_CRITEST_KIT`, else `shared/critest-kit` beside the checkout. Images come
//! from the kit's registry through its containerd-style mirror config (`certs.d`), which
//! podlab's pull reads as containerd does (`PODLAB_REGISTRY_CONFIG`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{cargo, workspace_root};

/// The flags this task reads itself; the rest go to critest.
#[derive(Debug, Default)]
struct Options {
    release: bool,
    trace: bool,
    containerd: bool,
    benchmark: bool,
    critest: Vec<String>,
}

fn options(args: &[String]) -> Options {
    let mut options = Options::default();
    for arg in args {
        match arg.as_str() {
            "--release" => options.release = true,
            "--trace" => options.trace = true,
            "--containerd" => options.containerd = true,
            other => {
                if matches!(
                    other,
                    "--benchmark" | "-benchmark" | "--benchmark=true" | "-benchmark=true"
                ) {
                    options.benchmark = true;
                }
                options.critest.push(arg.clone());
            }
        }
    }
    options
}

pub fn run(args: &[String]) -> Result<()> {
    let mut options = options(args);
    if options.containerd && !options.critest.iter().any(|a| a.contains("ginkgo.seed")) {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs());
        eprintln!(
            "cri-validate: both runtimes run critest's specs in one order: --ginkgo.seed={seed}"
        );
        options.critest.push(format!("--ginkgo.seed={seed}"));
    }
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
    let profile = if options.release {
        // Without `--bins`: the same features as `cargo build --release --workspace`, so that
        // its build is reused rather than the TLS stack built again with others.
        cargo(&["build", "--release", "--workspace"], &[])?;
        "release"
    } else {
        cargo(&["build", "--workspace", "--bins"], &[])?;
        "debug"
    };
    let bin = root.join("target").join(profile);
    let status = Command::new(kit.join("setup"))
        .env("CRITEST_HOME", &critest_home)
        .status()
        .context("running the kit's setup")?;
    if !status.success() {
        bail!("the kit's setup failed ({status})");
    }
    let stamp = Command::new("date")
        .arg("+%Y%m%d-%H%M%S")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let reports = critest_home.join("reports");
    let podlab_report = reports.join(format!("{stamp}-podlab"));
    let outcome = run_podlab(&options, &kit, &critest_home, &bin, &podlab_report);
    let outcome = match options.containerd {
        true => outcome.and(against_containerd(
            &options,
            &kit,
            &critest_home,
            &bin,
            &reports.join(format!("{stamp}-containerd")),
            &podlab_report,
        )),
        false => outcome,
    };
    // The kit's registry (started by its setup) goes with the run: nothing is left running.
    let _ = Command::new(kit.join("stop"))
        .env("CRITEST_HOME", &critest_home)
        .stdout(Stdio::null())
        .status();
    outcome
}

/// The same critest run against the kit's containerd, and with `--benchmark` the side-by-side
/// report of both.
fn against_containerd(
    options: &Options,
    kit: &std::path::Path,
    critest_home: &std::path::Path,
    bin: &std::path::Path,
    containerd_report: &std::path::Path,
    podlab_report: &std::path::Path,
) -> Result<()> {
    let root = workspace_root();
    let baseline = run_containerd(options, kit, critest_home, bin, containerd_report);
    if options.benchmark {
        let status = Command::new("python3")
            .arg(root.join("scripts/cri-bench-report.py"))
            .arg(podlab_report)
            .arg(containerd_report)
            .status()
            .context("running scripts/cri-bench-report.py")?;
        if !status.success() {
            eprintln!("scripts/cri-bench-report.py failed ({status})");
        }
    }
    baseline
}

/// critest against a `podlab cri` of its own, reports in `report`.
fn run_podlab(
    options: &Options,
    kit: &std::path::Path,
    critest_home: &std::path::Path,
    bin: &std::path::Path,
    report: &std::path::Path,
) -> Result<()> {
    let scratch = std::env::temp_dir().join(format!("podlab-cri-validate-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    std::fs::create_dir_all(report)?;
    let socket = scratch.join("cri.sock");
    let nri_socket = scratch.join("nri.sock");
    let state = scratch.join("root");
    let podlab = bin.join("podlab");
    let log_path = report.join("server.log");
    let log = std::fs::File::create(&log_path)?;
    let mut server = Command::new(&podlab);
    server
        .args(["cri", "--listen"])
        .arg(&socket)
        .arg("--root")
        .arg(&state)
        .arg("--nri-socket")
        .arg(&nri_socket);
    if options.trace {
        server.arg("--trace");
    }
    let mut server = server
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
            .arg(format!("--nri-socket={}", nri_socket.display()))
            .args(&options.critest)
            .env("CRITEST_HOME", critest_home)
            .env("CRITEST_REPORT_DIR", report)
            .status()
            .context("running the kit's run-critest")
    } else {
        Err(anyhow::anyhow!("podlab cri made no socket within 30 s"))
    };
    let endpoint = format!("unix://{}", socket.display());
    if options.benchmark && socket.exists() {
        roundtrip(critest_home, bin, &endpoint, &scratch, report);
    }
    // What critest left (a failed test's pods) goes before the server does.
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
    let server_log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&scratch);
    if !options.trace {
        let _ = std::fs::remove_file(&log_path);
    }
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

/// The kit's containerd baseline with the same critest flags, kept running for the round
/// trips when benchmarking, then stopped.
fn run_containerd(
    options: &Options,
    kit: &std::path::Path,
    critest_home: &std::path::Path,
    bin: &std::path::Path,
    report: &std::path::Path,
) -> Result<()> {
    println!("\n== the same critest run against containerd (the kit's containerd-baseline) ==");
    let mut baseline = Command::new(kit.join("containerd-baseline"));
    if options.benchmark {
        baseline.arg("--keep");
    }
    let status = baseline
        .args(&options.critest)
        .env("CRITEST_HOME", critest_home)
        .env("CRITEST_REPORT_DIR", report)
        .status()
        .context("running the kit's containerd-baseline");
    if options.benchmark {
        let dir = std::fs::read_to_string(critest_home.join("baseline.dir")).unwrap_or_default();
        let socket = PathBuf::from(dir.trim()).join("containerd.sock");
        if socket.exists() {
            let scratch =
                std::env::temp_dir().join(format!("podlab-cri-baseline-{}", std::process::id()));
            let _ = std::fs::create_dir_all(&scratch);
            let endpoint = format!("unix://{}", socket.display());
            roundtrip(critest_home, bin, &endpoint, &scratch, report);
            let _ = Command::new(critest_home.join("bin/crictl"))
                .args(["--runtime-endpoint", &endpoint, "rmp", "-a", "-f"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = std::fs::remove_dir_all(&scratch);
        }
        let _ = Command::new(kit.join("stop"))
            .arg("--baseline-only")
            .env("CRITEST_HOME", critest_home)
            .status();
    }
    let status = status?;
    if !status.success() {
        bail!("critest against containerd failed ({status})");
    }
    Ok(())
}

/// One pod with one running container, then `cri-roundtrip` on `endpoint`: its output goes to
/// `report/roundtrip.txt` (best effort: a failure is reported, not fatal).
fn roundtrip(
    critest_home: &std::path::Path,
    bin: &std::path::Path,
    endpoint: &str,
    scratch: &std::path::Path,
    report: &std::path::Path,
) {
    let crictl = |args: &[&str]| -> Option<String> {
        let out = Command::new(critest_home.join("bin/crictl"))
            .args(["--runtime-endpoint", endpoint, "--image-endpoint", endpoint])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let image = "registry.k8s.io/e2e-test-images/busybox:1.29-2";
    let pod = scratch.join("rtt-pod.json");
    let container = scratch.join("rtt-container.json");
    let _ = std::fs::write(
        &pod,
        r#"{"metadata": {"name": "rtt", "namespace": "default", "uid": "rtt-1", "attempt": 0}, "linux": {}}"#,
    );
    let _ = std::fs::write(
        &container,
        format!(
            r#"{{"metadata": {{"name": "rtt"}}, "image": {{"image": "{image}"}}, "command": ["sleep", "1000"], "linux": {{}}}}"#
        ),
    );
    let made = crictl(&["pull", image]).and_then(|_| {
        let pod_id = crictl(&["runp", &pod.to_string_lossy()])?;
        let id = crictl(&[
            "create",
            &pod_id,
            &container.to_string_lossy(),
            &pod.to_string_lossy(),
        ])?;
        crictl(&["start", &id])
    });
    if made.is_none() {
        eprintln!("cri-roundtrip: could not make a pod and a container on {endpoint}");
    }
    match Command::new(bin.join("cri-roundtrip"))
        .arg(endpoint)
        .output()
    {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            print!("\n== round trips on one connection ({endpoint}) ==\n{text}");
            let _ = std::fs::write(report.join("roundtrip.txt"), text.as_bytes());
        }
        Ok(out) => eprintln!(
            "cri-roundtrip failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("cri-roundtrip: {e}"),
    }
}
