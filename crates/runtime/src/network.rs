//! The hook for pod networking beyond `lo`: containerd calls its CNI plugins here.
//!
//! RunPodSandbox calls [`NetworkPlugin::set_up`] with the pinned network namespace once the
//! pause process holds it and before the sandbox is Ready; the IPs it returns become the pod's
//! IPs (and the pod's line in `/etc/hosts`). StopPodSandbox calls [`NetworkPlugin::tear_down`]
//! after the containers are stopped and before the namespace is unpinned; a failed teardown
//! fails the stop, so that it can be retried while the namespace still exists (CNI wants a DEL
//! for every ADD). `hostNetwork` pods are never handed to the plugin.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::PodSandboxMetadata;
use crate::id::SandboxId;

pub type PluginError = Box<dyn std::error::Error + Send + Sync>;

/// The pod whose network is set up or torn down.
#[derive(Debug, Clone, Copy)]
pub struct PodNetwork<'a> {
    pub sandbox_id: &'a SandboxId,
    pub metadata: &'a PodSandboxMetadata,
    /// The pinned network namespace (`<sandbox>/ns/net`), for `CNI_NETNS`.
    pub netns: &'a Path,
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
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

pub trait NetworkPlugin: Send + Sync {
    /// A name for messages (`cni`, `bridge`...).
    fn name(&self) -> &str;

    fn set_up(&self, pod: &PodNetwork<'_>) -> Result<NetworkAttachment, PluginError>;

    fn tear_down(
        &self,
        pod: &PodNetwork<'_>,
        result: Option<&serde_json::Value>,
    ) -> Result<(), PluginError>;

    /// The node agent that used this plugin is stopping: what the network kept for the next
    /// pod (a bridge without a port) can go. Pods still attached keep theirs.
    fn node_stopping(&self) -> Result<(), PluginError> {
        Ok(())
    }
}
