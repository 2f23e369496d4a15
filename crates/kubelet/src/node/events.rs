//! The agent's event recorder: kubelet's reasons and messages ([`crate::events`]) written to the
//! object store as `v1.Event`s about the pod, with `involvedObject.fieldPath` naming the
//! container (`spec.containers{app}`) as kubelet does. A repeat of the same event for the same
//! object bumps `count` and `lastTimestamp` of the one already stored, as client-go's event
//! correlator aggregates, so a crash loop is one `BackOff` event with a growing count.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Event, Pod};
use podlab_control::events::{self as store_events, reference_to};
use podlab_control::Store;

pub use podlab_control::events::{NORMAL, WARNING};

/// `source.component` of the agent's events.
pub const COMPONENT: &str = "kubelet";
/// `source.component` of the binding's `Scheduled` event.
pub const SCHEDULER: &str = "default-scheduler";
pub const SCHEDULED: &str = "Scheduled";

/// Stored events kept for aggregation; beyond this the memory is simply dropped.
const RECENT_LIMIT: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct EventKey {
    uid: String,
    field_path: Option<String>,
    reason: String,
    message: String,
}

/// Writes events; shared by every pod worker and probe thread.
#[derive(Debug)]
pub struct Recorder {
    store: Store,
    recent: Mutex<HashMap<EventKey, Event>>,
}

impl Recorder {
    pub fn new(store: Store) -> Recorder {
        Recorder {
            store,
            recent: Mutex::new(HashMap::new()),
        }
    }

    /// An event about the pod as a whole (`SandboxChanged`, `FailedCreatePodSandBox`).
    pub fn pod_event(&self, pod: &Pod, event_type: &str, reason: &str, message: &str) {
        self.emit(pod, None, event_type, reason, message, COMPONENT);
    }

    /// An event about one of the pod's containers (`Created`, `Started`, `Killing`, `BackOff`,
    /// `Unhealthy`, ...).
    pub fn container_event(
        &self,
        pod: &Pod,
        container: &str,
        event_type: &str,
        reason: &str,
        message: &str,
    ) {
        let field_path = field_path(pod, container);
        self.emit(pod, field_path, event_type, reason, message, COMPONENT);
    }

    /// The scheduler's `Successfully assigned <ns>/<pod> to <node>`.
    pub fn scheduled(&self, pod: &Pod, node: &str) {
        let (namespace, name, _) = crate::translate::identity(pod);
        let message = format!("Successfully assigned {namespace}/{name} to {node}");
        self.emit(pod, None, NORMAL, SCHEDULED, &message, SCHEDULER);
    }

    /// An event about the node (`FreeDiskSpaceFailed`), in namespace `default` as kubelet's
    /// node events are.
    pub fn node_event(&self, node: &str, event_type: &str, reason: &str, message: &str) {
        let involved = k8s_openapi::api::core::v1::ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            uid: Some(node.into()),
            namespace: Some("default".into()),
            ..Default::default()
        };
        if let Err(e) = store_events::record(
            &self.store,
            involved,
            event_type,
            reason,
            message,
            COMPONENT,
        ) {
            eprintln!("podlab node: recording event {reason} ({message}): {e}");
        }
    }

    /// Drops what is remembered of a pod's events (it is gone).
    pub fn forget(&self, uid: &str) {
        self.lock().retain(|key, _| key.uid != uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<EventKey, Event>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn emit(
        &self,
        pod: &Pod,
        field_path: Option<String>,
        event_type: &str,
        reason: &str,
        message: &str,
        component: &str,
    ) {
        let key = EventKey {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            field_path: field_path.clone(),
            reason: reason.into(),
            message: message.into(),
        };
        let mut recent = self.lock();
        if let Some(mut event) = recent.get(&key).cloned() {
            event.count = Some(event.count.unwrap_or(1) + 1);
            event.last_timestamp = Some(podlab_control::names::now());
            if let Ok(updated) = self.store.update(event) {
                recent.insert(key, updated);
                return;
            }
        }
        let mut involved = reference_to(pod);
        involved.field_path = field_path;
        match store_events::record(
            &self.store,
            involved,
            event_type,
            reason,
            message,
            component,
        ) {
            Ok(event) => {
                if recent.len() >= RECENT_LIMIT {
                    recent.clear();
                }
                recent.insert(key, event);
            }
            Err(e) => eprintln!("podlab node: recording event {reason} ({message}): {e}"),
        }
    }
}

/// kubelet's `fieldPath` of a container: `spec.containers{name}`, `spec.initContainers{name}`,
/// `spec.ephemeralContainers{name}`.
pub fn field_path(pod: &Pod, container: &str) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let list = if spec.containers.iter().any(|c| c.name == container) {
        "containers"
    } else if spec
        .init_containers
        .iter()
        .flatten()
        .any(|c| c.name == container)
    {
        "initContainers"
    } else if spec
        .ephemeral_containers
        .iter()
        .flatten()
        .any(|c| c.name == container)
    {
        "ephemeralContainers"
    } else {
        return None;
    };
    Some(format!("spec.{list}{{{container}}}"))
}
