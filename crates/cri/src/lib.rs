//! # podlab-cri: containerd's CRI plugin, small
//!
//! `podlab cri` serves the Kubernetes Container Runtime Interface (`runtime.v1` RuntimeService
//! and ImageService) over gRPC on a unix socket, so that `crictl`, `critest` and a real kubelet
//! (`--container-runtime-endpoint unix:///run/podlab/cri.sock`) drive podlab-runtime's
//! sandboxes and containers and podlab-image's store. The messages come from the CRI proto
//! itself (`proto/api.proto`, compiled at build time).
//!
//! The server is one tokio current-thread runtime: every RPC runs on the process's only thread,
//! and podlab-runtime does its namespace work in the shim and in forked children, which a
//! single-threaded parent may fork safely.
//!
//! | module | what |
//! |---|---|
//! | [`server`] | the socket, the runtime, the signals |
//! | [`service`] | the RPCs: [`Cri`] and its two service halves |
//! | [`convert`] | CRI configs to podlab's, fields refused by name |
//! | [`events`] | GetContainerEvents: the RPCs' and the shims' events to subscribers |
//! | [`images`] | the store as CRI images (ids, repo tags, repo digests) |
//! | [`metrics`] | ListMetricDescriptors, ListPodSandboxMetrics: cAdvisor's metrics from the cgroups |
//! | [`nri`] | NRI plugins (`--nri-socket`): told of each pod's and container's steps, as containerd tells them |
//! | [`status`] | errors as containerd words them on the wire |
//! | [`streaming`] | the streaming server behind Exec, Attach and PortForward (SPDY/3.1) |

pub mod convert;
pub mod events;
pub mod images;
pub mod metrics;
pub mod nri;
pub mod server;
pub mod service;
pub mod status;
pub mod streaming;

/// The CRI v1 messages and service traits, generated from `proto/api.proto`.
#[allow(
    clippy::all,
    missing_docs,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls,
    rustdoc::broken_intra_doc_links
)]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}

pub use server::{serve, socket_path, ServeError, DEFAULT_SOCKET};
pub use service::Cri;
