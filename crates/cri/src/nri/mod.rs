//! NRI, the Node Resource Interface (containerd/nri): plugins connect to a socket of the
//! runtime's, and the runtime tells each of them of every pod and container it runs, waiting
//! for its answer at each step. containerd 2 and CRI-O serve it; `podlab cri --nri-socket PATH`
//! does too, so that the same plugins (and critest's NRI specs) run against podlab.
//!
//! A plugin's life, as containerd's adaptation leads it:
//!
//! 1. it connects and calls `Runtime.RegisterPlugin` (its name and index);
//! 2. the runtime calls `Plugin.Configure` (the runtime's name, the timeouts) and learns which
//!    events the plugin wants (a bit mask of [`api::Event`]);
//! 3. the runtime calls `Plugin.Synchronize` with every pod and container it has. Events that
//!    happen meanwhile wait for it to end, so that the plugin hears of each container once,
//!    in the list or as an event, never neither;
//! 4. then each event it subscribed to: `CreateContainer`, `UpdateContainer` and
//!    `StopContainer` as their own calls, the others as `StateChange`. Plugins are called one
//!    after the other, by index.
//!
//! A pod (a container) whose `RunPodSandbox` (`CreateContainer`) call is under way is hidden
//! from the CRI, as if it did not exist yet ([`Nri::hides`]); if a plugin fails the call, the
//! RPC fails and what was made is removed. A plugin that does not answer within its timeout is
//! disconnected.
//!
//! A plugin's `CreateContainer` answer may adjust the container before it starts
//! ([`adjust`]: environment, args, annotations, bind mounts, `oom_score_adj`, cgroup limits)
//! and update other containers' resources; its `UpdateContainer` answer may change the update
//! UpdateContainerResources is about to write; `StopContainer`'s answer and a plugin's own
//! `UpdateContainers` may update resources too, and the latter evict (stop) containers.
//! Validator plugins (ValidateContainerAdjustment) are then shown the merged adjustment and may
//! reject it. What podlab cannot apply fails the creation or the update, naming the field;
//! nothing is dropped silently.

#[allow(
    clippy::all,
    missing_docs,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls,
    rustdoc::broken_intra_doc_links
)]
pub mod api {
    //! The NRI messages, generated from `proto/nri.proto` (containerd/nri v0.12.1 `pkg/api`).
    tonic::include_proto!("nri.pkg.api.v1alpha1");
}
pub mod adjust;
pub mod describe;
pub mod ttrpc;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::service::Cri;
use api::Event;

/// How long a plugin has to answer Configure and Synchronize (containerd's default).
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a plugin has to answer an event (containerd's default).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

#[derive(Debug, thiserror::Error)]
pub enum NriError {
    #[error("NRI plugin {plugin}: {method} failed: {message}")]
    Plugin {
        plugin: String,
        method: &'static str,
        message: String,
    },
    #[error(
        "NRI plugin {plugin}: {method}: no answer within {timeout:?}; the plugin was disconnected"
    )]
    Timeout {
        plugin: String,
        method: &'static str,
        timeout: Duration,
    },
    #[error("NRI plugin {plugin}: {method}: the plugin's connection closed before it answered")]
    Closed {
        plugin: String,
        method: &'static str,
    },
    #[error("NRI plugin {plugin}: {method}: its answer is not a {method} response: {cause}")]
    Decode {
        plugin: String,
        method: &'static str,
        cause: prost::DecodeError,
    },
    #[error("NRI plugin {plugin}: CreateContainer: its adjustment {}", adjust::refusal_text(.refusal))]
    Adjustment {
        plugin: String,
        refusal: adjust::Refusal,
    },
    #[error("NRI plugin {plugin} rejected the container's adjustment: {reason}")]
    Rejected { plugin: String, reason: String },
    #[error("NRI plugin {plugin}: UpdateContainer: its update {}", adjust::refusal_text(.refusal))]
    Update {
        plugin: String,
        refusal: adjust::Refusal,
    },
}

/// What the plugins answered to a CreateContainer: the container adjusted (None: as it
/// was), and the updates of other containers they asked for, each with its plugin.
pub struct CreateAnswers {
    pub adjusted: Option<adjust::Merge>,
    pub updates: Vec<(String, api::ContainerUpdate)>,
}

/// What the plugins answered to an UpdateContainerResources: the container's resources as
/// they changed them, and the updates of other containers they asked for.
pub struct UpdateAnswers {
    pub resources: api::LinuxResources,
    pub updates: Vec<(String, api::ContainerUpdate)>,
}

