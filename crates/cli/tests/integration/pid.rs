//! Integration tests: pid. PID 1 of a new pid namespace, checked in NSpid, in a `/proc` mounted
//! inside, in the parent pids of orphans, and in how PID 1 takes signals.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::WaitStatus;
use nix::unistd::{fork, ForkResult, Pid};
use podlab_ns::child::{run_in_child, wait_for};
use podlab_ns::pid;
use serde::de::DeserializeOwned;
use serde::Serialize;

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap()
}

// Messages are one JSON line each, so that the reader never depends on end-of-file: other tests
// of this multi-threaded harness fork too, and their children briefly hold copies of our pipes.
fn send<T: Serialize>(to: OwnedFd, value: &T) {
    let mut line = serde_json::to_vec(value).unwrap();
    line.push(b'\n');
    let _ = std::fs::File::from(to).write_all(&line);
}

fn receive<T: DeserializeOwned>(from: OwnedFd) -> T {
    let mut line = String::new();
    BufReader::new(std::fs::File::from(from))
        .read_line(&mut line)
        .unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("PID 1 sent {line:?}: {e}"))
}

/// Blocks until one byte arrives on `from`.
fn wait_for_go(from: OwnedFd) {
    let _ = std::fs::File::from(from).read(&mut [0u8; 1]);
}

/// Runs `f` as PID 1 of a new pid namespace and returns what it found, and how PID 1 ended.
fn as_pid1<T: Serialize + DeserializeOwned>(
    f: impl FnOnce() -> Result<T, String>,
) -> (Result<T, String>, WaitStatus) {
    let (answer_in, answer_out) = pipe();
    let pid1 = pid::fork_into_new_pidns(move || {
        send(answer_out, &f());
        0
    })
    .unwrap();
    let answer = receive(answer_in);
    (answer, wait_for(pid1).unwrap())
}

/// Polls until `cond` holds, for at most 5 s.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    crate::support::wait_until(Duration::from_secs(5), &mut cond)
}

#[test]
fn the_first_process_is_pid_1_and_the_host_knows_it_by_another_pid() {
    let (report_in, report_out) = pipe();
    let (go_in, go_out) = pipe();
    let pid1 = pid::fork_into_new_pidns(move || {
        send(report_out, &nix::unistd::getpid().as_raw());
        // Stay alive until the parent has looked.
        wait_for_go(go_in);
        0
    })
    .unwrap();
    let pid_inside: i32 = receive(report_in);
    let nspid = pid::pid_in_own_ns(pid1.as_raw()).unwrap();
    let host_ns = std::fs::metadata("/proc/self/ns/pid").unwrap();
    let its_ns = std::fs::metadata(format!("/proc/{pid1}/ns/pid")).unwrap();
    let parent = pid::proc_stat(pid1.as_raw()).unwrap().ppid;
    std::fs::File::from(go_out).write_all(b"x").unwrap();
    assert_eq!(wait_for(pid1).unwrap(), WaitStatus::Exited(pid1, 0));

    assert_eq!(pid_inside, 1, "getpid() inside the new namespace");
    assert_eq!(
        nspid,
        [pid1.as_raw(), 1],
        "NSpid: the host's pid, then 1 inside"
    );
    use std::os::unix::fs::MetadataExt;
    assert_ne!(host_ns.ino(), its_ns.ino(), "another pid namespace");
    assert_eq!(
        parent,
        std::process::id() as i32,
        "PID 1 is the caller's own child"
    );
}

#[test]
fn proc_mounted_inside_shows_only_the_namespace() {
    let (inside, status) = as_pid1(|| {
        pid::mount_own_proc().map_err(|e| e.to_string())?;
        let sleeper = match unsafe { fork() }.map_err(|e| e.to_string())? {
            ForkResult::Child => {
                std::thread::sleep(Duration::from_secs(30));
                unsafe { libc::_exit(0) }
            }
            ForkResult::Parent { child } => child,
        };
        let mut pids: Vec<i32> = pid::all_processes()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|p| p.pid)
            .collect();
        pids.sort_unstable();
        let _ = kill(sleeper, Signal::SIGKILL);
        let _ = wait_for(sleeper);
        Ok(pids)
    });
    assert_eq!(status, WaitStatus::Exited(status.pid().unwrap(), 0));
    assert_eq!(
        inside.unwrap(),
        [1, 2],
        "PID 1 and its one child, nothing of the host"
    );
    let me = std::process::id() as i32;
    assert!(
        pid::all_processes().unwrap().iter().any(|p| p.pid == me),
        "the test's own /proc shows the test process, which has no pid inside"
    );
}

/// What PID 1 saw of an orphan: its parent before and after its own parent exited, and whether
/// PID 1 reaped it.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct Orphan {
    pid: i32,
    ppid_before: i32,
    ppid_after: i32,
    reaped_by_pid1: bool,
    zombies_left: Vec<i32>,
}

