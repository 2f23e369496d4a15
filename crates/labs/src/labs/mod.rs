//! The labs, one module each, in course order (docs/labs/README.md is the outline).

mod init_order;
mod ipc;
mod pid_zombies;
mod pod_by_hand;
mod uts;
mod veth_bridge;

use crate::Lab;

pub static ALL: &[&Lab] = &[
    &pod_by_hand::LAB,
    &uts::LAB,
    &ipc::LAB,
    &veth_bridge::LAB,
    &pid_zombies::LAB,
    &init_order::LAB,
];