/// The runtime's side of NRI: the socket, the plugins on it, and the pods and containers whose
/// creating hook is still under way.
pub struct Nri {
    socket: PathBuf,
    plugins: Mutex<Vec<Arc<Plugin>>>,
    /// Told whenever a plugin ends its Synchronize or goes away.
    synced: Notify,
    hidden: Mutex<HashSet<String>>,
    /// Containers whose stop the plugins were told of (StopContainer is told once, whether
    /// the container was stopped or exited by itself); an id leaves when it is removed.
    stop_told: Mutex<HashSet<String>>,
    /// `--trace`: each call to a plugin printed with its time, below its RPC.
    pub(crate) trace: bool,
}

impl Nri {
    pub fn new(socket: &Path, trace: bool) -> Nri {
        Nri {
            trace,
            socket: socket.to_path_buf(),
            plugins: Mutex::default(),
            synced: Notify::new(),
            hidden: Mutex::default(),
            stop_told: Mutex::default(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether the CRI must not show `id` yet: its RunPodSandbox or CreateContainer hook is
    /// under way.
    pub fn hides(&self, id: &str) -> bool {
        self.hidden.lock().unwrap().contains(id)
    }

    pub(crate) fn hide(&self, id: &str) {
        self.hidden.lock().unwrap().insert(id.to_string());
    }

    pub(crate) fn show(&self, id: &str) {
        self.hidden.lock().unwrap().remove(id);
    }

    /// Whether no plugin is connected past its registration: the hooks then tell nobody and
    /// describe nothing (a pod or container is still hidden and shown, so that a plugin that
    /// registers meanwhile hears of it in its Synchronize or as an event).
    pub fn idle(&self) -> bool {
        self.plugins.lock().unwrap().is_empty()
    }

    /// Whether the plugins are still to hear of `container`'s stop; from now on they are not.
    pub(crate) fn first_stop(&self, container: &str) -> bool {
        self.stop_told.lock().unwrap().insert(container.to_string())
    }

    /// `container` was removed.
    pub(crate) fn forget_container(&self, container: &str) {
        self.stop_told.lock().unwrap().remove(container);
    }

    /// Calls `method` of `plugin`, printed with its time under `--trace`.
    async fn call<R: prost::Message + Default>(
        &self,
        plugin: &Plugin,
        method: &'static str,
        request: &impl prost::Message,
        timeout: Duration,
    ) -> Result<R, NriError> {
        let started = std::time::Instant::now();
        let answer = plugin.call(method, request, timeout).await;
        if self.trace {
            let outcome = if answer.is_ok() { "" } else { " (failed)" };
            crate::service::print_step(
                &format!("NRI {method}{outcome}"),
                &plugin.name(),
                started.elapsed().as_secs_f64() * 1e3,
            );
        }
        answer
    }

    /// The plugins that want `event`, by index, once no plugin is synchronizing.
    async fn subscribers(&self, event: Event) -> Vec<Arc<Plugin>> {
        loop {
            let notified = self.synced.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let synchronizing = self
                .plugins
                .lock()
                .unwrap()
                .iter()
                .any(|p| p.state() == State::Synchronizing);
            if !synchronizing {
                break;
            }
            // Bounded: a Synchronize that does not end in its timeout closes its plugin.
            let _ = tokio::time::timeout(REGISTRATION_TIMEOUT, notified).await;
        }
        let mut plugins: Vec<_> = self
            .plugins
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.state() == State::Ready && p.wants(event))
            .cloned()
            .collect();
        plugins.sort_by_key(|p| p.order());
        plugins
    }

    /// Tells the plugins of a pod's or a container's step (`StateChange`); the first plugin
    /// that fails it fails the step.
    pub async fn state_change(
        &self,
        event: Event,
        pod: &api::PodSandbox,
        container: Option<&api::Container>,
    ) -> Result<(), NriError> {
        let change = api::StateChangeEvent {
            event: event as i32,
            pod: Some(pod.clone()),
            container: container.cloned(),
        };
        for plugin in self.subscribers(event).await {
            self.call::<api::Empty>(&plugin, "StateChange", &change, REQUEST_TIMEOUT)
                .await?;
        }
        Ok(())
    }

    /// [`Nri::state_change`] of a step that has happened: a plugin's error cannot undo it and is
    /// written to stderr.
    pub async fn tell(
        &self,
        event: Event,
        pod: &api::PodSandbox,
        container: Option<&api::Container>,
    ) {
        if let Err(e) = self.state_change(event, pod, container).await {
            eprintln!("podlab cri: {e}");
        }
    }

    /// CreateContainer: each plugin may veto the container, adjust it (shown to the next
    /// plugin adjusted) and ask for updates of other containers. Evictions asked here are
    /// written to stderr and not made, as containerd makes none.
    pub async fn create_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
    ) -> Result<CreateAnswers, NriError> {
        let mut merge = adjust::Merge::new(container.clone());
        let mut updates = Vec::new();
        let mut consulted = Vec::new();
        for plugin in self.subscribers(Event::CreateContainer).await {
            let (index, name) = plugin.order();
            consulted.push(api::PluginInstance { name, index });
            let request = api::CreateContainerRequest {
                pod: Some(pod.clone()),
                container: Some(merge.container.clone()),
            };
            let reply: api::CreateContainerResponse = self
                .call(&plugin, "CreateContainer", &request, REQUEST_TIMEOUT)
                .await?;
            if let Some(adjustment) = &reply.adjust {
                merge.apply(&plugin.name(), adjustment).map_err(|refusal| {
                    NriError::Adjustment {
                        plugin: plugin.name(),
                        refusal,
                    }
                })?;
            }
            updates.extend(reply.update.into_iter().map(|u| (plugin.name(), u)));
            if !reply.evict.is_empty() {
                eprintln!(
                    "podlab cri: NRI plugin {}: CreateContainer asked for {} evictions; as containerd, podlab makes none there (UpdateContainers evicts)",
                    plugin.name(),
                    reply.evict.len()
                );
            }
        }
        self.validate(pod, container, &merge, &updates, &consulted)
            .await?;
        Ok(CreateAnswers {
            adjusted: merge.changed().then_some(merge),
            updates,
        })
    }

    /// ValidateContainerAdjustment, as containerd asks it once the adjustment is merged: each
    /// validator plugin is shown the container as it was, the pending adjustment and updates,
    /// who made them and which plugins were asked, and may reject the container.
    async fn validate(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
        merge: &adjust::Merge,
        updates: &[(String, api::ContainerUpdate)],
        consulted: &[api::PluginInstance],
    ) -> Result<(), NriError> {
        let validators = self.subscribers(Event::ValidateContainerAdjustment).await;
        if validators.is_empty() {
            return Ok(());
        }
        let request = api::ValidateContainerAdjustmentRequest {
            pod: Some(pod.clone()),
            container: Some(container.clone()),
            adjust: Some(merge.pending.clone()),
            update: updates.iter().map(|(_, u)| u.clone()).collect(),
            owners: Some(merge.owners()),
            plugins: consulted.to_vec(),
        };
        for validator in validators {
            let reply: api::ValidateContainerAdjustmentResponse = self
                .call(
                    &validator,
                    "ValidateContainerAdjustment",
                    &request,
                    REQUEST_TIMEOUT,
                )
                .await?;
            if reply.reject {
                return Err(NriError::Rejected {
                    plugin: validator.name(),
                    reason: reply.reason,
                });
            }
        }
        Ok(())
    }

    /// UpdateContainer, before UpdateContainerResources writes `requested`: each plugin may
    /// change the update (an update of this container in its answer, merged by the owners
    /// rule) and ask for updates of others. Evictions asked here are written to stderr and not
    /// made, as containerd makes none.
    pub async fn update_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
        requested: api::LinuxResources,
    ) -> Result<UpdateAnswers, NriError> {
        let mut merge = adjust::Merge::new(api::Container {
            linux: Some(api::LinuxContainer {
                resources: Some(requested),
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut updates = Vec::new();
        for plugin in self.subscribers(Event::UpdateContainer).await {
            let request = api::UpdateContainerRequest {
                pod: Some(pod.clone()),
                container: Some(container.clone()),
                linux_resources: Some(merge.resources()),
            };
            let reply: api::UpdateContainerResponse = self
                .call(&plugin, "UpdateContainer", &request, REQUEST_TIMEOUT)
                .await?;
            for update in reply.update {
                if update.container_id != container.id {
                    updates.push((plugin.name(), update));
                    continue;
                }
                let wanted = update.linux.and_then(|l| l.resources).unwrap_or_default();
                merge
                    .update_resources(&plugin.name(), &wanted)
                    .map_err(|refusal| NriError::Update {
                        plugin: plugin.name(),
                        refusal,
                    })?;
            }
            if !reply.evict.is_empty() {
                eprintln!(
                    "podlab cri: NRI plugin {}: UpdateContainer asked for {} evictions; as containerd, podlab makes none there (UpdateContainers evicts)",
                    plugin.name(),
                    reply.evict.len()
                );
            }
        }
        Ok(UpdateAnswers {
            resources: merge.resources(),
            updates,
        })
    }

    /// StopContainer: told after the container stopped. The updates the plugins ask for in
    /// return, each with the plugin that asked.
    pub async fn stop_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
    ) -> Result<Vec<(String, api::ContainerUpdate)>, NriError> {
        let request = api::StopContainerRequest {
            pod: Some(pod.clone()),
            container: Some(container.clone()),
        };
        let mut updates = Vec::new();
        for plugin in self.subscribers(Event::StopContainer).await {
            let reply: api::StopContainerResponse = self
                .call(&plugin, "StopContainer", &request, REQUEST_TIMEOUT)
                .await?;
            updates.extend(reply.update.into_iter().map(|u| (plugin.name(), u)));
        }
        Ok(updates)
    }

    fn forget(&self, plugin: &Arc<Plugin>) {
        let mut plugins = self.plugins.lock().unwrap();
        plugins.retain(|p| !Arc::ptr_eq(p, plugin));
        if plugins.is_empty() {
            // Nobody left to tell of a stop: a plugin that comes hears of them in Synchronize.
            self.stop_told.lock().unwrap().clear();
        }
        drop(plugins);
        self.synced.notify_waiters();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum State {
    Connected,
    Synchronizing,
    Ready,
    Closed,
}

/// One connected plugin: what it registered as, the events it wants, and its calls waiting for
/// an answer.
struct Plugin {
    /// Its name and index, from RegisterPlugin.
    identity: OnceLock<(String, String)>,
    events: AtomicI32,
    state: AtomicU8,
    /// Frames for the connection's writer.
    out: mpsc::UnboundedSender<Vec<u8>>,
    pending: Mutex<HashMap<u32, oneshot::Sender<ttrpc::Response>>>,
    next_stream: AtomicU32,
    /// Ends the connection (a plugin that timed out).
    closing: Notify,
}

impl Plugin {
    fn new(out: mpsc::UnboundedSender<Vec<u8>>) -> Plugin {
        Plugin {
            identity: OnceLock::new(),
            events: AtomicI32::new(0),
            state: AtomicU8::new(State::Connected as u8),
            out,
            pending: Mutex::default(),
            // ttrpc clients number their streams 1, 3, 5…
            next_stream: AtomicU32::new(1),
            closing: Notify::new(),
        }
    }

    /// `NN-name`, as containerd names plugins.
    fn name(&self) -> String {
        match self.identity.get() {
            Some((name, index)) => format!("{index}-{name}"),
            None => "(unregistered)".to_string(),
        }
    }

    fn order(&self) -> (String, String) {
        self.identity
            .get()
            .map(|(name, index)| (index.clone(), name.clone()))
            .unwrap_or_default()
    }

    fn state(&self) -> State {
        match self.state.load(Ordering::SeqCst) {
            0 => State::Connected,
            1 => State::Synchronizing,
            2 => State::Ready,
            _ => State::Closed,
        }
    }

    fn set_state(&self, state: State) {
        self.state.store(state as u8, Ordering::SeqCst);
    }

    fn wants(&self, event: Event) -> bool {
        let bit = 1i32 << (event as i32 - 1);
        self.events.load(Ordering::SeqCst) & bit != 0
    }

    /// Calls `method` of the plugin's service and waits at most `timeout` for its answer; a
    /// plugin that lets it pass is disconnected, as containerd does.
    async fn call<R: prost::Message + Default>(
        &self,
        method: &'static str,
        request: &impl prost::Message,
        timeout: Duration,
    ) -> Result<R, NriError> {
        let stream = self.next_stream.fetch_add(2, Ordering::SeqCst);
        let (answer, answered) = oneshot::channel();
        self.pending.lock().unwrap().insert(stream, answer);
        let request = ttrpc::Request {
            service: PLUGIN_SERVICE.to_string(),
            method: method.to_string(),
            payload: request.encode_to_vec(),
            timeout_nano: i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX),
            metadata: Vec::new(),
        };
        let frame = ttrpc::frame(&ttrpc::Message {
            mux: ttrpc::PLUGIN_CONN,
            stream,
            kind: ttrpc::REQUEST,
            payload: request.encode_to_vec(),
        });
        let closed = || NriError::Closed {
            plugin: self.name(),
            method,
        };
        if self.out.send(frame).is_err() {
            self.pending.lock().unwrap().remove(&stream);
            return Err(closed());
        }
        let response = match tokio::time::timeout(timeout, answered).await {
            Ok(Ok(response)) => response,
            Ok(Err(_)) => return Err(closed()),
            Err(_) => {
                self.pending.lock().unwrap().remove(&stream);
                self.close();
                return Err(NriError::Timeout {
                    plugin: self.name(),
                    method,
                    timeout,
                });
            }
        };
        if let Some(status) = response.status.filter(|s| s.code != 0) {
            return Err(NriError::Plugin {
                plugin: self.name(),
                method,
                message: status.message,
            });
        }
        R::decode(response.payload.as_slice()).map_err(|cause| NriError::Decode {
            plugin: self.name(),
            method,
            cause,
        })
    }

    /// An answer from the plugin to one of the runtime's calls.
    fn answered(&self, message: ttrpc::Message) {
        let Some(waiting) = self.pending.lock().unwrap().remove(&message.stream) else {
            return; // a call that timed out
        };
        if let Ok(response) = ttrpc::Response::decode(message.payload.as_slice()) {
            let _ = waiting.send(response);
        }
    }

    fn close(&self) {
        self.set_state(State::Closed);
        // The calls still waiting end as Closed.
        self.pending.lock().unwrap().clear();
        self.closing.notify_one();
    }

    fn respond(&self, stream: u32, response: ttrpc::Response) {
        let _ = self.out.send(ttrpc::frame(&ttrpc::Message {
            mux: ttrpc::RUNTIME_CONN,
            stream,
            kind: ttrpc::RESPONSE,
            payload: response.encode_to_vec(),
        }));
    }
}

/// Accepts plugins on `listener` for as long as the server runs.
pub(crate) async fn serve(listener: UnixListener, cri: Arc<Cri>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, Arc::clone(&cri)));
            }
            // Out of descriptors, say: tried again a little later, not in a busy loop.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// One plugin's connection: its frames read and sorted, until it closes or is closed.
async fn connection(stream: UnixStream, cri: Arc<Cri>) {
    let Some(nri) = cri.nri() else {
        return;
    };
    let (mut reader, mut writer) = stream.into_split();
    let (out, mut frames) = mpsc::unbounded_channel::<Vec<u8>>();
    let writing = tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if writer.write_all(&frame).await.is_err() {
                break;
            }
        }
    });
    let plugin = Arc::new(Plugin::new(out));
    let mut demux = ttrpc::Demux::default();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::select! {
            read = reader.read(&mut buffer) => read,
            _ = plugin.closing.notified() => break,
        };
        let messages = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => match demux.push(&buffer[..n]) {
                Ok(messages) => messages,
                Err(e) => {
                    eprintln!("podlab cri: NRI plugin {}: {e}", plugin.name());
                    break;
                }
            },
        };
        for message in messages {
            match (message.mux, message.kind) {
                (ttrpc::PLUGIN_CONN, ttrpc::RESPONSE) => plugin.answered(message),
                (ttrpc::RUNTIME_CONN, ttrpc::REQUEST) => runtime_request(&cri, &plugin, message),
                _ => {}
            }
        }
    }
    plugin.close();
    nri.forget(&plugin);
    writing.abort();
}

