//! Shared helpers of the integration tests: paths of the built binaries, bounded polling,
//! and the skip convention for what this kernel lacks.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The `podlab` binary built for this test run.
pub fn podlab() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_podlab"))
}

/// The `podlab-pause` binary, built next to `podlab` (the xtask builds it first).
pub fn pause_binary() -> PathBuf {
    let podlab = PathBuf::from(env!("CARGO_BIN_EXE_podlab"));
    let pause = podlab.with_file_name("podlab-pause");
    assert!(
        pause.exists(),
        "{} missing: build it with `cargo build -p podlab-pause`",
        pause.display()
    );
    pause
}

/// Polls `cond` every 10 ms until it is true or `limit` passes; returns whether it became true.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Records that a test was skipped and why: on stderr, and in the file `cargo xtask test`
/// names in `PODLAB_SKIP_LOG`, so that every skip is counted and printed at the end of the run.
pub fn record_skip(test: &str, reason: &str) {
    eprintln!("PODLAB-SKIP: {test}: {reason}");
    if let Ok(log) = std::env::var("PODLAB_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(file, "{test}: {reason}");
        }
    }
}

/// Skips a test whose kernel feature is missing, recording the reason (see [`record_skip`]).
#[macro_export]
macro_rules! skip_unless {
    ($cond:expr, $reason:expr) => {
        if !$cond {
            $crate::support::record_skip(module_path!(), &$reason.to_string());
            return;
        }
    };
}

/// Tests whose pods get addresses take this lock: the tests of one run share a network
/// namespace, hence podlab's bridge `podlab0` and its subnet, and a test that counts the
/// bridge's ports or checks that nothing is left must not see another test's pods.
pub fn network_lock() -> std::sync::MutexGuard<'static, ()> {
    static NETWORK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    NETWORK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
