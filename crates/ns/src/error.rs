//! The one error type of podlab-ns: what was called, on which namespace, path and pid, and why.
//!
//! Like every typed error of podlab's, its message ends with the cause (the errno, the I/O
//! error), which is therefore not also its `source()`: anyhow's `{:#}` would say it twice.

use std::fmt;
use std::path::PathBuf;

use crate::NsKind;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a failed operation was aimed: any of the namespace kind, a path, a pid.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Option<NsKind>,
    pub path: Option<PathBuf>,
    pub pid: Option<i32>,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(kind) = self.kind {
            parts.push(format!("{kind} namespace"));
        }
        if let Some(pid) = self.pid {
            parts.push(format!("pid {pid}"));
        }
        if let Some(path) = &self.path {
            parts.push(path.display().to_string());
        }
        if parts.is_empty() {
            Ok(())
        } else {
            write!(f, " ({})", parts.join(", "))
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error("{call}{target}: {errno}")]
    Sys {
        call: &'static str,
        target: Target,
        errno: nix::Error,
    },
    /// A system call failed for a reason podlab can name (a multi-threaded caller, a process
    /// that is not dumpable, a shared mount under pivot_root), said after the errno.
    #[error("{call}{target}: {errno}: {why}")]
    SysExplained {
        call: &'static str,
        target: Target,
        errno: nix::Error,
        why: String,
    },
    /// A system call on several namespace kinds at once (`unshare`, `clone`) failed.
    #[error("{call} ({} namespaces): {errno}", kinds_text(kinds))]
    SysOnKinds {
        call: &'static str,
        kinds: Vec<NsKind>,
        errno: nix::Error,
    },
    /// A system call on one System V IPC object failed.
    #[error("{call} (ipc namespace, {what} {id}): {errno}")]
    SysvObject {
        call: &'static str,
        what: &'static str,
        id: i32,
        errno: nix::Error,
    },
    /// A file or /proc read or write failed.
    #[error("{what} {path}: {cause}")]
    Io {
        what: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The running kernel does not have this namespace kind (no `/proc/self/ns/<kind>`).
    #[error("the kernel has no {kind} namespaces (no /proc/self/ns/{})", kind.proc_name())]
    KindUnsupported { kind: NsKind },
    /// A name that is not a namespace kind.
    #[error("unknown namespace kind {0:?} (expected one of uts, ipc, net, pid, mnt, user, cgroup, time)")]
    UnknownKind(String),
    /// A netlink request was answered with an error, or the answer could not be read.
    #[error("netlink {request}{target}: {message}")]
    Netlink {
        request: &'static str,
        target: Target,
        message: String,
        /// The errno the kernel answered with, when it answered with one.
        errno: Option<nix::Error>,
    },
    /// A forked helper process failed; its own error message travels back over a pipe.
    #[error("child process {pid}: {message}")]
    Child { pid: i32, message: String },
    /// Anything else that is not a system call failure, with its explanation.
    #[error("{0}")]
    Invalid(String),
}

/// Several kinds in words: `uts+ipc+net`.
pub fn kinds_text(kinds: &[NsKind]) -> String {
    let names: Vec<&str> = kinds.iter().map(|k| k.proc_name()).collect();
    names.join("+")
}

impl Error {
    /// A failed system call with no particular target.
    pub fn sys(call: &'static str, errno: nix::Error) -> Self {
        Error::Sys {
            call,
            target: Target::default(),
            errno,
        }
    }

    /// A failed system call on one namespace kind.
    pub fn sys_on(call: &'static str, kind: NsKind, errno: nix::Error) -> Self {
        Error::Sys {
            call,
            target: Target {
                kind: Some(kind),
                ..Target::default()
            },
            errno,
        }
    }

    /// A failed system call with its full target.
    pub fn sys_at(call: &'static str, target: Target, errno: nix::Error) -> Self {
        Error::Sys {
            call,
            target,
            errno,
        }
    }

    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            cause: source,
        }
    }

    /// The errno, when this is a failed system call.
    pub fn errno(&self) -> Option<nix::Error> {
        match self {
            Error::Sys { errno, .. }
            | Error::SysExplained { errno, .. }
            | Error::SysOnKinds { errno, .. }
            | Error::SysvObject { errno, .. } => Some(*errno),
            Error::Io { cause, .. } => cause.raw_os_error().map(nix::Error::from_raw),
            Error::Netlink { errno, .. } => *errno,
            _ => None,
        }
    }
}
