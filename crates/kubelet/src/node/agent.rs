//! The agent's main loop (kubelet's `syncLoop` with the API server as its pod source): list the
//! pods, find the sandboxes the runtime already has for them, remove what belongs to no pod any
//! more, start a worker per pod, then follow the store's watch — binding new pods to this node
//! (the scheduler's `Scheduled` event), handing each change to its pod's worker — until stopped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use podlab_control::{EventType, Store};
use podlab_runtime::{Runtime, SandboxId, SandboxStatus};

use super::remote::RemoteRuntime;
use super::runtime_service::RuntimeService;

use crate::translate::{self, PodDirs};

use super::config::NodeConfig;
use super::daemon::NodeLock;
use super::events::Recorder;
use super::execute::kill_pod;
use super::images::ImageManager;
use super::pleg::Pleg;
use super::view::PodRuntime;
use super::worker::{remove_pod_dirs, PodWorker, WorkerMsg};
use super::NodeError;

/// How long the loop waits on the watch before it looks at its own state (stop flag, workers).
const TICK: Duration = Duration::from_millis(200);

/// What every worker and probe thread of the agent shares.
pub struct Node {
    pub config: NodeConfig,
    pub store: Store,
    /// The runtime the pods run on: podlab-runtime in this process (the default), or a CRI
    /// runtime at `config.runtime_endpoint` ([`super::remote::RemoteRuntime`]).
    pub runtime: Arc<dyn RuntimeService>,
    /// The image store, its serialized puller and its GC.
    pub images: ImageManager,
    pub recorder: Recorder,
    /// `status.hostIP`.
    pub host_ip: String,
    pub pleg: Pleg,
    /// The CRI runtime, when the pods run on one (its event stream wakes the pod workers).
    pub remote: Option<Arc<RemoteRuntime>>,
    /// Set when the agent is asked to stop: a grace period being waited out is given up (the
    /// container keeps its SIGTERM, the pod keeps running) and nothing more is torn down, so
    /// that the agent exits at once, as kubelet does; the next agent takes the work up again.
    pub stopping: Arc<AtomicBool>,
    /// The pods whose in-place resize is Deferred (tried again when room may have come).
    pub resizes: super::allocation::Resizes,
}

impl Node {
    /// Whether the agent is stopping (see [`Node::stopping`]).
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Opens the store and the runtime of `config.root`, or connects to the CRI runtime at
    /// `config.runtime_endpoint`.
    pub fn open(config: NodeConfig) -> Result<Node, NodeError> {
        config.check()?;
        let store = Store::open(config.store_root())?;
        if let Some(endpoint) = &config.runtime_endpoint {
            let remote = Arc::new(RemoteRuntime::connect(endpoint)?);
            if config.narrates_node() {
                println!(
                    "node {}: pods run on {} {} at {endpoint}",
                    config.node_name, remote.runtime_name, remote.runtime_version
                );
            }
            return Ok(Node {
                recorder: Recorder::new(store.clone()),
                pleg: Pleg::default(),
                stopping: Arc::new(AtomicBool::new(false)),
                resizes: Default::default(),
                host_ip: node_address(),
                images: ImageManager::remote(Arc::clone(&remote)),
                config,
                store,
                remote: Some(Arc::clone(&remote)),
                runtime: remote,
            });
        }
        let mut runtime = Runtime::open(config.runtime.clone())?;
        let images = ImageManager::open(&config.runtime.image_root).map_err(NodeError::Image)?;
        if let Some(plugin) = &config.network {
            runtime.set_network_plugin(Arc::clone(plugin));
        }
        // The agent lives as long as its pods come and go: their containers are made from a
        // small mount namespace, so that one more costs the same at 500 pods as at one.
        if let Err(e) = runtime.use_mount_template() {
            eprintln!("podlab node: containers are made from a copy of the node's mounts: {e}");
        }
        Ok(Node {
            recorder: Recorder::new(store.clone()),
            pleg: Pleg::default(),
            stopping: Arc::new(AtomicBool::new(false)),
            resizes: Default::default(),
            host_ip: node_address(),
            images,
            config,
            store,
            runtime: Arc::new(runtime),
            remote: None,
        })
    }
}

