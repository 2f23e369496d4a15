//! The plain data the rules read: what the pod asks for ([`PodSpecView`]) and what the runtime
//! has ([`RuntimeView`]: sandboxes and container records), plus the kubelet's caches that feed a
//! pass ([`PassContext`]: probe results, start-failure reasons, previous status).
//!
//! These mirror the inputs of spec section 11 but belong to no file format: the node agent
//! fills them from podlab-runtime, `explain` fills them from case JSON.

use serde::{Deserialize, Serialize};

/// `spec.restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    /// kubelet's `shouldRestartOnFailure`: anything but Never.
    pub fn restarts_on_failure(self) -> bool {
        self != RestartPolicy::Never
    }
}

/// The three probe kinds of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeType {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeType {
    /// The capitalised name used in event messages (`Liveness probe failed: ...`).
    pub fn title(self) -> &'static str {
        match self {
            ProbeType::Liveness => "Liveness",
            ProbeType::Readiness => "Readiness",
            ProbeType::Startup => "Startup",
        }
    }
}

/// Which probes a container declares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probes {
    pub liveness: bool,
    pub readiness: bool,
    pub startup: bool,
}

impl Probes {
    pub fn has(&self, kind: ProbeType) -> bool {
        match kind {
            ProbeType::Liveness => self.liveness,
            ProbeType::Readiness => self.readiness,
            ProbeType::Startup => self.startup,
        }
    }
}

/// One init or regular container of the spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSpecView {
    pub name: String,
    /// Init container with `restartPolicy: Always` (only meaningful in `initContainers`).
    pub sidecar: bool,
    pub probes: Probes,
    /// kubelet's container hash (name + image, see [`container_hash`]); a record whose hash
    /// differs was made from an older definition (CTR-2).
    pub hash: u64,
    /// Its running container must be restarted for an in-place resize: a resource whose
    /// `resizePolicy` is `RestartContainer` changed (kubelet's `computePodResizeAction`; set by
    /// the node agent from its allocation, [`crate::resize`]).
    #[serde(default)]
    pub resize_restart: bool,
}

impl ContainerSpecView {
    pub fn new(name: impl Into<String>) -> Self {
        ContainerSpecView {
            name: name.into(),
            sidecar: false,
            probes: Probes::default(),
            hash: 0,
            resize_restart: false,
        }
    }
}

/// One `spec.ephemeralContainers[*]` entry (`kubectl debug`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EphemeralSpecView {
    pub name: String,
    /// `targetContainerName`: whose PID namespace to join (EPH-4).
    pub target_container: Option<String>,
}

/// What the pod asks for, as far as the lifecycle rules care.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodSpecView {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub restart_policy: RestartPolicy,
    pub host_network: bool,
    pub share_process_namespace: bool,
    pub host_pid: bool,
    /// The pod has a deletion timestamp.
    pub deletion_requested: bool,
    pub readiness_gates: Vec<String>,
    pub init_containers: Vec<ContainerSpecView>,
    pub containers: Vec<ContainerSpecView>,
    pub ephemeral_containers: Vec<EphemeralSpecView>,
}

impl PodSpecView {
    /// A pod with the given regular containers and defaults everywhere else.
    pub fn new(restart_policy: RestartPolicy, containers: &[&str]) -> Self {
        PodSpecView {
            name: "pod".into(),
            namespace: "default".into(),
            uid: "uid".into(),
            restart_policy,
            host_network: false,
            share_process_namespace: false,
            host_pid: false,
            deletion_requested: false,
            readiness_gates: Vec::new(),
            init_containers: Vec::new(),
            containers: containers
                .iter()
                .map(|n| ContainerSpecView::new(*n))
                .collect(),
            ephemeral_containers: Vec::new(),
        }
    }

    /// kubelet's `format.Pod`: `name_namespace(uid)`.
    pub fn display_name(&self) -> String {
        format!("{}_{}({})", self.name, self.namespace, self.uid)
    }

    pub fn has_init_containers(&self) -> bool {
        !self.init_containers.is_empty()
    }
}

/// CRI sandbox state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// CRI network namespace mode of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum NetnsMode {
    /// The pod's own network namespace.
    Pod,
    /// The host's (hostNetwork).
    Node,
}

/// One CRI PodSandbox of the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    /// Creation time; only the order matters.
    pub created: i64,
    pub state: SandboxState,
    pub netns: NetnsMode,
    /// `None` = the sandbox reports no network status at all; `Some("")` = a status without IP.
    pub ip: Option<String>,
    pub attempt: u32,
}

