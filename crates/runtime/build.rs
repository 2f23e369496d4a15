//! Links `podlab-shim` statically (and not position-independent) on glibc targets: one shim
//! lives per pod, so what each one dirties on its own is paid for by every pod. A dynamic shim
//! dirties the dynamic loader's pages, libc's relocated data and its own relocated read-only
//! data in every process; a static, fixed-address shim has no relocations to apply, so those
//! pages stay clean and are shared by all the shims of the node. The library, the tests and
//! the other crates keep linking as usual.
//!
//! rustc links the standard library's native libraries (`-lc -lm -lgcc_s ...`) in dynamic mode
//! unless the whole crate is built with `crt-static`, which cargo can only set for every crate
//! at once. So the shim's link gets a folder of its own searched first, in which each of those
//! names is a linker script that takes the static archive instead (`-lgcc_s` becomes libgcc's
//! static unwinder, as with `crt-static`).
//!
//! The same link places the code a shim daemon runs side by side (`src/shim/resident.ld`,
//! made by `src/shim/resident.sh`): the kernel maps the pages around each page of a file that
//! a process touches, so that code spread over the binary makes most of it resident in every
//! shim.

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

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") != "linux" || target("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let resident = manifest.join("src/shim/resident.ld");
    println!("cargo:rerun-if-changed={}", resident.display());
    match write_stand_ins(&out.join("static-libs")) {
        Ok(dir) => {
            let mut args = vec![
                format!("-L{}", dir.display()),
                "-static".into(),
                "-no-pie".into(),
            ];
            match linker_without_scripts() {
                None => args.push(format!("-Wl,-T,{}", resident.display())),
                Some(linker) => println!(
                    "cargo:warning=podlab-shim's code is not packed: {linker} takes no SECTIONS script"
                ),
            }
            for arg in args {
                println!("cargo:rustc-link-arg-bin=podlab-shim={arg}");
            }
        }
        Err(why) => println!("cargo:warning=podlab-shim is linked dynamically: {why}"),
    }
}

/// The linker the build's flags choose when it is one that does not take resident.ld (a
/// `SECTIONS ... INSERT` script): gold and mold. rust-lld (rustc's default) and GNU ld do.
fn linker_without_scripts() -> Option<&'static str> {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    ["mold", "gold"].into_iter().find(|linker| {
        flags
            .split('\x1f')
            .any(|flag| flag.contains(&format!("fuse-ld={linker}")))
    })
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
