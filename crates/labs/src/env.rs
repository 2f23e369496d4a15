//! Where a lab works: podlab's root (the student's `$PODLAB_ROOT`, so that `podlab get pods`
//! shows the lab's pods), the user's state folder (progress and each lab's work folder, with
//! the manifests to edit and the answer files), the `podlab` binary, and the commands a scene
//! or a solution runs, each printed first as the student would type it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use podlab_control::Store;
use podlab_runtime::config::RuntimeConfig;
use podlab_runtime::Runtime;

/// The variable every process a lab starts carries (`PODLAB_LAB=<id>`), so that `reset` finds
/// them by their environment, whatever they have become since.
pub const LAB_TAG: &str = "PODLAB_LAB";

pub struct Env {
    /// `$PODLAB_ROOT` (default `/run/podlab` for root).
    pub root: PathBuf,
    /// `$XDG_STATE_HOME/podlab` (default `~/.local/state/podlab`).
    pub state: PathBuf,
    /// The lab's own folder below `state/labs/`.
    pub work: PathBuf,
    /// The lab's id, `NN-name`.
    pub lab: String,
    /// Print commands and their output (off while `check` probes).
    pub quiet: bool,
}

impl Env {
    pub fn new(lab: &crate::Lab) -> Result<Env> {
        let state = state_dir()?;
        Ok(Env {
            root: RuntimeConfig::from_env().root,
            work: state.join("labs").join(lab.id()),
            state,
            lab: lab.id(),
            quiet: false,
        })
    }

    /// The work folder, made if missing.
    pub fn work_dir(&self) -> Result<&Path> {
        std::fs::create_dir_all(&self.work)
            .with_context(|| format!("creating {}", self.work.display()))?;
        Ok(&self.work)
    }

    /// A file of the work folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.work.join(name)
    }

    /// Writes a file of the work folder (a manifest to apply or edit).
    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf> {
        let path = self.work_dir()?.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// The object store (the API server's twin) of the root.
    pub fn store(&self) -> Result<Store> {
        Store::open(self.root.join("store")).context("opening podlab's object store")
    }

    /// The runtime (containerd's twin) of the root.
    pub fn runtime(&self) -> Result<Runtime> {
        Runtime::open(RuntimeConfig::from_env()).context("opening podlab's runtime")
    }

    /// The `podlab` binary (this one).
    pub fn podlab_binary(&self) -> Result<PathBuf> {
        std::env::current_exe().context("finding the podlab binary")
    }

    /// `podlab-pause`, installed next to `podlab`.
    pub fn pause_binary(&self) -> Result<PathBuf> {
        let pause = self.podlab_binary()?.with_file_name("podlab-pause");
        if !pause.exists() {
            bail!(
                "{} is missing: build it with `cargo build -p podlab-pause`",
                pause.display()
            );
        }
        Ok(pause)
    }

    /// Says one line of narration.
    pub fn say(&self, line: impl AsRef<str>) {
        if !self.quiet {
            println!("{}", line.as_ref());
        }
    }

    /// A command tagged with the lab (see [`LAB_TAG`]).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        command.args(args).env(LAB_TAG, &self.lab);
        command
    }

    /// `podlab ARGS`, untagged: the node agent it may start is the node's, not the lab's (it
    /// outlives the lab, as kubelet outlives a pod, and stops itself when idle).
    fn podlab_command(&self, args: &[&str]) -> Result<Command> {
        let mut command = Command::new(self.podlab_binary()?);
        command.args(args).env_remove(LAB_TAG);
        Ok(command)
    }

    /// Runs `podlab ARGS`, printed as `$ podlab ARGS`; fails when it does.
    pub fn podlab(&self, args: &[&str]) -> Result<String> {
        self.run_shown("podlab", self.podlab_command(args)?, args)
    }

    /// Runs `podlab ARGS` without printing; its exit code and output.
    pub fn podlab_quiet(&self, args: &[&str]) -> Result<(i32, String, String)> {
        let out = self
            .podlab_command(args)?
            .stdin(Stdio::null())
            .output()
            .context("running podlab")?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// Runs a host command (`ip`, `nsenter`...), printed first; fails when it does.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<String> {
        self.run_shown(program, self.command(program, args), args)
    }

    fn run_shown(&self, name: &str, mut command: Command, args: &[&str]) -> Result<String> {
        self.say(format!("$ {name} {}", shell_line(args)));
        let out = command
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {name}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        for line in stdout.lines() {
            self.say(format!("  {line}"));
        }
        if !out.status.success() {
            bail!(
                "`{name} {}` failed ({}): {}",
                shell_line(args),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(stdout)
    }

    /// Starts a long-lived process in the background (its own session, no terminal), printed
    /// as `$ CMD &`; returns its pid. It is tagged, so that `reset` finds it.
    pub fn spawn(&self, program: &str, args: &[&str]) -> Result<i32> {
        self.spawn_logged(program, args, None)
    }

    /// [`Env::spawn`], with its output appended to `log` when given.
    pub fn spawn_logged(&self, program: &str, args: &[&str], log: Option<&Path>) -> Result<i32> {
        use std::os::unix::process::CommandExt;
        self.say(format!("$ {program} {} &", shell_line(args)));
        let mut command = self.command(program, args);
        let output = || -> Result<Stdio> {
            Ok(match log {
                Some(path) => std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening {}", path.display()))?
                    .into(),
                None => Stdio::null(),
            })
        };
        command
            .stdin(Stdio::null())
            .stdout(output()?)
            .stderr(output()?);
        // SAFETY: setsid is async-signal-safe; it detaches the child from the CLI's session,
        // so that it outlives this command as a student's `&` job outlives their shell line.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                Ok(())
            });
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        Ok(child.id() as i32)
    }

    /// Applies a manifest kept in the work folder as `name` (written there first), as
    /// `podlab apply -f FILE`.
    pub fn apply(&self, name: &str, manifest: &str) -> Result<()> {
        let path = self.write(name, manifest)?;
        self.podlab(&["apply", "-f", &path.display().to_string()])?;
        Ok(())
    }
}

/// `$XDG_STATE_HOME/podlab`, else `~/.local/state/podlab`.
pub fn state_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("podlab"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("neither XDG_STATE_HOME nor HOME is set: where should lab progress go?")?;
    Ok(PathBuf::from(home).join(".local/state/podlab"))
}

/// The arguments as a shell line, quoted where a shell would need it.
pub fn shell_line(args: &[&str]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
            {
                a.to_string()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_line_quotes_what_a_shell_would_split() {
        assert_eq!(shell_line(&["ip", "netns", "add", "x"]), "ip netns add x");
        assert_eq!(
            shell_line(&["sh", "-c", "echo it's"]),
            r"sh -c 'echo it'\''s'"
        );
        assert_eq!(shell_line(&[""]), "''");
    }
}
