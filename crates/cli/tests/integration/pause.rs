//! Integration tests: pause. `podlab-pause` as a pod's infra process: PID 1 of a new pid
//! namespace that reaps every orphan, stops with exit status 0 on SIGTERM and SIGINT, prints its
//! version, and warns when it is not PID 1.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::WaitStatus;
use nix::unistd::{ForkResult, Pid};
use podlab_ns::child::{run_in_child, wait_for};
use podlab_ns::{ops, pid, NsKind};

use crate::support::{pause_binary, wait_until};

const ORPHANS: usize = 100;
const WARNING: &str = "not PID 1";

/// A running podlab-pause with its stderr on a pipe; killed and reaped on drop.
struct Pause {
    pid: Pid,
    stderr: OwnedFd,
    ended: bool,
}

impl Pause {
    /// Starts podlab-pause in new namespaces of `kinds` (none: as a plain child) and waits until
    /// it has its signal handlers, so that a signal sent next is the one it handles.
    fn start(kinds: &[NsKind]) -> Pause {
        let binary = CString::new(pause_binary().as_os_str().as_bytes()).unwrap();
        // Built here: the clone child of this multi-threaded harness must not allocate.
        let argv = [binary.as_ptr(), std::ptr::null()];
        let (stderr, stderr_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let pid = ops::spawn_with_clone(kinds, || {
            // SAFETY: plain system calls on prepared arguments, then exec or exit.
            unsafe {
                libc::dup2(stderr_write.as_raw_fd(), 2);
                libc::execv(binary.as_ptr(), argv.as_ptr());
            }
            127
        })
        .unwrap();
        drop(stderr_write);
        let pause = Pause {
            pid,
            stderr,
            ended: false,
        };
        assert!(
            wait_until(Duration::from_secs(5), || pause.handles_its_signals()),
            "podlab-pause (pid {pid}) never installed its handlers"
        );
        pause
    }

    /// Whether the process is podlab-pause and catches SIGINT, SIGTERM and SIGCHLD.
    fn handles_its_signals(&self) -> bool {
        let wanted = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGCHLD]
            .iter()
            .fold(0u64, |mask, s| mask | 1 << (*s as i32 - 1));
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_default()
                .to_string()
        };
        let caught = u64::from_str_radix(&field("SigCgt:"), 16).unwrap_or(0);
        field("Name:") == "podlab-pause" && caught & wanted == wanted
    }

    /// Sends `signal` and returns how the process ended, with what it wrote on stderr.
    fn stop_with(mut self, signal: Signal) -> (WaitStatus, String) {
        kill(self.pid, signal).unwrap();
        let status = wait_for(self.pid).unwrap();
        self.ended = true;
        (status, self.stderr_so_far())
    }

    /// What is on the stderr pipe now. Read without waiting for end-of-file: children that other
    /// tests fork at the same moment may briefly hold a copy of the pipe.
    fn stderr_so_far(&self) -> String {
        let flags = nix::fcntl::fcntl(&self.stderr, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        let nonblocking = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&self.stderr, nix::fcntl::FcntlArg::F_SETFL(nonblocking)).unwrap();
        let mut text = Vec::new();
        let mut buffer = [0u8; 4096];
        while let Ok(n @ 1..) = nix::unistd::read(&self.stderr, &mut buffer) {
            text.extend_from_slice(&buffer[..n]);
        }
        String::from_utf8_lossy(&text).into_owned()
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        if !self.ended {
            let _ = kill(self.pid, Signal::SIGKILL);
            let _ = wait_for(self.pid);
        }
    }
}

#[test]
fn dash_v_prints_the_version() {
    let out = std::process::Command::new(pause_binary())
        .arg("-v")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("podlab-pause {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn as_pid_1_it_exits_0_on_sigterm_and_on_sigint() {
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let pause = Pause::start(&[NsKind::Pid]);
        let nspid = pid::pid_in_own_ns(pause.pid.as_raw()).unwrap();
        assert_eq!(nspid.last(), Some(&1), "podlab-pause is PID 1: {nspid:?}");
        let (status, stderr) = pause.stop_with(signal);
        assert!(
            matches!(status, WaitStatus::Exited(_, 0)),
            "{signal}: {status:?}"
        );
        assert!(stderr.contains(signal.as_str()), "{signal}: {stderr:?}");
        assert!(!stderr.contains(WARNING), "PID 1 does not warn: {stderr:?}");
    }
}

