//! What a forked child tells the shim over its close-on-exec report pipe: when each step of
//! its start ended (one CLOCK_MONOTONIC for the shim and its children, so the shim can time
//! the fork and the `execve` too), or what failed. End-of-file with no failure means `execve`
//! succeeded: the kernel closed the pipe as it replaced the program.

use std::io::Write;
use std::os::fd::OwnedFd;

use crate::error::InitFailure;

/// CLOCK_MONOTONIC in nanoseconds: one clock for the shim and its children.
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// What a child writes on its report pipe, one JSON line each: the times its steps ended
/// (just before `execve`), or its failure; pause also says when the pod's namespaces are
/// made, so that a container the shim forked while pause goes on may join them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReportLine {
    Marks(Vec<(String, u64)>),
    Failed(InitFailure),
    Namespaces,
}

/// The child's end of the report pipe, and the moments its steps ended.
#[derive(Debug)]
pub struct Trace {
    report: std::fs::File,
    marks: Vec<(String, u64)>,
}

impl Trace {
    pub(crate) fn new(report: OwnedFd) -> Trace {
        let mut trace = Trace {
            report: std::fs::File::from(report),
            marks: Vec::new(),
        };
        trace.lap("fork");
        trace
    }

    /// Notes that `step` has just ended.
    pub fn lap(&mut self, step: &str) {
        self.marks.push((step.to_string(), monotonic_ns()));
    }

    pub(crate) fn send(&mut self, line: &ReportLine) {
        let mut bytes = serde_json::to_vec(line).unwrap_or_default();
        bytes.push(b'\n');
        let _ = self.report.write_all(&bytes);
    }

    /// Sends the marks; the next thing the parent hears is end-of-file (the `execve`) or a
    /// failure.
    pub fn send_marks(&mut self) {
        let marks = std::mem::take(&mut self.marks);
        self.send(&ReportLine::Marks(marks));
    }
}

/// What a child said on its report pipe.
#[derive(Debug, Default)]
pub struct Report {
    /// None when it reached `execve`.
    pub failure: Option<InitFailure>,
    /// When its steps ended (CLOCK_MONOTONIC ns), in order.
    pub marks: Vec<(String, u64)>,
    /// When the parent saw end-of-file: the `execve` had closed the pipe.
    pub closed_at: u64,
}

impl Report {
    /// The steps with their durations: from `forked_at` (taken just before the fork) to the
    /// first mark, between marks, and from the last mark to end-of-file as `execve`.
    pub fn steps(&self, forked_at: u64) -> Vec<StartStep> {
        let mut steps = Vec::new();
        let mut previous = forked_at;
        for (step, at) in &self.marks {
            steps.push(StartStep {
                step: step.clone(),
                nanos: at.saturating_sub(previous),
            });
            previous = *at;
        }
        if self.failure.is_none() && !self.marks.is_empty() {
            steps.push(StartStep {
                step: "execve".into(),
                nanos: self.closed_at.saturating_sub(previous),
            });
        }
        steps
    }
}

/// One timed step of a container's start, for `podlab bench` and the demo's cost table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StartStep {
    pub step: String,
    pub nanos: u64,
}

/// Reads a child's report pipe to its end.
pub fn read_report(report: OwnedFd) -> Report {
    ReportPipe::new(report).finish()
}

/// The parent's end of a report pipe, read in steps: up to a line the child sends midway
/// ([`ReportPipe::namespaces_made`]), then to the end ([`ReportPipe::finish`]).
#[derive(Debug)]
pub struct ReportPipe {
    pipe: std::fs::File,
    read: Vec<u8>,
}

impl ReportPipe {
    pub fn new(report: OwnedFd) -> ReportPipe {
        ReportPipe {
            pipe: std::fs::File::from(report),
            read: Vec::new(),
        }
    }

    /// Waits for the child's [`ReportLine::Namespaces`]: false when anything else came
    /// first (a failure, or the end of the pipe), which [`ReportPipe::finish`] then reads.
    pub fn namespaces_made(&mut self) -> bool {
        use std::io::Read;
        let mut chunk = [0u8; 512];
        loop {
            if let Some(end) = self.read.iter().position(|&b| b == b'\n') {
                let namespaces = matches!(
                    serde_json::from_slice::<ReportLine>(&self.read[..end]),
                    Ok(ReportLine::Namespaces)
                );
                if namespaces {
                    self.read.drain(..=end);
                }
                return namespaces;
            }
            match self.pipe.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => self.read.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    /// The pipe, to poll for the rest of the report.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.pipe.as_fd()
    }

    /// Reads the pipe to its end.
    pub fn finish(mut self) -> Report {
        use std::io::Read;
        let mut bytes = std::mem::take(&mut self.read);
        let _ = self.pipe.read_to_end(&mut bytes);
        parse_report(&bytes)
    }
}

fn parse_report(bytes: &[u8]) -> Report {
    let mut report = Report {
        closed_at: monotonic_ns(),
        ..Report::default()
    };
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<ReportLine>(line) {
            Ok(ReportLine::Marks(marks)) => report.marks.extend(marks),
            Ok(ReportLine::Failed(failure)) => report.failure = Some(failure),
            Ok(ReportLine::Namespaces) => {}
            Err(_) => {
                report.failure = Some(InitFailure {
                    step: "init".into(),
                    path: None,
                    errno: None,
                    message: format!(
                        "unreadable report from the container's init: {}",
                        String::from_utf8_lossy(line)
                    ),
                })
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_the_gaps_between_marks_and_end_with_the_execve() {
        let report = Report {
            failure: None,
            marks: vec![("fork".into(), 110), ("mount".into(), 150)],
            closed_at: 200,
        };
        let steps: Vec<(String, u64)> = report
            .steps(100)
            .into_iter()
            .map(|s| (s.step, s.nanos))
            .collect();
        assert_eq!(
            steps,
            [
                ("fork".to_string(), 10),
                ("mount".to_string(), 40),
                ("execve".to_string(), 50)
            ]
        );
        let failed = Report {
            failure: Some(InitFailure {
                step: "exec".into(),
                path: None,
                errno: None,
                message: "no".into(),
            }),
            ..report
        };
        assert_eq!(failed.steps(100).len(), 2, "no execve step when it failed");
    }

    #[test]
    fn a_report_pipe_carries_marks_then_a_failure() {
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        let mut trace = Trace::new(write_end);
        trace.lap("step");
        trace.send_marks();
        trace.send(&ReportLine::Failed(InitFailure {
            step: "exec".into(),
            path: None,
            errno: Some(2),
            message: "exec: \"x\": executable file not found in $PATH".into(),
        }));
        drop(trace);
        let report = read_report(read_end);
        let names: Vec<&str> = report.marks.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["fork", "step"]);
        assert_eq!(report.failure.unwrap().errno, Some(2));
    }
}
