//! `podlab demo pid`: a new pid namespace, its PID 1, and why a pod wants a good PID 1.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use nix::sys::signal::{kill, signal, SigHandler, Signal};
use nix::sys::wait::WaitStatus;
use nix::unistd::{fork, getpid, getppid, ForkResult, Pid};
use podlab_ns::pid::{self, OwnedChild};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::uts::side_by_side;
use super::{say, Evidence, Shown};

/// What PID 1 found inside its namespace.
#[derive(Debug, Serialize, Deserialize)]
struct Inside {
    getpid: i32,
    nspid: Vec<i32>,
    /// (pid, command) of every process in the `/proc` mounted inside.
    processes: Vec<(i32, String)>,
    /// The pid (inside) of PID 1's one other child at that moment.
    sleeper: i32,
    orphan: Orphan,
    sigterm_sent_from_inside: bool,
}

/// A grandchild of PID 1 whose parent exited.
#[derive(Debug, Serialize, Deserialize)]
struct Orphan {
    pid: i32,
    ppid_before: i32,
    ppid_after: i32,
    reaped_by_pid1: Option<String>,
    zombies_left: Vec<i32>,
}

pub fn run(evidence: &mut Evidence) -> Result<()> {
    say("A pid namespace numbers processes afresh: the first process made in it is PID 1 there,");
    say("while the host knows it by an ordinary pid. PID 1 has two duties the kernel gives no");
    say("other process: orphans inside are re-parented to it, so it must reap them or zombies");
    say("pile up; and signals to it are dropped unless it installed a handler (only SIGKILL and");
    say(
        "SIGSTOP from an ancestor namespace get through). With shareProcessNamespace: true a pod's",
    );
    say(
        "containers share one pid namespace whose PID 1 is the pause process, which reaps; without",
    );
    say("it each container's own entrypoint is PID 1, and an app that ignores SIGTERM only stops");
    say("when kubelet's grace period ends in SIGKILL.");
    say("");
    say("A helper unshares CLONE_NEWPID and forks PID 1, which unshares a mount namespace and");
    say("mounts its own /proc there (as `unshare --pid --fork --mount-proc` does).");

    let (report_read, report_write) = channel()?;
    let (ping_read, ping_write) = channel()?;
    let our_ends = [report_read.as_raw_fd(), ping_write.as_raw_fd()];
    let pid1 = OwnedChild::new(pid::fork_into_new_pidns(move || {
        for fd in our_ends {
            // SAFETY: PID 1's copies of the demo's own pipe ends, used by nothing else there.
            unsafe { libc::close(fd) };
        }
        be_pid1(report_write, ping_read)
    })?);
    let mut reports = BufReader::new(File::from(report_read));
    let mut ping = File::from(ping_write);
    let inside: Inside =
        receive_line::<Result<Inside, String>>(&mut reports)?.map_err(|e| anyhow!("PID 1: {e}"))?;

    let host_pid = pid1.pid().as_raw();
    let host_nspid = pid::pid_in_own_ns(host_pid)?;
    let host_ppid = pid::proc_stat(host_pid)?.ppid;
    let host_listed: Vec<i32> = pid::all_processes()?.iter().map(|p| p.pid).collect();
    let host_count = host_listed.len();
    let me = getpid().as_raw();
    side_by_side(
        ("host", "inside"),
        &[
            (
                "getpid()",
                &host_pid.to_string(),
                &inside.getpid.to_string(),
            ),
            (
                "NSpid in /proc/PID/status",
                &nspid_line(&host_nspid),
                &nspid_line(&inside.nspid),
            ),
            (
                "processes in /proc",
                &host_count.to_string(),
                &inside.processes.len().to_string(),
            ),
        ],
    );
    say("The /proc mounted inside lists only the namespace's own processes:");
    for (p, comm) in &inside.processes {
        say(format!("  {p:>5}  {comm}"));
    }
    say(format!(
        "An orphan: PID 1 forked a process that forked pid {} and exited. Its parent went from {}",
        inside.orphan.pid, inside.orphan.ppid_before
    ));
    say(format!(
        "to {}, and PID 1 reaped it: {}.",
        inside.orphan.ppid_after,
        inside
            .orphan
            .reaped_by_pid1
            .as_deref()
            .unwrap_or("not reaped")
    ));

    say(
        "A process inside sent SIGTERM to PID 1, which has no handler; now the host sends one too,",
    );
    say("then asks PID 1 whether it is still there:");
    kill(pid1.pid(), Signal::SIGTERM).context("kill(SIGTERM) from the host")?;
    ping.write_all(b"?").context("asking PID 1")?;
    let answer: String = receive_line(&mut reports)?;
    say(format!("  PID 1 answers \"{answer}\""));
    say("SIGKILL from the host cannot be ignored:");
    let ended = pid1.kill()?;
    say(format!("  PID 1: {}", podlab_ns::child::describe(ended)));
    drop(ping);

    evidence.compare(
        "inside the new namespace the first process is PID 1",
        inside.getpid,
        1,
        true,
    );
    evidence.compare(
        "the host's NSpid of that process ends in 1, after its host pid",
        host_nspid,
        vec![host_pid, 1],
        true,
    );
    evidence.compare(
        "on the host, PID 1 is an ordinary child of podlab",
        host_ppid,
        me,
        true,
    );
    let mut listed: Vec<i32> = inside.processes.iter().map(|(p, _)| *p).collect();
    listed.sort_unstable();
    evidence.compare(
        "the /proc mounted inside lists only PID 1 and its child",
        listed,
        vec![1, inside.sleeper],
        true,
    );
    evidence.check(
        "the host's /proc shows podlab itself, outside the namespace, and PID 1 under its host pid",
        host_listed.contains(&me) && host_listed.contains(&host_pid),
        format!(
            "podlab {me} and PID 1 {host_pid} among {} processes",
            host_listed.len()
        ),
    );
    evidence.check(
        "an orphan inside is re-parented to PID 1",
        inside.orphan.ppid_before != 1 && inside.orphan.ppid_after == 1,
        format!(
            "ppid {} → {}",
            inside.orphan.ppid_before, inside.orphan.ppid_after
        ),
    );
    evidence.check(
        "PID 1 reaps the orphan, leaving no zombie",
        inside.orphan.reaped_by_pid1.is_some() && inside.orphan.zombies_left.is_empty(),
        format!(
            "reaped: {}, zombies of PID 1: {}",
            inside
                .orphan
                .reaped_by_pid1
                .as_deref()
                .unwrap_or("not reaped"),
            inside.orphan.zombies_left.shown()
        ),
    );
    evidence.check(
        "SIGTERM from inside and from the host leave a handler-less PID 1 running",
        inside.sigterm_sent_from_inside && answer == "alive",
        format!(
            "kill(1, SIGTERM) inside {}; PID 1 answered \"{answer}\"",
            if inside.sigterm_sent_from_inside {
                "succeeded"
            } else {
                "failed"
            }
        ),
    );
    evidence.check(
        "SIGKILL from the host ends PID 1",
        ended == WaitStatus::Signaled(Pid::from_raw(host_pid), Signal::SIGKILL, false),
        podlab_ns::child::describe(ended),
    );
    Ok(())
}

