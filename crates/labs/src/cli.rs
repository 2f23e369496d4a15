//! `podlab lab list | start ID | check [ID] | hint [ID] [N] | solve ID | reset [ID] | status`.
//!
//! Exit status: 0 done (a check that passes); 1 a check that does not pass yet, or a step that
//! failed; 2 a usage error (an unknown lab, no root).

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use crate::env::{state_dir, Env};
use crate::progress::{now, Progress};
use crate::Lab;

#[derive(Args)]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

#[derive(Subcommand)]
pub enum LabCommand {
    /// The labs, in course order, with your progress.
    List,
    /// Set a lab's scene and show its goal.
    Start { lab: String },
    /// Check the goal on the kernel and in podlab's objects; says what is still missing.
    Check {
        /// The lab (default: the one started last).
        lab: Option<String>,
    },
    /// Hint N (default: the next one), from a nudge to the command.
    Hint {
        /// The lab (default: the one started last).
        lab: Option<String>,
        n: Option<u32>,
    },
    /// Perform the reference solution (for teachers, and for the tests).
    Solve {
        lab: String,
        /// Make the lab's common mistake instead, which `check` must reject.
        #[arg(long)]
        mistake: bool,
    },
    /// Remove everything the lab and its solution made (every lab without an id).
    Reset { lab: Option<String> },
    /// What you have done so far.
    Status,
    /// Lab 14's holder of the private docker and containerd (started by `start 14`).
    #[command(hide = true)]
    HoldDaemons {
        #[arg(long)]
        work: std::path::PathBuf,
    },
}

/// A usage error: an unknown lab, no root. `podlab` exits 2 on it.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Runs one `podlab lab` command; the exit status.
pub fn run(args: LabArgs) -> Result<i32> {
    match args.command {
        LabCommand::List => list().map(|()| 0),
        LabCommand::Status => status().map(|()| 0),
        LabCommand::HoldDaemons { work } => crate::labs::hold_daemons(&work).map(|()| 0),
        LabCommand::Start { lab } => start(find(&lab)?).map(|()| 0),
        LabCommand::Check { lab } => check(current(lab)?),
        LabCommand::Hint { lab, n } => hint(current(lab)?, n).map(|()| 0),
        LabCommand::Solve { lab, mistake } => solve(find(&lab)?, mistake).map(|()| 0),
        LabCommand::Reset { lab: Some(lab) } => reset(find(&lab)?).map(|()| 0),
        LabCommand::Reset { lab: None } => {
            for lab in crate::all() {
                reset(lab)?;
            }
            Ok(0)
        }
    }
}

fn find(query: &str) -> Result<&'static Lab> {
    crate::find(query).ok_or_else(|| {
        UsageError(format!(
            "no lab {query:?}: `podlab lab list` shows them (a number, a name or NN-name)"
        ))
        .into()
    })
}

/// The lab named, else the one started last.
fn current(query: Option<String>) -> Result<&'static Lab> {
    match query {
        Some(query) => find(&query),
        None => match Progress::load(&state_dir()?)?.current {
            Some(id) => find(&id),
            None => Err(UsageError("no lab started yet: `podlab lab start 1`".into()).into()),
        },
    }
}

fn need_root(what: &str) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        return Err(UsageError(format!(
            "podlab lab {what} needs root: the labs build pods and namespaces on this kernel"
        ))
        .into());
    }
    Ok(())
}

fn update(f: impl FnOnce(&mut Progress)) -> Result<()> {
    let state = state_dir()?;
    let mut progress = Progress::load(&state)?;
    f(&mut progress);
    progress.save(&state)
}

fn list() -> Result<()> {
    let progress = Progress::load(&state_dir()?)?;
    println!(
        "{:<22} {:<13} {:>4}  {:<8}  TITLE",
        "LAB", "LEVEL", "MIN", "STATUS"
    );
    for lab in crate::all() {
        let id = lab.id();
        let mark = progress.labs.get(&id).map_or("", |p| match p {
            p if p.passed.is_some() && !p.solved => "passed",
            p if p.solved => "solved",
            p if p.started.is_some() => "started",
            _ => "",
        });
        println!(
            "{id:<22} {:<13} {:>4}  {mark:<8}  {}",
            lab.level.name(),
            lab.minutes,
            lab.title
        );
    }
    Ok(())
}

