//! One agent per root, started on demand. The agent holds an exclusive flock(2) on
//! `<root>/node.lock` for as long as it lives — the kernel drops it when the agent dies, even by
//! `kill -9`, so a stale lock cannot exist — and writes its pid to `<root>/node.pid`.
//! [`ensure_running`] is what the CLI calls before it needs a node: if nobody holds the lock it
//! starts `podlab node --background` detached (its own session, output to `<root>/node.log`)
//! and waits until the new agent holds the lock.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::NodeError;

pub const LOCK_FILE: &str = "node.lock";
pub const PID_FILE: &str = "node.pid";
pub const LOG_FILE: &str = "node.log";
/// Held by a CLI while it starts an agent, so two CLIs do not both start one.
const SPAWN_LOCK_FILE: &str = "node.spawn.lock";
/// How long [`ensure_running`] waits for a new agent to take its lock.
pub const START_TIMEOUT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);
/// How often [`NodeLock::acquire`] retries a lock held without a live agent's pid (1 s).
const LOCK_TRIES: u32 = 50;

/// The agent's hold on its root; released (and the pid file removed) when dropped.
#[derive(Debug)]
pub struct NodeLock {
    _file: File,
    pid_file: PathBuf,
}

impl NodeLock {
    /// Takes `<root>/node.lock`, or fails with [`NodeError::AlreadyRunning`].
    pub fn acquire(root: &Path) -> Result<NodeLock, NodeError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(|e| NodeError::io("creating", root, e))?;
        let path = root.join(LOCK_FILE);
        let file = open_lock_file(&path)?;
        // A shared hold is only ever a moment's look by `running_agent`; an agent's exclusive
        // hold comes with its pid file. So wait out the first, not the second.
        let mut tries = 0;
        while !flock(&file, libc::LOCK_EX | libc::LOCK_NB, &path)? {
            let holder = read_pid(root).filter(|&pid| pid_alive(pid));
            tries += 1;
            if holder.is_some() || tries >= LOCK_TRIES {
                return Err(NodeError::AlreadyRunning {
                    root: root.to_path_buf(),
                    pid: holder,
                });
            }
            std::thread::sleep(POLL);
        }
        let pid_file = root.join(PID_FILE);
        let tmp = root.join(format!(".{PID_FILE}.{}", std::process::id()));
        std::fs::write(&tmp, format!("{}\n", std::process::id()))
            .and_then(|()| std::fs::rename(&tmp, &pid_file))
            .map_err(|e| NodeError::io("writing", &pid_file, e))?;
        Ok(NodeLock {
            _file: file,
            pid_file,
        })
    }
}

impl Drop for NodeLock {
    fn drop(&mut self) {
        if read_pid_file(&self.pid_file) == Some(std::process::id() as i32) {
            let _ = std::fs::remove_file(&self.pid_file);
        }
    }
}

/// The pid of the agent that holds `root`'s lock, if one does.
pub fn running_agent(root: &Path) -> Option<i32> {
    let path = root.join(LOCK_FILE);
    let file = File::open(&path).ok()?;
    match flock(&file, libc::LOCK_SH | libc::LOCK_NB, &path) {
        // Nobody holds it exclusively: no agent.
        Ok(true) => None,
        Ok(false) => read_pid(root),
        Err(_) => None,
    }
}

/// Makes sure an agent runs for `root`, starting `podlab_exe node --background` if none does;
/// returns the agent's pid.
pub fn ensure_running(podlab_exe: &Path, root: &Path) -> Result<i32, NodeError> {
    let mut command = Command::new(podlab_exe);
    command
        .args(["node", "--background"])
        .env("PODLAB_ROOT", root);
    ensure_running_with(command, root)
}

