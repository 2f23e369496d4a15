//! `podlab-shim`: the per-pod shim daemon (see `podlab_runtime::shim`). Started by the runtime
//! library, never by hand.
//!
//! It has no Rust `main`: the standard library's start-up (a guard page and an alternate
//! signal stack for stack-overflow reports, found by parsing /proc/self/maps with C's scanf)
//! would touch code and data that one shim per pod then keeps for the pod's whole life. The
//! arguments are read from C's `argv` (musl, unlike glibc, does not hand them to the
//! standard library before `main`).

// The test harness brings its own `main` (the binary has no tests of its own).
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
#[unsafe(no_mangle)]
extern "C" fn main(argc: libc::c_int, argv: *const *const libc::c_char) -> libc::c_int {
    // As the standard start-up would: a closed reader makes a write fail (EPIPE), it does not
    // kill the shim. Containers get the default back before they exec.
    // SAFETY: SIG_IGN installs no handler code.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let mut args = arguments(argc, argv).into_iter().skip(1).peekable();
    if args
        .peek()
        .is_some_and(|a| a == podlab_runtime::mount_template::SHIM_FLAG)
    {
        let dir = args.nth(1).unwrap_or_default();
        return match podlab_runtime::mount_template::hold(std::path::Path::new(&dir)) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("Error: {e}");
                1
            }
        };
    }
    // The runtime starts every shim so (`podlab_runtime::starting_shim`): the sandbox's id and
    // folder on the command line, the rest of its arguments on stdin once they are known.
    let run = match args.next() {
        Some(flag) if flag == podlab_runtime::starting_shim::ARGS_ON_STDIN => {
            podlab_runtime::shim::args_from_stdin(args)
        }
        other => Err(format!(
            "expected {} --id ID --sandbox-dir DIR (the runtime starts shims), got {other:?}",
            podlab_runtime::starting_shim::ARGS_ON_STDIN
        )),
    }
    .map_err(|e| anyhow::anyhow!("podlab-shim: {e}"))
    .and_then(|args| {
        // Started off its caller's CPU, which the caller set after the spawn and before it
        // sent the arguments: what the shim starts gets the caller's affinity back.
        podlab_runtime::spawn_cpu::restore_caller_cpus();
        args.map_or(Ok(()), |(args, listener)| {
            podlab_runtime::shim::run(args, listener)
        })
    });
    match run {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("Error: {e:?}");
            1
        }
    }
}

/// C's `argv` as the standard library's `args_os` would give it.
#[cfg(not(test))]
fn arguments(argc: libc::c_int, argv: *const *const libc::c_char) -> Vec<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    (0..usize::try_from(argc).unwrap_or(0))
        .map(|i| {
            // SAFETY: the C runtime passes `argc` valid, NUL-terminated strings in `argv`.
            let arg = unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) };
            std::ffi::OsStr::from_bytes(arg.to_bytes()).to_os_string()
        })
        .collect()
}
