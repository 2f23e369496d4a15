//! Events, as client-go's `EventRecorder` writes them (`Normal SuccessfulCreate Created pod:
//! web-x7k2p`), so that `podlab describe` and `podlab get events` show what controllers did.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::error::Result;
use crate::kind::StoreObject;
use crate::names;
use crate::store::Store;

pub const NORMAL: &str = "Normal";
pub const WARNING: &str = "Warning";

/// A reference to `object` for `involvedObject`.
pub fn reference_to<T: StoreObject>(object: &T) -> ObjectReference {
    let meta = object.metadata();
    ObjectReference {
        api_version: Some(T::STORE_KIND.api_version().into()),
        kind: Some(T::STORE_KIND.name().into()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}

/// Stores one event about `involved`, named `<object name>.<hex nanoseconds>` as client-go
/// names them.
pub fn record(
    store: &Store,
    involved: ObjectReference,
    event_type: &str,
    reason: &str,
    message: &str,
    component: &str,
) -> Result<Event> {
    let now = names::now();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}.{nanos:x}",
                involved.name.as_deref().unwrap_or("object")
            )),
            namespace: involved.namespace.clone(),
            ..Default::default()
        },
        involved_object: involved,
        type_: Some(event_type.into()),
        reason: Some(reason.into()),
        message: Some(message.into()),
        source: Some(EventSource {
            component: Some(component.into()),
            host: None,
        }),
        reporting_component: Some(component.into()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Default::default()
    };
    store.create(event)
}
