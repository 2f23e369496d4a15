//! Runs the integration tests inside fresh namespaces.
//!
//! As root: `unshare --mount --uts --ipc --net --pid --fork --mount-proc --propagation private`,
//! with this binary as the sandbox's PID 1 (it reaps the daemons the tests leave to it).
//! As another user: the same with `--user --map-root-user` first. Inside, `lo` is brought up,
//! then `cargo test --test '*'` (every integration-test target) runs offline. When the sandbox's PID 1 ends, the kernel kills every
//! process left in it and frees its namespaces and mounts: a test that leaks cannot leak onto
//! the host. Tests that skip for a missing kernel feature append their reason to the file named
//! by `PODLAB_SKIP_LOG`; they are counted and printed at the end.

use std::process::Command;

use anyhow::{bail, Context, Result};

pub fn run_integration_tests(filter: &[String]) -> Result<()> {
    run_integration_tests_with(filter, &[])
}

/// [`run_integration_tests`], with more variables for the tests.
pub fn run_integration_tests_with(filter: &[String], env: &[(&str, String)]) -> Result<()> {
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
    ]);
    // The sandbox's PID 1 reaps: daemons the tests start (shims, node agents) are re-parented
    // to it when they exit, and must not stay zombies for the rest of the run.
    unshare.arg(std::env::current_exe().context("finding the xtask binary")?);
    unshare.args([
        INIT_TASK,
        "sh",
        "-c",
        // lo first: tests reach their servers over 127.0.0.1 inside the sandbox's netns.
        "ip link set lo up && exec \"$0\" test --workspace --test '*' --offline \"$@\"",
        env!("CARGO"),
    ]);
    unshare.args(filter);
    unshare.current_dir(&root).env("PODLAB_SKIP_LOG", &skip_log);
    unshare.envs(env.iter().map(|(k, v)| (k, v)));
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

/// The hidden task that runs as the sandbox's PID 1.
pub const INIT_TASK: &str = "__sandbox-init";

/// PID 1 of the sandbox: runs `command`, reaps every child until it exits, and exits with its
/// status (128+N if it was killed by signal N).
pub fn init(command: &[String]) -> Result<()> {
    let (program, args) = command.split_first().context("sandbox init: no command")?;
    let child = Command::new(program)
        .args(args)
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    let main = child.id() as i32;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-pointer.
        let pid = unsafe { waitpid(-1, &mut status, 0) };
        if pid == main {
            let code = if status & 0x7f == 0 {
                (status >> 8) & 0xff
            } else {
                128 + (status & 0x7f)
            };
            std::process::exit(code);
        }
        if pid < 0 && std::io::Error::last_os_error().raw_os_error() != Some(4) {
            bail!("sandbox init: waitpid: {}", std::io::Error::last_os_error());
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { geteuid() == 0 }
}

extern "C" {
    fn geteuid() -> u32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
}
