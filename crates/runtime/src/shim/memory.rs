//! The shim's own memory: one shim lives as long as its pod, so every page it dirties once is
//! paid for by every pod on the node, for the pod's whole life.
//!
//! glibc's allocator, left to itself, grows the heap for a burst and keeps it: it raises its
//! mmap threshold to the size of the largest block freed (a 256 KiB message buffer then comes
//! from the heap, dirtying it for good), and it only gives back the top of the heap. The shim
//! fixes the thresholds, so that large short-lived buffers are mapped and unmapped, and hands
//! the free pages inside the heap back to the kernel once a burst of work (starting the pod, a
//! request) is over.
//!
//! glibc also keeps up to seven freed blocks of every small size in a per-thread cache
//! (tcache) that `malloc_trim` cannot touch, and which only a tunable read at start-up turns
//! off: so the shim starts itself again with `glibc.malloc.tcache_count=0` added to
//! `GLIBC_TUNABLES` (one `execve` in the process the runtime started, before it detaches;
//! nothing is re-executed when the variable already says so).

/// Blocks of this size or more are mapped on their own and unmapped when freed.
const MMAP_THRESHOLD: libc::c_int = 64 * 1024;
/// Free memory at the top of the heap beyond this is returned to the kernel at once.
const TRIM_THRESHOLD: libc::c_int = 64 * 1024;

/// The glibc tunable that turns the per-thread cache of freed blocks off.
const NO_THREAD_CACHE: &str = "glibc.malloc.tcache_count=0";

/// Whether a `GLIBC_TUNABLES` value turns the thread cache off.
fn turns_thread_cache_off(tunables: &str) -> bool {
    tunables
        .split(':')
        .any(|tunable| tunable == NO_THREAD_CACHE)
}

/// `GLIBC_TUNABLES` for a shim: the caller's, with the thread cache off. The runtime starts
/// the shim with it, which spares the shim its re-execution.
pub(crate) fn tunables_without_thread_cache() -> String {
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if turns_thread_cache_off(&tunables) {
        tunables
    } else if tunables.is_empty() {
        NO_THREAD_CACHE.to_string()
    } else {
        format!("{tunables}:{NO_THREAD_CACHE}")
    }
}

/// Re-executes the shim with the same arguments and glibc's thread cache off, unless it is off
/// already. Returns only when it is, or when the re-execution failed (the shim then goes on
/// as it is: it only costs memory).
pub(super) fn without_thread_cache() {
    use std::os::unix::process::CommandExt;

    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if turns_thread_cache_off(&tunables) {
        return;
    }
    let tunables = tunables_without_thread_cache();
    // The binary's own path, not /proc/self/exe: the kernel names the process after the file
    // it executes, and `podlab-shim` is how the runtime and its garbage collector know it.
    let Ok(binary) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut again = std::process::Command::new(binary);
    if let Some(name) = args.next() {
        again.arg0(name);
    }
    let error = again.args(args).env("GLIBC_TUNABLES", tunables).exec();
    eprintln!("podlab-shim: starting again with glibc's thread cache off: {error}");
}

/// Fixes the allocator's thresholds (which also stops glibc from moving them).
pub(super) fn tune_allocator() {
    // SAFETY: mallopt only changes the allocator's parameters; the shim is single-threaded.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Returns every free page of the heap to the kernel (the pages stay mapped; the next use
/// faults in a fresh zero page).
pub(super) fn release_free_pages() {
    // SAFETY: malloc_trim only releases memory the allocator holds as free.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_cache_tunable_is_found_among_others() {
        assert!(turns_thread_cache_off("glibc.malloc.tcache_count=0"));
        assert!(turns_thread_cache_off(
            "glibc.malloc.check=0:glibc.malloc.tcache_count=0"
        ));
        assert!(!turns_thread_cache_off(""));
        assert!(!turns_thread_cache_off("glibc.malloc.tcache_count=07"));
        assert!(!turns_thread_cache_off("glibc.malloc.tcache_count=1"));
    }
}
