//! The hook for pod networking beyond `lo`: containerd calls its CNI plugins here.
//!
//! RunPodSandbox calls [`NetworkPlugin::set_up`] with the pinned network namespace once the
//! pause process holds it and before the sandbox is Ready; the IPs it returns become the pod's
//! IPs (and the pod's line in `/etc/hosts`). StopPodSandbox calls [`NetworkPlugin::tear_down`]
//! after the containers are stopped and before the namespace is unpinned; a failed teardown
//! fails the stop, so that it can be retried while the namespace still exists (CNI wants a DEL
//! for every ADD). `hostNetwork` pods are never handed to the plugin.
//!
//! A plugin may also hand RunPodSandbox a network namespace it made and attached ahead of time
//! ([`NetworkPlugin::take_prepared`], a warm one): then pause joins that namespace instead of
//! making one, the ADD's result is the attachment's, and the teardown is the same as for a pod
//! attached on the way.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::Path;

use crate::config::{PodSandboxMetadata, PortMapping};
use crate::id::SandboxId;

pub type PluginError = Box<dyn std::error::Error + Send + Sync>;

/// The pod whose network is set up or torn down.
#[derive(Debug, Clone, Copy)]
pub struct PodNetwork<'a> {
    pub sandbox_id: &'a SandboxId,
    pub metadata: &'a PodSandboxMetadata,
    /// The pinned network namespace (`<sandbox>/ns/net`), for `CNI_NETNS`.
    pub netns: &'a Path,
    /// Where the namespace is for this call when it is not pinned: a `/proc/PID/fd/N` of the
    /// caller, which holds it (the DEL of a warm namespace after a failed shim start). `netns`
    /// still names the sandbox's pin, and so its folder.
    pub netns_now: Option<&'a Path>,
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
    /// Host ports to forward to the pod (CNI's `portMappings` capability); a plugin that
    /// cannot make them fails the set-up, never drops them.
    pub port_mappings: &'a [PortMapping],
}

/// What a set-up gave the pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkAttachment {
    /// The pod's IPs, the primary one first.
    pub ips: Vec<String>,
    /// The plugin's own record of the attachment (a CNI result), stored in sandbox.json and
    /// handed back to `tear_down`.
    pub result: Option<serde_json::Value>,
}

/// A network namespace made and attached before the pod asked for it: the pod's from now on.
#[derive(Debug)]
pub struct PreparedNetwork {
    /// The namespace (with `lo` up and the attachment in it); pause joins it.
    pub netns: OwnedFd,
    /// What its set-up gave it, as [`NetworkPlugin::set_up`] would have returned it.
    pub attachment: NetworkAttachment,
}

pub trait NetworkPlugin: Send + Sync {
    /// A name for messages (`cni`, `bridge`...).
    fn name(&self) -> &str;

    fn set_up(&self, pod: &PodNetwork<'_>) -> Result<NetworkAttachment, PluginError>;

    fn tear_down(
        &self,
        pod: &PodNetwork<'_>,
        result: Option<&serde_json::Value>,
    ) -> Result<(), PluginError>;

    /// A namespace attached ahead of time for `pod`, if the plugin has one ready; the plugin
    /// has recorded by then whatever its `tear_down` of `pod` needs. `pod.netns` is where the
    /// namespace will be pinned. None: RunPodSandbox makes the namespace and calls `set_up`.
    fn take_prepared(&self, _pod: &PodNetwork<'_>) -> Option<PreparedNetwork> {
        None
    }

    /// The node agent that used this plugin is stopping: what the network kept for the next
    /// pod (a bridge without a port) can go. Pods still attached keep theirs.
    fn node_stopping(&self) -> Result<(), PluginError> {
        Ok(())
    }
}

/// A TCP/IPv4 socket made inside the network namespace pinned at `netns`, for a port-forward's
/// upstream connection (a socket belongs to the namespace it was made in, whatever process
/// uses it later). A forked child joins the namespace, makes the socket and passes it back
/// over a unix socket (`SCM_RIGHTS`), so the caller never changes namespace and no address,
/// route or NAT rule is added anywhere. The caller must be single-threaded (it forks).
pub fn tcp_socket_in_netns(netns: &Path) -> crate::Result<std::os::fd::OwnedFd> {
    use crate::Error;
    use std::os::fd::{AsFd, AsRawFd};
    let (receiver, sender) = crate::tty::console_socket_pair()?;
    let ns = std::fs::File::open(netns)
        .map_err(|e| Error::io("opening the pod's network namespace", netns, e))?;
    // SAFETY: the caller is single-threaded; the child only makes a socket, sends it and exits.
    match unsafe { nix::unistd::fork() }.map_err(|e| Error::sys("fork", netns.display(), e))? {
        nix::unistd::ForkResult::Child => {
            let made = podlab_ns::ops::join(ns.as_fd(), podlab_ns::NsKind::Net)
                .map_err(|_| nix::Error::EINVAL)
                .and_then(|()| {
                    nix::sys::socket::socket(
                        nix::sys::socket::AddressFamily::Inet,
                        nix::sys::socket::SockType::Stream,
                        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
                        None,
                    )
                })
                .and_then(|socket| crate::tty::send_fd(sender.as_raw_fd(), socket.as_fd()));
            // SAFETY: leave without running the parent's atexit handlers.
            unsafe { libc::_exit(i32::from(made.is_err())) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(sender);
            let socket = crate::tty::receive_fd(receiver.as_fd());
            let _ = podlab_ns::child::wait_for(child);
            socket?.ok_or_else(|| {
                Error::Invalid(format!(
                    "failed to make a socket inside namespace {:?}",
                    netns.display().to_string()
                ))
            })
        }
    }
}
