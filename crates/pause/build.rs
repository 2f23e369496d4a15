//! Link podlab-pause as a static executable with no C runtime at all: the process has its own
//! `_start`, makes raw system calls, and maps nothing but its own few pages. That is how it stays
//! far below `catatonit -P` in resident memory.
fn main() {
    for arg in [
        "-nostartfiles",
        "-nostdlib",
        "-static",
        "-no-pie",
        "-Wl,--build-id=none",
    ] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
}