/// CRI container state of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeState {
    Created,
    Running,
    Exited,
    Unknown,
}

impl RuntimeState {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeState::Created => "created",
            RuntimeState::Running => "running",
            RuntimeState::Exited => "exited",
            RuntimeState::Unknown => "unknown",
        }
    }
}

/// One runtime container instance. A name has one record per (re)start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub id: String,
    pub name: String,
    pub state: RuntimeState,
    /// Creation time; the newest record of a name is the one with the largest value.
    pub created: i64,
    pub exit_code: i32,
    /// Runtime reason (`Completed`, `Error`, `OOMKilled`, `StartError`...), empty when none.
    pub reason: String,
    /// The runtime's message with it (a start failure's error), empty when none.
    #[serde(default)]
    pub message: String,
    pub restart_count: u32,
    pub sandbox_id: String,
    /// Hash of the definition the record was made from (see [`ContainerSpecView::hash`]).
    pub hash: u64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// What the runtime has for the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeView {
    pub sandboxes: Vec<SandboxRecord>,
    pub containers: Vec<ContainerRecord>,
}

impl RuntimeView {
    /// The newest sandbox (largest `created`).
    pub fn newest_sandbox(&self) -> Option<&SandboxRecord> {
        self.sandboxes.iter().max_by_key(|s| s.created)
    }

    /// The active sandbox: the newest one, if it is READY.
    pub fn active_sandbox(&self) -> Option<&SandboxRecord> {
        self.newest_sandbox()
            .filter(|s| s.state == SandboxState::Ready)
    }

    /// kubelet's `FindContainerStatusByName`: the newest record of `name`.
    pub fn newest(&self, name: &str) -> Option<&ContainerRecord> {
        self.containers
            .iter()
            .filter(|r| r.name == name)
            .max_by_key(|r| r.created)
    }

    /// The newest and the second-newest record of `name` (only these two feed the status).
    pub fn two_newest(&self, name: &str) -> (Option<&ContainerRecord>, Option<&ContainerRecord>) {
        let mut first: Option<&ContainerRecord> = None;
        let mut second: Option<&ContainerRecord> = None;
        for record in self.containers.iter().filter(|r| r.name == name) {
            match first {
                Some(f) if record.created <= f.created => {
                    if second.is_none_or(|s| record.created > s.created) {
                        second = Some(record);
                    }
                }
                _ => {
                    second = first;
                    first = Some(record);
                }
            }
        }
        (first, second)
    }

    /// The newest record of `name` that has exited (the backoff gate's reference, BO-1).
    pub fn newest_exited(&self, name: &str) -> Option<&ContainerRecord> {
        self.containers
            .iter()
            .filter(|r| r.name == name && r.state == RuntimeState::Exited)
            .max_by_key(|r| r.created)
    }
}

/// A cached probe result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

impl ProbeResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeResult::Success => "success",
            ProbeResult::Failure => "failure",
            ProbeResult::Unknown => "unknown",
        }
    }
}

/// The results managers' cache for one container record. `None` = no result cached yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedProbeResults {
    pub container_id: String,
    pub liveness: Option<ProbeResult>,
    pub readiness: Option<ProbeResult>,
    pub startup: Option<ProbeResult>,
}

impl CachedProbeResults {
    pub fn get(&self, kind: ProbeType) -> Option<ProbeResult> {
        match kind {
            ProbeType::Liveness => self.liveness,
            ProbeType::Readiness => self.readiness,
            ProbeType::Startup => self.startup,
        }
    }
}

/// A start failure the previous pass recorded for a container (kubelet's reasonCache).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartFailure {
    pub container: String,
    /// `CrashLoopBackOff`, `ErrImagePull`, `RunContainerError`, ...
    pub reason: String,
    pub message: String,
}

/// State of an API container status (`state` / `lastState`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApiState {
    Waiting {
        reason: Option<String>,
        message: Option<String>,
    },
    Running {
        started_at: Option<i64>,
    },
    Terminated(Termination),
}

impl ApiState {
    pub fn waiting(reason: &str) -> Self {
        ApiState::Waiting {
            reason: Some(reason.to_string()),
            message: None,
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(self, ApiState::Running { .. })
    }

    pub fn terminated(&self) -> Option<&Termination> {
        match self {
            ApiState::Terminated(t) => Some(t),
            _ => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ApiState::Waiting { .. } => "waiting",
            ApiState::Running { .. } => "running",
            ApiState::Terminated(_) => "terminated",
        }
    }
}

/// `ContainerStateTerminated`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Termination {
    pub exit_code: i32,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub container_id: Option<String>,
}

