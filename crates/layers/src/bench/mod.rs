//! `cargo xtask peers`: podlab next to the real peers, in the same run, on the same machine.
//!
//! * [`suite`]: the five comparisons (a namespace set, a `/bin/true` container, a pod, scale,
//!   teardown), each run interleaved with a warm-up;
//! * [`podlab`]: podlab's side of each comparison, one small function each (rows stay
//!   "pending", with the command they will run, until the podlab command exists);
//! * [`stats`]: interleaving and median/min/max;
//! * [`record`]: the rows and their CSV form (`docs/benchmarks/<date>/peers.csv`);
//! * [`report`]: the Markdown table and the SVG plots.

pub mod podlab;
pub mod record;
pub mod report;
pub mod stats;
pub mod suite;
