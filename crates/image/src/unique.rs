//! Names no other writer takes: for what is made under a name of its own first and then
//! renamed (a blob being written, a staging folder, what a collection throws away). The
//! process id keeps processes apart, a counter the threads and calls of one process.

use std::sync::atomic::{AtomicU64, Ordering};

/// `PID-N`, with N new for every call in this process.
pub(crate) fn suffix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}-{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_call_gets_a_suffix_of_its_own_naming_this_process() {
        let (a, b) = (super::suffix(), super::suffix());
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("{}-", std::process::id())), "{a}");
    }
}
