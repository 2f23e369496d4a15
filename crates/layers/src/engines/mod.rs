//! The real peers, each started the way `reference/peers.md` says it runs on these machines:
//! private instances with every state folder, socket and store inside the [`crate::lab::Lab`],
//! and nothing that could reach outside (no NAT, no forwarding, no iptables, `--network none`).
//!
//! One module per peer: [`containerd`] (with `ctr`), [`dockerd`] (with the docker CLI, on top
//! of the lab's containerd, as in real life), [`podman`] (daemonless: a config of its own), and
//! [`oci`] (runc and crun on a bundle folder).

pub mod containerd;
pub mod dockerd;
pub mod oci;
pub mod podman;
