//! `podlab completion bash|zsh|fish` and `podlab man`: shell completion scripts (clap_complete)
//! and man pages (clap_mangen), both generated from the clap definition of the commands, so
//! they cannot drift from what podlab accepts.

use std::path::Path;

use anyhow::{bail, Context, Result};
use clap_complete::Shell;

/// Writes the completion script of `shell` to stdout, as `kubectl completion SHELL` does.
pub fn completion(command: clap::Command, shell: &str) -> Result<()> {
    script(command, shell, &mut std::io::stdout())
}

fn script(mut command: clap::Command, shell: &str, out: &mut dyn std::io::Write) -> Result<()> {
    let shell = match shell {
        "bash" => Shell::Bash,
        "zsh" => Shell::Zsh,
        "fish" => Shell::Fish,
        "powershell" => Shell::PowerShell,
        other => bail!("Unsupported shell type {other:?}."),
    };
    clap_complete::generate(shell, &mut command, "podlab", out);
    Ok(())
}

/// `podlab.1` to stdout, or with `dir` one page per command there (`podlab.1`,
/// `podlab-get.1`, `podlab-rollout-status.1`...), as `git help` finds them.
pub fn man(command: clap::Command, dir: Option<&Path>) -> Result<()> {
    let command = command.version(env!("CARGO_PKG_VERSION"));
    let Some(dir) = dir else {
        clap_mangen::Man::new(command)
            .render(&mut std::io::stdout())
            .context("writing the man page")?;
        return Ok(());
    };
    std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    let mut written = 0;
    write_pages(&command, "podlab", "podlab", dir, &mut written)?;
    println!("{written} man pages written to {}", dir.display());
    Ok(())
}

fn write_pages(
    command: &clap::Command,
    name: &str,
    invocation: &str,
    dir: &Path,
    written: &mut usize,
) -> Result<()> {
    let page = command
        .clone()
        .display_name(name.to_string())
        .bin_name(invocation.to_string());
    let path = dir.join(format!("{name}.1"));
    let mut file =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    clap_mangen::Man::new(page)
        .render(&mut file)
        .with_context(|| format!("writing {}", path.display()))?;
    *written += 1;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub_name = sub.get_name();
        write_pages(
            sub,
            &format!("{name}-{sub_name}"),
            &format!("{invocation} {sub_name}"),
            dir,
            written,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn script_of(shell: &str) -> String {
        let mut out = Vec::new();
        script(crate::Cli::command(), shell, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The script must be one the shell itself accepts, and offer the verbs of this issue.
    fn shell_accepts(shell: &str, check: &[&str], text: &str) {
        if !std::path::Path::new(&format!("/bin/{shell}")).exists() {
            eprintln!("skipped: {shell} is not installed");
            return;
        }
        let dir = std::env::temp_dir().join(format!("podlab-completion-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(shell);
        std::fs::write(&file, text).unwrap();
        let out = std::process::Command::new(shell)
            .args(check)
            .arg(&file)
            .output()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn completion_scripts_parse_in_their_shells_and_know_the_verbs() {
        let bash = script_of("bash");
        for verb in ["label", "annotate", "scale", "completion", "get", "delete"] {
            assert!(
                bash.contains(&format!("podlab__subcmd__{verb}")),
                "bash lacks {verb}"
            );
        }
        shell_accepts("bash", &["-n"], &bash);
        let zsh = script_of("zsh");
        assert!(zsh.starts_with("#compdef podlab"), "{}", &zsh[..40]);
        shell_accepts("zsh", &["-n"], &zsh);
        let fish = script_of("fish");
        assert!(fish.contains("complete -c podlab"), "fish script");
        shell_accepts("fish", &["--no-execute"], &fish);
    }

    #[test]
    fn an_unknown_shell_is_refused_in_kubectls_words() {
        let e = script(crate::Cli::command(), "ksh", &mut Vec::new()).unwrap_err();
        assert_eq!(e.to_string(), "Unsupported shell type \"ksh\".");
    }

    #[test]
    fn man_pages_are_written_for_every_command() {
        let dir = std::env::temp_dir().join(format!("podlab-man-{}", std::process::id()));
        man(crate::Cli::command(), Some(&dir)).unwrap();
        let label = std::fs::read_to_string(dir.join("podlab-label.1")).unwrap();
        let top = std::fs::read_to_string(dir.join("podlab.1")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(label.contains(".TH podlab-label 1"), "{label}");
        assert!(label.contains("\\fBpodlab label\\fR"), "{label}");
        assert!(label.contains("\\-\\-overwrite"), "{label}");
        assert!(top.contains("podlab\\-scale(1)"), "{top}");
    }
}
