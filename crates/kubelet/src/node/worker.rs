//! One pod worker (kubelet's `podWorkers` goroutine for one pod): a thread that runs a sync pass
//! whenever its pod changes, a probe result changes, a postponed action falls due, or the resync
//! interval has passed — whichever is first.
//!
//! What it keeps in memory is what kubelet keeps: the pod's sandboxes, the start-failure reasons
//! and crash-loop backoff entries ([`PodCaches`]), the probe results, the status it wrote last,
//! the runtime's records as its last read found them (what a resync works from while the PLEG
//! sees no change, as kubelet's workers read the PLEG's cache).
//! All of it can be lost: a new agent finds the sandboxes again by their labels, reads the
//! previous status from the store, and starts the probe workers anew (readiness starting at
//! Failure, liveness at Success, so nothing healthy is killed).
//!
//! Three ends: a pod whose phase became Succeeded or Failed has what still runs killed and its
//! sandbox stopped, then the worker only waits for the pod's deletion; a pod with a
//! `deletionTimestamp` goes through the termination path and is deleted from the store; a pod
//! that vanished from the store has its containers and sandboxes removed.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use podlab_control::Preconditions;
use podlab_runtime::SandboxId;

use crate::model::{PassContext, ResizeInProgress, ResizeState, RestartPolicy};
use crate::resize;
use crate::rules::Trace;
use crate::sync::{sync_pass, sync_pass_narrated, SyncResult};
use crate::translate::{self, PodDirs};
use crate::PodSpecView;

use super::agent::Node;
use super::allocation::{self, PodAllocation};
use super::execute::{kill_pod, Execution, PodCaches};
use super::pleg::Relist;
use super::probes::{ContainerTarget, ProbeManager, ProbeTargets};
use super::status::{pod_status, StatusInputs};
use super::view::{self, PodRuntime};

/// After a pass that changed the runtime or the status, the next one comes at once, to report
/// the change (a started container's Running and Ready reach the store without delay); a pass
/// that follows such a pass and changes something again is followed after `SETTLE`, so that a
/// status that keeps changing cannot spin the worker.
const SETTLE: Duration = Duration::from_millis(50);
/// A status write retries this often on a Conflict, re-reading the pod each time.
const STATUS_WRITE_TRIES: usize = 4;

/// What the agent tells a worker.
#[derive(Debug)]
pub enum WorkerMsg {
    /// The pod as the store has it now.
    Pod(Box<Pod>),
    /// Something it waits for changed (a probe result): run a pass.
    Wake,
    /// The pod is gone from the store (this is its last state).
    Deleted(Box<Pod>),
    /// The agent stops; the pod keeps running.
    Stop,
}

/// One pod's worker.
pub struct PodWorker {
    node: Arc<Node>,
    pod: Pod,
    dirs: PodDirs,
    sandboxes: Vec<SandboxId>,
    caches: PodCaches,
    probes: ProbeManager,
    last_status: Option<PodStatus>,
    last_written_rv: Option<String>,
    wake_at: Option<Instant>,
    /// What the last full read saw, for the PLEG to tell whether the runtime changed since.
    relist: Arc<Mutex<Relist>>,
    /// The runtime's records as the last full read found them: a periodic resync of a pod the
    /// PLEG saw unchanged since works from them (kubelet's pod workers read the PLEG's cache).
    observed: Option<Arc<PodRuntime>>,
    /// The agent found this pod when it started (probe workers then start with a jitter).
    found_at_start: bool,
    /// The pod reached a terminal phase: no more runtime passes.
    finished: bool,
    /// The pod passed kubelet's admission (checked once, before its first pass).
    admitted: bool,
    /// A pass ran for the pod already (its trace's first agent mark is written).
    seen: bool,
    /// The eviction manager evicted the pod (its limited emptyDirs are measured when
    /// `usage_due` falls due).
    eviction: Option<crate::model::Eviction>,
    usage_due: Option<Instant>,
    /// The pod's allocated and actuated resources (read or made at its first pass).
    allocation: Option<PodAllocation>,
    /// The last in-place resize actuation's error, until one succeeds (PodResizeInProgress).
    resize_error: Option<String>,
    /// This worker's own channel, for the node's list of Deferred resizes.
    wake: Sender<WorkerMsg>,
}