/// [`ensure_running`] with the command that starts an agent (it must run [`super::run`] on
/// `root`). Its stdio is replaced by `<root>/node.log`, and it gets a session of its own.
pub fn ensure_running_with(mut command: Command, root: &Path) -> Result<i32, NodeError> {
    if let Some(pid) = running_agent(root) {
        return Ok(pid);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(|e| NodeError::io("creating", root, e))?;
    let spawn_lock_path = root.join(SPAWN_LOCK_FILE);
    let spawn_lock = open_lock_file(&spawn_lock_path)?;
    flock(&spawn_lock, libc::LOCK_EX, &spawn_lock_path)?;
    if let Some(pid) = running_agent(root) {
        return Ok(pid);
    }
    let log_path = root.join(LOG_FILE);
    let log = OpenOptions::new()
        .mode(0o600)
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| NodeError::io("opening", &log_path, e))?;
    let log_err = log
        .try_clone()
        .map_err(|e| NodeError::io("duplicating", &log_path, e))?;
    command.stdin(Stdio::null()).stdout(log).stderr(log_err);
    // SAFETY: setsid is async-signal-safe; it detaches the agent from the caller's terminal
    // and process group, so the CLI's Ctrl-C does not reach it.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| NodeError::io("starting the node agent", root, e))?;
    let started = Instant::now();
    let not_started = |message: String| NodeError::NotStarted {
        root: root.to_path_buf(),
        log: log_path.clone(),
        message,
    };
    loop {
        if let Some(pid) = running_agent(root) {
            // Reaped when it exits, however long the caller lives.
            std::thread::spawn(move || child.wait());
            return Ok(pid);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(not_started(format!(
                "it exited ({status}): {}",
                log_tail(&log_path)
            )));
        }
        if started.elapsed() >= START_TIMEOUT {
            return Err(not_started(format!(
                "it did not take {} within {START_TIMEOUT:?} (pid {} still runs)",
                root.join(LOCK_FILE).display(),
                child.id()
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// Asks the agent of `root` to stop (SIGTERM) and waits up to `timeout` for its lock to be
/// released; true when one was running and stopped.
pub fn stop_agent(root: &Path, timeout: Duration) -> Result<bool, NodeError> {
    let Some(pid) = running_agent(root) else {
        return Ok(false);
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGTERM).map_err(
        |errno| NodeError::Sys {
            call: "kill(SIGTERM)",
            target: format!("node agent pid {pid}"),
            errno,
        },
    )?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if running_agent(root).is_none() {
            return Ok(true);
        }
        std::thread::sleep(POLL);
    }
    Ok(running_agent(root).is_none())
}

static STOP_FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_stop_signal(_: libc::c_int) {
    if let Some(flag) = STOP_FLAG.get() {
        flag.store(true, Ordering::SeqCst);
    }
}

/// A stop flag for [`super::run`] that SIGTERM and SIGINT set: what `podlab node` hands in.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>, NodeError> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let flag = Arc::clone(STOP_FLAG.get_or_init(|| Arc::new(AtomicBool::new(false))));
    let action = SigAction::new(
        SigHandler::Handler(on_stop_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sigaction(signal, &action) }.map_err(|errno| NodeError::Sys {
            call: "sigaction",
            target: signal.to_string(),
            errno,
        })?;
    }
    Ok(flag)
}

fn open_lock_file(path: &Path) -> Result<File, NodeError> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| NodeError::io("opening the lock file", path, e))
}

/// flock(2); Ok(false) when a non-blocking request finds the lock taken.
fn flock(file: &File, operation: libc::c_int, path: &Path) -> Result<bool, NodeError> {
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(true);
        }
        match nix::Error::last() {
            nix::Error::EINTR => continue,
            nix::Error::EWOULDBLOCK => return Ok(false),
            errno => {
                return Err(NodeError::Sys {
                    call: "flock",
                    target: path.display().to_string(),
                    errno,
                })
            }
        }
    }
}

fn pid_alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

fn read_pid(root: &Path) -> Option<i32> {
    read_pid_file(&root.join(PID_FILE))
}

fn read_pid_file(path: &Path) -> Option<i32> {
    let mut text = String::new();
    File::open(path).ok()?.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// The last lines of the agent's log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lock_per_root_and_the_pid_is_published() {
        let root = std::env::temp_dir().join(format!("podlab-node-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(running_agent(&root), None);
        let lock = NodeLock::acquire(&root).unwrap();
        assert_eq!(running_agent(&root), Some(std::process::id() as i32));
        match NodeLock::acquire(&root) {
            Err(NodeError::AlreadyRunning { pid, .. }) => {
                assert_eq!(pid, Some(std::process::id() as i32))
            }
            other => panic!("a second lock was given: {other:?}"),
        }
        drop(lock);
        assert_eq!(running_agent(&root), None);
        assert!(!root.join(PID_FILE).exists());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