#[test]
fn not_as_pid_1_it_warns_and_exits_0_on_sigterm_and_on_sigint() {
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let pause = Pause::start(&[]);
        let (status, stderr) = pause.stop_with(signal);
        assert!(
            matches!(status, WaitStatus::Exited(_, 0)),
            "{signal}: {status:?}"
        );
        assert!(stderr.contains(WARNING), "{signal}: {stderr:?}");
    }
}

#[test]
fn as_pid_1_it_reaps_a_hundred_orphans() {
    let pause = Pause::start(&[NsKind::Pid]);
    let pause_pid = pause.pid.as_raw();
    let (reports, reports_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
    let pidns = ops::ns_path(pause_pid, NsKind::Pid);
    let made: usize = run_in_child(|| {
        // The children of this process are made in pause's pid namespace.
        ops::join_path(&pidns, NsKind::Pid)?;
        make_orphans(&reports_write)
    })
    .unwrap();
    drop(reports_write);
    assert_eq!(made, ORPHANS);

    // Each orphan says whether its parent was PID 1 (pause) once its own parent had gone.
    let said = read_exactly(&reports, ORPHANS, Duration::from_secs(5));
    assert_eq!(said.len(), ORPHANS, "only {} orphans reported", said.len());
    assert!(
        said.iter().all(|b| *b == b'1'),
        "some orphans were not re-parented to podlab-pause: {:?}",
        String::from_utf8_lossy(&said)
    );
    let mut zombies = Vec::new();
    let reaped = wait_until(Duration::from_secs(5), || {
        zombies = pid::zombies_of(pause_pid).unwrap();
        zombies.is_empty()
    });
    assert!(reaped, "zombies left under podlab-pause: {zombies:?}");
    let (status, _) = pause.stop_with(Signal::SIGTERM);
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}");
}

/// Forks a parent (in the joined pid namespace) that forks the orphans and exits at once. Each
/// orphan waits until that parent is gone, writes `1` if its new parent is PID 1 (else `0`) on
/// `reports`, and exits, leaving its zombie to PID 1.
fn make_orphans(reports: &OwnedFd) -> podlab_ns::Result<usize> {
    // SAFETY: called in a single-threaded child; the forked processes only read, write, exit.
    let fork = || unsafe { nix::unistd::fork() }.map_err(|e| podlab_ns::Error::sys("fork", e));
    match fork()? {
        ForkResult::Child => {
            // The gate: end-of-file on it means this parent has exited.
            let Ok((gate, gate_open)) = nix::unistd::pipe() else {
                unsafe { libc::_exit(2) }
            };
            let parent = nix::unistd::getpid();
            let mut made: i32 = 0;
            for _ in 0..ORPHANS {
                match fork() {
                    Ok(ForkResult::Child) => {
                        drop(gate_open);
                        let _ = nix::unistd::read(&gate, &mut [0u8; 1]);
                        // An exiting parent closes its files before its children are handed
                        // on, so the new parent shows a moment after end-of-file.
                        for _ in 0..5000 {
                            if nix::unistd::getppid() != parent {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        let parent_is_pid_1 = nix::unistd::getppid().as_raw() == 1;
                        let _ =
                            nix::unistd::write(reports, if parent_is_pid_1 { b"1" } else { b"0" });
                        unsafe { libc::_exit(0) }
                    }
                    Ok(ForkResult::Parent { .. }) => made += 1,
                    Err(_) => break,
                }
            }
            // SAFETY: leave at once; the exit status says how many were made.
            unsafe { libc::_exit(made) }
        }
        ForkResult::Parent { child } => match wait_for(child)? {
            WaitStatus::Exited(_, made) => Ok(made as usize),
            other => Err(podlab_ns::Error::Invalid(format!(
                "the orphans' parent: {other:?}"
            ))),
        },
    }
}

/// Reads up to `count` bytes, waiting at most `limit` in all.
fn read_exactly(from: &OwnedFd, count: usize, limit: Duration) -> Vec<u8> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let start = std::time::Instant::now();
    let mut got = Vec::new();
    while got.len() < count {
        let left = limit.saturating_sub(start.elapsed());
        let mut fds = [PollFd::new(from.as_fd(), PollFlags::POLLIN)];
        let timeout = PollTimeout::try_from(left.as_millis() as i32).unwrap_or(PollTimeout::ZERO);
        if left.is_zero() || poll(&mut fds, timeout).unwrap_or(0) == 0 {
            break;
        }
        let mut buffer = vec![0u8; count - got.len()];
        match nix::unistd::read(from, &mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buffer[..n]),
        }
    }
    got
}