impl PodWorker {
    /// A worker for `pod`, whose sandboxes the runtime already has (found by their labels).
    pub fn new(
        node: Arc<Node>,
        pod: Pod,
        sandboxes: Vec<SandboxId>,
        found_at_start: bool,
        wake: Sender<WorkerMsg>,
    ) -> PodWorker {
        let dirs = PodDirs::new(&node.config.root, &pod);
        let caches = PodCaches::new(&node.config);
        let relist = Arc::new(Mutex::new(Relist::default()));
        node.pleg.register(&relist, wake.clone());
        let own = wake.clone();
        let wake = Mutex::new(wake);
        let probes = ProbeManager::new(move || {
            let _ = wake.lock().map(|w| w.send(WorkerMsg::Wake));
        });
        PodWorker {
            node,
            pod,
            dirs,
            sandboxes,
            caches,
            probes,
            last_status: None,
            last_written_rv: None,
            wake_at: None,
            relist,
            observed: None,
            found_at_start,
            finished: false,
            admitted: false,
            seen: false,
            eviction: None,
            usage_due: None,
            allocation: None,
            resize_error: None,
            wake: own,
        }
    }

    /// The worker's loop, until the pod is gone or the agent stops. A full pass runs when the
    /// pod changes, the PLEG or a probe wakes the worker, a postponed action falls due, and at
    /// least every `full_resync`. Returns the sandboxes it leaves on the node: none when it
    /// removed them, the pod's when the agent stops (or a removal failed).
    pub fn run(mut self, messages: Receiver<WorkerMsg>) -> Vec<SandboxId> {
        let full_resync = self.node.config.full_resync;
        let mut due = Instant::now();
        let mut news = false;
        let mut follow_up = false;
        loop {
            let now = Instant::now();
            let next = [self.wake_at, self.usage_due]
                .into_iter()
                .flatten()
                .fold(due, Instant::min);
            let mut deleted = None;
            let first = match messages.recv_timeout(next.saturating_duration_since(now)) {
                Ok(message) => Some(message),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => Some(WorkerMsg::Stop),
            };
            let rest = std::iter::from_fn(|| messages.try_recv().ok());
            for message in first.into_iter().chain(rest) {
                match message {
                    WorkerMsg::Pod(pod) => news |= self.take_pod(*pod),
                    WorkerMsg::Wake => news = true,
                    WorkerMsg::Deleted(pod) => deleted = Some(*pod),
                    WorkerMsg::Stop => {
                        self.probes.stop();
                        return std::mem::take(&mut self.sandboxes);
                    }
                }
            }
            if let Some(pod) = deleted {
                self.remove_vanished(pod);
                return std::mem::take(&mut self.sandboxes);
            }
            let now = Instant::now();
            if self.wake_at.is_some_and(|w| w <= now) {
                self.wake_at = None;
                news = true;
            }
            if self.usage_due.is_some_and(|at| at <= now) {
                news = true;
            }
            // Only the periodic resync asks: `due` is not a follow-up's (after a pass that
            // changed something), and the first pass has no earlier read to work from.
            let resync_only = !news && due <= now && !follow_up;
            if due <= now {
                news = true;
            }
            if !news {
                continue;
            }
            news = false;
            due = now + full_resync;
            if self.finished && self.pod.metadata.deletion_timestamp.is_none() {
                // A terminal pod only waits for its deletion.
                continue;
            }
            match self.sync(resync_only) {
                Pass::Done => return std::mem::take(&mut self.sandboxes),
                Pass::Changed if follow_up => due = Instant::now() + SETTLE,
                Pass::Changed => {
                    due = Instant::now();
                    follow_up = true;
                    continue;
                }
                Pass::Idle => {}
            }
            follow_up = false;
        }
    }

