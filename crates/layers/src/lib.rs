//! # podlab-layers: docker and containerd, side by side, for real
//!
//! Docker 和 containerd 的关系: docker is the car, containerd the engine. This crate shows it on
//! the machine itself: where dockerd, containerd, ctr and runc are installed it starts private
//! instances of them (see [`lab`]), runs a container through each stack, and prints the real
//! process trees, namespace ids and overlay layers that the kernel reports ([`demo`]). The same
//! lab drives the side-by-side benchmarks of `cargo xtask peers` ([`mod@bench`]).
//!
//! * [`lab`]: a temporary folder and private network + mount namespaces in which the peers run,
//!   and the teardown that leaves the host as it was;
//! * [`engines`]: containerd/ctr, dockerd/docker, podman, runc/crun, each started as
//!   `reference/peers.md` says;
//! * [`image`]: one busybox image for all of them;
//! * [`procs`], [`overlay`]: what the kernel says (process trees, memory, overlay layers);
//! * [`hostcheck`]: a snapshot of the host's links, rules, sysctls, mounts and cgroups, compared
//!   before and after;
//! * [`tools`]: which peer binaries are installed, and the install line for the others.

pub mod bench;
pub mod demo;
pub mod engines;
pub mod error;
pub mod hostcheck;
pub mod image;
pub mod interrupt;
pub mod lab;
pub mod overlay;
pub mod procs;
pub mod tools;

pub use demo::run_layers_demo;
pub use error::{Error, Result};
