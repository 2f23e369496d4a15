//! How a command gets the privileges it needs: pods need root; a namespace demo gets by as root
//! of a new user namespace.

use anyhow::Result;

/// Makes the current (single-threaded) process able to create namespaces. As root nothing is
/// needed; as another user it enters a new user namespace where it is root, and says so.
pub fn ensure_namespace_privileges() -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let uid = nix::unistd::getuid();
    podlab_ns::user::become_root_in_new_userns().map_err(|err| {
        crate::UsageError(format!(
            "not root, and no user namespace could be made for uid {uid} ({err}); run as root, \
             or enable user namespaces (sysctl user.max_user_namespaces)"
        ))
    })?;
    println!("(not root: running in a new user namespace where uid {uid} is mapped to root)");
    Ok(())
}

/// Pods need root, and a command that makes or reads pods says so before it makes anything
/// (no state root folder, no image store): a sandbox's namespaces, mounts and network need
/// CAP_SYS_ADMIN and CAP_NET_ADMIN over the host's namespaces, and an image's files keep the uids
/// they were built with, which only root may give. (A user namespace gives an unprivileged user
/// neither a network on the host's bridge nor files owned by other uids.)
pub fn require_root_for_pods() -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    Err(crate::UsageError(POD_NEEDS_ROOT.into()).into())
}

/// The one line a non-root user's pod command ends with (exit status 2).
pub const POD_NEEDS_ROOT: &str = "pods need root (CAP_SYS_ADMIN and CAP_NET_ADMIN for their namespaces, \
     mounts and network, and chown for image files); run as root (sudo podlab ...); without root, \
     the namespace demos (podlab demo all) and podlab ns run --map-root-user work in a user namespace";
