//! # podlab-runtime: the CRI runtime, containerd's CRI plugin + shim + runc in one crate
//!
//! A pod sandbox is a pause process in new uts, ipc and net namespaces (and pid, with
//! `shareProcessNamespace`), started by a per-pod shim (`podlab-shim`, a subreaper daemon like
//! `containerd-shim-runc-v2`) and held by bind mounts in the sandbox folder. Containers are
//! children of that shim: each joins the pod's namespaces, gets a mount namespace of its own with
//! an overlay rootfs of its image, and `execve`s its process. The shim keeps the containers'
//! stdout/stderr pipes and writes them to CRI log files, reaps them and records their exit codes,
//! so the caller (the kubelet layer, the CLI) can die at any time without losing either.
//!
//! The API is shaped like the CRI's RuntimeService; see [`Runtime`].
//!
//! | module | what |
//! |---|---|
//! | [`config`], [`status`] | what is asked for and what is answered |
//! | [`state`] | the on-disk layout and its records, written atomically |
//! | [`process`] | Kubernetes' command/args rules, env, cwd, user |
//! | [`etc_files`] | the pod's /etc/hostname, /etc/hosts, /etc/resolv.conf |
//! | [`cri_log`] | the CRI log format |
//! | [`protocol`] | the shim's request socket |
//! | [`liveness`] | process identities (pid + start time) and pidfds |

pub mod config;
pub mod cri_log;
pub mod error;
pub mod etc_files;
pub mod id;
pub mod liveness;
pub mod process;
pub mod protocol;
pub mod state;
pub mod status;

pub use error::{Error, InitFailure, Result};
pub use id::{ContainerId, SandboxId};
