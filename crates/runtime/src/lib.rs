//! # podlab-runtime: the CRI runtime, containerd's CRI plugin + shim + runc in one crate
//!
//! A pod sandbox is a pause process in new uts, ipc, net and pid namespaces (the pid one the
//! pod's with `shareProcessNamespace`), with a read-only root of its own, started by a per-pod
//! shim (`podlab-shim`, a subreaper daemon like `containerd-shim-runc-v2`) and held by bind
//! mounts in the sandbox folder. Containers are
//! children of that shim: each joins the pod's namespaces, gets a mount namespace of its own with
//! an overlay rootfs of its image, and `execve`s its process. The shim keeps the containers'
//! stdout/stderr pipes and writes them to CRI log files, reaps them and records their exit codes,
//! so the caller (the kubelet layer, the CLI) can die at any time without losing either.
//!
//! The API is shaped like the CRI's RuntimeService; see [`Runtime`].
//!
//! ```no_run
//! use podlab_runtime::{ContainerConfig, ContainerMetadata, PodSandboxConfig, Runtime, RuntimeConfig};
//! # fn main() -> podlab_runtime::Result<()> {
//! let runtime = Runtime::open(RuntimeConfig::from_env())?;
//! let mut pod = PodSandboxConfig::default();
//! pod.metadata.name = "web".into();
//! pod.hostname = "web".into();
//! let sandbox = runtime.run_pod_sandbox(&pod)?;
//! let container = runtime.create_container(&sandbox, &ContainerConfig {
//!     metadata: ContainerMetadata { name: "app".into(), attempt: 0 },
//!     image: "busybox".into(),
//!     command: vec!["sleep".into(), "1000".into()],
//!     ..ContainerConfig::default()
//! })?;
//! runtime.start_container(&container)?;
//! let hostname = runtime.exec_sync(&container, &["hostname".into()], None)?;
//! assert_eq!(hostname.stdout, b"web\n");
//! runtime.stop_pod_sandbox(&sandbox)?;
//! runtime.remove_pod_sandbox(&sandbox)?;
//! # Ok(()) }
//! ```
//!
//! A running pod, as `ps --forest` shows it (with `shareProcessNamespace`; without it every
//! container has a pid namespace of its own and is its PID 1):
//!
//! ```text
//! podlab-shim --args-on-stdin --id 4b21… --sandbox-dir …/sandboxes/4b21…   subreaper
//!  \_ /podlab-pause sandbox=…/sandboxes/4b21…          holds uts, ipc, net, pid
//!  \_ httpd -f -p 8080                                joined them, own mnt
//!  \_ sleep 1000                                      joined them, own mnt
//! ```
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
//! | [`shim`] | the per-pod shim daemon |
//! | [`starting_shim`] | a shim started before its sandbox's configuration is known |
//! | [`init`] | a container's process between fork and execve (runc init) |
//! | [`report`] | what that process tells the shim: its step times, or its failure |
//! | [`capabilities`] | containerd's default capability set |
//! | [`seccomp`] | seccomp profiles (containerd's default, OCI JSON) compiled to BPF |
//! | [`cgroups`] | the pod's and each container's cgroup, `oom_score_adj` |
//! | [`masked_paths`] | runc's read-only and masked paths of /proc and /sys |
//! | [`image`], [`network`] | the image service and the network plugin hook |
//! | [`gc`] | cleaning up after crashes |
//! | [`trace`] | `--trace`: what each phase of a pod's life took, across processes |
//! | [`bundle`] | a container as an OCI bundle for runc |
//! | [`tty`] | ptys: a container's console, the user's terminal in raw mode, the relay |

mod attach;
pub mod bundle;
pub mod capabilities;
pub mod cgroups;
pub mod config;
mod container;
pub mod cri_log;
pub mod error;
pub mod etc_files;
pub mod events;
mod exec;
pub mod gc;
pub mod id;
pub mod image;
pub mod init;
mod live_processes;
pub mod liveness;
pub mod masked_paths;
pub mod mount_template;
pub mod network;
pub mod process;
pub mod protocol;
mod record_cache;
pub mod report;
mod runtime;
mod sandbox;
pub mod seccomp;
pub mod shim;
pub mod spawn_cpu;
pub mod starting_shim;
pub mod state;
pub mod status;
pub mod trace;
mod trash;
pub mod tty;

pub use attach::Attached;
pub use config::{
    ContainerConfig, ContainerMetadata, DnsConfig, EnvVar, HostAlias, HostsConfig, ImageVolume,
    Mount, PodSandboxConfig, PodSandboxMetadata, PortMapping, RuntimeConfig, SandboxSecurity,
    SecurityConfig,
};
pub use container::{ContainerExit, ExitWaiter};
pub use error::{Error, InitFailure, Result};
pub use exec::{ExecProcess, ExecStdio, TtyExec};
pub use gc::GcReport;
pub use id::{ContainerId, SandboxId};
pub use image::{ImageService, ResolvedImage, StoreImages};
pub use network::{NetworkAttachment, NetworkPlugin, PodNetwork, PreparedNetwork};
pub use report::StartStep;
pub use runtime::{EmptyNetnsSource, Runtime};
pub use starting_shim::StartingShim;
pub use status::{
    ContainerFilter, ContainerState, ContainerStatus, ExecResult, NetworkMode, PinnedNamespace,
    SandboxFilter, SandboxState, SandboxStatus,
};
