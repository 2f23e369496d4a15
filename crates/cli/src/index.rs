//! `podlab get pods --index NAME=KEY`: the answer of one informer index, the way a controller
//! finds its pods (client-go's `ByIndex`), instead of a listing.
//!
//! * `controller=<uid>`: pods whose controlling ownerReference has that UID
//!   (`podControllerUID`, keyed `<namespace>/<uid>`);
//! * `controller=orphan`: pods with no controller (the `_ORPHAN_POD` key);
//! * `node=<name>`: pods bound to that node (`spec.nodeName`);
//! * `namespace=<ns>`: pods of that namespace.

use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::Pod;
use podlab_control::indexes::{
    controller_index_key, orphan_index_key, pod_indexers, NAMESPACE_INDEX,
    POD_CONTROLLER_UID_INDEX, POD_NODE_NAME_INDEX,
};
use podlab_control::Informer;
use serde_json::Value;

use crate::context::Ctx;

pub fn pods_by_index(ctx: &Ctx, spec: &str, namespace: Option<&str>) -> Result<Vec<Value>> {
    let Some((name, key)) = spec.split_once('=') else {
        bail!("--index {spec:?}: expected NAME=KEY, e.g. controller=orphan");
    };
    let ns = namespace.unwrap_or("default");
    let (index, key) = match name {
        "controller" if key == "orphan" => (POD_CONTROLLER_UID_INDEX, orphan_index_key(ns)),
        "controller" => (POD_CONTROLLER_UID_INDEX, controller_index_key(ns, key)),
        "node" => (POD_NODE_NAME_INDEX, key.to_string()),
        "namespace" => (NAMESPACE_INDEX, key.to_string()),
        other => bail!("no index {other:?}: podlab's pod indexes are controller, node, namespace"),
    };
    let mut informer = Informer::<Pod>::with_indexers(ctx.store.clone(), pod_indexers());
    informer.sync()?;
    let pods = informer.indexer().by_index(index, &key)?;
    pods.iter()
        .map(|p| Ok(serde_json::to_value(p.as_ref())?))
        .collect()
}
