//! How a demo gets the privileges it needs: directly as root, or through a user namespace.

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
