//! What a pod's life costs, phase by phase (`podlab run|apply|delete --trace`, or
//! `PODLAB_TRACE=1`): a trace file per pod under the state root, to which every process that
//! works on the pod (the CLI, the node agent, the pod's shim, a container's init between fork
//! and `execve`) appends one line as each phase ends.
//!
//! A line is `<CLOCK_BOOTTIME ns> <pid> <process> <phase>`, written with one `write(2)` on an
//! `O_APPEND` descriptor, so lines of several processes never interleave within a line and
//! need no lock. `CLOCK_BOOTTIME` is one clock for every process of the machine. A mark says
//! "this phase ended now"; the phase began at the previous mark, whoever wrote it, so the
//! phases of the table cover the whole time from the first mark to the last and add up to it.
//!
//! Off by default and nearly free when off: tracing is on for a pod while its file exists
//! (the command that traces creates it, reads it at the end, and removes it), and a process
//! that finds no file writes nothing (one failed `open` per operation on the pod, none per
//! mark). The file's first line names the tracing command (`PID:STARTTIME`), so that
//! `podlab gc` removes the file of a command that died before removing it.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::liveness::ProcessIdentity;

/// `PODLAB_TRACE=1` turns `--trace` on for run, apply and delete.
pub const ENV_TRACE: &str = "PODLAB_TRACE";

/// Whether `PODLAB_TRACE` asks for a trace.
pub fn requested_by_env() -> bool {
    std::env::var(ENV_TRACE).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// `<root>/traces`: the pods' trace files.
pub fn traces_dir(root: &Path) -> PathBuf {
    root.join("traces")
}

/// The trace file of the pod `namespace/name`. Pods are named uniquely per namespace at any
/// time, and a command that traces knows the name before the pod has a uid or a sandbox.
pub fn path(root: &Path, namespace: &str, name: &str) -> PathBuf {
    traces_dir(root).join(format!("{namespace}_{name}"))
}

/// Now on `CLOCK_BOOTTIME`, in nanoseconds.
pub fn now() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// One pod's trace, as one process writes to it; a no-op when the pod is not traced.
#[derive(Debug, Default)]
pub struct PodTrace {
    file: Option<File>,
    process: &'static str,
}

impl PodTrace {
    /// A trace that records nothing.
    pub fn off() -> PodTrace {
        PodTrace::default()
    }

    /// Starts tracing the pod (the command that asked for it): a fresh file whose first line
    /// names this process, then the `start` mark.
    pub fn begin(root: &Path, namespace: &str, name: &str) -> std::io::Result<PodTrace> {
        let dir = traces_dir(root);
        std::fs::create_dir_all(&dir)?;
        let path = path(root, namespace, name);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        let me = ProcessIdentity::of(std::process::id() as i32)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        writeln!(file, "# {}:{}", me.pid, me.start_time)?;
        drop(file);
        let trace = PodTrace::open_path(&path, "podlab");
        trace.mark("start");
        Ok(trace)
    }

    /// The pod's trace if a command traces it, marked as this process's (see
    /// [`set_process_name`]).
    pub fn open(root: &Path, namespace: &str, name: &str) -> PodTrace {
        PodTrace::open_path(&path(root, namespace, name), process_name())
    }

    /// The trace at `path` if it exists (it is not created).
    pub fn open_path(path: &Path, process: &'static str) -> PodTrace {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .ok();
        PodTrace { file, process }
    }

    pub fn is_on(&self) -> bool {
        self.file.is_some()
    }

    /// The phase `phase` ends now.
    pub fn mark(&self, phase: &str) {
        if let Some(file) = &self.file {
            mark_to(file, self.process, phase);
        }
    }
}

fn mark_to(mut file: &File, process: &str, phase: &str) {
    let line = format!("{} {} {} {}\n", now(), std::process::id(), process, phase);
    // One write: O_APPEND keeps concurrent writers' lines whole.
    let _ = file.write_all(line.as_bytes());
}

static PROCESS_NAME: OnceLock<&'static str> = OnceLock::new();

/// What this process's marks call it: `agent` for the node agent; `podlab` unless set.
pub fn set_process_name(name: &'static str) {
    let _ = PROCESS_NAME.set(name);
}

fn process_name() -> &'static str {
    PROCESS_NAME.get().copied().unwrap_or("podlab")
}

/// The trace file of the pod a shim serves: one pod per shim process, so a global, which the
/// containers' init processes (forked from the shim) inherit. The shim opens it for each mark,
/// since the file is made anew by each command that traces the pod (apply, later delete).
static SHIM_TRACE: OnceLock<PathBuf> = OnceLock::new();
/// The same file held open by a container's init from its start, since its path no longer
/// resolves once init has switched to the container's root.
static HELD: OnceLock<Option<File>> = OnceLock::new();

/// Sets the shim's trace file (once, at its start).
pub fn set_process_trace(path: PathBuf) {
    let _ = SHIM_TRACE.set(path);
}