    fn relist(&self) -> std::sync::MutexGuard<'_, Relist> {
        self.relist.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a newer version of the pod; true when it is news (not our own status write).
    fn take_pod(&mut self, pod: Pod) -> bool {
        let rv = |p: &Pod| {
            p.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        if rv(&pod) <= rv(&self.pod) {
            return false;
        }
        let ours = pod.metadata.resource_version == self.last_written_rv;
        self.pod = pod;
        !ours
    }

    /// The mark `phase` on the pod's trace, if a command traces it ([`podlab_runtime::trace`]).
    fn mark(&self, phase: &str) {
        let (namespace, name, _) = translate::identity(&self.pod);
        podlab_runtime::trace::PodTrace::open(&self.node.config.root, &namespace, &name)
            .mark(phase);
    }

    /// One sync pass (section 1); `resync_only` when nothing but the periodic resync asks
    /// for it.
    fn sync(&mut self, resync_only: bool) -> Pass {
        if self.pod.metadata.deletion_timestamp.is_some() {
            self.mark("deletion seen by the agent");
            self.terminate();
            return Pass::Done;
        }
        if !self.seen {
            self.seen = true;
            self.mark("pod seen by the agent");
        }
        if !self.admitted {
            match self.admit() {
                Admission::Admitted => self.admitted = true,
                Admission::Rejected { changed } => {
                    self.finished = true;
                    return if changed { Pass::Changed } else { Pass::Idle };
                }
            }
        }
        self.check_local_storage();
        let Some(observed) = self.observe(resync_only) else {
            return Pass::Idle;
        };
        let (pod, resize) = self.resize(&observed);
        let mut spec = view::spec_view(&pod);
        for container in &mut spec.containers {
            container.resize_restart = resize.restart.contains(&container.name);
        }
        let rt = observed.view();
        let mut ctx = self.context(false);
        ctx.resize = resize.state;
        let result = sync_pass(&spec, &rt, &ctx);
        let status_changed = self.write_status(&result, &observed);
        self.publish_targets(&spec, &result, &observed);

        if !result.runtime_sync_called {
            if result.phase.phase.is_terminal() {
                self.narrate(&spec, &rt, &ctx, status_changed || !self.finished);
                self.stop_terminal_pod(&observed);
            }
            return if status_changed {
                Pass::Changed
            } else {
                Pass::Idle
            };
        }
        self.probes
            .ensure(&self.node, &self.pod, self.found_at_start);
        let failures_before = self.caches.start_failures.clone();
        let mut trace = if self.narrating() {
            Trace::narrated()
        } else {
            Trace::quiet()
        };
        let outcome = Execution {
            node: &self.node,
            pod: &pod,
            spec: &spec,
            rt: &rt,
            observed: &observed,
            dirs: &self.dirs,
            caches: &mut self.caches,
            sandboxes: &mut self.sandboxes,
            trace: &mut trace,
        }
        .carry_out(&result);
        self.note_created();
        self.relist().follow(&self.sandboxes);
        self.wake_at = outcome.wake_at;
        let failures_changed = failures_before != self.caches.start_failures;
        let decided = outcome.changed || status_changed || failures_changed;
        if !decided {
            return Pass::Idle;
        }
        self.narrate(&spec, &rt, &ctx, true);
        for line in trace.into_parts().1 {
            self.say(|| format!("  {line}"));
        }
        Pass::Changed
    }

    /// The runtime's records for this pass. A periodic resync of a pod that the PLEG has
    /// watched since the last full read, and seen neither change nor exit, works from what
    /// that read found: at 1000 idle pods, re-reading each pod once a minute (its records, its
    /// shim's and pause's `/proc` entries, about 30 system calls) and having the PLEG watch it
    /// again was a large part of the idle agent's time. Any other pass reads the runtime
    /// again, stamped for the PLEG.
    fn observe(&mut self, resync_only: bool) -> Option<Arc<PodRuntime>> {
        if resync_only && self.relist().unchanged() {
            if let Some(observed) = &self.observed {
                return Some(Arc::clone(observed));
            }
        }
        self.observed = None;
        let stamp = self
            .relist()
            .start_read(&*self.node.runtime, &self.sandboxes);
        let observed = match PodRuntime::observe(&*self.node.runtime, &self.sandboxes) {
            Ok(observed) => Arc::new(observed),
            Err(e) => {
                eprintln!("podlab node: {}: reading the runtime: {e}", self.key());
                return None;
            }
        };
        self.sandboxes = observed.sandbox_ids();
        self.relist().record(stamp, &self.sandboxes, &observed);
        self.observed = Some(Arc::clone(&observed));
        Some(observed)
    }

    /// kubelet's admission of a new pod (`canAdmitPod`, here its sysctl and AppArmor
    /// handlers, in kubelet's order): a pod that is not allowed is rejected before anything is
    /// made for it (`rejectPod`): phase Failed with the handler's reason, "Pod was rejected: "
    /// and its message, and a Warning event. A pod that already has sandboxes or a terminal
    /// phase was admitted before (or rejected: that is not done again).
    fn admit(&mut self) -> Admission {
        let status = self.pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Failed" | "Succeeded")) {
            let reason = status.and_then(|s| s.reason.as_deref());
            let rejected = matches!(
                reason,
                Some(crate::sysctl::FORBIDDEN_REASON | crate::apparmor::REASON)
            );
            return if rejected && self.sandboxes.is_empty() {
                Admission::Rejected { changed: false }
            } else {
                Admission::Admitted
            };
        }
        if !self.sandboxes.is_empty() {
            return Admission::Admitted;
        }
        let security = &self.node.config.security;
        let rejection = match security.sysctls.admit(&self.pod) {
            Some(message) => Some((crate::sysctl::FORBIDDEN_REASON, message)),
            None => crate::apparmor::admit(&self.pod, &security.apparmor)
                .map(|message| (crate::apparmor::REASON, message)),
        };
        let Some((reason, message)) = rejection else {
            return Admission::Admitted;
        };
        self.say(|| format!("rejected ({reason}): {message}"));
        self.node
            .recorder
            .pod_event(&self.pod, super::events::WARNING, reason, &message);
        let old = self.pod.status.as_ref();
        let status = PodStatus {
            phase: Some("Failed".into()),
            reason: Some(reason.into()),
            message: Some(format!("Pod was rejected: {message}")),
            qos_class: Some(podlab_api::resources::pod_qos(&self.pod).into()),
            start_time: old
                .and_then(|s| s.start_time.clone())
                .or_else(|| Some(podlab_control::names::now())),
            ..PodStatus::default()
        };
        let changed = self.store_status(status);
        Admission::Rejected { changed }
    }

