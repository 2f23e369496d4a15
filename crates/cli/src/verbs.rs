//! The kubectl verbs that act on objects of any kind (`label`, `annotate`, `scale`, `patch`,
//! `edit`), `rollout`, and the commands about podlab itself (`completion`, `man`), as one clap group flattened into the
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
    /// Update fields of an object with a strategic merge, JSON merge or JSON patch.
    Patch(crate::patch::PatchArgs),
    /// Edit an object in $KUBE_EDITOR or $EDITOR (vi by default).
    Edit(crate::patch::EditArgs),
    /// Manage the rollout of a deployment: status, history, undo, restart.
    Rollout {
        #[command(subcommand)]
        command: crate::rollout::Rollout,
    },
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
        Verb::Patch(args) => crate::patch::patch(args),
        Verb::Edit(args) => crate::patch::edit(args),
        Verb::Rollout { command } => crate::rollout::run(command),
        Verb::Completion { shell } => crate::completion::completion(cli(), &shell),
        Verb::Man { dir } => crate::completion::man(cli(), dir.as_deref()),
    }
}
