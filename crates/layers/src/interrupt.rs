//! Ctrl-C without losing the clean-up: SIGINT, SIGTERM and SIGHUP only set a flag, the
//! benchmark loop checks it between runs ([`check`]) and returns [`Error::Interrupted`], and the
//! lab's teardown then stops every daemon and container by pid, as on any other error. The
//! daemons run in sessions of their own, so the terminal's SIGINT does not reach them first.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use crate::{Error, Result};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note(_signal: libc::c_int) {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Installs the handlers (once per process; call it from `main`).
pub fn install() -> Result<()> {
    let action = SigAction::new(
        SigHandler::Handler(note),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sigaction(signal, &action) }
            .map_err(|errno| podlab_ns::Error::sys("sigaction", errno))?;
    }
    Ok(())
}

pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// `Err(Interrupted)` once a signal came.
pub fn check() -> Result<()> {
    if requested() {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}
