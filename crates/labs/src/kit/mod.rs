//! What the labs share: processes in `/proc` ([`procs`]), pods in podlab's objects ([`pods`])
//! and a process's cgroup folders ([`cgroups`]).

pub mod cgroups;
pub mod pods;
pub mod procs;
