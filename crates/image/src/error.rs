//! The one error type of podlab-image: which image, blob, path or archive entry, and why.

use std::path::PathBuf;

use crate::digest::Digest;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No image of this name is in the store. Kubelet's `imagePullPolicy: Never` turns this into
    /// the `ErrImageNeverPull` waiting reason.
    #[error(
        "image {name:?} is not in the podlab image store; there is no registry here, \
         import it first: podlab image import FILE"
    )]
    NotFound { name: String },

    /// A name that is not a valid image reference.
    #[error("invalid image name {name:?}: {reason}")]
    InvalidReference { name: String, reason: String },

    /// Content whose sha256 is not the digest it is stored or referenced under.
    #[error("{what} {expected} ({path}): content hashes to {actual}; it is corrupt or not what was referenced")]
    DigestMismatch {
        what: &'static str,
        path: PathBuf,
        expected: Digest,
        actual: Digest,
    },

    /// Content whose length is not the size its descriptor says.
    #[error("blob {digest} ({path}): {actual} bytes, but its descriptor says {expected}")]
    SizeMismatch {
        digest: Digest,
        path: PathBuf,
        expected: u64,
        actual: u64,
    },

    /// A blob that a manifest, config or archive refers to is not there.
    #[error("blob {digest} is missing (looked for {path})")]
    BlobMissing { digest: Digest, path: PathBuf },

    /// A digest string that is not `sha256:` followed by 64 lowercase hex digits.
    #[error("invalid digest {digest:?}: {reason}")]
    InvalidDigest {
        digest: String,
        reason: &'static str,
    },

    /// An archive or layout that cannot be imported as it is.
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },

    /// A JSON document (index, manifest, config) that does not parse.
    #[error("{what} {path}: {cause}")]
    Json {
        what: &'static str,
        path: PathBuf,
        cause: serde_json::Error,
    },

    /// A layer entry that would write outside its snapshot folder, or cannot be applied safely.
    #[error("layer {layer}: entry {entry:?}: {reason}")]
    UnsafeEntry {
        layer: String,
        entry: String,
        reason: String,
    },

    /// A layer compression or media type this build does not handle.
    #[error("{0}")]
    Unsupported(String),

    /// Images in an archive that carry no name, and no name was given.
    #[error("{path}: image {what} has no image name; give one: podlab image import {path} NAME")]
    Unnamed { path: PathBuf, what: String },

    /// A name was given for an archive that holds several images.
    #[error(
        "{path} holds several images ({choices}); the name {name:?} does not pick exactly one"
    )]
    Ambiguous {
        path: PathBuf,
        name: String,
        choices: String,
    },

    /// A snapshot of the image is a lower layer of a mounted overlay.
    #[error(
        "image {name} is in use: its snapshot {snapshot} is a lower folder of an overlay \
         mounted in the mount namespace of pid {pid}; remove the container first"
    )]
    InUse {
        name: String,
        snapshot: PathBuf,
        pid: i32,
    },

    /// The host has no static busybox to build the built-in image from.
    #[error("{path}: {problem}; the built-in busybox image needs busybox-static: apt-get install busybox-static")]
    BusyboxMissing { path: PathBuf, problem: String },

    /// A system call failed.
    #[error("{call} {path}: {errno}")]
    Sys {
        call: &'static str,
        path: PathBuf,
        errno: nix::Error,
    },

    /// Setting or reading an extended attribute failed (overlayfs keeps opaque folders in
    /// `trusted.overlay.opaque`, which needs CAP_SYS_ADMIN and a filesystem with xattrs).
    #[error("{call} {name} on {path}: {errno}")]
    Xattr {
        call: &'static str,
        name: String,
        path: PathBuf,
        errno: nix::Error,
    },

    /// A file operation failed.
    #[error("{what} {path}: {cause}")]
    Io {
        what: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },
}

impl Error {
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            cause: source,
        }
    }

    pub fn sys(call: &'static str, path: impl Into<PathBuf>, errno: nix::Error) -> Self {
        Error::Sys {
            call,
            path: path.into(),
            errno,
        }
    }

    pub fn format(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Format {
            path: path.into(),
            message: message.into(),
        }
    }

    /// Whether this is [`Error::NotFound`], the case the runtime reports as `ErrImageNeverPull`.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }
}
