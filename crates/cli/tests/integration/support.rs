//! Shared helpers of the integration tests: paths of the built binaries, bounded polling,
//! and the skip convention for what this kernel lacks.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The `podlab` binary built for this test run.
pub fn podlab() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_podlab"))
}

/// The built binaries that podlab runs from its own folder (itself, podlab-shim, podlab-pause),
/// copied to a fresh folder that every user can read and enter, removed on drop.
///
/// A test that runs podlab as another user (uid 65534) must not run it from the checkout: the
/// checkout may sit below a folder only root can enter (a clone under /root, a `mktemp -d`),
/// and then that user's `execve` fails with EACCES.
pub struct SharedBinaries {
    dir: SharedDir,
}

impl SharedBinaries {
    pub fn new() -> SharedBinaries {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_podlab"));
        SharedBinaries::of(built.parent().expect("the binary has a folder"))
    }

    /// The binaries found in `built_dir`, shared.
    pub fn of(built_dir: &std::path::Path) -> SharedBinaries {
        let shared = SharedBinaries {
            dir: SharedDir::new("podlab-bin", 0o755),
        };
        for name in ["podlab", "podlab-shim", "podlab-pause"] {
            let from = built_dir.join(name);
            if !from.exists() {
                continue;
            }
            let to = shared.dir.path().join(name);
            // A hard link keeps the binary's own 0755 mode and costs no copy; another
            // filesystem (a tmpfs /tmp) needs the copy.
            if std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to).unwrap_or_else(|e| {
                    panic!("copying {} to {}: {e}", from.display(), to.display())
                });
            }
        }
        shared
    }

    /// The shared copy of `podlab`, to be run with the folder `/` as its working folder (the
    /// test's own may not be enterable either).
    pub fn podlab(&self) -> std::process::Command {
        let mut command = std::process::Command::new(self.dir.path().join("podlab"));
        command.current_dir("/");
        command
    }
}

/// A new folder under `/tmp` that other users can reach (mode `mode`, not the umask's),
/// removed with everything in it on drop. Not under `$TMPDIR`, which may itself be private to
/// root (pam_tmpdir's `/tmp/user/0`).
pub struct SharedDir(PathBuf);

impl SharedDir {
    pub fn new(prefix: &str, mode: u32) -> SharedDir {
        use std::os::unix::fs::PermissionsExt;
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The test binary runs in a pid namespace of its own (the xtask's `unshare`), where its
        // pid is the same small number in every run: two runs at once named their folders
        // alike, and each removed the other's. The namespace's inode tells them apart (its last
        // digits: namespaces alive at once have nearby numbers, and sockets' paths stay short).
        let pid_ns = std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| {
            use std::os::unix::fs::MetadataExt;
            m.ino() % 100_000
        });
        let dir =
            PathBuf::from("/tmp").join(format!("{prefix}-{pid_ns}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let shared = SharedDir(dir);
        std::fs::set_permissions(&shared.0, std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", shared.0.display()));
        shared
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

/// The lines of a demo's output written in Rust's debug notation instead of words: `Some(..)`,
/// `None`, `Ok(..)`, `Err(..)`, a struct's ` { `, a list of strings `["..`, or a tuple variant
/// such as `Signaled(Pid(..` (a capitalised word glued to its parenthesis).
pub fn debug_notation(text: &str) -> Vec<&str> {
    let tuple_variant = |line: &str| {
        line.match_indices('(').any(|(at, _)| {
            let word: String = line[..at]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let word: String = word.chars().rev().collect();
            word.starts_with(|c: char| c.is_ascii_uppercase())
                && word.chars().any(|c| c.is_ascii_lowercase())
        })
    };
    text.lines()
        .filter(|line| {
            ["Some(", "None", "Ok(", "Err(", " { ", "[\""]
                .iter()
                .any(|p| line.contains(p))
                || tuple_variant(line)
        })
        .collect()
}

/// Asserts that a demo's output reads as words and tables, with no Rust debug notation.
pub fn assert_reads_as_words(demo: &str, stdout: &str) {
    let found = debug_notation(stdout);
    assert!(
        found.is_empty(),
        "podlab demo {demo} printed Rust debug notation:\n{}",
        found.join("\n")
    );
}

/// The columns of `podlab ns ls`: lsns's, with the pod and container of podlab's namespaces.
pub const NS_LS_COLUMNS: [&str; 8] = [
    "NS",
    "TYPE",
    "NPROCS",
    "PID",
    "USER",
    "POD",
    "CONTAINER",
    "COMMAND",
];
