//! Links `podlab-shim` statically (and not position-independent) on glibc targets: one shim
//! lives per pod, so what each one dirties on its own is paid for by every pod. A dynamic shim
//! dirties the dynamic loader's pages, libc's relocated data and its own relocated read-only
//! data in every process; a static, fixed-address shim has no relocations to apply, so those
//! pages stay clean and are shared by all the shims of the node. The library, the tests and
//! the other crates keep linking as usual.
//!
//! How the static link is made: `podlab-static-link` (the podlab binary is linked the same way).
//!
//! The same link places the code a shim daemon runs side by side (`src/shim/resident.ld`,
//! made by `src/shim/resident.sh`): the kernel maps the pages around each page of a file that
//! a process touches, so that code spread over the binary makes most of it resident in every
//! shim.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let resident = manifest.join("src/shim/resident.ld");
    println!("cargo:rerun-if-changed={}", resident.display());
    match podlab_static_link::args(&out) {
        Ok(None) => {}
        Ok(Some(mut args)) => {
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
