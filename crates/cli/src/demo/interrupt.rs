//! Ending a demo early without leaving anything behind: Ctrl-C (SIGINT), SIGTERM, SIGHUP, or
//! a stdout closed under it (`podlab demo | head`).
//!
//! A pod demo's node agent and shims run in sessions of their own (they outlive a terminal),
//! so a demo killed by a signal would leave them and its scratch root running: cleanup on drop
//! never runs when the default action ends the process, and with `panic = "abort"` nothing
//! unwinds. So while a demo runs, those signals only set a flag (async-signal-safe), SIGPIPE
//! is ignored so that a write to a closed pipe fails with EPIPE instead of killing podlab, and
//! the demo looks at both at its checkpoints: every line it says, every poll of a wait. There,
//! what the demo registered ([`on_abandon`]: its scratch roots) is removed, as their drop
//! would, and podlab exits with 128 + the signal's number, as a shell reports a process the
//! signal killed. A panic (a `println!` into the closed pipe, deep in a shared module) takes
//! the same way out through the panic hook.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Mutex;

/// The signal that asked the demo to stop (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The process that installed the handlers: a forked child shares them, and must never remove
/// what its parent made.
static DEMO_PID: AtomicI32 = AtomicI32::new(0);
/// Set once the cleanup has begun, so that nothing it calls starts it again.
static ABANDONING: AtomicBool = AtomicBool::new(false);

/// What to remove if the demo ends early: a path and the function that removes it.
type Cleanup = (PathBuf, fn(&Path));
static CLEANUPS: Mutex<Vec<Cleanup>> = Mutex::new(Vec::new());

extern "C" fn record(signal: libc::c_int) {
    SIGNAL.store(signal, Ordering::SeqCst);
}

/// Takes over SIGINT, SIGTERM and SIGHUP (recorded, checked at checkpoints), ignores SIGPIPE,
/// and makes a panic clean up first. Called once, before the first demo starts anything.
pub fn install() {
    DEMO_PID.store(std::process::id() as i32, Ordering::SeqCst);
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a handler that only stores into an atomic is async-signal-safe. No
        // SA_RESTART: a blocking read or wait returns EINTR, and the demo's error path (its
        // drops) runs before the next checkpoint ends it.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = record as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
    // SAFETY: changing a disposition; the CLI is single-threaded here.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let broken_pipe = info.to_string().contains("Broken pipe");
        if broken_pipe {
            SIGNAL.store(libc::SIGPIPE, Ordering::SeqCst);
        } else {
            default_hook(info);
        }
        abandon();
    }));
}

/// Registers `path` to be removed by `cleanup` if the demo ends early; [`done`] takes it off.
pub fn on_abandon(path: &Path, cleanup: fn(&Path)) {
    lock().push((path.to_path_buf(), cleanup));
}

/// `path` was removed the ordinary way.
pub fn done(path: &Path) {
    lock().retain(|(p, _)| p != path);
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Cleanup>> {
    CLEANUPS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Ends the demo here if a signal came or stdout was closed.
pub fn checkpoint() {
    if SIGNAL.load(Ordering::SeqCst) != 0 {
        abandon();
    }
}

/// Prints a line of narration; a closed stdout is taken as SIGPIPE.
pub fn say(line: &str) {
    if SIGNAL.load(Ordering::SeqCst) != libc::SIGPIPE {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            SIGNAL.store(libc::SIGPIPE, Ordering::SeqCst);
        }
    }
    checkpoint();
}

/// Removes everything registered and exits with 128 + the signal. In a forked child (which
/// shares the handlers and the hook) it only exits.
fn abandon() {
    let signal = SIGNAL.load(Ordering::SeqCst);
    let code = 128 + if signal == 0 { libc::SIGABRT } else { signal };
    if DEMO_PID.load(Ordering::SeqCst) != std::process::id() as i32 {
        std::process::exit(code);
    }
    if ABANDONING.swap(true, Ordering::SeqCst) {
        return;
    }
    if signal == libc::SIGPIPE {
        // The reader is gone: the rest of the output, the cleanup's included, goes nowhere,
        // and a print must not fail again.
        redirect_stdout_to_null();
    } else if signal != 0 {
        let name = nix::sys::signal::Signal::try_from(signal)
            .map(|s| s.as_str())
            .unwrap_or("a signal");
        eprintln!("podlab demo: stopped by {name}; removing what the demo made");
    }
    let cleanups = std::mem::take(&mut *lock());
    for (path, cleanup) in cleanups.into_iter().rev() {
        cleanup(&path);
    }
    std::process::exit(code);
}

fn redirect_stdout_to_null() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 of two open descriptors.
        unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), libc::STDOUT_FILENO) };
    }
}