/// Runs the agent in the calling thread until `stop` is set (or, with `exit_when_idle`, until
/// it has had no pod that long). Takes `<root>/node.lock` first: one agent per root. Pods keep
/// running when it returns.
pub fn run(config: NodeConfig, stop: Arc<AtomicBool>) -> Result<(), NodeError> {
    podlab_runtime::trace::set_process_name("agent");
    let lock = NodeLock::acquire(&config.root)?;
    let mut node = Node::open(config)?;
    // The flag the signal handler sets: workers see a stop at once, not at the next tick.
    node.stopping = Arc::clone(&stop);
    let node = Arc::new(node);
    let pleg_stop = Arc::new(AtomicBool::new(false));
    // The shims' change notices; without them (a root whose path is too long for a socket
    // address, or a CRI runtime, whose shims are not ours) the relist alone finds every change.
    let notices = match node.runtime.local() {
        None => None,
        Some(_) => match podlab_runtime::events::Listener::bind(&node.config.root) {
            Ok(listener) => Some(listener),
            Err(e) => {
                eprintln!("podlab node: no change notices from the shims ({e}); relisting only");
                None
            }
        },
    };
    let pleg = {
        let (shared, stop) = (Arc::clone(&node), Arc::clone(&pleg_stop));
        std::thread::Builder::new()
            .name("pleg".into())
            .spawn(move || {
                shared.pleg.run(
                    &*shared.runtime,
                    shared.config.resync,
                    &stop,
                    notices.as_ref(),
                )
            })
            .map_err(|e| NodeError::io("starting the PLEG thread", &node.config.root, e))?
    };
    let events = match node.remote.clone() {
        Some(remote) => {
            let (shared, stop) = (Arc::clone(&node), Arc::clone(&pleg_stop));
            let thread = std::thread::Builder::new()
                .name("cri-events".into())
                .spawn(move || watch_cri_events(&remote, &shared, &stop))
                .map_err(|e| {
                    NodeError::io("starting the CRI events thread", &node.config.root, e)
                })?;
            Some(thread)
        }
        None => None,
    };
    let mut agent = Agent {
        node,
        workers: HashMap::new(),
        scheduled: HashSet::new(),
        exits: mpsc::channel(),
        left_behind: HashMap::new(),
    };
    let result = agent.serve(&stop);
    agent.shutdown();
    pleg_stop.store(true, Ordering::SeqCst);
    let _ = pleg.join();
    if let Some(events) = events {
        let _ = events.join();
    }
    // Before the lock goes: whoever waits for this agent to stop sees its network cleaned.
    if let Some(network) = &agent.node.config.network {
        if let Err(e) = network.node_stopping() {
            eprintln!("podlab node: releasing the {} network: {e}", network.name());
        }
    }
    drop(lock);
    result
}

/// The CRI runtime's container events, as kubelet's evented PLEG reads them: each wakes the
/// worker of the event's sandbox at once, the relist staying what catches anything missed. A
/// runtime without them (Unimplemented) leaves the relist alone; a broken stream is opened
/// again after a second.
fn watch_cri_events(remote: &RemoteRuntime, node: &Node, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match remote.watch_events(stop, |sandbox| node.pleg.sandbox_changed(sandbox)) {
            Ok(false) => {
                if node.config.narrates_node() {
                    println!(
                        "the runtime has no GetContainerEvents: the PLEG relists every {:?}",
                        node.config.resync
                    );
                }
                return;
            }
            Ok(true) => {}
            Err(e) => eprintln!("podlab node: the runtime's container events: {e}"),
        }
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(TICK);
        }
    }
}

struct WorkerHandle {
    messages: Sender<WorkerMsg>,
    thread: JoinHandle<()>,
}

struct Agent {
    node: Arc<Node>,
    workers: HashMap<String, WorkerHandle>,
    /// Pods whose `Scheduled` event was recorded by this agent.
    scheduled: HashSet<String>,
    /// Workers say here that they ended: the pod's uid and the sandboxes they left.
    exits: (Sender<WorkerExit>, Receiver<WorkerExit>),
    /// Sandboxes of pods that have no worker: what ended workers could not remove. With the
    /// listing at the start, this is every sandbox a new worker can inherit, so that starting
    /// one never lists the node's sandboxes (at 500 pods that read 1,000 files).
    left_behind: HashMap<String, Vec<SandboxId>>,
}

/// A worker's last word.
struct WorkerExit {
    uid: String,
    sandboxes: Vec<SandboxId>,
}

