//! `-i` and `-t` as kubectl reads them (`StreamOptions.SetupTTY`), and the user's terminal
//! around a container's console: raw mode, the relay, the window size.

use std::os::fd::AsFd;

use anyhow::Result;
use podlab_runtime::tty::{self, RawMode, RelayEnd, RelayEnds};

/// How the user's stdin reaches the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// No `-i`: the container's stdin is empty.
    NoStdin,
    /// `-i` without a usable terminal: stdin is passed as it is (a pipe, a file).
    Stdin,
    /// `-i -t` on a terminal: a pty in the container, this terminal in raw mode.
    Tty,
}

/// kubectl's rules: `-t` without `-i` is dropped silently; `-t` when stdin is not a terminal
/// is dropped with kubectl's warning (instead of hanging on a terminal that is not there).
pub fn streams(stdin: bool, tty: bool, quiet: bool) -> Streams {
    if !stdin {
        return Streams::NoStdin;
    }
    if !tty {
        return Streams::Stdin;
    }
    if !tty::is_terminal(std::io::stdin().as_fd()) {
        if !quiet {
            eprintln!("Unable to use a TTY - input is not a terminal or the right kind of file");
        }
        return Streams::Stdin;
    }
    Streams::Tty
}

/// The size of the user's terminal (kubectl reads it from its output), if there is one.
pub fn size() -> Option<tty::WindowSize> {
    tty::window_size(std::io::stdout().as_fd())
        .or_else(|| tty::window_size(std::io::stdin().as_fd()))
}

/// Runs a process made with a console: this terminal in raw mode (restored whatever happens),
/// input and output relayed, resizes passed on, until it exits; returns its exit code.
pub fn run_console(exec: &podlab_runtime::TtyExec) -> Result<i32> {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    tty::set_nonblocking(exec.master.as_fd())?;
    let end = {
        let _raw = RawMode::enter(stdin.as_fd())?;
        let ends = RelayEnds {
            input: Some(stdin.as_fd()),
            output: stdout.as_fd(),
            remote_input: Some(exec.master.as_fd()),
            remote_output: exec.master.as_fd(),
            ended: Some(exec.ended()),
            detach: tty::Detach::Off,
        };
        tty::relay(&ends, Some(stdout.as_fd()), |size| {
            let _ = exec.resize(size);
        })?
    };
    match end {
        RelayEnd::OutputClosed | RelayEnd::Ended | RelayEnd::Detached => Ok(exec.wait(None)?),
        // Hanging up the shim's connection (on return) kills the process, as kubectl's
        // interrupted stream ends the remote one.
        RelayEnd::Signal(signo) => Ok(128 + signo),
    }
}
