//! The shim's own memory: one shim lives as long as its pod, so every page it dirties once is
//! paid for by every pod on the node, for the pod's whole life.
//!
//! glibc's allocator, left to itself, grows the heap for a burst and keeps it: it raises its
//! mmap threshold to the size of the largest block freed (a 256 KiB message buffer then comes
//! from the heap, dirtying it for good), and it only gives back the top of the heap. The shim
//! fixes the thresholds, so that large short-lived buffers are mapped and unmapped, and hands
//! the free pages inside the heap back to the kernel once a burst of work (starting the pod, a
//! request) is over.

/// Blocks of this size or more are mapped on their own and unmapped when freed.
const MMAP_THRESHOLD: libc::c_int = 64 * 1024;
/// Free memory at the top of the heap beyond this is returned to the kernel at once.
const TRIM_THRESHOLD: libc::c_int = 64 * 1024;

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
