//! Runs the integration tests inside fresh namespaces.
//!
//! As root: `unshare --mount --uts --ipc --net --pid --fork --mount-proc --propagation private`,
//! with this binary as the sandbox's PID 1 (it reaps the daemons the tests leave to it).
//! As another user: the same with `--user --map-root-user` first. Inside, `lo` is brought up,
//! then `cargo test --test '*'` (every integration-test target) runs offline. When the sandbox's PID 1 ends, the kernel kills every
//! process left in it and frees its namespaces and mounts: a test that leaks cannot leak onto
//! the host. Tests that skip for a missing kernel feature append their reason to the file named
//! by `PODLAB_SKIP_LOG`; they are counted and printed at the end.
//!
//! Control groups are the one thing the sandbox cannot take with it: the v1 hierarchies are the
//! host's. So the `podlab-*` cgroups that appeared during the run are removed after it, once
//! every process in the sandbox is dead ([`CgroupSweep`]); a populated cgroup cannot be removed,
//! so one that another podlab on the host made and uses meanwhile is left alone.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
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
    let sweep = CgroupSweep::before_the_run();
    let status = unshare.status().context("running unshare (util-linux)")?;
    sweep.after_the_run();

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

/// The `podlab-*` cgroups of every hierarchy under `/sys/fs/cgroup` before the tests ran.
struct CgroupSweep {
    before: HashSet<PathBuf>,
}

impl CgroupSweep {
    const ROOT: &'static str = "/sys/fs/cgroup";

    fn podlab_cgroups() -> HashSet<PathBuf> {
        let Ok(hierarchies) = std::fs::read_dir(Self::ROOT) else {
            return HashSet::new();
        };
        hierarchies
            .flatten()
            .filter_map(|h| std::fs::read_dir(h.path()).ok())
            .flat_map(|entries| entries.flatten())
            .filter(|e| e.file_name().to_string_lossy().starts_with("podlab-"))
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect()
    }

    fn before_the_run() -> Self {
        CgroupSweep {
            before: Self::podlab_cgroups(),
        }
    }

    /// Removes, deepest first, the cgroups the run made; says which could not go.
    fn after_the_run(&self) {
        let mut left = Vec::new();
        for made in Self::podlab_cgroups().difference(&self.before) {
            remove_cgroup_tree(made);
            if made.exists() {
                left.push(made.display().to_string());
            }
        }
        if !left.is_empty() {
            left.sort();
            println!(
                "cgroups the tests made that are still in use: {}",
                left.join(", ")
            );
        }
    }
}

/// rmdir of a cgroup and its children, children first (a cgroup's files cannot be unlinked;
/// rmdir of an empty cgroup removes them with it).
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
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
