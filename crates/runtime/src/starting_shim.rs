//! A shim started before its pod's configuration is known. A shim's `execve` and its C
//! library's start take about 1.4 ms here (this VM traps the `CPUID`s glibc asks at start),
//! while a one-shot `run --rm` spends about a millisecond before RunPodSandbox (the stores, the
//! image, the pod's folders) and in it (the /etc files, `/dev/shm`) before the shim's arguments
//! are known. Started first, the shim gets that far on the other core meanwhile, then waits on
//! its stdin for its arguments; [`Runtime::run_pod_sandbox_with`] sends them down the same pipe
//! that later carries the cgroups' and the network's bytes (see `shim::take_gate_pipe`).
//! Every shim gets its arguments so, and is spawned by a thread of its own (`Spawning`): here
//! once the folder and lock are made, by [`Runtime::run_pod_sandbox`] once the sandbox has its
//! folder; the thread is joined where the shim is needed.
//!
//! ```text
//! caller                                   podlab-shim --args-on-stdin --id ID --sandbox-dir DIR
//!   mkdir DIR, lock, spawn (a thread) ────▶ execve, glibc's start
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

use nix::sched::CpuSet;

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
    pub(crate) process: Option<Spawning>,
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
        // The caller goes on with its own work on this CPU while a thread spawns the shim (the
        // spawn's `vfork` holds that thread until the shim's `execve`) and the shim starts.
        starting.process = Some(Spawning::start(
            &starting.paths,
            &starting.id,
            shim,
            crate::spawn_cpu::this_cpu(),
        ));
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
/// arguments on its stdin, its log in the folder. `off_cpu`: the caller's affinity and the CPU
/// of its thread that goes on working meanwhile, which the shim is kept off
/// ([`crate::spawn_cpu`]); a thread that only spawns, for a caller that waits for it, leaves
/// its CPU to the shim.
pub(crate) fn spawn_waiting(
    paths: &SandboxPaths,
    id: &SandboxId,
    shim: &Path,
    off_cpu: Option<(CpuSet, usize)>,
) -> Result<WaitingShim> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(paths.shim_log())
        .map_err(|e| Error::io("opening", paths.shim_log(), e))?;
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| Error::io("making", "the shim's argument pipe", e.into()))?;
    let mut command = Command::new(shim);
    if let Some((cpus, _)) = &off_cpu {
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
    if let Some((cpus, cpu)) = &off_cpu {
        crate::spawn_cpu::move_off_cpu(child.id(), cpus, *cpu);
    }
    Ok(WaitingShim {
        child: Some(child),
        pipe: Some(write),
    })
}

/// A sandbox's shim being spawned by a thread of its own, or spawned already. Spawned in the
/// caller's thread, the `vfork` held it until the shim's `execve` (0.6 ms), and where the
/// network's ADD runs while the shim starts (the CRI's pods) the ADD, the longest branch of the
/// start, went out that much later; a `run --rm`'s command went on to its pod's folders later.
pub(crate) struct Spawning {
    /// Spawned (or failed) in the caller's thread.
    done: Option<Result<WaitingShim>>,
    /// Joined when dropped (a start that failed before it used the shim): the shim then reads
    /// the end of its stdin and exits, and is waited for, before the sandbox's undo.
    thread: Option<std::thread::JoinHandle<Result<WaitingShim>>>,
}

impl Spawning {
    /// Spawns `shim` on a thread of its own, kept off `off_cpu` ([`spawn_waiting`]); in this
    /// thread, and off its CPU, if no thread can be had.
    pub(crate) fn start(
        paths: &SandboxPaths,
        id: &SandboxId,
        shim: &Path,
        off_cpu: Option<usize>,
    ) -> Spawning {
        let hint = crate::spawn_cpu::hint(off_cpu);
        let (owned_paths, owned_id, owned_shim) = (paths.clone(), id.clone(), shim.to_owned());
        let thread = crate::spawn_cpu::HeldThread::spawn("podlab-spawn", move || {
            spawn_waiting(&owned_paths, &owned_id, &owned_shim, hint)
        });
        match thread {
            Ok(thread) => {
                if let Some((cpus, cpu)) = &hint {
                    thread.move_off_cpu(cpus, *cpu);
                }
                Spawning {
                    done: None,
                    thread: Some(thread.release()),
                }
            }
            Err(_) => Spawning {
                done: Some(spawn_waiting(
                    paths,
                    id,
                    shim,
                    crate::spawn_cpu::hint(crate::spawn_cpu::this_cpu()),
                )),
                thread: None,
            },
        }
    }

    /// The spawned shim, once its spawn is done.
    pub(crate) fn wait(mut self) -> Result<WaitingShim> {
        if let Some(done) = self.done.take() {
            return done;
        }
        match self.thread.take().map(|thread| thread.join()) {
            Some(Ok(spawned)) => spawned,
            Some(Err(_)) => Err(Error::Invalid(
                "the thread spawning the shim panicked".into(),
            )),
            None => Err(Error::Invalid("the shim was waited for twice".into())),
        }
    }
}

impl Drop for Spawning {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
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
