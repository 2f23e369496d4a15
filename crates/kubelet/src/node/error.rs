//! The node agent's error: which layer failed (store, runtime, a file, the agent's own lock),
//! with the path or pid it was about.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("object store: {0}")]
    Store(podlab_control::Error),

    #[error("runtime: {0}")]
    Runtime(podlab_runtime::Error),

    #[error("image store: {0}")]
    Image(podlab_image::Error),

    #[error("{what} {path}: {cause}")]
    Io {
        what: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },

    #[error("{call} {target}: {errno}")]
    Sys {
        call: &'static str,
        target: String,
        errno: nix::Error,
    },

    /// Another agent holds `<root>/node.lock`.
    #[error("a node agent already runs for {}{}", root.display(), pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    AlreadyRunning { root: PathBuf, pid: Option<i32> },

    /// `ensure_running` started an agent that did not take its lock in time.
    #[error("the node agent for {} did not come up: {message} (its log: {})", root.display(), log.display())]
    NotStarted {
        root: PathBuf,
        log: PathBuf,
        message: String,
    },

    #[error("node configuration: {0}")]
    Config(String),
}

// Not `#[from]`, which would also make the wrapped error this one's `source()`: its words are
// in this error's message already, and `{:#}` would print them twice.
impl From<podlab_control::Error> for NodeError {
    fn from(error: podlab_control::Error) -> Self {
        NodeError::Store(error)
    }
}

impl From<podlab_runtime::Error> for NodeError {
    fn from(error: podlab_runtime::Error) -> Self {
        NodeError::Runtime(error)
    }
}

impl NodeError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        NodeError::Io {
            what,
            path: path.into(),
            cause: source,
        }
    }
}
