//! The one error type of podlab-layers: which command, file, process or claim failed, and why.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A namespace operation of podlab-ns failed (the lab's holder, a setns, a mount).
    #[error(transparent)]
    Ns(#[from] podlab_ns::Error),
    /// A program could not be started at all.
    #[error("starting {program}: {cause}")]
    Spawn {
        program: String,
        cause: std::io::Error,
    },
    /// A program ran and failed; `stderr` holds the end of what it said.
    #[error("{command} failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    /// Something did not happen within its bounded wait.
    #[error("timed out after {seconds} s waiting for {what}")]
    Timeout { what: String, seconds: u64 },
    /// A file or /proc read or write failed.
    #[error("{what} {path}: {cause}")]
    Io {
        what: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },
    /// A peer's output, a /proc file or a CSV line could not be read.
    #[error("unreadable {what}: {text:?}")]
    Parse { what: &'static str, text: String },
    /// A binary the task needs is not installed.
    #[error("{binary} is not installed (apt-get install -y {package})")]
    Missing {
        binary: &'static str,
        package: &'static str,
    },
    /// The demo's evidence does not hold: what it claimed, and what the kernel showed instead.
    #[error("evidence does not hold: {claim}: {found}")]
    Evidence { claim: String, found: String },
    /// The host is not as the lab found it (a process, mount, link, rule or cgroup stayed).
    #[error("the host was left changed: {}", changes.join("; "))]
    LeftBehind { changes: Vec<String> },
    /// Ctrl-C (or SIGTERM/SIGHUP) arrived; everything started so far has been stopped.
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            cause: source,
        }
    }

    pub fn evidence(claim: impl Into<String>, found: impl Into<String>) -> Self {
        Error::Evidence {
            claim: claim.into(),
            found: found.into(),
        }
    }
}
