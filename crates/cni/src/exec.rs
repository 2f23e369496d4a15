//! Running one plugin binary, the way libcni's `invoke` package does: find it in CNI_PATH, give it
//! the CNI_* variables and its configuration on stdin, read its result or error on stdout.
//!
//! A binary that is "text file busy" is started again a few times, as libcni does. Every run
//! has a deadline. The plugin is started in a process group of its own, so that on
//! timeout the group is killed: the plugin and what it delegated to (bridge runs host-local
//! as its child), not only the first process. One thread does all of it with `poll(2)` over
//! the pipes and a pidfd of the plugin, so callers that must stay single-threaded (a shim that
//! forks into namespaces afterwards) may call it.

use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::result::PluginError;
use crate::{Error, Result};

/// How many times a plugin whose binary is busy (ETXTBSY) is started again, and the pause in
/// between.
const BUSY_TRIES: u32 = 5;
const BUSY_PAUSE: Duration = Duration::from_millis(20);

/// Starts the plugin, again while its binary is "text file busy", as libcni's `RawExec` does:
/// a process forked at the moment the binary was written (a plugin being installed, a test
/// writing a script) holds it open for writing until its own `execve`.
fn spawn_retrying_busy(process: &mut std::process::Command) -> std::io::Result<Child> {
    let mut tries = 1;
    loop {
        match process.spawn() {
            Err(e) if e.kind() == ErrorKind::ExecutableFileBusy && tries < BUSY_TRIES => {
                tries += 1;
                std::thread::sleep(BUSY_PAUSE);
            }
            spawned => return spawned,
        }
    }
}

/// CNI_COMMAND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
}

impl Command {
    pub fn as_env(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_env().to_ascii_lowercase())
    }
}

/// The environment of one invocation (besides CNI_COMMAND and CNI_PATH).
#[derive(Debug, Clone, Default)]
pub struct Invocation<'a> {
    pub container_id: &'a str,
    /// Empty for a DEL whose network namespace is gone (the spec makes it optional there).
    pub netns: &'a str,
    pub ifname: &'a str,
    pub args: &'a str,
}

/// Where plugins are looked for, and how long each may run.
#[derive(Debug, Clone)]
pub struct PluginRunner {
    pub bin_dirs: Vec<PathBuf>,
    pub timeout: Duration,
}