/// PID 1's life: look around, report, then answer pings until killed.
fn be_pid1(report: OwnedFd, ping: OwnedFd) -> i32 {
    let mut report = File::from(report);
    let inside = look_around().map_err(|e| format!("{e:#}"));
    if send_line(&mut report, &inside).is_err() || inside.is_err() {
        return 1;
    }
    let mut ping = File::from(ping);
    let mut byte = [0u8; 1];
    while matches!(ping.read(&mut byte), Ok(1)) {
        if send_line(&mut report, &"alive").is_err() {
            return 1;
        }
    }
    0
}

fn look_around() -> Result<Inside> {
    // Make sure of the premise: no handler for SIGTERM.
    // SAFETY: restoring the default disposition installs no handler code.
    unsafe { signal(Signal::SIGTERM, SigHandler::SigDfl) }.context("signal(SIGTERM, SIG_DFL)")?;
    pid::mount_own_proc()?;
    let sleeper = OwnedChild::new(fork_child(|| {
        std::thread::sleep(Duration::from_secs(60));
        0
    })?);
    let me = getpid().as_raw();
    let nspid = pid::pid_in_own_ns(me)?;
    let processes = pid::all_processes()?
        .into_iter()
        .map(|p| (p.pid, p.comm))
        .collect();
    let orphan = make_an_orphan()?;
    let sender = OwnedChild::new(fork_child(|| {
        i32::from(kill(Pid::from_raw(1), Signal::SIGTERM).is_err())
    })?);
    let sigterm_sent_from_inside = matches!(sender.wait()?, WaitStatus::Exited(_, 0));
    let sleeper_pid = sleeper.pid().as_raw();
    sleeper.kill()?;
    Ok(Inside {
        getpid: me,
        nspid,
        processes,
        sleeper: sleeper_pid,
        orphan,
        sigterm_sent_from_inside,
    })
}

