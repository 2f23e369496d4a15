//! The pod shim built for musl, beside the glibc one: `target/<profile>/musl/podlab-shim`.
//!
//! Why: every glibc program's start costs about 0.8 ms on a VM that traps `CPUID` (glibc asks
//! the CPU's features and caches with some 64 of them before `main`; docs/benchmarks.md,
//! session 14), and a shim starts on the way of every pod. musl asks nothing at start: a musl
//! shim starts in about 0.1 ms. The runtime takes `musl/podlab-shim` when it is there and not
//! older than the glibc `podlab-shim` beside it (so a shim left from older sources, after a
//! plain `cargo build` rebuilt the glibc one, is not used); otherwise the glibc one.
//!
//! Built only where it can be: the `x86_64-unknown-linux-musl` standard library installed
//! (`rustup target add x86_64-unknown-linux-musl`, which `scripts/run` tries) and a musl C
//! compiler (`musl-gcc`, Debian's `musl-tools`: `ring`, a dependency of the image crate, has C
//! code). Otherwise the task says why and goes on with the glibc shim.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

const TARGET: &str = "x86_64-unknown-linux-musl";

/// Builds the musl shim for `profile` ("debug" or "release") and puts it at
/// `target/<profile>/musl/podlab-shim`; says why and returns when it cannot be built here.
pub fn build(profile: &str) -> Result<()> {
    if let Some(why) = missing() {
        println!("xtask: pods use the glibc podlab-shim: {why}");
        return Ok(());
    }
    let mut args = vec!["build", "--target", TARGET, "-p", "podlab-runtime", "--bin"];
    args.push("podlab-shim");
    if profile == "release" {
        args.push("--release");
    }
    crate::cargo(&args, &[])?;
    let target = crate::workspace_root().join("target");
    let built = target.join(TARGET).join(profile).join("podlab-shim");
    let folder = target.join(profile).join("musl");
    std::fs::create_dir_all(&folder).with_context(|| format!("creating {}", folder.display()))?;
    let placed = folder.join("podlab-shim");
    // A new file, written after the glibc shim was: the runtime takes the newer of the two.
    let _ = std::fs::remove_file(&placed);
    std::fs::copy(&built, &placed)
        .with_context(|| format!("copying {} to {}", built.display(), placed.display()))?;
    Ok(())
}

/// Why the musl shim cannot be built here (None: it can).
fn missing() -> Option<String> {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let std_lib = Path::new(&sysroot)
        .join("lib/rustlib")
        .join(TARGET)
        .join("lib");
    if !std_lib.is_dir() {
        return Some(format!(
            "the {TARGET} standard library is not installed (rustup target add {TARGET})"
        ));
    }
    let has_musl_gcc = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| dir.join("musl-gcc").is_file())
    });
    if !has_musl_gcc {
        return Some("no musl-gcc (Debian's musl-tools)".into());
    }
    None
}
