//! The error type of the explain engine: what is wrong with the input and where (a JSON path
//! such as `cases[3].input.pod.restartPolicy`).

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A field is missing, has the wrong type or an impossible value.
    #[error("{path}: {message}")]
    BadInput { path: String, message: String },
    /// `kind` is not one of `sync`, `backoff`, `probeWorker`.
    #[error(
        "{path}: unknown case kind {kind:?} (expected \"sync\", \"backoff\" or \"probeWorker\")"
    )]
    UnknownKind { path: String, kind: String },
    /// The document is neither a case nor an object with a `cases` array.
    #[error("{path}: expected a case object ({{\"id\", \"kind\", \"input\"}}) or an object with a \"cases\" array")]
    NotACase { path: String },
}

impl Error {
    pub(crate) fn bad(path: impl Into<String>, message: impl Into<String>) -> Self {
        Error::BadInput {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The JSON path the error is about.
    pub fn path(&self) -> &str {
        match self {
            Error::BadInput { path, .. }
            | Error::UnknownKind { path, .. }
            | Error::NotACase { path } => path,
        }
    }
}
