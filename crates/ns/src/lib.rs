//! # podlab-ns: the kernel's namespaces, one module per kind
//!
//! A Linux namespace wraps one global resource so that the processes inside see their own copy:
//! the hostname (uts), System V and POSIX IPC objects (ipc), network devices and addresses (net),
//! process ids (pid), the mount table (mnt), user and group ids (user), the cgroup root (cgroup)
//! and the monotonic/boot clocks (time). A Kubernetes pod is nothing more than a set of these,
//! held open by a pause process, that containers join.
//!
//! This crate is podlab's bottom layer, the twin of util-linux's `unshare`/`nsenter`/`lsns` and
//! of `ip netns`. It has the operations that every kind shares ([`kind`], [`ops`]: create, join,
//! pin, unpin, inspect, list), one module per kind for what is particular to it, and [`sysctl`]
//! for the kernel parameters a namespace isolates.
//!
//! ## Threads
//! `setns(CLONE_NEWNS)` and `unshare(CLONE_NEWUSER)` fail with `EINVAL` in a process that has more
//! than one thread. Do namespace work in a single-threaded process; [`child`] forks one and brings
//! its result (or its error) back over a pipe.
//!
//! ## Errors
//! Every fallible function returns [`Error`], which names the system call, the namespace kind,
//! the path and the pid involved, so that a message can be acted on.

pub mod child;
pub mod error;
pub mod ipc;
pub mod kind;
pub mod mnt;
pub mod net;
pub mod ops;
pub mod pid;
pub mod sysctl;
pub mod user;
pub mod uts;

pub use error::{Error, Result};
pub use kind::NsKind;