    /// The phase and Ready condition of a status being written, for the trace.
    fn status_summary(status: &PodStatus) -> String {
        let phase = status.phase.clone().unwrap_or_default();
        let ready = status
            .conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .map_or("-", |c| c.status.as_str());
        format!("{phase}, Ready={ready}")
    }

    /// The eviction manager's local-storage check ([`crate::eviction`]), when it falls due: an
    /// emptyDir above its `sizeLimit`, the pod above its `ephemeral-storage` limit, or a
    /// container above its own evicts the pod (a Warning event now; the pass that follows
    /// makes it Failed and stops it).
    fn check_local_storage(&mut self) {
        if self.eviction.is_some() || self.finished {
            self.usage_due = None;
            return;
        }
        if !crate::eviction::has_storage_limits(&self.pod) {
            self.usage_due = None;
            return;
        }
        let now = Instant::now();
        if self.usage_due.is_some_and(|at| at > now) {
            return;
        }
        self.usage_due = Some(now + self.node.config.eviction_period);
        let Some(eviction) = self.measure_local_storage() else {
            return;
        };
        self.say(|| format!("evicted: {}", eviction.message));
        self.node.recorder.pod_event(
            &self.pod,
            super::events::WARNING,
            &eviction.reason,
            &eviction.message,
        );
        self.usage_due = None;
        self.eviction = Some(eviction);
    }

    /// kubelet's `localStorageEviction` over what the kernel says the pod uses: its volumes'
    /// folders, its running containers' writable layers (the runtime's stats: podlab's overlay
    /// upper folders) and log folders, its newest sandbox's `/etc/hosts`.
    fn measure_local_storage(&self) -> Option<crate::model::Eviction> {
        use crate::eviction::{disk_usage, Usage};
        let runtime = &self.node.runtime;
        let running: Vec<podlab_runtime::ContainerStatus> = self
            .sandboxes
            .iter()
            .filter_map(|id| {
                let filter = podlab_runtime::ContainerFilter {
                    sandbox_id: Some(id.clone()),
                    state: Some(podlab_runtime::ContainerState::Running),
                    ..Default::default()
                };
                runtime.list_containers(&filter).ok()
            })
            .flatten()
            .collect();
        let dirs = &self.dirs;
        crate::eviction::local_storage_eviction(&self.pod, |target| {
            let path = match target {
                Usage::EmptyDir(name) => dirs.empty_dir(name),
                Usage::ConfigMap(name) => dirs
                    .volumes
                    .join(crate::volume::CONFIG_MAP_PLUGIN)
                    .join(name),
                Usage::Rootfs(name) => {
                    let c = running
                        .iter()
                        .filter(|c| c.metadata.name == name)
                        .max_by_key(|c| c.created_at)?;
                    return runtime.writable_layer_bytes(&c.sandbox_id, &c.id);
                }
                Usage::Logs(name) => dirs.logs.join(name),
                // The runtime's file in podlab (kubelet keeps its own `etc-hosts`).
                Usage::EtcHosts => {
                    let local = runtime.local()?;
                    local.layout().sandbox(self.sandboxes.last()?).hosts()
                }
            };
            disk_usage(&path).ok()
        })
    }

