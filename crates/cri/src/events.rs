//! `GetContainerEvents`: the CRI's event stream, as containerd's CRI plugin sends it to
//! kubelet's evented PLEG. Each event names a container (or a sandbox: containerd sends the
//! sandbox's own events with its id as the container id), says what happened to it
//! (CONTAINER_CREATED_EVENT, STARTED, STOPPED, DELETED), when (ns), and carries the sandbox's
//! status and the statuses of its containers at that moment.
//!
//! Where they come from:
//!
//! - CREATED, STARTED and DELETED, and the STOPPED of StopContainer, StopPodSandbox and
//!   RemovePodSandbox, from the RPCs that make them, right after the runtime did it (on the
//!   server's one thread, so before any later notice is looked at).
//! - STOPPED of what nobody asked to stop (a container that exited, a pause that died) from the
//!   shims' change notices ([`podlab_runtime::events`]): the shim sends the sandbox's id to
//!   `<root>/cri-events.sock` when it reaps something, and the server then looks at that
//!   sandbox's records. Nothing is polled: with no change, nothing runs. The same notices tell
//!   NRI plugins of containers that exited by themselves ([`crate::nri`]).
//!
//! A container's STOPPED is sent once: for a container that ran and exited while someone was
//! subscribed (its `finished_at`) and was not reported yet. A client gets what happens after
//! it subscribed (containerd keeps events five minutes for a subscriber to come; podlab keeps
//! none); one that falls more than [`CAPACITY`] events behind gets `ResourceExhausted` and the
//! stream ends, as kubelet then relists. Without subscribers the RPCs read nothing for events.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Mutex;

use podlab_runtime::status::{ContainerState, SandboxState};
use podlab_runtime::{ContainerFilter, ContainerId, SandboxId};
use tokio::sync::broadcast;
use tokio_stream::StreamExt;
use tonic::Status;

use crate::proto;
use crate::proto::ContainerEventType as Kind;
use crate::service::Cri;

/// How many events a subscriber may be behind before its stream ends.
pub const CAPACITY: usize = 1024;

/// The stream one subscriber reads.
pub type EventStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<proto::ContainerEventResponse, Status>> + Send>>;

/// The subscribers, and what was reported stopped.
pub struct Hub {
    /// None once the server stops: every stream ends, so the server's graceful shutdown does
    /// not wait for clients that would listen forever.
    sender: Mutex<Option<broadcast::Sender<proto::ContainerEventResponse>>>,
    /// Since when someone has been subscribed (ns): a container that finished before was not
    /// seen stopping.
    since_ns: Mutex<i64>,
    /// Containers and sandboxes whose STOPPED was sent; an id leaves with its DELETED.
    stopped: Mutex<HashSet<String>>,
}

impl Default for Hub {
    fn default() -> Hub {
        Hub {
            sender: Mutex::new(Some(broadcast::channel(CAPACITY).0)),
            since_ns: Mutex::new(0),
            stopped: Mutex::new(HashSet::new()),
        }
    }
}

impl Hub {
    /// A new subscriber's stream: the events from now on.
    pub fn subscribe(&self) -> Result<EventStream, Status> {
        let sender = self.sender.lock().unwrap();
        let sender = sender
            .as_ref()
            .ok_or_else(|| Status::unavailable("podlab cri is stopping"))?;
        if sender.receiver_count() == 0 {
            // The first subscriber: nothing before it is anyone's news.
            *self.since_ns.lock().unwrap() = podlab_runtime::liveness::now_ns();
            self.stopped.lock().unwrap().clear();
        }
        let receiver = sender.subscribe();
        let stream = tokio_stream::wrappers::BroadcastStream::new(receiver).map(|item| {
            item.map_err(|lagged| {
                Status::resource_exhausted(format!(
                    "the event stream's client fell behind ({lagged}); subscribe again and relist"
                ))
            })
        });
        // The first error ends the stream.
        let mut failed = false;
        let stream = stream.take_while(move |item| {
            let go_on = !failed;
            failed |= item.is_err();
            go_on
        });
        Ok(Box::pin(stream))
    }

    /// Ends every stream (the server stops).
    pub fn close(&self) {
        self.sender.lock().unwrap().take();
    }

    /// Whether someone listens: without, the RPCs read nothing for events.
    pub(crate) fn subscribed(&self) -> bool {
        self.sender
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|s| s.receiver_count() > 0)
    }

    /// Marks `id` stopped; false when it already was.
    fn mark_stopped(&self, id: &str) -> bool {
        self.stopped.lock().unwrap().insert(id.to_owned())
    }

    fn forget(&self, id: &str) {
        self.stopped.lock().unwrap().remove(id);
    }
}