/// A call from the plugin to the runtime's service.
fn runtime_request(cri: &Arc<Cri>, plugin: &Arc<Plugin>, message: ttrpc::Message) {
    let failure = |code, message: String| ttrpc::Response {
        status: Some(ttrpc::RpcStatus { code, message }),
        payload: Vec::new(),
    };
    let Ok(request) = ttrpc::Request::decode(message.payload.as_slice()) else {
        plugin.respond(
            message.stream,
            failure(ttrpc::CODE_UNKNOWN, "not a ttrpc request".into()),
        );
        return;
    };
    let response = match (request.service.as_str(), request.method.as_str()) {
        (RUNTIME_SERVICE, "RegisterPlugin") => {
            match api::RegisterPluginRequest::decode(request.payload.as_slice()) {
                Ok(register) if plugin.identity.get().is_none() => {
                    let _ = plugin
                        .identity
                        .set((register.plugin_name, register.plugin_idx));
                    // The answer goes first: the plugin waits for it before it serves
                    // Configure.
                    plugin.respond(
                        message.stream,
                        ttrpc::Response {
                            status: None,
                            payload: api::Empty {}.encode_to_vec(),
                        },
                    );
                    tokio::spawn(register_plugin(Arc::clone(cri), Arc::clone(plugin)));
                    return;
                }
                Ok(_) => failure(
                    ttrpc::CODE_UNKNOWN,
                    format!("plugin {} has registered already", plugin.name()),
                ),
                Err(e) => failure(
                    ttrpc::CODE_UNKNOWN,
                    format!("RegisterPlugin: not a RegisterPluginRequest: {e}"),
                ),
            }
        }
        (RUNTIME_SERVICE, "UpdateContainers") => {
            match api::UpdateContainersRequest::decode(request.payload.as_slice()) {
                Ok(asked) => {
                    let (cri, plugin) = (Arc::clone(cri), Arc::clone(plugin));
                    tokio::spawn(async move {
                        let failed = cri.nri_update_containers(&plugin.name(), asked).await;
                        let payload = api::UpdateContainersResponse { failed }.encode_to_vec();
                        plugin.respond(
                            message.stream,
                            ttrpc::Response {
                                status: None,
                                payload,
                            },
                        );
                    });
                    return;
                }
                Err(e) => failure(
                    ttrpc::CODE_UNKNOWN,
                    format!("UpdateContainers: not an UpdateContainersRequest: {e}"),
                ),
            }
        }
        (service, method) => failure(
            ttrpc::CODE_UNIMPLEMENTED,
            format!("podlab's NRI runtime has no {service}/{method}"),
        ),
    };
    plugin.respond(message.stream, response);
}