impl Agent {
    fn serve(&mut self, stop: &AtomicBool) -> Result<(), NodeError> {
        let (pods, mut watch) = self.node.store.list_and_watch::<Pod>(None)?;
        let mut sandboxes = self.managed_sandboxes()?;
        let uids: HashSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        let orphans: Vec<(String, Vec<SandboxStatus>)> = sandboxes
            .iter()
            .filter(|(uid, _)| !uids.contains(*uid))
            .map(|(uid, list)| (uid.clone(), list.clone()))
            .collect();
        for (uid, list) in orphans {
            sandboxes.remove(&uid);
            self.remove_orphan(&uid, list);
        }
        self.say(|| {
            format!(
                "node {} ({}): {} pods in the store, {} with sandboxes on this node",
                self.node.config.node_name,
                self.node.host_ip,
                pods.len(),
                sandboxes.len()
            )
        });
        for pod in pods {
            let found = pod
                .metadata
                .uid
                .as_deref()
                .and_then(|uid| sandboxes.get(uid))
                .map(|list| list.iter().map(|s| s.id.clone()).collect());
            self.dispatch(pod, found);
        }
        let mut idle_since = Instant::now();
        // kubelet runs image GC at start, then every ImageGCPeriod.
        let mut image_gc_at = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            if Instant::now() >= image_gc_at {
                self.collect_image_garbage();
                image_gc_at = Instant::now() + self.node.config.image_gc_period;
            }
            match watch.next_timeout(TICK) {
                Ok(Some(event)) => match event.event_type {
                    EventType::Deleted => self.deleted(event.object),
                    _ => self.dispatch(event.object, None),
                },
                Ok(None) => {}
                Err(e) => {
                    eprintln!("podlab node: watching pods: {e}; listing again");
                    std::thread::sleep(TICK);
                    let (pods, fresh) = self.node.store.list_and_watch::<Pod>(None)?;
                    for pod in pods {
                        self.dispatch(pod, None);
                    }
                    watch = fresh;
                }
            }
            while let Ok(exit) = self.exits.1.try_recv() {
                if let Some(handle) = self.workers.remove(&exit.uid) {
                    let _ = handle.thread.join();
                }
                // A pod left the node: a Deferred resize may fit now.
                self.node.resizes.forget(&exit.uid);
                self.node.resizes.retry(None);
                if !exit.sandboxes.is_empty() {
                    self.left_behind.insert(exit.uid, exit.sandboxes);
                }
            }
            if !self.workers.is_empty() {
                idle_since = Instant::now();
            } else if self
                .node
                .config
                .exit_when_idle
                .is_some_and(|idle| idle_since.elapsed() >= idle)
            {
                self.say(|| "no pods: the agent exits".into());
                break;
            }
        }
        Ok(())
    }

    /// One image GC run (kubelet's `GarbageCollect`), on podlab's store or through the CRI
    /// runtime's ImageService: the images of every container the runtime has are in use;
    /// what cannot be freed is a `FreeDiskSpaceFailed` node event.
    fn collect_image_garbage(&self) {
        let used: Vec<String> = match self
            .node
            .runtime
            .list_containers(&podlab_runtime::ContainerFilter::default())
        {
            // The image as asked for, and the runtime's reference to it (a CRI runtime's id).
            Ok(list) => list
                .into_iter()
                .flat_map(|c| [c.image, c.image_id])
                .filter(|name| !name.is_empty())
                .collect(),
            Err(e) => {
                eprintln!("podlab node: image garbage collection: listing containers: {e}");
                return;
            }
        };
        let policy = self.node.config.image_gc;
        match self.node.images.collect_garbage(policy, &used) {
            Ok((crate::images::GcPlan::Nothing { .. }, _)) => {}
            Ok((
                crate::images::GcPlan::Free {
                    usage_percent,
                    amount_to_free,
                    freed,
                    ..
                },
                removed,
            )) => {
                eprintln!(
                    "podlab node: image filesystem {usage_percent}% used (high threshold {}%): {amount_to_free} bytes to free down to {}%; removed {}",
                    policy.high_percent,
                    policy.low_percent,
                    if removed.is_empty() { "nothing".to_string() } else { removed.join(", ") }
                );
                if freed < amount_to_free {
                    let message =
                        crate::images::free_disk_space_failed_message(amount_to_free, freed);
                    self.node.recorder.node_event(
                        &self.node.config.node_name,
                        super::events::WARNING,
                        crate::images::FREE_DISK_SPACE_FAILED,
                        &message,
                    );
                }
            }
            Err(e) => eprintln!("podlab node: image garbage collection: {e}"),
        }
    }

    /// Every sandbox the agent made, by pod uid.
    fn managed_sandboxes(&self) -> Result<BTreeMap<String, Vec<SandboxStatus>>, NodeError> {
        let mut by_pod: BTreeMap<String, Vec<SandboxStatus>> = BTreeMap::new();
        for sandbox in self.node.runtime.list_pod_sandboxes()? {
            if let Some(uid) = translate::managed_pod_uid(&sandbox.labels) {
                by_pod.entry(uid.to_string()).or_default().push(sandbox);
            }
        }
        Ok(by_pod)
    }

    /// kubelet's cleanup of pods that no longer exist: their containers are stopped and their
    /// sandboxes, volumes and logs removed.
    fn remove_orphan(&self, uid: &str, sandboxes: Vec<SandboxStatus>) {
        let ids: Vec<SandboxId> = sandboxes.iter().map(|s| s.id.clone()).collect();
        let Some(first) = sandboxes.first() else {
            return;
        };
        let mut pod = Pod::default();
        pod.metadata.uid = Some(uid.to_string());
        pod.metadata.name = Some(first.metadata.name.clone());
        pod.metadata.namespace = Some(first.metadata.namespace.clone());
        self.say(|| {
            format!(
                "pod {}/{} ({uid}) is gone from the store: removing what it left",
                first.metadata.namespace, first.metadata.name
            )
        });
        if let Ok(observed) = PodRuntime::observe(&*self.node.runtime, &ids) {
            kill_pod(&self.node, None, &observed);
        }
        for id in &ids {
            if let Err(e) = self.node.runtime.remove_pod_sandbox(id) {
                eprintln!("podlab node: removing sandbox {id} of a deleted pod: {e}");
            }
        }
        remove_pod_dirs(
            &self.node.config.root,
            &PodDirs::new(&self.node.config.root, &pod),
        );
    }

    /// A pod was added or changed: bind it if unbound, else hand it to its worker (started if
    /// needed). `found`: its sandboxes, when the agent has just listed them.
    fn dispatch(&mut self, pod: Pod, found: Option<Vec<SandboxId>>) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let node_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        if node_name.is_empty() {
            self.bind(pod);
            return;
        }
        if node_name != self.node.config.node_name {
            return;
        }
        if let Some(handle) = self.workers.get(&uid) {
            if handle
                .messages
                .send(WorkerMsg::Pod(Box::new(pod.clone())))
                .is_ok()
            {
                return;
            }
            // The worker ended (its pod was finalised); a newer version means nothing now.
            return;
        }
        if pod.status.is_none() && self.scheduled.insert(uid.clone()) {
            self.node
                .recorder
                .scheduled(&pod, &self.node.config.node_name);
        }
        let at_start = found.is_some();
        let sandboxes = match found {
            Some(ids) => ids,
            None => self.left_behind.remove(&uid).unwrap_or_default(),
        };
        let (tx, rx) = mpsc::channel();
        let worker = PodWorker::new(
            Arc::clone(&self.node),
            pod.clone(),
            sandboxes,
            at_start,
            tx.clone(),
        );
        let exits = self.exits.0.clone();
        let name = format!("pod-{}", pod.metadata.name.as_deref().unwrap_or("?"));
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            let sandboxes = worker.run(rx);
            let _ = exits.send(WorkerExit { uid, sandboxes });
        });
        match spawned {
            Ok(thread) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                self.workers.insert(
                    uid,
                    WorkerHandle {
                        messages: tx,
                        thread,
                    },
                );
            }
            Err(e) => eprintln!("podlab node: starting a pod worker: {e}"),
        }
    }

    /// The scheduler's part on a one-node cluster: the pod is bound to this node.
    fn bind(&mut self, mut pod: Pod) {
        let node = self.node.config.node_name.clone();
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = Some(node.clone());
        } else {
            return;
        }
        match self.node.store.update(pod) {
            Ok(bound) => {
                if let Some(uid) = bound.metadata.uid.clone() {
                    self.scheduled.insert(uid);
                }
                self.node.recorder.scheduled(&bound, &node);
            }
            // Somebody changed it meanwhile: the watch brings the new version.
            Err(e) if e.is_conflict() || e.is_not_found() => {}
            Err(e) => eprintln!("podlab node: binding a pod to {node}: {e}"),
        }
    }

    fn deleted(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        self.scheduled.remove(&uid);
        if let Some(handle) = self.workers.get(&uid) {
            let _ = handle.messages.send(WorkerMsg::Deleted(Box::new(pod)));
        }
    }

    /// Stops every worker (their pods keep running) and waits for them.
    fn shutdown(&mut self) {
        self.node.stopping.store(true, Ordering::SeqCst);
        for handle in self.workers.values() {
            let _ = handle.messages.send(WorkerMsg::Stop);
        }
        for (_, handle) in self.workers.drain() {
            let _ = handle.thread.join();
        }
    }

    fn say(&self, what: impl FnOnce() -> String) {
        if self.node.config.narrates_node() {
            println!("{}", what());
        }
    }
}

/// The node's address for `status.hostIP`: the first global IPv4 address of the agent's network
/// namespace, else 127.0.0.1. It is reported, never contacted.
pub(crate) fn node_address() -> String {
    let addresses = podlab_ns::net::Netlink::open().and_then(|mut nl| nl.addresses());
    addresses
        .ok()
        .into_iter()
        .flatten()
        .map(|a| a.addr)
        .find(|ip| ip.is_ipv4() && !ip.is_loopback() && !ip.is_unspecified())
        .map(|ip| ip.to_string())
        .unwrap_or_else(|| "127.0.0.1".into())
}