fn status() -> Result<()> {
    let state = state_dir()?;
    let progress = Progress::load(&state)?;
    let passed = progress
        .labs
        .values()
        .filter(|p| p.passed.is_some())
        .count();
    println!(
        "{passed} of {} labs passed (progress in {})",
        crate::all().len(),
        Progress::path(&state).display()
    );
    if let Some(current) = &progress.current {
        println!("current lab: {current}");
    }
    println!(
        "\n{:<22} {:<8} {:>6} {:>5}  SOLVED",
        "LAB", "PASSED", "CHECKS", "HINTS"
    );
    for (id, p) in &progress.labs {
        println!(
            "{id:<22} {:<8} {:>6} {:>5}  {}",
            if p.passed.is_some() { "yes" } else { "no" },
            p.checks,
            p.hints,
            if p.solved { "yes (by solve)" } else { "no" }
        );
    }
    Ok(())
}

/// A goal or hint with `{work}` (the lab's folder) and `{pause}` (the pause binary) filled in.
pub fn fill(text: &str, env: &Env) -> String {
    let pause = env
        .pause_binary()
        .map_or_else(|_| "podlab-pause".into(), |p| p.display().to_string());
    text.replace("{work}", &env.work.display().to_string())
        .replace("{pause}", &pause)
}

fn start(lab: &Lab) -> Result<()> {
    need_root("start")?;
    let env = Env::new(lab)?;
    println!("=== lab {}: {} ===\n", lab.id(), lab.title);
    println!("Setting the scene (anything left by an earlier start is removed first):");
    (lab.reset)(&Env {
        quiet: true,
        ..Env::new(lab)?
    })?;
    env.work_dir()?;
    (lab.scene)(&env)?;
    update(|p| {
        p.current = Some(lab.id());
        let entry = p.lab(&lab.id());
        entry.started = Some(now());
    })?;
    println!("\nGoal:\n{}", indent(&fill(lab.goal, &env)));
    println!(
        "\nYour files: {}\nWhen you think you are done: podlab lab check {}   (hints: podlab lab hint {})",
        env.work.display(),
        lab.number,
        lab.number
    );
    Ok(())
}

fn check(lab: &Lab) -> Result<i32> {
    need_root("check")?;
    let env = Env {
        quiet: true,
        ..Env::new(lab)?
    };
    let verdict = (lab.check)(&env)?;
    let passed = verdict.passed();
    update(|p| {
        let entry = p.lab(&lab.id());
        entry.checks += 1;
        if passed && entry.passed.is_none() {
            entry.passed = Some(now());
        }
    })?;
    if passed {
        println!("lab {}: passed\n{}", lab.id(), verdict.render());
        println!(
            "Well done. `podlab lab reset {}` removes what it made.",
            lab.number
        );
        Ok(0)
    } else {
        let missing = verdict.missing_parts().len();
        println!(
            "lab {}: not yet ({missing} still to do)\n{}",
            lab.id(),
            verdict.render()
        );
        println!("A hint: podlab lab hint {}", lab.number);
        Ok(1)
    }
}

fn hint(lab: &Lab, n: Option<u32>) -> Result<()> {
    let state = state_dir()?;
    let seen = Progress::load(&state)?
        .labs
        .get(&lab.id())
        .map_or(0, |p| p.hints);
    let total = lab.hints.len() as u32;
    let n = n.unwrap_or((seen + 1).min(total));
    if n == 0 || n > total {
        bail!(UsageError(format!(
            "lab {} has hints 1 to {total}",
            lab.id()
        )));
    }
    let env = Env::new(lab)?;
    println!(
        "hint {n} of {total}:\n{}",
        indent(&fill(lab.hints[n as usize - 1], &env))
    );
    update(|p| {
        let entry = p.lab(&lab.id());
        entry.hints = entry.hints.max(n);
    })
}

fn solve(lab: &Lab, mistake: bool) -> Result<()> {
    need_root("solve")?;
    let env = Env::new(lab)?;
    env.work_dir()?;
    if mistake {
        println!("A common mistake: {}\n", lab.mistake_story);
        (lab.mistake)(&env)?;
        println!(
            "\nNow `podlab lab check {}` says what is wrong.",
            lab.number
        );
        return Ok(());
    }
    println!("The reference solution of lab {}:\n", lab.id());
    (lab.solve)(&env)?;
    update(|p| p.lab(&lab.id()).solved = true)?;
    println!("\nNow `podlab lab check {}` should pass.", lab.number);
    Ok(())
}

fn reset(lab: &Lab) -> Result<()> {
    need_root("reset")?;
    let env = Env::new(lab)?;
    (lab.reset)(&env)?;
    if env.work.exists() {
        std::fs::remove_dir_all(&env.work)?;
    }
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