/// Configure, then Synchronize; the plugin hears of events once both are done.
async fn register_plugin(cri: Arc<Cri>, plugin: Arc<Plugin>) {
    let Some(nri) = cri.nri() else {
        return;
    };
    let configure = api::ConfigureRequest {
        config: String::new(),
        runtime_name: "podlab".to_string(),
        runtime_version: env!("CARGO_PKG_VERSION").to_string(),
        registration_timeout: REGISTRATION_TIMEOUT.as_millis() as i64,
        request_timeout: REQUEST_TIMEOUT.as_millis() as i64,
        nri_version: String::new(),
    };
    let configured: Result<api::ConfigureResponse, _> = nri
        .call(&plugin, "Configure", &configure, REGISTRATION_TIMEOUT)
        .await;
    let events = match configured {
        Ok(reply) if reply.events != 0 => reply.events,
        // A plugin that names no events gets them all.
        Ok(_) => (1 << (Event::Last as i32 - 1)) - 1,
        Err(e) => {
            eprintln!("podlab cri: {e}");
            plugin.close();
            return;
        }
    };
    plugin.events.store(events, Ordering::SeqCst);
    if plugin.state() == State::Closed {
        return; // gone while it configured: its connection has ended
    }
    // Listed before the snapshot: from here on, events wait for the Synchronize to end.
    plugin.set_state(State::Synchronizing);
    nri.plugins.lock().unwrap().push(Arc::clone(&plugin));
    let (pods, containers) = describe::snapshot(cri.runtime(), |id| nri.hides(id));
    let synchronize = api::SynchronizeRequest {
        pods,
        containers,
        more: false,
    };
    let synchronized: Result<api::SynchronizeResponse, _> = nri
        .call(&plugin, "Synchronize", &synchronize, REGISTRATION_TIMEOUT)
        .await;
    match synchronized {
        Ok(reply) => {
            if !reply.update.is_empty() {
                let asked = api::UpdateContainersRequest {
                    update: reply.update,
                    evict: Vec::new(),
                };
                // Each failure is written to stderr there; Synchronize has nobody to answer.
                cri.nri_update_containers(&plugin.name(), asked).await;
            }
            if plugin.state() == State::Synchronizing {
                plugin.set_state(State::Ready);
            }
        }
        Err(e) => {
            eprintln!("podlab cri: {e}");
            plugin.close();
            nri.forget(&plugin);
        }
    }
    nri.synced.notify_waiters();
}

/// Binds the NRI socket at `path`, as the server's socket is bound: its folder made, a stale
/// socket that nobody answers on replaced.
pub(crate) fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "another runtime serves NRI there",
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    // Plugins run as root, as containerd's socket is 0600.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}
