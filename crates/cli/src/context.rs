//! What every pod command opens: podlab's root folder, the object store (the API server's
//! twin), the runtime (containerd's), and the image store.

use std::path::PathBuf;

use anyhow::{Context, Result};
use podlab_control::Store;
use podlab_runtime::config::RuntimeConfig;
use podlab_runtime::Runtime;

pub struct Ctx {
    pub root: PathBuf,
    pub store: Store,
    pub runtime_config: RuntimeConfig,
}

impl Ctx {
    /// `$PODLAB_ROOT` (default `/run/podlab` for root): `store/` holds the objects,
    /// `sandboxes/` the runtime's state, `images/` the image store.
    /// Refused, before anything is made, to a user who is not root: see
    /// [`crate::privilege::require_root_for_pods`].
    pub fn open() -> Result<Ctx> {
        crate::privilege::require_root_for_pods()?;
        let runtime_config = RuntimeConfig::from_env();
        let root = runtime_config.root.clone();
        podlab_runtime::state::private_state(&root, &runtime_config.image_root)?;
        let store = Store::open(root.join("store")).context("opening the object store")?;
        Ok(Ctx {
            root,
            store,
            runtime_config,
        })
    }

    pub fn runtime(&self) -> Result<Runtime> {
        let mut runtime =
            Runtime::open(self.runtime_config.clone()).context("opening the runtime")?;
        if let Some(network) = crate::network::plugin(&self.root)? {
            runtime.set_network_plugin(network);
        }
        Ok(runtime)
    }

    pub fn images(&self) -> Result<podlab_image::Store> {
        podlab_image::Store::open(&self.runtime_config.image_root)
            .context("opening the image store")
    }

    /// The node agent for this root, started if none runs (as kubelet runs on a node). An
    /// agent started this way exits after a minute without pods (`PODLAB_NODE_EXIT_WHEN_IDLE`
    /// overrides it), so that a demo or a test leaves no daemon behind.
    pub fn ensure_node(&self) -> Result<()> {
        let exe = std::env::current_exe().context("finding the podlab binary")?;
        let mut command = std::process::Command::new(exe);
        command
            .args(["node", "--background"])
            .env("PODLAB_ROOT", &self.root);
        if std::env::var_os(podlab_kubelet::node::config::ENV_EXIT_WHEN_IDLE).is_none() {
            command.env(podlab_kubelet::node::config::ENV_EXIT_WHEN_IDLE, "60s");
        }
        podlab_kubelet::node::ensure_running_with(command, &self.root)
            .context("starting the node agent (podlab node)")?;
        Ok(())
    }
}
