//! Ending a command while a child carries on its work in the same address space.
//!
//! `run --rm` returns once its container's exit is known and leaves its pod's removal to a
//! child. A forked child costs the command twice on the way out: `fork` copies its page
//! tables (and every page the command writes afterwards faults to be copied), and the
//! command's `exit` then tears down its own address space, the ~11 MB of the binary it has
//! mapped with its heap: about 0.4 ms between the container's exit and the caller's next
//! step, on this 2-CPU VM (docs/benchmarks.md, session 30). A child made with
//! `clone(CLONE_VM)` shares the address space instead: the command's exit only lets go of
//! it, and the child unmaps it when it ends, off the caller's way.
//!
//! Two processes in one address space are safe here because they never run code that touches
//! it at the same time:
//! - the child starts on a stack of its own and, in raw system calls only, waits for the end
//!   of a pipe whose other end only the command holds: it reads end-of-file once the
//!   command's exit has closed its descriptors, which the kernel does after it let go of the
//!   memory;
//! - the command, once `clone` returned, makes two raw system calls: it tells the kernel not
//!   to clear its thread id at its exit (`set_tid_address`: the word is in the thread block
//!   the child goes on using), then calls `exit_group`. It never returns, so nothing it owns
//!   is dropped: what the child borrows from its stack stays where it is, in memory that
//!   stays mapped as long as the child lives.
//!
//! The child then is the command's continuation as a process of its own (its own pid and
//! descriptor table, the command's signal handlers copied, the parent its reaper once the
//! command is gone), as a forked child is.

use std::convert::Infallible;
use std::os::fd::{IntoRawFd, RawFd};

use nix::errno::Errno;

/// The child's stack, with a page below it that faults (no guard of the kernel's: a
/// `clone` stack is plain memory).
const STACK: usize = 8 << 20;
const GUARD: usize = 4096;

/// What the child runs: handed over on the heap, the child's alone from `clone` on.
struct Continuation<'a> {
    wait_for_parent: RawFd,
    parent_end: RawFd,
    work: Box<dyn FnOnce() -> i32 + 'a>,
}

/// Starts a child that shares this process's memory and runs `work` once this process is
/// gone, then exits with `code` without returning. Returns only if no such child could be
/// started; then nothing was started and the caller does `work` itself.
///
/// The process must have one thread (another would go on running beside the child), and
/// its output must be flushed: nothing runs after the child starts but raw system calls.
pub fn exit_leaving<'a>(code: i32, work: impl FnOnce() -> i32 + 'a) -> Result<Infallible, Errno> {
    let (wait_for_parent, parent_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (wait_for_parent, parent_end) = (wait_for_parent.into_raw_fd(), parent_end.into_raw_fd());
    let close_both = || {
        // SAFETY: the two ends were made above and are not used after.
        unsafe {
            libc::close(wait_for_parent);
            libc::close(parent_end);
        }
    };
    // SAFETY: a fresh private mapping; its lowest page made inaccessible below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK + GUARD,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        close_both();
        return Err(Errno::last());
    }
    // SAFETY: the mapping's first page, ours.
    if unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) } != 0 {
        let e = Errno::last();
        // SAFETY: the mapping made above, unused.
        unsafe { libc::munmap(base, STACK + GUARD) };
        close_both();
        return Err(e);
    }
    let continuation: Box<Continuation<'_>> = Box::new(Continuation {
        wait_for_parent,
        parent_end,
        work: Box::new(work),
    });
    let continuation = Box::into_raw(continuation).cast::<libc::c_void>();
    // SAFETY: the stack's top, 16-byte aligned (the mapping is page-aligned).
    let top = unsafe { base.cast::<u8>().add(STACK + GUARD) }.cast::<libc::c_void>();
    // SAFETY: CLONE_VM without CLONE_VFORK: see the module doc for why the two never run
    // side by side. `continuation` is leaked to the child; the stack is the child's.
    let child = unsafe {
        libc::clone(
            continue_in_child,
            top,
            libc::CLONE_VM | libc::SIGCHLD,
            continuation,
        )
    };
    if child < 0 {
        let e = Errno::last();
        // SAFETY: no child took them.
        unsafe {
            drop(Box::from_raw(continuation.cast::<Continuation<'_>>()));
            libc::munmap(base, STACK + GUARD);
        }
        close_both();
        return Err(e);
    }
    // From here on, raw system calls only. The pipe's read end is closed by the exit.
    // SAFETY: with a null address the kernel writes nothing at this thread's exit; then the
    // process ends.
    unsafe {
        libc::syscall(
            libc::SYS_set_tid_address,
            std::ptr::null_mut::<libc::c_int>(),
        );
        libc::syscall(libc::SYS_exit_group, code);
    }
    unreachable!("exit_group returned")
}

extern "C" fn continue_in_child(continuation: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the Box leaked by `exit_leaving`, handed to this child alone.
    let continuation = unsafe { Box::from_raw(continuation.cast::<Continuation<'static>>()) };
    // Raw system calls until the parent is gone, their errno unread (the word is the parent's).
    // SAFETY: this child's copies of the pipe's ends.
    unsafe {
        libc::syscall(libc::SYS_close, continuation.parent_end);
        let mut byte = 0u8;
        // End-of-file once the parent's exit closed its end; an error (EINTR) is retried, a
        // few times only, not forever.
        for _ in 0..1000 {
            let read = libc::syscall(
                libc::SYS_read,
                continuation.wait_for_parent,
                std::ptr::addr_of_mut!(byte),
                1usize,
            );
            if read >= 0 {
                break;
            }
        }
        libc::syscall(libc::SYS_close, continuation.wait_for_parent);
    }
    // A panic aborts (panic = "abort"), as in a forked child.
    std::process::exit((continuation.work)())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child sees what the parent left in memory, runs only after the parent is gone, and
    /// the parent's exit code is the one given.
    #[test]
    fn the_child_runs_after_the_parent_exits_and_sees_its_memory() {
        // The test harness has threads: the handover runs in a forked, single-threaded
        // process, whose exit code and whose child's report through a pipe are checked.
        let (report_read, report_write) = nix::unistd::pipe().unwrap();
        // SAFETY: the child only does what the test asks and exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                drop(report_read);
                let parent = std::process::id();
                let words = [String::from("left"), String::from("by the parent")];
                let report = std::fs::File::from(report_write);
                let _ = exit_leaving(7, move || {
                    use std::io::Write;
                    // The parent is gone: it is no longer this process's parent.
                    let orphaned = nix::unistd::getppid().as_raw() as u32 != parent;
                    let mut report = report;
                    let _ = writeln!(report, "{} {orphaned}", words.join(" "));
                    0
                });
                // SAFETY: only if the handover failed.
                unsafe { libc::_exit(99) };
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop(report_write);
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 7));
                let mut said = String::new();
                std::io::Read::read_to_string(&mut std::fs::File::from(report_read), &mut said)
                    .unwrap();
                assert_eq!(said, "left by the parent true\n");
            }
        }
    }
}
