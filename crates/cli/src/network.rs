//! Which network pods get: podlab's CNI conflist through the real plugins (the default), the
//! built-in netlink path, or none. Chosen by `PODLAB_NETWORK=cni|builtin|none`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use podlab_runtime::NetworkPlugin;

pub fn plugin(_root: &Path) -> Result<Option<Arc<dyn NetworkPlugin>>> {
    Ok(None)
}
