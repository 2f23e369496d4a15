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
//!
//! The stack is the other page-keeper: a request's deepest call (parsing a container's spec,
//! writing a status) dirties pages that the idle loop, a few frames deep, never uses again,
//! and the kernel keeps them for the process's life. Once a burst is over the shim hands the
//! pages below its loop's frame back too ([`StackTop::release_below`]).

/// Blocks of this size or more are mapped on their own and unmapped when freed.
#[cfg(target_env = "gnu")]
const MMAP_THRESHOLD: libc::c_int = 64 * 1024;
/// Free memory at the top of the heap beyond this is returned to the kernel at once.
#[cfg(target_env = "gnu")]
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

    // glibc's thread cache only: musl's allocator has none.
    if cfg!(not(target_env = "gnu")) {
        return;
    }

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

/// Fixes the allocator's thresholds (which also stops glibc from moving them). glibc's
/// allocator only: musl's has no such knobs.
pub(super) fn tune_allocator() {
    // SAFETY: mallopt only changes the allocator's parameters; the shim is single-threaded.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Returns every free page of the heap to the kernel (the pages stay mapped; the next use
/// faults in a fresh zero page). glibc's allocator only: musl's gives free pages back itself.
pub(super) fn release_free_pages() {
    // SAFETY: malloc_trim only releases memory the allocator holds as free.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0)
    };
}

/// The shim's main stack as mapped when it started (the `[stack]` line of /proc/self/maps),
/// which bounds what [`StackTop::release_below`] may give back: nothing outside the stack's
/// own mapping is ever touched.
#[derive(Debug, Clone, Copy)]
pub(super) struct StackTop {
    lowest: usize,
    highest: usize,
}

/// Pages kept below the caller's frame: room for the frames of the release itself (the
/// `madvise` wrapper's frame must not be among the pages dropped while it runs).
const STACK_MARGIN_PAGES: usize = 1;

impl StackTop {
    /// Reads the stack's mapping; `None` when /proc/self/maps has no `[stack]` line (the
    /// release is then skipped: it only saves memory).
    pub(super) fn find() -> Option<StackTop> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let (lowest, highest) = stack_mapping(&maps)?;
        Some(StackTop { lowest, highest })
    }

    /// Gives the kernel back the stack pages below the caller's frame (they stay mapped; the
    /// next deep call faults in zero pages). Called from the idle loop, so nothing below its
    /// frame is live.
    #[inline(never)]
    pub(super) fn release_below(&self) {
        let marker = 0u8;
        let frame = std::hint::black_box(&marker) as *const u8 as usize;
        let Some((start, length)) = self.unused_below(frame, page_size()) else {
            return;
        };
        // SAFETY: the range lies inside the stack's own mapping and below every live frame of
        // this single-threaded process (the shim has no signal handlers: signals come through
        // a signalfd), so nothing there is read again before it is written.
        unsafe { libc::madvise(start as *mut libc::c_void, length, libc::MADV_DONTNEED) };
    }

    /// The stack's range below a frame at `frame`, less the margin: `None` when the frame is
    /// not on this stack (a thread's) or too close to its bottom.
    fn unused_below(&self, frame: usize, page: usize) -> Option<(usize, usize)> {
        if frame <= self.lowest || frame >= self.highest {
            return None;
        }
        let end = (frame & !(page - 1)).checked_sub(STACK_MARGIN_PAGES * page)?;
        (end > self.lowest).then(|| (self.lowest, end - self.lowest))
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

/// The start and end addresses of the `[stack]` mapping in a /proc/PID/maps text.
fn stack_mapping(maps: &str) -> Option<(usize, usize)> {
    let line = maps.lines().find(|line| line.ends_with("[stack]"))?;
    let range = line.split_whitespace().next()?;
    let (start, end) = range.split_once('-')?;
    Some((
        usize::from_str_radix(start, 16).ok()?,
        usize::from_str_radix(end, 16).ok()?,
    ))
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

    #[test]
    fn the_stack_mapping_is_found_in_maps() {
        let maps = "00400000-004c0000 r-xp 00087000 fe:00 5320718  /usr/bin/podlab-shim\n\
                    3fa83000-3fa99000 rw-p 00000000 00:00 0  [heap]\n\
                    7ffcdfda4000-7ffcdfdc5000 rw-p 00000000 00:00 0  [stack]\n\
                    7f92279bb000-7f92279bd000 r-xp 00000000 00:00 0  [vdso]\n";
        assert_eq!(
            stack_mapping(maps),
            Some((0x7ffc_dfda_4000, 0x7ffc_dfdc_5000))
        );
        assert_eq!(
            stack_mapping("3fa83000-3fa99000 rw-p 00000000 00:00 0  [heap]\n"),
            None
        );
    }

    #[test]
    fn only_the_stack_below_the_frame_and_its_margin_is_released() {
        let page = 4096;
        let stack = StackTop {
            lowest: 0x10_0000,
            highest: 0x12_0000,
        };
        // Frame in the page at 0x11_8000: one page kept below it.
        assert_eq!(
            stack.unused_below(0x11_8123, page),
            Some((0x10_0000, 0x1_7000))
        );
        // A frame off this stack (a thread's), or too near its bottom: nothing.
        assert_eq!(stack.unused_below(0x7f00_0000, page), None);
        assert_eq!(stack.unused_below(0x0f_0000, page), None);
        assert_eq!(stack.unused_below(0x10_1010, page), None);
    }
}
