//! The Deployment controller (kube-controller-manager's `deployment` controller) and the
//! Deployment's API rules.
//!
//! * [`manifest`]: decoding, validation and defaults of `apps/v1` Deployments.
//! * [`hash`]: the `pod-template-hash` that names a Deployment's ReplicaSets.
//! * [`strategy`]: `maxSurge`/`maxUnavailable` arithmetic.
//! * [`sync`](mod@sync): one sync as a pure function → [`Action`]s.
//! * [`status`]: the status counts and the `Available`/`Progressing` conditions.
//! * [`controller`]: the driver: informers, the queue, carrying actions out on the store.

pub mod controller;
pub mod hash;
pub mod manifest;
pub mod status;
pub mod strategy;
pub mod sync;

pub use controller::DeploymentController;
pub use sync::{sync, Action};