/// In a container's init, before it changes its root: opens the shim's trace file, if the pod
/// is traced, for the marks that follow.
pub fn hold_open() {
    let _ = HELD.get_or_init(|| {
        SHIM_TRACE
            .get()
            .and_then(|path| PodTrace::open_path(path, "init").file)
    });
}

/// A mark on the trace of the shim's pod, if a command traces it now (from the shim or a
/// container's init: `process` names which).
pub fn process_mark(process: &str, phase: &str) {
    if let Some(held) = HELD.get() {
        if let Some(file) = held {
            mark_to(file, process, phase);
        }
        return;
    }
    if let Some(PodTrace {
        file: Some(file), ..
    }) = SHIM_TRACE
        .get()
        .map(|path| PodTrace::open_path(path, "shim"))
    {
        mark_to(&file, process, phase);
    }
}

/// One line of a trace file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// `CLOCK_BOOTTIME`, ns.
    pub at: u64,
    pub pid: u32,
    pub process: String,
    pub phase: String,
}

/// The marks of a trace file, in time order; the owner line and torn lines are skipped.
pub fn read(path: &Path) -> std::io::Result<Vec<Mark>> {
    let text = std::fs::read_to_string(path)?;
    let mut marks: Vec<Mark> = text.lines().filter_map(parse_line).collect();
    marks.sort_by_key(|m| m.at);
    Ok(marks)
}

fn parse_line(line: &str) -> Option<Mark> {
    let mut fields = line.splitn(4, ' ');
    Some(Mark {
        at: fields.next()?.parse().ok()?,
        pid: fields.next()?.parse().ok()?,
        process: fields.next()?.to_string(),
        phase: fields.next()?.to_string(),
    })
}

/// Whether the command that made the trace file still runs (false when it cannot tell).
pub fn owner_alive(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let owner = text.lines().next().and_then(|l| l.strip_prefix("# "));
    let Some((pid, start)) = owner.and_then(|o| o.split_once(':')) else {
        return false;
    };
    match (pid.parse(), start.parse()) {
        (Ok(pid), Ok(start_time)) => ProcessIdentity { pid, start_time }.is_alive(),
        _ => false,
    }
}

/// Removes the trace files whose command is gone (for `podlab gc`); returns how many.
pub fn remove_orphans(root: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(traces_dir(root)) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if !owner_alive(&entry.path()) && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    let _ = std::fs::remove_dir(traces_dir(root));
    removed
}

/// The table `--trace` prints: each phase with the process that ended it, when it ended (ms
/// after the first mark) and how long it took (since the previous mark), then the total.
pub fn table(marks: &[Mark]) -> String {
    let mut out = format!(
        "{:<4} {:<40} {:<7} {:>8} {:>10} {:>10}\n",
        "#", "PHASE", "PROCESS", "PID", "AT(ms)", "TOOK(ms)"
    );
    let Some(first) = marks.first() else {
        return out;
    };
    let mut previous = first.at;
    for (index, mark) in marks.iter().enumerate() {
        out.push_str(&format!(
            "{:<4} {:<40} {:<7} {:>8} {:>10.3} {:>10.3}\n",
            index,
            mark.phase,
            mark.process,
            mark.pid,
            ms(mark.at - first.at),
            ms(mark.at - previous),
        ));
        previous = mark.at;
    }
    let total = marks.last().map_or(0, |m| m.at - first.at);
    out.push_str(&format!(
        "{:<4} {:<40} {:<7} {:>8} {:>10} {:>10.3}\n",
        "",
        "total",
        "",
        "",
        "",
        ms(total)
    ));
    out
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_of_several_writers_make_a_table_that_adds_up() {
        let root = std::env::temp_dir().join(format!("podlab-trace-{}", std::process::id()));
        let trace = PodTrace::begin(&root, "default", "web").unwrap();
        let other = PodTrace::open_path(&path(&root, "default", "web"), "agent");
        other.mark("sandbox");
        trace.mark("exit");
        let marks = read(&path(&root, "default", "web")).unwrap();
        let phases: Vec<&str> = marks.iter().map(|m| m.phase.as_str()).collect();
        assert_eq!(phases, ["start", "sandbox", "exit"]);
        assert_eq!(marks[1].process, "agent");
        let table = table(&marks);
        assert!(table.lines().next().unwrap().contains("PHASE"));
        assert!(table.lines().last().unwrap().contains("total"));
        assert!(owner_alive(&path(&root, "default", "web")));
        assert_eq!(remove_orphans(&root), 0, "its command still runs");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_pod_without_a_trace_file_records_nothing_and_creates_nothing() {
        let root = std::env::temp_dir().join(format!("podlab-notrace-{}", std::process::id()));
        let trace = PodTrace::open_path(&path(&root, "default", "web"), "agent");
        assert!(!trace.is_on());
        trace.mark("sandbox");
        assert!(!root.exists());
    }

    #[test]
    fn a_torn_or_foreign_line_is_skipped() {
        assert_eq!(parse_line("# 12:34"), None);
        assert_eq!(parse_line("12 3"), None);
        let mark = parse_line("5 7 shim CNI ADD").unwrap();
        assert_eq!(mark.phase, "CNI ADD");
    }
}