/// A container status as the API shows it (previous pass's or this pass's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviousContainerStatus {
    pub name: String,
    pub state: ApiState,
    pub last_state: Option<ApiState>,
    pub restart_count: u32,
}

/// A pod condition carried over from the previous status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedCondition {
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// The pod status the kubelet reported last time (absent on the first pass).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviousStatus {
    pub phase: Option<crate::phase::Phase>,
    pub init: Vec<PreviousContainerStatus>,
    pub containers: Vec<PreviousContainerStatus>,
    pub ephemeral: Vec<PreviousContainerStatus>,
    /// `DisruptionTarget`, copied forward as it is (COND-DT).
    pub disruption_target: Option<CarriedCondition>,
}

/// An internal module asked for the pod to be evicted (active deadline, eviction manager): PH-8.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eviction {
    pub reason: String,
    pub message: String,
}

/// In-place resize state (COND-RESIZE-*): a resize not admitted yet, one admitted and being
/// actuated, or both (an actuation failed and a newer resize waits).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeState {
    /// Requested but not admitted: `Deferred` (may fit later) or `Infeasible`.
    #[serde(default)]
    pub pending: Option<ResizePending>,
    /// Admitted and being actuated.
    #[serde(default)]
    pub in_progress: Option<ResizeInProgress>,
}

/// PodResizePending's reason and message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizePending {
    pub reason: String,
    pub message: String,
}

/// PodResizeInProgress; `error` when actuation failed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeInProgress {
    pub error: Option<String>,
}

/// Everything a pass reads besides the spec and the runtime view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassContext {
    pub probe_results: Vec<CachedProbeResults>,
    pub start_failures: Vec<StartFailure>,
    /// Conditions owned by others (readiness gates): type → `"True"`/`"False"`/...
    pub other_conditions: Vec<(String, String)>,
    /// Evaluate the phase as on the termination path (pod deleted/evicted or already terminal).
    pub pod_is_terminal: bool,
    pub previous: Option<PreviousStatus>,
    /// The runtime reports its network ready (section 1 step 3).
    pub network_ready: bool,
    pub eviction: Option<Eviction>,
    pub resize: Option<ResizeState>,
    /// Evaluate status, phase and conditions over *no* container statuses at all (the
    /// defensive branch behind COND-INIT-0, unreachable in a normal pass).
    pub no_container_statuses: bool,
}

impl Default for PassContext {
    fn default() -> Self {
        PassContext {
            probe_results: Vec::new(),
            start_failures: Vec::new(),
            other_conditions: Vec::new(),
            pod_is_terminal: false,
            previous: None,
            network_ready: true,
            eviction: None,
            resize: None,
            no_container_statuses: false,
        }
    }
}

impl PassContext {
    /// Cached probe results for a container record id.
    pub fn probes_for(&self, container_id: &str) -> Option<&CachedProbeResults> {
        self.probe_results
            .iter()
            .find(|p| p.container_id == container_id)
    }

    /// Cached result of one probe kind for a record.
    pub fn probe(&self, record: Option<&ContainerRecord>, kind: ProbeType) -> Option<ProbeResult> {
        record
            .and_then(|r| self.probes_for(&r.id))
            .and_then(|p| p.get(kind))
    }

    pub fn start_failure(&self, container: &str) -> Option<&StartFailure> {
        self.start_failures
            .iter()
            .find(|f| f.container == container)
    }
}

/// kubelet's container hash covers the name and the image only: a stable FNV-1a of both.
pub fn container_hash(name: &str, image: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes().chain([0]).chain(image.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::exited;

    #[test]
    fn two_newest_picks_by_creation_time_in_any_order() {
        let rt = RuntimeView {
            sandboxes: vec![],
            containers: vec![
                exited("a", 5, 0),
                exited("a", 9, 0),
                exited("b", 20, 0),
                exited("a", 7, 0),
            ],
        };
        let (first, second) = rt.two_newest("a");
        assert_eq!(first.map(|r| r.created), Some(9));
        assert_eq!(second.map(|r| r.created), Some(7));
        assert_eq!(rt.newest("a").map(|r| r.created), Some(9));
        assert_eq!(rt.two_newest("c"), (None, None));
    }

    #[test]
    fn container_hash_depends_on_name_and_image() {
        assert_eq!(
            container_hash("a", "busybox"),
            container_hash("a", "busybox")
        );
        assert_ne!(
            container_hash("a", "busybox"),
            container_hash("a", "busybox:2")
        );
        assert_ne!(container_hash("ab", "c"), container_hash("a", "bc"));
    }
}