/// Forks a middle process that forks the orphan and exits; the orphan reports its parent pid
/// before and after. Called in a reaper (PID 1 or a subreaper), which then reaps the orphan.
fn orphan_under_me() -> Result<Orphan, String> {
    let (report_in, report_out) = pipe();
    let (noted_in, noted_out) = pipe();
    let middle = match unsafe { fork() }.map_err(|e| e.to_string())? {
        ForkResult::Child => {
            drop(report_in);
            match unsafe { fork() } {
                Ok(ForkResult::Child) => {
                    let before = nix::unistd::getppid().as_raw();
                    // The middle process waits for this before it exits, so that `before`
                    // is read while it still lives.
                    let _ = std::fs::File::from(noted_out).write_all(b"!");
                    // Bounded wait for the middle process to exit and leave us orphaned.
                    let mut after = before;
                    for _ in 0..500 {
                        after = nix::unistd::getppid().as_raw();
                        if after != before {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let me = nix::unistd::getpid().as_raw();
                    send(report_out, &(me, before, after));
                    unsafe { libc::_exit(0) }
                }
                _ => {
                    wait_for_go(noted_in);
                    unsafe { libc::_exit(0) }
                }
            }
        }
        ForkResult::Parent { child } => child,
    };
    drop(report_out);
    drop((noted_in, noted_out));
    wait_for(middle).map_err(|e| e.to_string())?;
    let (orphan, before, after): (i32, i32, i32) = receive(report_in);
    let mut reaped = false;
    // This process as the /proc it reads names it: as PID 1 of a new pid namespace it has
    // another pid there, and the ppid fields of /proc/*/stat are in /proc's namespace too.
    let me: i32 = std::fs::read_link("/proc/self")
        .map_err(|e| e.to_string())?
        .to_string_lossy()
        .parse()
        .map_err(|e| format!("/proc/self: {e}"))?;
    eventually(|| {
        reaped |= pid::reap_all_nohang()
            .iter()
            .any(|(p, _)| p.as_raw() == orphan);
        reaped
    });
    Ok(Orphan {
        pid: orphan,
        ppid_before: before,
        ppid_after: after,
        reaped_by_pid1: reaped,
        zombies_left: pid::zombies_of(me).map_err(|e| e.to_string())?,
    })
}

#[test]
fn an_orphan_is_reparented_to_pid_1_and_reaped_by_it() {
    let (orphan, _) = as_pid1(orphan_under_me);
    let orphan = orphan.unwrap();
    assert_ne!(
        orphan.ppid_before, 1,
        "at first the orphan's parent is the middle process"
    );
    assert_eq!(
        orphan.ppid_after, 1,
        "once orphaned its parent is PID 1: {orphan:?}"
    );
    assert!(orphan.reaped_by_pid1, "PID 1 reaped it: {orphan:?}");
    assert!(orphan.zombies_left.is_empty(), "{orphan:?}");
}

#[test]
fn a_subreaper_outside_any_new_namespace_adopts_orphans_too() {
    let (orphan, me): (Orphan, i32) = run_in_child(|| {
        pid::set_child_subreaper()?;
        let orphan = orphan_under_me().map_err(podlab_ns::Error::Invalid)?;
        Ok((orphan, nix::unistd::getpid().as_raw()))
    })
    .unwrap();
    assert_eq!(
        orphan.ppid_after, me,
        "re-parented to the subreaper: {orphan:?}"
    );
    assert!(orphan.reaped_by_pid1, "{orphan:?}");
}

#[test]
fn pid_1_ignores_sigterm_from_inside_but_not_sigkill_from_the_host() {
    let (report_in, report_out) = pipe();
    let (never_in, never_out) = pipe();
    let pid1 = pid::fork_into_new_pidns(move || {
        // A process inside sends SIGTERM to PID 1, which has no handler for it.
        let sender = match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                let sent = kill(Pid::from_raw(1), Signal::SIGTERM).is_ok();
                unsafe { libc::_exit(if sent { 0 } else { 1 }) }
            }
            Ok(ForkResult::Parent { child }) => child,
            Err(_) => return 2,
        };
        let sent = matches!(wait_for(sender), Ok(WaitStatus::Exited(_, 0)));
        send(report_out, &sent);
        // Still here: wait for the host, which never lets us go but kills us.
        wait_for_go(never_in);
        3
    })
    .unwrap();
    let sent: bool = receive(report_in);
    assert!(sent, "kill(1, SIGTERM) inside returned success");
    // It could only answer after the SIGTERM if that did not kill it.
    let state = pid::proc_stat(pid1.as_raw()).unwrap().state;
    assert_ne!(state, 'Z', "PID 1 survived the SIGTERM");
    kill(pid1, Signal::SIGKILL).unwrap();
    let status = wait_for(pid1).unwrap();
    drop(never_out);
    assert_eq!(
        status,
        WaitStatus::Signaled(pid1, Signal::SIGKILL, false),
        "the host's SIGKILL ends PID 1"
    );
}

#[test]
fn podlab_demo_pid_holds_all_its_evidence() {
    crate::user::assert_demo_holds(crate::support::podlab(), "pid");
}
