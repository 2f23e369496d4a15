//! `podlab`: the one command. kubectl, crictl and podman's twin for pods built on this kernel.
//!
//! Exit status: 0 success; 1 a demo's evidence did not hold, or an operation failed; 2 bad
//! input (an unknown namespace kind, a kind this kernel lacks, no way to get privileges).

#[allow(dead_code)] // wired by the pod commands
mod columns;
mod demo;
mod explain;
mod nsls;
mod privilege;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "podlab",
    version,
    about = "A Kubernetes pod, built for real on the Linux kernel"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a demo that builds namespaces for real and checks its own evidence.
    Demo {
        /// uts, ipc, net, pid, mnt, user, or all (the default).
        #[arg(default_value = "all")]
        what: String,
    },
    /// Kubelet's decisions for a cases file, with the rule IDs that made them.
    Explain {
        /// A JSON file with one case, or an object with a `cases` array (`-` for stdin).
        #[arg(short = 'f', long = "filename")]
        file: std::path::PathBuf,
        /// `json`: one JSON object with the outputs; default: the decisions in words.
        #[arg(short = 'o', long = "output", value_parser = ["json"])]
        output: Option<String>,
        /// Compare each output with the case's `expect`; end with `N passed, M failed`.
        #[arg(long)]
        check: bool,
    },
    /// Namespaces on this host.
    Ns {
        #[command(subcommand)]
        command: NsCommand,
    },
}

#[derive(Subcommand)]
enum NsCommand {
    /// List namespaces like `lsns`: one row per namespace, with its processes.
    Ls {
        /// Only the namespaces of this process.
        #[arg(long)]
        pid: Option<i32>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// An error that is the user's to fix: printed on one line, exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn main() -> ExitCode {
    // Like every Unix filter: `podlab get pods | head` ends quietly when head has read enough.
    // SAFETY: restoring a default signal disposition before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { what } => demo::run(&what),
        Command::Ns {
            command: NsCommand::Ls { pid, json },
        } => nsls::run(pid, json),
        Command::Explain {
            file,
            output,
            check,
        } => explain::run(&file, output.is_some(), check),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let usage = err.downcast_ref::<UsageError>().is_some()
                || matches!(
                    err.downcast_ref::<podlab_ns::Error>(),
                    Some(
                        podlab_ns::Error::UnknownKind(_) | podlab_ns::Error::KindUnsupported { .. }
                    )
                );
            eprintln!("podlab: {err:#}");
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}
