//! podlab-kubelet: kubelet's pod-lifecycle decisions as pure functions.
//!
//! Each module is one concept of `reference/kubelet-semantics.md` and names its rule IDs
//! (`SBX-3`, `PH-5c`, ...): plain data in ([`PodSpecView`], [`RuntimeView`], [`PassContext`]),
//! plain data out, no clock, no I/O, no root. [`sync_pass`] runs one reconcile pass (spec
//! section 1); [`explain()`] runs the section-11 cases behind `podlab explain` and [`check`]
//! compares their outputs with the cases' `expect`.
//!
//! Reading order follows a pass: [`sandbox`] → [`actions`] ([`restart`], [`init`], [`ephemeral`],
//! [`attempt`], [`kill`]) → [`status`] → [`phase`] → [`conditions`]; beside it the clock-driven
//! machines [`backoff`] and [`probe`], the image manager's rules [`images`] (pull policy, pull
//! backoff, image GC), in-place resize [`resize`] (admission, and what each container needs),
//! and the event vocabulary [`events`].
//!
//! Beyond the pure rules: [`translate`] turns a `v1.Pod` into the runtime's CRI requests, and
//! [`node`] is the node agent (kubelet's twin) that runs a pod worker per pod against
//! podlab-runtime and writes statuses and events to podlab-control's store.

pub mod actions;
pub mod apparmor;
pub mod atomic_writer;
pub mod attempt;
pub mod backoff;
pub mod conditions;
pub mod env;
pub mod ephemeral;
mod error;
pub mod events;
pub mod eviction;
pub mod explain;
pub mod images;
pub mod init;
pub mod kill;
pub mod model;
pub mod node;
pub mod ownership;
pub mod phase;
pub mod probe;
pub mod qos;
pub mod resize;
pub mod restart;
pub mod rules;
pub mod sandbox;
pub mod security;
pub mod status;
pub mod subpath;
pub mod sync;
pub mod sysctl;
#[cfg(test)]
mod testkit;
pub mod translate;
pub mod userns;
pub mod volume;

pub use error::Error;
pub use explain::{
    check, explain, verify, CaseResult, CheckedCase, Mismatch, Verification, CASES_SCHEMA,
};
pub use model::{
    ContainerRecord, ContainerSpecView, PassContext, PodSpecView, RestartPolicy, RuntimeState,
    RuntimeView, SandboxRecord,
};
pub use phase::Phase;
pub use rules::{RuleId, Trace, SPEC_RULE_IDS};
pub use sync::{sync_pass, sync_pass_narrated, SyncResult};
