//! The built-in index functions, named as upstream names them.
//!
//! * [`NAMESPACE_INDEX`] (`namespace`): client-go's `MetaNamespaceIndexFunc`.
//! * [`POD_NODE_NAME_INDEX`] (`spec.nodeName`): kube-controller-manager's
//!   `AddPodNodeNameIndexer`; a pod not yet on a node is in no value.
//! * [`POD_CONTROLLER_UID_INDEX`] (`podControllerUID`): `AddPodControllerUIDIndexer`. A pod with
//!   a controller is under [`controller_index_key`] (`<namespace>/<controller uid>`); a pod
//!   without one is under [`orphan_index_key`] (`_ORPHAN_POD/<namespace>`). The namespace is in
//!   both keys on purpose: upstream added it to the orphan key (PR #132400) so that a
//!   controller only sees the orphans it may adopt, and folded the owner's namespace into the
//!   controlled key (PR #134654) so that a pod in another namespace cannot make itself part of a
//!   controller by copying its UID. A namespace is a DNS label, so it never collides with
//!   `_ORPHAN_POD`.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::error::IndexError;
use crate::indexer::{index_func, IndexFunc, Indexer, Indexers};
use crate::kind::controller_of;

pub const NAMESPACE_INDEX: &str = "namespace";
pub const POD_NODE_NAME_INDEX: &str = "spec.nodeName";
pub const POD_CONTROLLER_UID_INDEX: &str = "podControllerUID";
/// Upstream's `OrphanPodIndexKey`; the value used is [`orphan_index_key`].
pub const ORPHAN_POD_INDEX_KEY: &str = "_ORPHAN_POD";

/// The value under which the pods controlled by the object with `uid` in `namespace` are.
pub fn controller_index_key(namespace: &str, uid: &str) -> String {
    format!("{namespace}/{uid}")
}

/// The value under which the pods of `namespace` that have no controller are.
pub fn orphan_index_key(namespace: &str) -> String {
    format!("{ORPHAN_POD_INDEX_KEY}/{namespace}")
}

pub fn namespace_index_func<T: k8s_openapi::Metadata<Ty = ObjectMeta>>() -> IndexFunc<T> {
    index_func(|object: &T| vec![object.metadata().namespace.clone().unwrap_or_default()])
}

pub fn pod_node_name_index_func() -> IndexFunc<Pod> {
    index_func(|pod: &Pod| {
        pod.spec
            .as_ref()
            .and_then(|spec| spec.node_name.clone())
            .filter(|node| !node.is_empty())
            .into_iter()
            .collect()
    })
}

pub fn pod_controller_uid_index_func() -> IndexFunc<Pod> {
    index_func(|pod: &Pod| {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        vec![match controller_of(&pod.metadata) {
            Some(owner) => controller_index_key(namespace, &owner.uid),
            None => orphan_index_key(namespace),
        }]
    })
}

/// All three built-in pod indexes.
pub fn pod_indexers() -> Indexers<Pod> {
    Indexers::from([
        (NAMESPACE_INDEX.to_string(), namespace_index_func()),
        (POD_NODE_NAME_INDEX.to_string(), pod_node_name_index_func()),
        (
            POD_CONTROLLER_UID_INDEX.to_string(),
            pod_controller_uid_index_func(),
        ),
    ])
}

/// `AddPodControllerUIDIndexer`: registers the index unless it is there already.
pub fn add_pod_controller_uid_indexer(indexer: &Indexer<Pod>) -> Result<(), IndexError> {
    if indexer.has_index(POD_CONTROLLER_UID_INDEX) {
        return Ok(());
    }
    indexer.add_indexers(Indexers::from([(
        POD_CONTROLLER_UID_INDEX.to_string(),
        pod_controller_uid_index_func(),
    )]))
}
