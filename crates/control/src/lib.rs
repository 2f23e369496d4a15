//! # podlab-control: client-go and kube-controller-manager, on one host
//!
//! The layer above the kubelet in a cluster is an API server that stores objects and streams
//! their changes, and controllers that watch those changes through informers and act. podlab
//! has all three, small and real:
//!
//! * [`store`]: the object store (pods, replicasets, events) with resourceVersions, optimistic
//!   concurrency and watch, shared by every podlab process through files, a change log and a
//!   lock.
//! * [`indexer`] and [`indexes`]: client-go's ThreadSafeStore with custom indexes
//!   (`AddIndexers`, `ByIndex`), and the built-in index functions, among them the pod
//!   controller-UID index with its orphan key.
//! * [`informer`]: list + watch into an indexer, with event handlers.
//! * [`selector`]: label selectors (`matchLabels`, `matchExpressions`).
//! * [`manifest`]: `apps/v1` ReplicaSet manifests, decoded and validated as the API server does.
//! * [`replicaset`]: the ReplicaSet controller: a pure reconcile function and a driver.
//! * [`deployment`]: the Deployment controller (ReplicaSets named by `pod-template-hash`,
//!   revisions, RollingUpdate and Recreate) and the Deployment's manifest rules.
//! * [`events`]: `v1.Event`s as client-go's recorder writes them.

pub mod changelog;
pub mod config_data;
pub mod deployment;
pub mod durable;
pub mod error;
pub mod events;
pub mod indexer;
pub mod indexes;
pub mod informer;
pub mod kind;
pub mod manifest;
pub mod names;
pub mod replicaset;
pub mod selector;
pub mod store;
pub mod watch;

pub use changelog::EventType;
pub use deployment::DeploymentController;
pub use error::{Error, IndexError, Result};
pub use indexer::{index_func, IndexFunc, Indexer, Indexers};
pub use informer::{EventHandler, HandlerFuncs, Informer};
pub use kind::{controller_of, object_key, Kind, StoreObject};
pub use replicaset::{ControllerConfig, ReplicaSetController};
pub use selector::Selector;
pub use store::{PodDeletion, Preconditions, Store, DEFAULT_NAMESPACE};
pub use watch::{Watch, WatchEvent};
