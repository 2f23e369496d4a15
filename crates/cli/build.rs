//! Links the `podlab` binary as a position-dependent executable (`-no-pie`).
//!
//! Every podlab command is a process start, and a PIE of this size (17 MB, ~13,700 relative
//! relocations) has the dynamic loader write most of its relocated data pages before `main`:
//! about 50 page faults, which this VM charges 15-20 µs each. Without PIE the addresses are
//! fixed at link time (measured: `podlab ns run` 3.23 -> 2.87 ms, `--version` 1.50 -> 1.26 ms).
//! The price is that the binary's own image is not address-randomised (its libraries, heap and
//! stack still are): acceptable for a lab tool, and a one-line change to undo.

fn main() {
    println!("cargo:rustc-link-arg-bin=podlab=-no-pie");
    println!("cargo:rerun-if-changed=build.rs");
}
