//! The uts namespace: the hostname and the NIS domain name that `uname(2)` reports.
//!
//! Each uts namespace has its own pair; setting them inside changes nothing outside. A pod has
//! one uts namespace that all its containers join, which is why every container of a pod reports
//! the pod's hostname. The domain name is the old NIS one (`domainname`), not DNS; the kernel's
//! value when nobody set it is `(none)`.

use crate::{Error, NsKind, Result};

/// Sets the hostname of the calling thread's uts namespace (`sethostname(2)`).
pub fn set_hostname(name: &str) -> Result<()> {
    nix::unistd::sethostname(name).map_err(|e| Error::sys_on("sethostname", NsKind::Uts, e))
}

/// The hostname of the calling thread's uts namespace.
pub fn hostname() -> Result<String> {
    let name =
        nix::unistd::gethostname().map_err(|e| Error::sys_on("gethostname", NsKind::Uts, e))?;
    Ok(name.to_string_lossy().into_owned())
}

/// Sets the NIS domain name of the calling thread's uts namespace (`setdomainname(2)`).
pub fn set_domainname(name: &str) -> Result<()> {
    // SAFETY: the pointer and length describe `name`, which outlives the call.
    let done = unsafe { libc::setdomainname(name.as_ptr().cast(), name.len()) };
    nix::errno::Errno::result(done)
        .map(drop)
        .map_err(|e| Error::sys_on("setdomainname", NsKind::Uts, e))
}

/// The NIS domain name of the calling thread's uts namespace; `(none)` when unset.
pub fn domainname() -> Result<String> {
    let uts = nix::sys::utsname::uname().map_err(|e| Error::sys_on("uname", NsKind::Uts, e))?;
    Ok(uts.domainname().to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_kernel_reports() {
        let from_proc = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(hostname().unwrap(), from_proc.trim_end());
        let from_proc = std::fs::read_to_string("/proc/sys/kernel/domainname").unwrap();
        assert_eq!(domainname().unwrap(), from_proc.trim_end());
    }

    #[test]
    fn a_refused_set_names_the_namespace() {
        let err = set_hostname(&"x".repeat(300)).unwrap_err();
        assert!(
            err.to_string().starts_with("sethostname (uts namespace)"),
            "{err}"
        );
    }
}
