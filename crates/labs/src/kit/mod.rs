//! What the labs share: processes in `/proc` ([`procs`]) and pods in podlab's objects
//! ([`pods`]).

pub mod pods;
pub mod procs;