impl Cri {
    /// Sends one event: `id` (a container, or the sandbox itself) of `sandbox`, with the
    /// sandbox's status and its containers' statuses now, as containerd's
    /// `generateAndSendContainerEvent` gathers them (no sandbox status once it is removed).
    pub(crate) fn send_event(&self, id: &str, sandbox: &SandboxId, kind: Kind) {
        let hub = self.events();
        if !hub.subscribed() {
            return;
        }
        let runtime = self.runtime();
        let pod_sandbox_status = runtime
            .pod_sandbox_status(sandbox)
            .ok()
            .map(|s| self.sandbox_status(&s));
        let filter = ContainerFilter {
            sandbox_id: Some(sandbox.clone()),
            ..Default::default()
        };
        let containers_statuses = runtime
            .list_containers(&filter)
            .unwrap_or_default()
            .iter()
            .map(|c| self.container_status_proto(c))
            .collect();
        let event = proto::ContainerEventResponse {
            container_id: id.to_owned(),
            container_event_type: kind as i32,
            created_at: podlab_runtime::liveness::now_ns(),
            pod_sandbox_status,
            containers_statuses,
        };
        if let Some(sender) = self.events().sender.lock().unwrap().as_ref() {
            let _ = sender.send(event);
        }
    }

    /// RunPodSandbox made `sandbox`: CREATED, then STARTED, both with the sandbox's id.
    pub(crate) fn sandbox_started(&self, sandbox: &str) {
        if let Ok(id) = SandboxId::parse(sandbox) {
            self.send_event(sandbox, &id, Kind::ContainerCreatedEvent);
            self.send_event(sandbox, &id, Kind::ContainerStartedEvent);
        }
    }

    /// CreateContainer or StartContainer did `kind` to `container`.
    pub(crate) fn container_event(&self, container: &str, kind: Kind) {
        if !self.events().subscribed() {
            return;
        }
        let runtime = self.runtime();
        let Ok(id) = runtime.resolve_container_id(container) else {
            return;
        };
        if let Ok(status) = runtime.container_status(&id) {
            self.send_event(id.as_str(), &status.sandbox_id, kind);
        }
    }

    /// Looks at `sandbox`'s records after a change (a shim's notice, a Stop): STOPPED for each
    /// container that ran, exited since the server started and was not reported, then for the
    /// sandbox when it is no longer ready and was not reported (`stopping`: a Stop of a
    /// sandbox that was ready).
    pub(crate) fn observe_sandbox(&self, sandbox: &SandboxId, stopping: bool) {
        let runtime = self.runtime();
        let hub = self.events();
        if !hub.subscribed() {
            return;
        }
        let since = *hub.since_ns.lock().unwrap();
        let filter = ContainerFilter {
            sandbox_id: Some(sandbox.clone()),
            ..Default::default()
        };
        for container in runtime.list_containers(&filter).unwrap_or_default() {
            if container.state == ContainerState::Exited
                && container.started_at > 0
                && container.finished_at >= since
                && hub.mark_stopped(container.id.as_str())
            {
                self.send_event(container.id.as_str(), sandbox, Kind::ContainerStoppedEvent);
            }
        }
        let Ok(status) = runtime.pod_sandbox_status(sandbox) else {
            return;
        };
        let not_ready = status.state == SandboxState::NotReady;
        if (not_ready || stopping) && hub.mark_stopped(sandbox.as_str()) {
            self.send_event(sandbox.as_str(), sandbox, Kind::ContainerStoppedEvent);
        }
    }

    /// What RemoveContainer is about to remove: a running container is stopped first (as
    /// the runtime would), so that its STOPPED comes before its DELETED. Returns its sandbox.
    pub(crate) fn before_container_removal(&self, container: &ContainerId) -> Option<SandboxId> {
        if !self.events().subscribed() {
            return None;
        }
        let runtime = self.runtime();
        let status = runtime.container_status(container).ok()?;
        if status.state == ContainerState::Running
            && runtime
                .stop_container(container, std::time::Duration::ZERO)
                .is_ok()
        {
            self.observe_sandbox(&status.sandbox_id, false);
        }
        Some(status.sandbox_id)
    }

