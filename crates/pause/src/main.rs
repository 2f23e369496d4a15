//! `podlab-pause`: the infra process of a pod, podlab's twin of Kubernetes' `pause.c` and of
//! `catatonit -P`.
//!
//! A pod's namespaces (uts, ipc, net and, with `shareProcessNamespace`, pid) must outlive every
//! container in it, including init containers that come and go before the app containers start.
//! So the runtime starts this process first, in fresh namespaces, and every container joins them.
//! It does nothing but wait:
//!
//! * it sleeps in `pause()` forever;
//! * SIGINT or SIGTERM make it print one line to stderr and exit 0 (a PID 1 in a pid namespace
//!   only receives signals it has a handler for, so the handlers are what make it stoppable);
//! * SIGCHLD makes it reap every exited child with `waitpid(-1, WNOHANG)` in a loop. Children
//!   only exist when it is PID 1 of a shared pid namespace: orphans of every container are
//!   re-parented to it, and without reaping they would stay zombies;
//! * when it is not PID 1 it warns on stderr and carries on (it is still a valid namespace holder);
//! * `-v` prints `podlab-pause <version>` and exits 0. Other arguments are ignored, as pause.c does.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |------|---------|
//! | 0    | `-v` was given, or SIGINT/SIGTERM arrived |
//! | 1    | installing the SIGINT handler failed |
//! | 2    | installing the SIGTERM handler failed |
//! | 3    | installing the SIGCHLD handler failed |
//! | 42   | `pause()` returned from its loop (cannot happen) |
//!
//! The codes are those of pause.c, so tooling that knows one knows the other.
//!
//! # Why `no_std` and raw system calls
//!
//! One pause process lives per pod, so its resident memory is paid once per pod. With Rust's
//! standard library and glibc it would map about 1.8 MB; without a C runtime it is a few pages of
//! its own. It allocates nothing, ever. The handful of system calls it needs are in [`sys`].

#![no_std]
#![no_main]

mod sys;

const VERSION: &[u8] = env!("CARGO_PKG_VERSION").as_bytes();

const EXIT_SIGINT_HANDLER: i32 = 1;
const EXIT_SIGTERM_HANDLER: i32 = 2;
const EXIT_SIGCHLD_HANDLER: i32 = 3;
const EXIT_LOOP_ENDED: i32 = 42;

extern "C" fn on_shutdown(signal: i32) {
    sys::write(2, b"podlab-pause: shutting down, got ");
    sys::write(
        2,
        if signal == sys::SIGINT {
            b"SIGINT\n"
        } else {
            b"SIGTERM\n"
        },
    );
    sys::exit(0);
}

extern "C" fn on_child(_signal: i32) {
    // One SIGCHLD may stand for many exited children: reap until none is left.
    while sys::wait_any_nohang() > 0 {}
}

/// Called from `_start` with the initial stack pointer (argc, then argv).
///
/// # Safety
/// `stack` must be the process's initial stack as the kernel laid it out.
#[no_mangle]
unsafe extern "C" fn pause_main(stack: *const usize) -> ! {
    let argc = *stack;
    let argv = stack.add(1) as *const *const u8;
    for i in 1..argc {
        if is_version_flag(*argv.add(i)) {
            sys::write(1, b"podlab-pause ");
            sys::write(1, VERSION);
            sys::write(1, b"\n");
            sys::exit(0);
        }
    }
    if sys::getpid() != 1 {
        sys::write(
            2,
            b"podlab-pause: warning: not PID 1, orphans will not be reaped here\n",
        );
    }
    if !sys::set_handler(sys::SIGINT, on_shutdown, 0) {
        sys::exit(EXIT_SIGINT_HANDLER);
    }
    if !sys::set_handler(sys::SIGTERM, on_shutdown, 0) {
        sys::exit(EXIT_SIGTERM_HANDLER);
    }
    if !sys::set_handler(sys::SIGCHLD, on_child, sys::SA_NOCLDSTOP) {
        sys::exit(EXIT_SIGCHLD_HANDLER);
    }
    // Children that exited before the handler was in place would never raise SIGCHLD again.
    on_child(sys::SIGCHLD);
    loop {
        sys::pause();
    }
    #[allow(unreachable_code)]
    sys::exit(EXIT_LOOP_ENDED)
}

/// `-v`, case-insensitively, as pause.c accepts it.
unsafe fn is_version_flag(arg: *const u8) -> bool {
    *arg == b'-' && (*arg.add(1) | 0x20) == b'v' && *arg.add(2) == 0
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    sys::exit(EXIT_LOOP_ENDED)
}

/// Unoptimised builds of `core` keep a reference to the unwinding personality routine even with
/// `panic = "abort"`; nothing ever calls it.
#[no_mangle]
extern "C" fn rust_eh_personality() {}