    /// kubelet's allocation manager and `doPodResizeAction` for this pod, before its pass: a
    /// changed `resources` is admitted (it fits the node beside the other pods) or left
    /// pending; what is admitted is actuated in place for each running container whose
    /// `resizePolicy` allows it (the pod's cgroup first when it grows, after the containers
    /// when it shrinks; a memory limit is never set below what the container uses now).
    /// Returns the pod as the node runs it (its allocated resources) and the resize's state.
    fn resize(&mut self, observed: &PodRuntime) -> (Pod, Resize) {
        let root = self.node.config.root.clone();
        let (_, _, uid) = translate::identity(&self.pod);
        let path = PodAllocation::path(&root, &uid);
        let mut allocation = match self.allocation.take() {
            Some(allocation) => allocation,
            None => PodAllocation::load(&path).unwrap_or_else(|| {
                let admitted = PodAllocation::admitted(&self.pod);
                if let Err(e) = admitted.save(&path) {
                    eprintln!("podlab node: {}: {}: {e}", self.key(), path.display());
                }
                admitted
            }),
        };
        let desired = resize::requested(&self.pod);
        let mut pending = None;
        if resize::differs(&desired, &allocation.allocated) {
            let node = crate::env::PodRuntimeFacts::of_this_node(Vec::new(), String::new());
            let capacity = resize::NodeCapacity {
                milli_cpu: node.node_milli_cpu,
                memory: node.node_memory,
            };
            let others = allocation::admitted_others(&root, &self.node.store, &uid);
            match resize::admit(&self.pod, capacity, &others) {
                Ok(()) => {
                    self.say(|| "resize admitted: the new resources are allocated".into());
                    allocation.allocated = desired;
                    self.resize_error = None;
                    if let Err(e) = allocation.save(&path) {
                        eprintln!("podlab node: {}: {}: {e}", self.key(), path.display());
                    }
                    // A pod that shrank leaves room for another's Deferred resize.
                    self.node.resizes.retry(Some(&uid));
                }
                Err(why) => {
                    self.say(|| format!("resize pending ({}): {}", why.reason, why.message));
                    pending = Some(why);
                }
            }
        }
        let deferred = pending
            .as_ref()
            .is_some_and(|p| p.reason == resize::DEFERRED);
        self.node.resizes.set_deferred(&uid, deferred, &self.wake);

        let pod = resize::allocated_pod(&self.pod, &allocation.allocated);
        let mut restart = Vec::new();
        let mut in_place = Vec::new();
        for container in resize::resizable(&pod) {
            let Some(running) = observed.containers.iter().find(|c| {
                c.metadata.name == container.name
                    && c.state == podlab_runtime::ContainerState::Running
            }) else {
                continue;
            };
            let allocated = allocation.allocated.get(&container.name);
            let actuated = allocation.actuated.get(&container.name);
            let (Some(allocated), Some(actuated)) = (allocated, actuated) else {
                continue;
            };
            match resize::container_resize(container, allocated, actuated) {
                resize::ContainerResize::None => {}
                resize::ContainerResize::InPlace => {
                    in_place.push((container.clone(), running.clone()));
                }
                resize::ContainerResize::Restart => restart.push(container.name.clone()),
            }
        }
        if !in_place.is_empty() {
            let actuated_pod = resize::allocated_pod(&self.pod, &allocation.actuated);
            let outcome = self.actuate(&pod, &actuated_pod, &in_place, &mut allocation);
            if let Err(e) = allocation.save(&path) {
                eprintln!("podlab node: {}: {}: {e}", self.key(), path.display());
            }
            self.resize_error = outcome.err();
        }
        let unactuated = in_place.iter().any(|(c, _)| {
            let allocated = allocation.allocated.get(&c.name);
            let actuated = allocation.actuated.get(&c.name);
            matches!((allocated, actuated), (Some(a), Some(b)) if !resize::same_cpu_memory(a, b))
        });
        let in_progress = !restart.is_empty() || unactuated;
        if !in_progress {
            self.resize_error = None;
        }
        self.allocation = Some(allocation);
        let state = ResizeState {
            pending,
            in_progress: in_progress.then(|| ResizeInProgress {
                error: self.resize_error.clone(),
            }),
        };
        let resize = Resize {
            state: (state != ResizeState::default()).then_some(state),
            restart,
        };
        (pod, resize)
    }

    /// `doPodResizeAction`: the pod's cgroup and its running containers' set to the allocated
    /// resources in kubelet's order, memory then cpu, for each: the pod first if its limit
    /// grows, the containers whose limit shrinks, the pod if it shrinks, then the other
    /// containers (the kernel refuses a child's cfs quota above its parent's, and a memory
    /// limit below the usage). A container's update accepted for both is recorded as actuated.
    /// Returns the first error; a failure among the shrinking containers stops the rest of its
    /// resource and the next, as kubelet's does.
    fn actuate(
        &mut self,
        pod: &Pod,
        actuated_pod: &Pod,
        containers: &[(Container, podlab_runtime::ContainerStatus)],
        allocation: &mut PodAllocation,
    ) -> Result<(), String> {
        let result = self.actuate_in_order(pod, actuated_pod, containers, allocation);
        if let Err(e) = &result {
            self.say(|| format!("resize not actuated: {e}"));
            self.node
                .recorder
                .pod_event(&self.pod, super::events::WARNING, "ResizeError", e);
        }
        result
    }

