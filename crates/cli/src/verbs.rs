//! The kubectl verbs that act on objects of any kind (`label`, `annotate`, `scale`), and the
//! commands about podlab itself (`completion`, `man`), as one clap group flattened into the
//! top-level commands so that each lives in its own module.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

use crate::label::{self, Map};

#[derive(Subcommand)]
pub enum Verb {
    /// Update the labels of objects: `KEY=VALUE` sets, `KEY-` removes.
    Label(label::MapArgs),
    /// Update the annotations of objects: `KEY=VALUE` sets, `KEY-` removes.
    Annotate(label::MapArgs),
    /// Set the number of replicas of replicasets or deployments.
    Scale(crate::scale::ScaleArgs),
    /// Print a shell completion script: `source <(podlab completion bash)`.
    Completion {
        /// bash, zsh, fish (or powershell).
        shell: String,
    },
    /// Print podlab's man page, or write one page per command into a folder.
    Man {
        /// Write podlab.1 and podlab-COMMAND.1 here instead of printing podlab.1.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// Runs the verb; `cli` gives the whole command tree (for completion and man pages).
pub fn run(verb: Verb, cli: impl Fn() -> clap::Command) -> Result<()> {
    match verb {
        Verb::Label(args) => label::run(Map::Labels, args),
        Verb::Annotate(args) => label::run(Map::Annotations, args),
        Verb::Scale(args) => crate::scale::run(args),
        Verb::Completion { shell } => crate::completion::completion(cli(), &shell),
        Verb::Man { dir } => crate::completion::man(cli(), dir.as_deref()),
    }
}
