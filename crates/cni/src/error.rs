//! The one error type of podlab-cni: which network, plugin, command and file failed, and why.
//!
//! A plugin's own error (the CNI error JSON: `code`, `msg`, `details`) is kept as it came, so
//! that the runtime can put the plugin's words into the `FailedCreatePodSandBox` event.

use std::path::PathBuf;
use std::time::Duration;

use crate::exec::Command;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A network configuration file that cannot be used: unreadable, not JSON, or not a valid
    /// conflist.
    #[error("CNI network config {path}: {problem}")]
    Conf { path: PathBuf, problem: String },

    /// A configuration folder without any `.conflist`, `.conf` or `.json` file.
    #[error("no CNI network config in {dir} (no .conflist, .conf or .json file)")]
    NoConf { dir: PathBuf },

    /// The plugin binary named by a `type` is in none of the CNI_PATH folders.
    #[error("CNI plugin {plugin:?} not found in CNI_PATH {}", path_text(path))]
    PluginNotFound { plugin: String, path: Vec<PathBuf> },

    /// A plugin ran and failed: its CNI error JSON, or its stderr when it printed no JSON.
    #[error(
        "plugin type={plugin:?} failed ({command}): {msg}{}",
        details_text(details)
    )]
    Plugin {
        plugin: String,
        command: Command,
        /// The CNI error code (1 incompatible version ... 7 invalid config, 11 try again later,
        /// 100+ plugin specific); `None` when the plugin printed no error JSON.
        code: Option<u32>,
        msg: String,
        details: String,
    },

    /// The pod asks for something only a plugin with `capability` makes (host ports: the
    /// `portmap` plugin's `portMappings`), and the network's conflist has none.
    #[error(
        "network {network:?} ({}) has no plugin with the {capability:?} capability, so the pod's host ports cannot be set up: add the portmap plugin to the conflist",
        path.display()
    )]
    NoCapability {
        network: String,
        path: PathBuf,
        capability: &'static str,
    },

    /// The `portmap` plugin failed to set up the pod's host ports: this node's iptables NAT
    /// (a `nat` table it can add chains to) is what it needs.
    #[error("network {network:?}: the pod's host ports need iptables NAT on this node, and the portmap plugin could not set them up: {cause}")]
    HostPorts { network: String, cause: Box<Error> },

    /// A plugin did not finish in time; it was killed (with everything it started).
    #[error("plugin type={plugin:?} ({command}) did not finish within {after:?} and was killed")]
    Timeout {
        plugin: String,
        command: Command,
        after: Duration,
    },

    /// A plugin answered success with something that is not a CNI result.
    #[error("plugin type={plugin:?} ({command}) returned an unreadable result: {problem}")]
    BadResult {
        plugin: String,
        command: Command,
        problem: String,
    },

    /// The plugin process could not be started or talked to.
    #[error("running plugin type={plugin:?} ({command}) from {path}: {cause}")]
    Exec {
        plugin: String,
        command: Command,
        path: PathBuf,
        cause: std::io::Error,
    },

    /// An attachment the CNI spec does not allow (container id, interface name, CNI_ARGS value,
    /// network namespace).
    #[error("invalid attachment: {0}")]
    Invalid(String),

    /// The built-in IPAM has no free address left.
    #[error("network {network:?}: no IP addresses available in range {range}")]
    Exhausted { network: String, range: String },

    /// CHECK found the attachment not as it was set up.
    #[error("check of network {network:?} failed: {problem}")]
    Check { network: String, problem: String },

    /// A state file (result cache, IPAM lease) could not be read or written.
    #[error("{what} {path}: {cause}")]
    Io {
        what: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },

    /// A namespace or netlink operation of the built-in path failed.
    #[error(transparent)]
    Ns(#[from] podlab_ns::Error),

    /// Setup failed, and so did the teardown run to leave nothing half-made.
    #[error("{error} (and the cleanup after it failed too: {cleanup})")]
    CleanupFailed {
        error: Box<Error>,
        cleanup: Box<Error>,
    },
}

impl Error {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            cause: source,
        }
    }

    pub(crate) fn conf(path: impl Into<PathBuf>, problem: impl Into<String>) -> Self {
        Error::Conf {
            path: path.into(),
            problem: problem.into(),
        }
    }

    /// The CNI error code of a plugin failure (also behind a failed cleanup).
    pub fn code(&self) -> Option<u32> {
        match self {
            Error::Plugin { code, .. } => *code,
            Error::CleanupFailed { error, .. } => error.code(),
            Error::HostPorts { cause, .. } => cause.code(),
            _ => None,
        }
    }

    /// The error that made setup fail, without the cleanup that followed it.
    pub fn primary(&self) -> &Error {
        match self {
            Error::CleanupFailed { error, .. } => error.primary(),
            other => other,
        }
    }
}

fn path_text(path: &[PathBuf]) -> String {
    let dirs: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
    if dirs.is_empty() {
        "(empty)".to_owned()
    } else {
        dirs.join(":")
    }
}

fn details_text(details: &str) -> String {
    if details.is_empty() {
        String::new()
    } else {
        format!(" ({details})")
    }
}