    fn actuate_in_order(
        &self,
        pod: &Pod,
        actuated_pod: &Pod,
        containers: &[(Container, podlab_runtime::ContainerStatus)],
        allocation: &mut PodAllocation,
    ) -> Result<(), String> {
        let runtime = &self.node.runtime;
        let sandbox = containers[0].1.sandbox_id.clone();
        let pod_values = (
            crate::qos::pod_resources(actuated_pod),
            crate::qos::pod_resources(pod),
        );
        // (before, after, status) of each container's cgroup values.
        let values: Vec<_> = containers
            .iter()
            .map(|(container, status)| {
                let before = actuated_pod
                    .spec
                    .iter()
                    .flat_map(podlab_api::resources::containers)
                    .find(|c| c.name == container.name);
                let after = crate::qos::container_resources(pod, Some(container)).cgroup;
                let before = crate::qos::container_resources(actuated_pod, before).cgroup;
                (container.name.as_str(), before, after, status)
            })
            .collect();
        for resource in [Resource::Memory, Resource::Cpu] {
            let (before, after) = (resource.limit(&pod_values.0), resource.limit(&pod_values.1));
            let update_pod = || -> Result<(), String> {
                let usage = runtime.pod_memory_usage(&sandbox);
                if let Some(usage) =
                    usage.filter(|_| resource == Resource::Memory && after < before)
                {
                    if usage as i64 > after {
                        return Err(format!(
                            "attempting to set pod memory limit ({after}) below current usage ({usage})"
                        ));
                    }
                }
                runtime
                    .update_pod_sandbox_resources(&sandbox, &resource.values(&pod_values.1))
                    .map_err(|e| format!("updating the pod's cgroup: {e}"))
            };
            if after >= before {
                update_pod()?;
            }
            let mut first_error = None;
            for shrink in [true, false] {
                if !shrink {
                    if let Some(e) = first_error {
                        return Err(e);
                    }
                    if after < before {
                        update_pod()?;
                    }
                }
                for (name, old, new, status) in &values {
                    if (resource.limit(new) < resource.limit(old)) != shrink {
                        continue;
                    }
                    let limit = resource.limit(new);
                    let usage = runtime.container_memory_usage(&status.id);
                    let over = usage
                        .filter(|u| resource == Resource::Memory && shrink && *u as i64 > limit);
                    if let Some(usage) = over {
                        first_error.get_or_insert(format!(
                            "attempting to set container {name:?} memory limit ({limit}) below current usage ({usage})"
                        ));
                        continue;
                    }
                    if let Err(e) =
                        runtime.update_container_resources(&status.id, &resource.values(new))
                    {
                        first_error
                            .get_or_insert(format!("UpdateContainerResources of {name:?}: {e}"));
                    }
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
        }
        for (name, ..) in &values {
            if let Some(allocated) = allocation.allocated.get(*name) {
                allocation
                    .actuated
                    .insert(name.to_string(), allocated.clone());
                self.say(|| format!("{name} resized in place"));
            }
        }
        Ok(())
    }

    /// The containers created in the pass run with the allocated resources: actuated.
    fn note_created(&mut self) {
        let created = std::mem::take(&mut self.caches.created);
        let Some(allocation) = self.allocation.as_mut() else {
            return;
        };
        let mut changed = false;
        for name in created {
            if let Some(allocated) = allocation.allocated.get(&name) {
                if allocation.actuated.get(&name) != Some(allocated) {
                    allocation.actuated.insert(name, allocated.clone());
                    changed = true;
                }
            }
        }
        if changed {
            let (_, _, uid) = translate::identity(&self.pod);
            let path = PodAllocation::path(&self.node.config.root, &uid);
            if let Err(e) = allocation.save(&path) {
                eprintln!("podlab node: {}: {}: {e}", self.key(), path.display());
            }
        }
    }

    /// The caches that feed a pass.
    fn context(&self, pod_is_terminal: bool) -> PassContext {
        let status = self.last_status.as_ref().or(self.pod.status.as_ref());
        PassContext {
            probe_results: self.probes.results(),
            start_failures: self.caches.start_failures.values().cloned().collect(),
            other_conditions: view::other_conditions(self.pod.status.as_ref()),
            pod_is_terminal,
            previous: status.map(view::previous_status),
            eviction: self.eviction.clone(),
            ..PassContext::default()
        }
    }

    /// Writes the pass's status unless it is what the API holds already; true when written.
    fn write_status(&mut self, result: &SyncResult, observed: &PodRuntime) -> bool {
        let status = pod_status(
            result,
            &StatusInputs {
                pod: &self.pod,
                observed,
                allocation: self.allocation.as_ref(),
                host_ip: &self.node.host_ip,
                now: podlab_control::names::now(),
            },
        );
        self.store_status(status)
    }

    /// Writes `status` unless the API holds it already (retrying on a Conflict); true when
    /// written.
    fn store_status(&mut self, status: PodStatus) -> bool {
        if self.last_status.as_ref() == Some(&status) || self.pod.status.as_ref() == Some(&status) {
            self.last_status = Some(status);
            return false;
        }
        // Marked before the write: a traced command stops reading the trace once it sees the
        // status, so a mark after the commit could land in a file already printed and gone.
        self.mark(&format!(
            "status written ({})",
            Self::status_summary(&status)
        ));
        let mut pod = self.pod.clone();
        for _ in 0..STATUS_WRITE_TRIES {
            pod.status = Some(status.clone());
            match self.node.store.update_status(pod) {
                Ok(written) => {
                    self.last_written_rv = written.metadata.resource_version.clone();
                    self.pod = written;
                    self.last_status = Some(status);
                    return true;
                }
                Err(e) if e.is_conflict() => match self.reread() {
                    Some(fresh) => {
                        self.pod = fresh.clone();
                        pod = fresh;
                    }
                    None => return false,
                },
                Err(e) if e.is_not_found() => return false,
                Err(e) => {
                    eprintln!("podlab node: {}: writing the status: {e}", self.key());
                    return false;
                }
            }
        }
        false
    }

    /// The pod as stored now, if it is still this pod.
    fn reread(&self) -> Option<Pod> {
        let (namespace, name, uid) = translate::identity(&self.pod);
        self.node
            .store
            .get::<Pod>(&namespace, &name)
            .ok()
            .filter(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
    }

    /// What the probe threads see until the next pass.
    fn publish_targets(&self, spec: &PodSpecView, result: &SyncResult, observed: &PodRuntime) {
        if self.probes.is_empty() && !result.runtime_sync_called {
            return;
        }
        let sidecars: Vec<&str> = spec
            .init_containers
            .iter()
            .filter(|c| c.sidecar)
            .map(|c| c.name.as_str())
            .collect();
        let never = spec.restart_policy == RestartPolicy::Never;
        let containers = result
            .statuses
            .containers
            .iter()
            .chain(
                result
                    .statuses
                    .init
                    .iter()
                    .filter(|s| sidecars.contains(&s.name.as_str())),
            )
            .map(|s| {
                let started_at = match s.state {
                    crate::model::ApiState::Running { started_at } => started_at.unwrap_or(0),
                    _ => 0,
                };
                let target = ContainerTarget {
                    container_id: s.container_id.clone(),
                    running: s.state.is_running(),
                    terminated: s.state.terminated().is_some(),
                    started: s.started,
                    started_at,
                    can_restart: !never || sidecars.contains(&s.name.as_str()),
                };
                (s.name.clone(), target)
            })
            .collect();
        let newest = observed
            .newest_sandbox()
            .filter(|s| s.state == podlab_runtime::SandboxState::Ready);
        self.probes.publish(ProbeTargets {
            has_status: true,
            terminal: result.phase.phase.is_terminal(),
            deletion_requested: spec.deletion_requested,
            containers,
            netns: newest
                .and_then(|s| s.namespace_path(podlab_ns::NsKind::Net))
                .map(std::path::Path::to_path_buf),
            pod_ip: newest.and_then(|s| s.ip.clone()),
        });
    }

    /// Section 1 step 2: a terminal pod has what still runs killed and its sandbox stopped;
    /// the status then shows the final states. An evicted pod's containers get kubelet's
    /// override of the grace period, 0 (which the kill raises to its 2 s minimum).
    fn stop_terminal_pod(&mut self, observed: &PodRuntime) {
        let mut pod = self.pod.clone();
        if self.eviction.is_some() {
            if let Some(spec) = pod.spec.as_mut() {
                spec.termination_grace_period_seconds = Some(0);
            }
        }
        if kill_pod(&self.node, Some(&pod), observed) {
            self.write_final_status();
        }
        self.probes.stop();
        self.finished = true;
    }

    /// The status after everything stopped, with the phase as on the termination path.
    fn write_final_status(&mut self) {
        let Ok(observed) = PodRuntime::observe(&*self.node.runtime, &self.sandboxes) else {
            return;
        };
        let spec = view::spec_view(&self.pod);
        let result = sync_pass(&spec, &observed.view(), &self.context(true));
        self.write_status(&result, &observed);
    }

    /// The termination path of a pod with a `deletionTimestamp`: Killing events and
    /// SIGTERM → grace → SIGKILL for every container, the sandboxes stopped (CNI DEL, unpin) and
    /// removed, the pod's records, volumes and logs removed, the pod deleted from the store.
    fn terminate(&mut self) {
        self.probes.stop();
        if let Ok(observed) = PodRuntime::observe(&*self.node.runtime, &self.sandboxes) {
            let pod = self.pod.clone();
            if kill_pod(&self.node, Some(&pod), &observed) {
                self.write_final_status();
            }
            self.mark("containers killed, final status");
        }
        if self.node.is_stopping() {
            // The agent exits in the middle of the grace period: the pod stays, with its
            // deletionTimestamp, for the next agent to finish.
            return;
        }
        self.remove_everything();
        self.mark("pod folders removed");
        podlab_fault::point_reached("pod.terminate.before-store-delete");
        let (namespace, name, uid) = translate::identity(&self.pod);
        let preconditions = Preconditions {
            uid: Some(uid),
            resource_version: None,
        };
        match self
            .node
            .store
            .delete_with::<Pod>(&namespace, &name, &preconditions)
        {
            Ok(_) => {
                self.mark("deleted from the store");
                self.say(|| "terminated and deleted from the store".into())
            }
            Err(e) if e.is_not_found() || e.is_conflict() => {}
            Err(e) => eprintln!("podlab node: {}: deleting the pod: {e}", self.key()),
        }
    }

    /// A pod deleted from the store without the termination path (forced, or while no agent
    /// ran): what it left on the node is stopped and removed.
    fn remove_vanished(&mut self, last: Pod) {
        self.probes.stop();
        if last.metadata.uid == self.pod.metadata.uid {
            self.pod = last;
        }
        if let Ok(observed) = PodRuntime::observe(&*self.node.runtime, &self.sandboxes) {
            let pod = self.pod.clone();
            kill_pod(&self.node, Some(&pod), &observed);
        }
        if self.node.is_stopping() {
            // What is left belongs to no pod: the next agent removes it as an orphan.
            return;
        }
        self.remove_everything();
        self.say(|| "gone from the store: its containers and sandboxes are removed".into());
    }

    /// RemovePodSandbox for every sandbox (records included), then the pod's folders. The
    /// sandboxes that could not be removed stay in `self.sandboxes`.
    fn remove_everything(&mut self) {
        for id in std::mem::take(&mut self.sandboxes) {
            if let Err(e) = self.node.runtime.remove_pod_sandbox(&id) {
                eprintln!("podlab node: {}: removing sandbox {id}: {e}", self.key());
                self.sandboxes.push(id);
            }
        }
        remove_pod_dirs(&self.node.config.root, &self.dirs);
        if let Some(uid) = self.pod.metadata.uid.as_deref() {
            self.node.recorder.forget(uid);
        }
    }

    fn key(&self) -> String {
        let (namespace, name, _) = translate::identity(&self.pod);
        format!("{namespace}/{name}")
    }

    /// Whether this pod's passes are narrated (`-v`, and `--pod` names it if given).
    fn narrating(&self) -> bool {
        let (namespace, name, _) = translate::identity(&self.pod);
        self.node.config.narrates(&namespace, &name)
    }

    fn say(&self, what: impl FnOnce() -> String) {
        if self.narrating() {
            println!("{}: {}", self.key(), what());
        }
    }

    /// With `verbose`, a pass that decided something is told again with its narration.
    fn narrate(
        &self,
        spec: &PodSpecView,
        rt: &crate::RuntimeView,
        ctx: &PassContext,
        decided: bool,
    ) {
        if !self.narrating() || !decided {
            return;
        }
        let (_, lines) = sync_pass_narrated(spec, rt, ctx);
        let key = self.key();
        for line in lines {
            println!("{key}: {line}");
        }
    }
}

/// What admission decided for a new pod.
enum Admission {
    Admitted,
    /// Rejected; `changed` when its status was written now.
    Rejected {
        changed: bool,
    },
}

/// How a pass ended.
enum Pass {
    Idle,
    Changed,
    /// The pod is gone: the worker ends.
    Done,
}

/// What [`PodWorker::resize`] found for a pass.
struct Resize {
    /// The resize conditions' state, when there is a resize.
    state: Option<ResizeState>,
    /// The running containers whose resize requires a restart.
    restart: Vec<String>,
}

/// The pod's volumes (unmounted) and its volume and log folders (never anything outside `root`).
pub fn remove_pod_dirs(root: &std::path::Path, dirs: &PodDirs) {
    crate::volume::tear_down(root, dirs);
}

/// A resource an in-place resize changes, actuated one after the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Memory,
    Cpu,
}

impl Resource {
    /// The cgroup's limit of this resource (memory bytes, cfs quota); no limit is the largest.
    fn limit(self, values: &podlab_cgroups::Resources) -> i64 {
        let limit = match self {
            Resource::Memory => values.memory_limit_in_bytes,
            Resource::Cpu => values.cpu_quota,
        };
        if limit <= 0 {
            i64::MAX
        } else {
            limit
        }
    }

    /// This resource's values alone (the others 0: left as they are).
    fn values(self, values: &podlab_cgroups::Resources) -> podlab_cgroups::Resources {
        match self {
            Resource::Memory => podlab_cgroups::Resources {
                memory_limit_in_bytes: values.memory_limit_in_bytes,
                ..podlab_cgroups::Resources::default()
            },
            Resource::Cpu => podlab_cgroups::Resources {
                cpu_shares: values.cpu_shares,
                cpu_quota: values.cpu_quota,
                cpu_period: values.cpu_period,
                ..podlab_cgroups::Resources::default()
            },
        }
    }
}