    /// RemoveContainer removed `container` of `sandbox`: DELETED.
    pub(crate) fn container_removed(&self, container: &ContainerId, sandbox: &SandboxId) {
        self.send_event(container.as_str(), sandbox, Kind::ContainerDeletedEvent);
        self.events().forget(container.as_str());
    }

    /// What RemovePodSandbox is about to remove: its containers, each with whether it runs,
    /// and whether the sandbox is ready.
    pub(crate) fn before_sandbox_removal(&self, sandbox: &SandboxId) -> Removal {
        if !self.events().subscribed() {
            return Removal {
                sandbox: sandbox.clone(),
                containers: Vec::new(),
                ready: false,
            };
        }
        let filter = ContainerFilter {
            sandbox_id: Some(sandbox.clone()),
            ..Default::default()
        };
        let runtime = self.runtime();
        Removal {
            sandbox: sandbox.clone(),
            containers: runtime
                .list_containers(&filter)
                .unwrap_or_default()
                .into_iter()
                .map(|c| (c.id, c.state == ContainerState::Running))
                .collect(),
            ready: runtime
                .pod_sandbox_status(sandbox)
                .is_ok_and(|s| s.state == SandboxState::Ready),
        }
    }

    /// RemovePodSandbox, with subscribers, after the stop: each container removed and its
    /// DELETED sent while the sandbox is still there, as containerd's RemovePodSandbox removes
    /// them one by one before the sandbox.
    pub(crate) fn remove_containers_of(&self, removal: &Removal) -> Result<(), Status> {
        for (container, _) in &removal.containers {
            self.runtime()
                .remove_container(container)
                .map_err(crate::status::from_runtime)?;
            self.container_removed(container, &removal.sandbox);
        }
        Ok(())
    }

    /// RemovePodSandbox removed `sandbox` (stopped and emptied first): the sandbox's STOPPED if
    /// it was ready and none was sent, then its DELETED.
    pub(crate) fn sandbox_removed(&self, sandbox: &SandboxId, removal: &Removal) {
        let hub = self.events();
        if removal.ready && hub.mark_stopped(sandbox.as_str()) {
            self.send_event(sandbox.as_str(), sandbox, Kind::ContainerStoppedEvent);
        }
        self.send_event(sandbox.as_str(), sandbox, Kind::ContainerDeletedEvent);
        hub.forget(sandbox.as_str());
    }
}

/// A sandbox about to be removed, as [`Cri::before_sandbox_removal`] saw it.
pub(crate) struct Removal {
    sandbox: SandboxId,
    containers: Vec<(ContainerId, bool)>,
    ready: bool,
}

impl Removal {
    /// Whether the removal stops something: the sandbox is ready or a container runs.
    pub(crate) fn stops_something(&self) -> bool {
        self.ready || self.containers.iter().any(|(_, running)| *running)
    }
}

/// The shims' notice socket, `<root>/cri-events.sock` (a file a killed server left is
/// replaced). None, said once on stderr, when it cannot be bound (a root whose path is too
/// long): then no STOPPED of a stop that no RPC made is sent.
pub(crate) fn bind(cri: &Cri) -> Option<(tokio::net::UnixDatagram, RemoveOnDrop)> {
    let path = podlab_runtime::events::cri_socket_path(cri.runtime().layout().root());
    let _ = std::fs::remove_file(&path);
    match tokio::net::UnixDatagram::bind(&path) {
        Ok(socket) => Some((socket, RemoveOnDrop(path))),
        Err(e) => {
            eprintln!(
                "podlab cri: no change notices from the shims ({}: {e}); GetContainerEvents \
                 sends no STOPPED of a stop that no RPC made",
                path.display()
            );
            None
        }
    }
}

/// The shims' notices, for as long as the server runs: each names a sandbox to look at.
pub(crate) async fn listen(
    socket: Option<(tokio::net::UnixDatagram, RemoveOnDrop)>,
    cri: std::sync::Arc<Cri>,
) {
    let Some((socket, _remove)) = socket else {
        return;
    };
    let mut buffer = [0u8; 128];
    while let Ok(length) = socket.recv(&mut buffer).await {
        let id = std::str::from_utf8(&buffer[..length])
            .ok()
            .and_then(|text| SandboxId::parse(text).ok());
        if let Some(id) = id {
            cri.observe_sandbox(&id, false);
            cri.nri_observe_sandbox(&id).await;
        }
    }
}

/// Removes the notice socket when the listener ends (the server stops).
pub(crate) struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
