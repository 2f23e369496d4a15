//! Processes as the kernel shows them in `/proc`: their names, parents, states, namespaces,
//! the hostname their uts namespace holds, and the lab tag in their environment, which is how
//! `reset` finds every process a lab started (and what they became after an `exec`).

use std::time::{Duration, Instant};

use anyhow::Result;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use podlab_ns::{ops, NsKind};

use crate::env::LAB_TAG;

/// One process.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    /// `comm`: the name the kernel keeps (15 characters at most).
    pub name: String,
    /// `R`, `S`, `Z`...
    pub state: char,
}

impl Proc {
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }

    /// The inode id of one of its namespaces (None once it is gone).
    pub fn ns(&self, kind: NsKind) -> Option<u64> {
        ops::ns_inode(self.pid, kind).ok()
    }
}

/// Every process now.
pub fn all() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read)
        .collect()
}

/// One process, None if it is gone.
pub fn read(pid: i32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat[open + 1..close].to_string();
    let mut rest = stat[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        name,
        state,
    })
}

/// Its command line, words joined by spaces.
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .trim_end_matches('\0')
                .replace('\0', " ")
        })
        .unwrap_or_default()
}

/// Whether the process carries `PODLAB_LAB=<lab>` in its environment.
pub fn tagged_with(pid: i32, lab: &str) -> bool {
    let wanted = format!("{LAB_TAG}={lab}");
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == wanted.as_bytes()))
}

/// The live (not zombie) processes a lab started.
pub fn tagged(lab: &str) -> Vec<Proc> {
    let me = std::process::id() as i32;
    all()
        .into_iter()
        .filter(|p| p.pid != me && !p.is_zombie() && tagged_with(p.pid, lab))
        .collect()
}

/// The hostname and NIS domainname of the process's uts namespace, read by a child that
/// joins it (`gethostname`/`getdomainname` answer for the caller's own namespace only).
pub fn uts_names(pid: i32) -> Result<(String, String)> {
    let fd = ops::open_pid(pid, NsKind::Uts)?;
    Ok(podlab_ns::child::run_in_child(move || {
        ops::join(std::os::fd::AsFd::as_fd(&fd), NsKind::Uts)?;
        Ok((podlab_ns::uts::hostname()?, podlab_ns::uts::domainname()?))
    })?)
}

/// The inode id of one of this process's own namespaces (the host's, for the lab CLI).
pub fn host_ns(kind: NsKind) -> u64 {
    ops::self_inode(kind).unwrap_or(0)
}

/// SIGKILLs the processes and waits (bounded) until none of them runs.
pub fn kill_all(pids: &[i32]) {
    for pid in pids {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    wait_gone(pids, Duration::from_secs(5));
}

/// Waits (bounded) until none of the processes runs (gone, or a zombie awaiting its parent).
pub fn wait_gone(pids: &[i32], limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        if pids
            .iter()
            .all(|pid| read(*pid).is_none_or(|p| p.is_zombie()))
        {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `find` every 20 ms until it gives something, at most `limit`.
pub fn wait_for<T>(limit: Duration, mut find: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(found) = find() {
            return Some(found);
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills every process the lab started; returns how many there were.
pub fn kill_tagged(lab: &str) -> usize {
    let pids: Vec<i32> = tagged(lab).iter().map(|p| p.pid).collect();
    kill_all(&pids);
    pids.len()
}

/// The real and effective uid of the process, as the node numbers them (`/proc/PID/status`).
pub fn uids(pid: i32) -> Option<(u32, u32)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    let mut ids = line.split_whitespace().skip(1).map(|n| n.parse().ok());
    Some((ids.next()??, ids.next()??))
}

/// Whether the file at `path` was written (its mtime set) less than `within` ago.
pub fn written_within(path: &std::path::Path, within: Duration) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| std::time::SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age < within)
}
