//! The ReplicaSet controller (kube-controller-manager's `replicaset` controller).
//!
//! * [`reconcile`](mod@reconcile): one sync as a pure function (claim, manage, status) → [`Action`]s.
//! * [`rank`]: which surplus pods go first.
//! * [`status`]: the status counts and the pod predicates behind them.
//! * [`controller`]: the driver: informers, the work queue, carrying actions out on the store.

pub mod controller;
pub mod rank;
pub mod reconcile;
pub mod status;

pub use controller::{ControllerConfig, ReplicaSetController, SyncReport};
pub use reconcile::{claim_pods, pod_from_template, reconcile, Action, Claim, Ignored, PodRef};
