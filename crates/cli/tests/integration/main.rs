//! podlab's one integration-test binary. It needs root (real or in a user namespace) and is run
//! by `cargo xtask test` inside fresh namespaces (`unshare --mount --uts --ipc --net --pid
//! --fork`), so nothing it does can change the host's hostname, mounts or network.
//!
//! Each module tests one area against the kernel; `support` has the shared helpers.

mod support;

/// podlab-image's registry kit (docker-registry with a test CA and htpasswd auth, images pushed
/// by skopeo), for `image_pull` and `pod_images`.
#[allow(dead_code)]
#[path = "../../../image/tests/kit/mod.rs"]
mod kit;

mod agent;
mod cgroups;
mod churn;
mod cli;
mod concurrency;
mod copy_logs;
mod cri;
mod demos;
mod deployments;
mod errors;
mod eviction;
mod explain;
mod faults;
mod full_disk;
mod gc_network;
mod image_pull;
mod ipc;
mod kubectl_errors;
mod labs;
mod mnt;
mod net;
mod netns_folders;
mod network_curve;
mod node_cri;
mod ns;
mod nsrun;
mod object_verbs;
mod pause;
mod pid;
mod pod_images;
mod pod_updates;
mod pods;
mod port_forward;
mod printers;
mod resize;
mod security;
mod terminals;
mod trace;
mod user;
mod uts;
mod verbs;
mod volumes;
mod wait;
mod warm_netns;
