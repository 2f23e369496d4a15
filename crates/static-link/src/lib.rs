//! For the build scripts of podlab's binaries: the link arguments that make a binary static and
//! not position-independent on a glibc target (`*-linux-gnu`), binary by binary.
//!
//! Why: every podlab command, shim and agent is a process start, and a dynamic start is paid
//! in every one of them. The dynamic loader maps and relocates libc, libm and libgcc_s, and the
//! relocated data pages are written, so dirtied, in each process; on a VM that charges each
//! page fault and `CPUID` dearly that is about 0.4 ms of every `podlab` command (`--version`
//! 1.6 → 1.07 ms here) and pages of every shim that no other shim shares. A static,
//! fixed-address binary has no loader and no relocations to apply.
//!
//! How: rustc links the standard library's native libraries (`-lc -lm -lgcc_s ...`) in dynamic
//! mode unless the whole crate is built with `crt-static`, which cargo can only set for every
//! crate at once (proc macros included, which cannot be static). So the binary's link gets a
//! folder of its own searched first, in which each of those names is a linker script that
//! takes the static archive instead (`-lgcc_s` becomes libgcc's static unwinder, as with
//! `crt-static`), plus `-static -no-pie`. The libraries, tests and other binaries link as
//! usual.
//!
//! glibc's name service still works in a static binary (`getaddrinfo` and `getpwuid_r` load
//! the node's NSS modules of the same glibc at run time, as the linker's warning says): podlab
//! is built on the node it runs on.
//!
//! ```no_run
//! // build.rs
//! let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
//! match podlab_static_link::args(&out) {
//!     Ok(Some(args)) => args
//!         .iter()
//!         .for_each(|arg| println!("cargo:rustc-link-arg-bin=podlab={arg}")),
//!     Ok(None) => {} // not a glibc target: linked as rustc links it
//!     Err(why) => println!("cargo:warning=podlab is linked dynamically: {why}"),
//! }
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

/// The native libraries rustc links into a binary for `*-linux-gnu`, and the static archives
/// that stand in for each. libc's archive needs libgcc's (128-bit float, the unwinder's
/// personality routine), and a one-pass linker (GNU ld) only looks back within a group: so they
/// come in one, as `gcc -static` has them.
const STATIC_STAND_INS: &[(&str, &[&str])] = &[
    ("c", &["libc.a", "libgcc.a", "libgcc_eh.a"]),
    ("m", &["libm.a"]),
    ("rt", &["librt.a"]),
    ("dl", &["libdl.a"]),
    ("util", &["libutil.a"]),
    ("pthread", &["libpthread.a"]),
    ("gcc_s", &["libgcc_eh.a"]),
];

/// The link arguments of a static, fixed-address binary, with the stand-ins written to
/// `out_dir/static-libs`; `None` where the target is not Linux with glibc. Also tells cargo
/// to build again when `CC` changes. An `Err` says why it cannot be (no `libc6-dev`): the
/// caller then links dynamically and says so.
pub fn args(out_dir: &Path) -> Result<Option<Vec<String>>, String> {
    println!("cargo:rerun-if-env-changed=CC");
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") != "linux" || target("CARGO_CFG_TARGET_ENV") != "gnu" {
        return Ok(None);
    }
    let dir = write_stand_ins(&out_dir.join("static-libs"))?;
    Ok(Some(vec![
        format!("-L{}", dir.display()),
        "-static".into(),
        "-no-pie".into(),
    ]))
}

/// Writes `lib<name>.a` in `dir` for every stand-in: a linker script naming the archives the C
/// compiler knows (found with `cc -print-file-name`).
fn write_stand_ins(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    for (name, archives) in STATIC_STAND_INS {
        let paths: Vec<String> = archives
            .iter()
            .map(|archive| archive_path(&cc, archive).map(|p| format!("\"{}\"", p.display())))
            .collect::<Result<_, _>>()?;
        let script = dir.join(format!("lib{name}.a"));
        std::fs::write(&script, format!("GROUP({})\n", paths.join(" ")))
            .map_err(|e| format!("writing {}: {e}", script.display()))?;
    }
    Ok(dir.to_path_buf())
}

fn archive_path(cc: &str, archive: &str) -> Result<PathBuf, String> {
    let printed = Command::new(cc)
        .arg(format!("-print-file-name={archive}"))
        .output()
        .map_err(|e| format!("running {cc}: {e}"))?;
    let path = PathBuf::from(String::from_utf8_lossy(&printed.stdout).trim());
    // An archive the compiler does not know comes back as its bare name.
    if path.is_absolute() && path.is_file() {
        Ok(path)
    } else {
        Err(format!("{cc} knows no {archive} (is libc6-dev installed?)"))
    }
}