/// Forks a middle process that forks the orphan-to-be and exits at once. The orphan reports its
/// parent before and after; PID 1 then reaps it like any child of its own.
fn make_an_orphan() -> Result<Orphan> {
    let (read, write) = channel()?;
    let (noted_read, noted_write) = channel()?;
    let middle = OwnedChild::new(fork_child(move || {
        let grandchild = fork_child(|| {
            let before = getppid().as_raw();
            // Only now may the middle process exit: `before` must be seen while it lives.
            if File::from(noted_write).write_all(b"!").is_err() {
                return 1;
            }
            let mut after = before;
            // Bounded wait for the middle process to be gone.
            for _ in 0..500 {
                after = getppid().as_raw();
                if after != before {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let mut out = File::from(write);
            i32::from(send_line(&mut out, &(getpid().as_raw(), before, after)).is_err())
        });
        let noted = File::from(noted_read).read_exact(&mut [0u8; 1]);
        i32::from(grandchild.is_err() || noted.is_err())
    })?);
    middle.wait()?;
    let (orphan, before, after): (i32, i32, i32) =
        receive_line(&mut BufReader::new(File::from(read)))?;
    let mut reaped_by_pid1 = None;
    for _ in 0..500 {
        if let Some((_, status)) = pid::reap_all_nohang()
            .into_iter()
            .find(|(p, _)| p.as_raw() == orphan)
        {
            reaped_by_pid1 = Some(podlab_ns::child::describe(status));
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(Orphan {
        pid: orphan,
        ppid_before: before,
        ppid_after: after,
        reaped_by_pid1,
        zombies_left: pid::zombies_of(getpid().as_raw())?,
    })
}

/// Forks a child that runs `f` and exits with its value.
pub(super) fn fork_child(f: impl FnOnce() -> i32) -> Result<Pid> {
    // SAFETY: podlab is single-threaded; the child runs `f` and _exits.
    match unsafe { fork() }.context("fork")? {
        ForkResult::Child => {
            let code = f();
            // SAFETY: leave without the parent's atexit handlers and buffers.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => Ok(child),
    }
}

/// A pipe for JSON lines between forked processes of a demo: (read end, write end).
pub(super) fn channel() -> Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("pipe2")
}

/// Sends one value as one JSON line.
pub(super) fn send_line<T: Serialize>(to: &mut File, value: &T) -> Result<()> {
    let mut line = serde_json::to_vec(value)?;
    line.push(b'\n');
    to.write_all(&line).context("writing to a pipe")
}

/// Receives one JSON line; the other side closing first is an error.
pub(super) fn receive_line<T: DeserializeOwned>(from: &mut BufReader<File>) -> Result<T> {
    let mut line = String::new();
    from.read_line(&mut line).context("reading from a pipe")?;
    if line.is_empty() {
        anyhow::bail!("the other process ended without answering");
    }
    serde_json::from_str(&line).with_context(|| format!("unreadable answer {line:?}"))
}

/// The NSpid line of /proc/PID/status as the kernel writes it: the pid in each namespace,
/// outermost first.
fn nspid_line(pids: &[i32]) -> String {
    pids.iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}
