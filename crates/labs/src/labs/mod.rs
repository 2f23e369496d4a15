//! The labs, one module each, in course order (docs/labs/README.md is the outline).

mod cni_failure;
mod debug;
mod docker;
mod informer;
mod init_order;
mod ipc;
mod layers;
mod oom;
mod phase;
mod pid_zombies;
mod pod_by_hand;
mod probes;
mod resize;
mod sandbox;
mod security;
mod templates;
mod userns;
mod uts;
mod veth_bridge;

use crate::Lab;

/// Lab 14's daemons holder (`podlab lab hold-daemons`).
pub fn hold_daemons(work: &std::path::Path) -> anyhow::Result<()> {
    docker::hold(work)
}

pub static ALL: &[&Lab] = &[
    &pod_by_hand::LAB,
    &uts::LAB,
    &ipc::LAB,
    &veth_bridge::LAB,
    &pid_zombies::LAB,
    &init_order::LAB,
    &probes::LAB,
    &phase::LAB,
    &sandbox::LAB,
    &cni_failure::LAB,
    &templates::LAB,
    &informer::LAB,
    &debug::LAB,
    &docker::LAB,
    &layers::LAB,
    &security::LAB,
    &oom::LAB,
    &resize::LAB,
    &userns::LAB,
];