impl PluginRunner {
    /// The first `bin_dirs` entry holding an executable named `plugin`.
    pub fn find(&self, plugin: &str) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        self.bin_dirs
            .iter()
            .map(|dir| dir.join(plugin))
            .find(|path| {
                std::fs::metadata(path)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .ok_or_else(|| Error::PluginNotFound {
                plugin: plugin.to_owned(),
                path: self.bin_dirs.clone(),
            })
    }

    /// CNI_PATH: the folders joined with `:`.
    pub fn cni_path(&self) -> String {
        let dirs: Vec<String> = self
            .bin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        dirs.join(":")
    }

    /// Runs `plugin` for `command` with `stdin`; its stdout on success (exit 0), a typed error
    /// carrying its CNI error JSON (or its stderr when stdout is empty) otherwise.
    pub fn run(
        &self,
        plugin: &str,
        command: Command,
        invocation: &Invocation<'_>,
        stdin: &[u8],
    ) -> Result<Vec<u8>> {
        let path = self.find(plugin)?;
        let exec_error = |cause| Error::Exec {
            plugin: plugin.to_owned(),
            command,
            path: path.clone(),
            cause,
        };
        let mut process = std::process::Command::new(&path);
        process
            .env("CNI_COMMAND", command.as_env())
            .env("CNI_PATH", self.cni_path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if command != Command::Version {
            process
                .env("CNI_CONTAINERID", invocation.container_id)
                .env("CNI_NETNS", invocation.netns)
                .env("CNI_IFNAME", invocation.ifname)
                .env("CNI_ARGS", invocation.args);
        }
        let child = spawn_retrying_busy(&mut process).map_err(exec_error)?;
        let output = match converse(child, stdin, self.timeout).map_err(exec_error)? {
            Some(output) => output,
            None => {
                return Err(Error::Timeout {
                    plugin: plugin.to_owned(),
                    command,
                    after: self.timeout,
                })
            }
        };
        if output.success {
            return Ok(output.stdout);
        }
        Err(plugin_failure(plugin, command, &output))
    }
}

struct Output {
    success: bool,
    status: String,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn plugin_failure(plugin: &str, command: Command, output: &Output) -> Error {
    let (code, msg, details) = match PluginError::parse(&output.stdout) {
        Some(err) => (Some(err.code), err.msg, err.details),
        None => {
            // libcni's fallback: a plugin that printed no error JSON is described by its
            // stderr, or its stdout, and how it ended.
            let text = if output.stdout.iter().all(u8::is_ascii_whitespace) {
                &output.stderr
            } else {
                &output.stdout
            };
            let text = String::from_utf8_lossy(text).trim().to_owned();
            let msg = if text.is_empty() {
                format!("{} without output", output.status)
            } else {
                text
            };
            (None, msg, String::new())
        }
    };
    Error::Plugin {
        plugin: plugin.to_owned(),
        command,
        code,
        msg,
        details,
    }
}

/// Feeds `stdin` to the child and collects its output until it exits; `None` if it did not
/// exit before `timeout` (it and its process group are then killed and reaped).
fn converse(mut child: Child, stdin: &[u8], timeout: Duration) -> std::io::Result<Option<Output>> {
    let deadline = Instant::now() + timeout;
    let pidfd = pidfd_open(child.id());
    let mut input = child.stdin.take();
    let mut stdout_pipe = child.stdout.take();
    let mut stderr_pipe = child.stderr.take();
    for fd in [
        input.as_ref().map(|p| p.as_fd()),
        stdout_pipe.as_ref().map(|p| p.as_fd()),
        stderr_pipe.as_ref().map(|p| p.as_fd()),
    ]
    .into_iter()
    .flatten()
    {
        set_nonblocking(fd)?;
    }
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut written = 0;
    if stdin.is_empty() {
        input = None;
    }
    let mut exited = false;
    loop {
        let pipes_done = stdout_pipe.is_none() && stderr_pipe.is_none();
        if exited || (pidfd.is_none() && pipes_done) {
            break;
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            kill_group(&mut child);
            return Ok(None);
        };
        let mut fds = Vec::with_capacity(4);
        let input_slot = slot(
            &mut fds,
            input.as_ref().map(|p| p.as_fd()),
            PollFlags::POLLOUT,
        );
        let out_slot = slot(
            &mut fds,
            stdout_pipe.as_ref().map(|p| p.as_fd()),
            PollFlags::POLLIN,
        );
        let err_slot = slot(
            &mut fds,
            stderr_pipe.as_ref().map(|p| p.as_fd()),
            PollFlags::POLLIN,
        );
        let pid_slot = slot(
            &mut fds,
            pidfd.as_ref().map(|p| p.as_fd()),
            PollFlags::POLLIN,
        );
        let millis = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        match nix::poll::poll(
            &mut fds,
            PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX),
        ) {
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
        let ready = |slot: Option<usize>| {
            slot.and_then(|i| fds[i].revents())
                .is_some_and(|r| !r.is_empty())
        };
        let (input_ready, out_ready, err_ready, pid_ready) = (
            ready(input_slot),
            ready(out_slot),
            ready(err_slot),
            ready(pid_slot),
        );
        drop(fds);
        if input_ready {
            let pipe = input.as_mut().expect("polled");
            match pipe.write(&stdin[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // The plugin closed its stdin (or died): it reads no more.
                Err(_) => written = stdin.len(),
            }
            if written == stdin.len() {
                input = None;
            }
        }
        if out_ready && drain(stdout_pipe.as_mut().expect("polled"), &mut stdout)? {
            stdout_pipe = None;
        }
        if err_ready && drain(stderr_pipe.as_mut().expect("polled"), &mut stderr)? {
            stderr_pipe = None;
        }
        exited = pid_ready;
    }
    // What the plugin wrote before it exited is in the pipes; what its leftover children may
    // still write is not waited for.
    if let Some(pipe) = stdout_pipe.as_mut() {
        drain(pipe, &mut stdout)?;
    }
    if let Some(pipe) = stderr_pipe.as_mut() {
        drain(pipe, &mut stderr)?;
    }
    let status = child.wait()?;
    Ok(Some(Output {
        success: status.success(),
        status: status.to_string(),
        stdout,
        stderr,
    }))
}

/// Adds `fd` (if any) to the poll set; its index there.
fn slot<'a>(
    fds: &mut Vec<PollFd<'a>>,
    fd: Option<BorrowedFd<'a>>,
    flags: PollFlags,
) -> Option<usize> {
    fd.map(|fd| {
        fds.push(PollFd::new(fd, flags));
        fds.len() - 1
    })
}

/// Reads what is there; `true` at end of file.
fn drain(pipe: &mut impl Read, into: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(n) => into.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

fn kill_group(child: &mut Child) {
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// A pidfd of `pid` (readable once it exits), `None` on kernels before 5.3.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a non-negative return is a descriptor that we now own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether `path` is a network namespace file (`/proc/PID/ns/net` or a pin of one).
pub fn is_netns(path: &Path) -> bool {
    podlab_ns::ops::open(path, podlab_ns::NsKind::Net).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn plugin_dir(name: &str, scripts: &[(&str, &str)]) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("podlab-cni-exec-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (plugin, body) in scripts {
            let path = dir.join(plugin);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        TempDir(dir)
    }

    fn runner(dir: &TempDir, timeout: Duration) -> PluginRunner {
        PluginRunner {
            bin_dirs: vec![dir.0.join("missing"), dir.0.clone()],
            timeout,
        }
    }

    #[test]
    fn env_and_stdin_reach_the_plugin_and_stdout_comes_back() {
        let dir = plugin_dir(
            "env",
            &[("echo", "printf '%s|%s|%s|%s|%s|%s|' \"$CNI_COMMAND\" \"$CNI_CONTAINERID\" \"$CNI_NETNS\" \"$CNI_IFNAME\" \"$CNI_ARGS\" \"$CNI_PATH\"; cat")],
        );
        let invocation = Invocation {
            container_id: "c1",
            netns: "/proc/1/ns/net",
            ifname: "eth0",
            args: "IgnoreUnknown=1;K8S_POD_NAME=p",
        };
        let big = vec![b'x'; 300_000];
        let out = runner(&dir, Duration::from_secs(20))
            .run("echo", Command::Add, &invocation, &big)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let expected = format!(
            "ADD|c1|/proc/1/ns/net|eth0|IgnoreUnknown=1;K8S_POD_NAME=p|{}:{}|",
            dir.0.join("missing").display(),
            dir.0.display()
        );
        assert!(
            text.starts_with(&expected),
            "{}",
            &text[..expected.len().min(text.len())]
        );
        assert_eq!(
            text.len(),
            expected.len() + big.len(),
            "stdin larger than a pipe made it through"
        );
    }

    #[test]
    fn error_json_and_stderr_become_typed_errors() {
        let dir = plugin_dir(
            "errors",
            &[
                (
                    "json",
                    r#"echo '{"cniVersion":"1.0.0","code":7,"msg":"bad config","details":"no bridge"}'; exit 1"#,
                ),
                ("stderr", "echo 'panic: nil map' >&2; exit 2"),
                ("silent", "exit 3"),
            ],
        );
        let run = |plugin| {
            runner(&dir, Duration::from_secs(20))
                .run(plugin, Command::Del, &Invocation::default(), b"{}")
                .unwrap_err()
        };
        let json = run("json");
        assert_eq!(json.code(), Some(7));
        assert_eq!(
            json.to_string(),
            "plugin type=\"json\" failed (del): bad config (no bridge)"
        );
        let stderr = run("stderr");
        assert_eq!(stderr.code(), None);
        assert!(
            stderr.to_string().ends_with("failed (del): panic: nil map"),
            "{stderr}"
        );
        assert!(
            run("silent").to_string().contains("exit status: 3"),
            "{}",
            run("silent")
        );
    }

    #[test]
    fn a_missing_plugin_names_itself_and_the_path() {
        let dir = plugin_dir("missing", &[]);
        let err = runner(&dir, Duration::from_secs(1))
            .run("bridge", Command::Add, &Invocation::default(), b"{}")
            .unwrap_err();
        assert!(matches!(err, Error::PluginNotFound { .. }));
        let message = err.to_string();
        assert!(message.contains("\"bridge\""), "{message}");
        assert!(message.contains(&dir.0.display().to_string()), "{message}");
    }

    #[test]
    fn a_plugin_past_its_deadline_is_killed_with_its_children() {
        let dir = plugin_dir("slow", &[("slow", "sleep 60 & echo $! > \"$0.pid\"; wait")]);
        let err = runner(&dir, Duration::from_millis(300))
            .run("slow", Command::Add, &Invocation::default(), b"{}")
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        let grandchild: i32 = std::fs::read_to_string(dir.0.join("slow.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The killed grandchild is reaped by init; wait (bounded) until its pid is gone.
        let gone = (0..200).any(|_| {
            let alive = std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                .is_ok_and(|stat| !stat.contains(") Z "));
            if alive {
                std::thread::sleep(Duration::from_millis(10));
            }
            !alive
        });
        assert!(gone, "the plugin's child {grandchild} was killed too");
    }
}
