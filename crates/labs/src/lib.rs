//! # podlab-labs: self-checking exercises, one concept a lab
//!
//! The teaching projects people like (rubber-docker's levels, iximiuz's labs) give one concept
//! a step, each with a command that checks it. A podlab lab does the same on this kernel:
//!
//! * a **scene**: what the lab sets up before the student starts (pods, namespaces, a manifest
//!   to edit, sometimes something broken);
//! * a **goal**, in a few lines;
//! * a **check** that reads the kernel (namespace inode ids, hostnames, IPC objects, links,
//!   addresses, process trees) through `podlab-ns` and podlab's objects (pods, statuses,
//!   events, sandboxes) through `podlab-control` and `podlab-runtime`, and says in plain words
//!   what is still missing;
//! * graded **hints**, from a nudge to the command;
//! * a reference **solution** (for teachers, and for the tests), and one **mistake** students
//!   often make, which the check must reject;
//! * a **reset** that leaves nothing behind.
//!
//! Scenes and solutions do what a student would type: they run `podlab`, `ip`, `unshare` and
//! `nsenter` and print each command first. Progress is kept per user ([`progress`]).

pub mod cli;
pub mod env;
pub mod kit;
pub mod labs;
pub mod progress;
pub mod verdict;

pub use env::Env;
pub use verdict::Verdict;

use anyhow::Result;

/// How much a lab expects the student to know already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Beginner,
    Intermediate,
    Advanced,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Beginner => "beginner",
            Level::Intermediate => "intermediate",
            Level::Advanced => "advanced",
        }
    }
}

/// One lab: what it is about, and its five steps as functions of the [`Env`].
pub struct Lab {
    /// Its place in the course (`podlab lab start 3`).
    pub number: u32,
    /// Its short name (`podlab lab start ipc`); the id is `NN-name`.
    pub name: &'static str,
    pub title: &'static str,
    pub level: Level,
    /// About how long it takes a student, in minutes.
    pub minutes: u32,
    /// The goal, a few lines; `{work}` stands for the lab's work folder.
    pub goal: &'static str,
    /// Graded hints: the first nudges, the last gives the command.
    pub hints: &'static [&'static str],
    /// Words of the first thing the check says is missing right after `start`.
    pub not_yet: &'static str,
    /// What the mistake is, in one line (`podlab lab solve ID --mistake` makes it).
    pub mistake_story: &'static str,
    pub scene: fn(&Env) -> Result<()>,
    pub check: fn(&Env) -> Result<Verdict>,
    pub solve: fn(&Env) -> Result<()>,
    pub mistake: fn(&Env) -> Result<()>,
    pub reset: fn(&Env) -> Result<()>,
}

impl Lab {
    /// `NN-name`, as the docs and the progress file name it.
    pub fn id(&self) -> String {
        format!("{:02}-{}", self.number, self.name)
    }

    /// Whether `query` names this lab: `3`, `03`, `ipc` or `03-ipc`.
    pub fn is_named(&self, query: &str) -> bool {
        query == self.name
            || query == self.id()
            || query.parse::<u32>().is_ok_and(|n| n == self.number)
    }
}

/// Every lab, in course order.
pub fn all() -> Vec<&'static Lab> {
    labs::ALL.to_vec()
}

/// The lab `query` names.
pub fn find(query: &str) -> Option<&'static Lab> {
    labs::ALL.iter().copied().find(|lab| lab.is_named(query))
}
