//! Errors that name the cgroup file and what was done to it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read, write, mkdir or rmdir of a cgroup file or folder failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing a value to a cgroup file failed (the kernel refused the value, or the file).
    #[error("writing {value:?} to {path}: {source}")]
    Write {
        value: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A cgroup file did not hold what the kernel documents.
    #[error("{path}: cannot read {what} from {text:?}")]
    Parse {
        path: PathBuf,
        what: &'static str,
        text: String,
    },
    /// A `bpf(2)` call for a cgroup failed (v2 device program): the call, the cgroup's folder,
    /// the errno, and the verifier's log when it refused the program.
    #[error("{call} for {path}: {errno}{}", if log.is_empty() { String::new() } else { format!(" (verifier: {log})") })]
    Bpf {
        call: &'static str,
        path: PathBuf,
        errno: nix::Error,
        log: String,
    },
    /// No usable cgroup hierarchy on this machine.
    #[error("no cgroup hierarchy: {0}")]
    NoHierarchy(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The errno of the failed call, if one failed.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } | Error::Write { source, .. } => source.raw_os_error(),
            Error::Bpf { errno, .. } => Some(*errno as i32),
            _ => None,
        }
    }
}
