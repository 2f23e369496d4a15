//! The node agent: kubelet's twin. It watches the object store for pods bound to this node, runs
//! one pod worker per pod, and each worker runs sync pass after sync pass — read the runtime's
//! view, compute status, phase, conditions and actions with the pure rules ([`crate::sync_pass`]),
//! carry the actions out through podlab-runtime, write the status and the events back.
//!
//! | module | kubelet's part |
//! |---|---|
//! | [`config`] | the kubelet's flags: backoff, resync, node name |
//! | [`agent`] | the sync loop: pod config source (store watch), pod workers, orphan cleanup |
//! | [`worker`] | one pod worker: its caches and its passes; the termination path |
//! | [`allocation`] | the allocation manager: each pod's allocated and actuated resources, for in-place resize |
//! | [`pleg`] | the pod lifecycle event generator: a cheap relist of every pod each `resync` |
//! | [`view`] | runtime records → [`crate::RuntimeView`], `v1.Pod` → [`crate::PodSpecView`], API status → previous status |
//! | [`runtime_service`] | kubelet's `RuntimeService`: the runtime calls the agent makes, in process or over the CRI |
//! | [`remote`] | the CRI client: the pods on any CRI runtime (`--runtime-endpoint`) |
//! | [`execute`] | kuberuntime's SyncPod: kill, prune, RunPodSandbox, start through the backoff gate |
//! | [`images`] | the image manager (pulls by `imagePullPolicy` with `imagePullSecrets`, serialized) and the image GC |
//! | [`status`] | generateAPIPodStatus + the status manager: the `v1.PodStatus` written back |
//! | [`probes`], [`transport`] | the prober: one worker per container probe; exec, tcpSocket, httpGet |
//! | [`events`] | the event recorder with kubelet's reasons, aggregated like client-go's correlator |
//! | [`daemon`] | one agent per root (flock), started on demand, detached |
//!
//! Threads: the agent is multi-threaded (a thread per pod worker and per probe). It never moves a
//! thread into a mount namespace; the runtime forks or asks the pod's shim for everything that
//! must happen inside a pod, and the only namespace a thread ever enters is a pod's network
//! namespace, for the instant it takes to create a probe's socket ([`podlab_ns::net::socket_in`]).

pub mod agent;
pub mod allocation;
pub mod config;
pub mod daemon;
mod error;
pub mod events;
pub mod execute;
pub mod images;
pub mod pleg;
pub mod probes;
pub mod remote;
pub mod runtime_service;
pub mod status;
pub mod transport;
pub mod view;
pub mod worker;

pub use agent::run;
pub use config::{parse_backoff, parse_duration, store_root, NodeConfig};
pub use daemon::{ensure_running, ensure_running_with, running_agent, stop_agent, stop_on_signals};
pub use error::NodeError;
