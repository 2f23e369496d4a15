//! Typed errors of the store, the watch and the indexer, worded as the API server and client-go
//! word them (`pods "web" not found`), and naming the path and syscall when the machine failed.

use std::path::PathBuf;

use nix::errno::Errno;

/// What went wrong in a store operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        resource: &'static str,
        name: String,
    },

    #[error("{resource} \"{name}\" not found")]
    NotFound {
        resource: &'static str,
        name: String,
    },

    /// The API server's 409 for a stale `metadata.resourceVersion`.
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again")]
    Conflict {
        resource: &'static str,
        name: String,
    },

    /// A precondition on the UID failed: the object was deleted and made again under the same name.
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": Precondition failed: UID in precondition: {expected}, UID in object meta: {actual}")]
    UidMismatch {
        resource: &'static str,
        name: String,
        expected: String,
        actual: String,
    },

    /// The object cannot be stored as given (`metadata.name: Required value ...`).
    #[error("{kind} \"{name}\" is invalid: {message}")]
    Invalid {
        kind: &'static str,
        name: String,
        message: String,
    },

    #[error("{op} {path}: {cause}")]
    Io {
        op: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },

    #[error("{syscall} {path}: {errno}")]
    Sys {
        syscall: &'static str,
        path: PathBuf,
        errno: Errno,
    },

    /// A stored file that does not hold what the store wrote there.
    #[error("{path}: corrupt store record: {message}")]
    Corrupt { path: PathBuf, message: String },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            cause: source,
        }
    }

    pub(crate) fn sys(syscall: &'static str, path: impl Into<PathBuf>, errno: Errno) -> Self {
        Error::Sys {
            syscall,
            path: path.into(),
            errno,
        }
    }

    /// Whether this is the 409 that a caller answers by reading the object again and retrying.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. } | Error::UidMismatch { .. })
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    pub fn is_already_exists(&self) -> bool {
        matches!(self, Error::AlreadyExists { .. })
    }
}

/// What went wrong in an [`Indexer`](crate::Indexer) call, in client-go's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("indexer conflict: {0:?}")]
    Conflict(Vec<String>),
    #[error("Index with name {0} does not exist")]
    NoSuchIndex(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
