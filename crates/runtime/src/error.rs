//! The one error type of podlab-runtime: which sandbox or container, which step, and why.
//!
//! The kubelet layer maps these onto its waiting reasons and events, so the variants follow the
//! CRI failure points: an image that is not there (`ErrImageNeverPull`), a config that cannot be
//! turned into a process (`CreateContainerConfigError`), a container that could not be started
//! (`RunContainerError`, with the failing step the way runc reports it), a sandbox that could
//! not be made (`FailedCreatePodSandBox`).

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What failed in a container's init between fork and `execve`, as it travels back over the
/// init's close-on-exec pipe: the step, the path it worked on, and the errno.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InitFailure {
    /// `mount overlay`, `pivot_root`, `chdir`, `exec` ...
    pub step: String,
    pub path: Option<String>,
    pub errno: Option<i32>,
    /// The whole message, worded like runc's (`exec: "nope": executable file not found in $PATH`).
    pub message: String,
}

impl InitFailure {
    /// The status a shell gives a command it could not run, which docker, podman and crictl
    /// exit with too: 127 when the program is not there, 126 when it is but cannot be
    /// executed (permission, format). None for a failure before the `exec` step.
    pub fn exit_status(&self) -> Option<i32> {
        if self.step != "exec" {
            return None;
        }
        match self.errno {
            Some(libc::ENOENT | libc::ENOTDIR) => Some(127),
            _ => Some(126),
        }
    }
}

impl std::fmt::Display for InitFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pod sandbox {id:?} not found")]
    SandboxNotFound { id: String },

    #[error("container {id:?} not found")]
    ContainerNotFound { id: String },

    /// A short id that matches more than one object.
    #[error("{what} id prefix {prefix:?} is ambiguous: it matches {matches:?}")]
    AmbiguousId {
        what: &'static str,
        prefix: String,
        matches: Vec<String>,
    },

    /// The image is not in the store (kubelet: `ErrImageNeverPull`).
    #[error("{message}")]
    ImageNotFound { name: String, message: String },

    /// Any other failure of the image store.
    #[error("image {name:?}: {message}")]
    Image { name: String, message: String },

    /// The container config cannot be turned into a process (kubelet: `CreateContainerConfigError`).
    #[error("container {name:?}: {message}")]
    InvalidConfig { name: String, message: String },

    /// The sandbox is not ready (stopped, or its shim or pause process is gone).
    #[error("pod sandbox {id} is not ready: {reason}")]
    SandboxNotReady { id: String, reason: String },

    /// The operation needs the container in another state.
    #[error("container {id} is {state}: {message}")]
    InvalidState {
        id: String,
        state: String,
        message: String,
    },

    /// The container's init failed before `execve` (kubelet: `RunContainerError`).
    #[error("container {id}: failed to start: {failure}")]
    StartFailed { id: String, failure: InitFailure },

    /// The shim could not start the sandbox; nothing of it is left.
    #[error("pod sandbox {id}: {message}")]
    SandboxStart { id: String, message: String },

    /// The network plugin's setup or teardown of the pod's network namespace failed.
    #[error("pod sandbox {id}: network {phase}: {message}")]
    Network {
        id: String,
        phase: &'static str,
        message: String,
    },

    /// The sandbox's shim did not answer as it should.
    #[error("shim of pod sandbox {id}: {message}")]
    Shim { id: String, message: String },

    /// An exec or wait did not finish in time.
    #[error("{what} timed out after {seconds:.3}s")]
    Timeout { what: String, seconds: f64 },

    /// A namespace, mount or process operation of podlab-ns failed.
    #[error(transparent)]
    Ns(#[from] podlab_ns::Error),

    /// A cgroup could not be made, given its values, or removed.
    #[error(transparent)]
    Cgroup(#[from] podlab_cgroups::Error),

    /// A system call failed.
    #[error("{call} {target}: {errno}")]
    Sys {
        call: &'static str,
        target: String,
        errno: nix::Error,
    },

    /// A file operation failed.
    #[error("{what} {path}: {cause}")]
    Io {
        what: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },

    /// A state file that does not parse.
    #[error("state file {path}: {message}")]
    State { path: PathBuf, message: String },

    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            cause: source,
        }
    }

    pub fn sys(call: &'static str, target: impl std::fmt::Display, errno: nix::Error) -> Self {
        Error::Sys {
            call,
            target: target.to_string(),
            errno,
        }
    }

    /// Whether this says that the sandbox or container does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            Error::SandboxNotFound { .. } | Error::ContainerNotFound { .. }
        )
    }
}
