//! A shim started before its pod's configuration is known. A shim's `execve` and its C
//! library's start take about 1.4 ms here (this VM traps the `CPUID`s glibc asks at start),
//! while a one-shot `run --rm` spends about a millisecond before RunPodSandbox (the stores, the
//! image, the pod's folders) and in it (the /etc files, `/dev/shm`) before the shim's arguments
//! are known. Started first, the shim gets that far on the other core meanwhile, then waits on
//! its stdin for its arguments; [`Runtime::run_pod_sandbox_with`] sends them down the same pipe
//! that later carries the cgroups' and the network's bytes (see `shim::take_gate_pipe`).
//! Every shim gets its arguments so; [`Runtime::run_pod_sandbox`] spawns it on a thread of its
//! own once the sandbox has its folder, and joins that thread where it needs the shim (see
//! `sandbox::Spawning` for why not on its own thread).
//!
//! ```text
//! caller                                   podlab-shim --args-on-stdin --id ID --sandbox-dir DIR
//!   mkdir DIR, lock, spawn ───────────────▶ execve, glibc's start
//!   stores, image, /etc files, /dev/shm      read(0) …
//!   write(len, ["--id", ID, …]) ──────────▶ parse, fork the daemon, pause …
//!   cgroups, then write("+") ─────────────▶ pause enters them
//! ```
//!
//! The sandbox's folder and its lock are made at the spawn, so the shim's command line names a
//! folder that exists and its log goes where a shim's always goes: `podlab gc` sees it as any
//! sandbox being made (locked: left alone). Dropped unused, the pipe's end tells the shim to
//! exit without a word, and the folder goes; after a `kill -9` of the caller the shim reads the
//! same end, and `gc` removes the folder, which has no record.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::config::RuntimeConfig;
use crate::id::SandboxId;
use crate::runtime::Runtime;
use crate::state::{Layout, SandboxLock, SandboxPaths};
use crate::{Error, Result};

/// The shim's first argument in this mode.
pub const ARGS_ON_STDIN: &str = "--args-on-stdin";

/// A shim waiting for its sandbox's arguments, with the sandbox's folder and lock.
pub struct StartingShim {
    pub(crate) id: SandboxId,
    pub(crate) paths: SandboxPaths,
    pub(crate) lock: Option<SandboxLock>,
    /// Taken by the sandbox's start.
    pub(crate) process: Option<WaitingShim>,
    /// The sandbox's start has the folder now (its undo removes it on failure).
    pub(crate) taken: bool,
}

/// The shim's first process and the write end of its stdin. Dropped, the pipe's end lets the
/// process exit, and it is waited for.
pub(crate) struct WaitingShim {
    pub(crate) child: Option<Child>,
    pub(crate) pipe: Option<OwnedFd>,
}

impl Drop for WaitingShim {
    fn drop(&mut self) {
        self.pipe = None;
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }
}

impl StartingShim {
    /// Starts a shim for the next sandbox of `config`'s root, for a caller that has more to
    /// do before its RunPodSandbox ([`Runtime::run_pod_sandbox_with`]).
    pub fn spawn(config: &RuntimeConfig) -> Result<StartingShim> {
        let root = std::fs::canonicalize(&config.root)
            .map_err(|e| Error::io("resolving", &config.root, e))?;
        let shim = crate::runtime::helper_path(&config.helper_dir, "podlab-shim")?;
        StartingShim::start(&Layout::new(root), &shim)
    }

    /// Starts `shim` for a new sandbox of `layout`'s (canonical) root.
    pub(crate) fn start(layout: &Layout, shim: &Path) -> Result<StartingShim> {
        let id = SandboxId::generate();
        let paths = layout.sandbox(&id);
        std::fs::create_dir(&paths.dir).map_err(|e| Error::io("creating", &paths.dir, e))?;
        let mut starting = StartingShim {
            id,
            lock: None,
            process: None,
            taken: false,
            paths,
        };
        starting.lock = Some(SandboxLock::acquire(&starting.paths.lock())?);
        // The caller goes on with its own work on this CPU while the shim starts.
        starting.process = Some(spawn_waiting(&starting.paths, &starting.id, shim, true)?);
        Ok(starting)
    }

    /// The id the sandbox will have.
    pub fn id(&self) -> &SandboxId {
        &self.id
    }

    /// The folder the shim was started for.
    pub fn sandbox_dir(&self) -> &PathBuf {
        &self.paths.dir
    }
}

/// Spawns `shim` for sandbox `id`, whose folder `paths` is made and locked: it waits for its
/// arguments on its stdin, its log in the folder. `off_caller_cpu` for a caller that goes on
/// working on this thread meanwhile ([`crate::spawn_cpu`]); a thread that only spawns leaves
/// its CPU to the shim.
pub(crate) fn spawn_waiting(
    paths: &SandboxPaths,
    id: &SandboxId,
    shim: &Path,
    off_caller_cpu: bool,
) -> Result<WaitingShim> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(paths.shim_log())
        .map_err(|e| Error::io("opening", paths.shim_log(), e))?;
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| Error::io("making", "the shim's argument pipe", e.into()))?;
    let cpus = off_caller_cpu.then(crate::spawn_cpu::caller_cpus).flatten();
    let mut command = Command::new(shim);
    if let Some(cpus) = &cpus {
        command.env(crate::spawn_cpu::ENV_CPUS, crate::spawn_cpu::encode(cpus));
    }
    let child = command
        .arg(ARGS_ON_STDIN)
        .arg("--id")
        .arg(id.as_str())
        .arg("--sandbox-dir")
        .arg(&paths.dir)
        // What the shim would otherwise re-execute itself to get (see shim::memory).
        .env(
            "GLIBC_TUNABLES",
            crate::shim::tunables_without_thread_cache(),
        )
        .stdin(Stdio::from(read))
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| Error::io("starting", shim, e))?;
    if let Some(cpus) = &cpus {
        crate::spawn_cpu::move_off_caller_cpu(child.id(), cpus);
    }
    Ok(WaitingShim {
        child: Some(child),
        pipe: Some(write),
    })
}

/// Sends `args` down the shim's stdin: their length (4 bytes, little-endian), then a JSON array
/// of the arguments a shim spawned with them would have had.
pub(crate) fn send_args(pipe: &OwnedFd, args: &[std::ffi::OsString]) -> std::io::Result<()> {
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let json = serde_json::to_vec(&words).map_err(std::io::Error::other)?;
    let length = u32::try_from(json.len()).map_err(std::io::Error::other)?;
    let mut message = length.to_le_bytes().to_vec();
    message.extend(json);
    let mut sent = 0;
    while sent < message.len() {
        sent += nix::unistd::write(pipe, &message[sent..]).map_err(std::io::Error::from)?;
    }
    Ok(())
}

impl Drop for StartingShim {
    fn drop(&mut self) {
        // Not taken by a sandbox (or not all made): the shim, if any, reads the end of its
        // stdin before any argument and exits, and the folder goes.
        if !self.taken {
            drop(self.process.take());
            let _ = std::fs::remove_dir_all(&self.paths.dir);
        }
    }
}

impl Runtime {
    /// Whether `starting` was started for this runtime's root.
    pub(crate) fn owns(&self, starting: &StartingShim) -> bool {
        self.layout().sandbox(&starting.id) == starting.paths
    }
}
