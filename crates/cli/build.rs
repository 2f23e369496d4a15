//! Links the `podlab` binary statically and as a position-dependent executable on glibc
//! targets (`podlab-static-link`; elsewhere only `-no-pie`).
//!
//! Every podlab command is a process start. A PIE of this size (17 MB, ~13,700 relative
//! relocations) had the dynamic loader write most of its relocated data pages before `main`:
//! about 50 page faults, which this VM charges 15-20 µs each; without PIE the addresses are
//! fixed at link time (measured: `podlab ns run` 3.23 -> 2.87 ms, `--version` 1.50 -> 1.26 ms).
//! Static, there is no loader at all: no libc, libm and libgcc_s to map and relocate in every
//! command, its forked children and its exit (measured, AMD EPYC VM: `--version` 1.60 ->
//! 1.07 ms, `run --rm /bin/true` without a network 9.5 -> 8.6 ms). The price is that the
//! binary's own image is not address-randomised (its heap and stack still are): acceptable for
//! a lab tool, and a one-line change to undo.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let args = match podlab_static_link::args(&out) {
        Ok(Some(args)) => args,
        Ok(None) => vec!["-no-pie".into()],
        Err(why) => {
            println!("cargo:warning=podlab is linked dynamically: {why}");
            vec!["-no-pie".into()]
        }
    };
    for arg in args {
        println!("cargo:rustc-link-arg-bin=podlab={arg}");
    }
}
