//! The kinds of object the store keeps, and what the store needs to know about each: its
//! resource name (the folder and the word in error messages), whether it has a `spec` whose
//! changes bump `metadata.generation`, and whether `status` is a subresource that only
//! [`Store::update_status`](crate::Store::update_status) may change.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// One kind of stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    ReplicaSet,
    /// apps/v1; its controller (kube-controller-manager's `deployment`) makes ReplicaSets.
    Deployment,
    Event,
    ConfigMap,
    /// Stored 0600 like every object file (the store folder is 0700); never printed but by
    /// `get -o yaml|json`, base64 as kubectl prints it.
    Secret,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Pod,
        Kind::ReplicaSet,
        Kind::Deployment,
        Kind::Event,
        Kind::ConfigMap,
        Kind::Secret,
    ];

    /// The `kind` field (`Pod`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::Deployment => "Deployment",
            Kind::Event => "Event",
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        }
    }

    /// The resource (`pods`): the store's folder, and the word kubectl's messages use.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Pod => "pods",
            Kind::ReplicaSet => "replicasets",
            Kind::Deployment => "deployments",
            Kind::Event => "events",
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Pod | Kind::Event | Kind::ConfigMap | Kind::Secret => "v1",
            Kind::ReplicaSet | Kind::Deployment => "apps/v1",
        }
    }

    /// Whether the API server keeps `metadata.generation` (bumped on every spec change).
    /// Pods have it since Kubernetes 1.33.
    pub fn has_generation(self) -> bool {
        matches!(self, Kind::Pod | Kind::ReplicaSet | Kind::Deployment)
    }

    /// Whether `status` is a subresource: a plain update keeps the stored status.
    pub fn has_status_subresource(self) -> bool {
        matches!(self, Kind::Pod | Kind::ReplicaSet | Kind::Deployment)
    }

    /// Parses what kubectl accepts for these resources: `pod`, `pods`, `po`, `rs`, `Pod`...
    pub fn parse(word: &str) -> Option<Kind> {
        match word.to_ascii_lowercase().as_str() {
            "pod" | "pods" | "po" => Some(Kind::Pod),
            "replicaset" | "replicasets" | "rs" | "replicasets.apps" => Some(Kind::ReplicaSet),
            "deployment" | "deployments" | "deploy" | "deployments.apps" => Some(Kind::Deployment),
            "event" | "events" | "ev" => Some(Kind::Event),
            "configmap" | "configmaps" | "cm" => Some(Kind::ConfigMap),
            "secret" | "secrets" => Some(Kind::Secret),
            _ => None,
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Kubernetes type that the store keeps.
pub trait StoreObject:
    k8s_openapi::Metadata<Ty = ObjectMeta>
    + Serialize
    + DeserializeOwned
    + Clone
    + Send
    + Sync
    + 'static
{
    const STORE_KIND: Kind;
}

impl StoreObject for Pod {
    const STORE_KIND: Kind = Kind::Pod;
}

impl StoreObject for ReplicaSet {
    const STORE_KIND: Kind = Kind::ReplicaSet;
}

impl StoreObject for Deployment {
    const STORE_KIND: Kind = Kind::Deployment;
}

impl StoreObject for Event {
    const STORE_KIND: Kind = Kind::Event;
}

impl StoreObject for ConfigMap {
    const STORE_KIND: Kind = Kind::ConfigMap;
}

impl StoreObject for Secret {
    const STORE_KIND: Kind = Kind::Secret;
}

/// client-go's `MetaNamespaceKeyFunc`: `namespace/name`, or `name` for cluster-scoped objects.
pub fn object_key(meta: &ObjectMeta) -> String {
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// The ownerReference with `controller: true` (`metav1.GetControllerOf`).
pub fn controller_of(
    meta: &ObjectMeta,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
}
