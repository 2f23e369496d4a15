//! The `input` member of a case (spec 11) as serde types, and its mapping onto the model the
//! rules read. Unknown fields are refused so that a typo in a case cannot pass silently.
//!
//! podlab extensions (all optional; absent means the spec's default): `pod.name/namespace/uid`,
//! `pod.shareProcessNamespace/hostPID`, `ephemeralContainers[].targetContainerName`, record
//! `id/startedAt/finishedAt`, `reasonCache` values as `{reason, message}`, `previousStatus`
//! (API-1/API-3/PH-7/COND-DT; the output's `apiStatuses` entries are accepted as is),
//! `networkReady`, `eviction` (PH-8), `resize` (COND-RESIZE-*), `noContainerStatuses`
//! (COND-INIT-0); probeWorker ticks' `containerId` and `started`.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::backoff::BackoffPolicy;
use crate::error::Error;
use crate::model::*;
use crate::phase::Phase;
use crate::probe::ProbeSpec;

/// Deserializes `value` into `T`, naming the JSON path below `prefix` on error.
pub(crate) fn parse<T: DeserializeOwned>(value: &Value, prefix: &str) -> Result<T, Error> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = if inner == "." {
            prefix.to_string()
        } else {
            format!("{prefix}.{inner}")
        };
        Error::bad(path, e.into_inner().to_string())
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SyncInput {
    pod: PodIn,
    #[serde(default)]
    runtime: RuntimeIn,
    #[serde(default)]
    probe_results: BTreeMap<String, ProbeResultsIn>,
    #[serde(default)]
    reason_cache: BTreeMap<String, ReasonIn>,
    #[serde(default)]
    other_conditions: BTreeMap<String, String>,
    #[serde(default)]
    pod_is_terminal: bool,
    #[serde(default)]
    previous_status: Option<PreviousIn>,
    #[serde(default = "yes")]
    network_ready: bool,
    #[serde(default)]
    eviction: Option<EvictionIn>,
    #[serde(default)]
    resize: Option<ResizeIn>,
    #[serde(default)]
    no_container_statuses: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodIn {
    #[serde(default = "default_pod_name")]
    name: String,
    #[serde(default = "default_namespace")]
    namespace: String,
    #[serde(default = "default_uid")]
    uid: String,
    restart_policy: RestartPolicy,
    #[serde(default)]
    host_network: bool,
    #[serde(default)]
    share_process_namespace: bool,
    #[serde(default, rename = "hostPID")]
    host_pid: bool,
    #[serde(default)]
    deletion_requested: bool,
    #[serde(default)]
    readiness_gates: Vec<String>,
    #[serde(default)]
    init_containers: Vec<ContainerIn>,
    containers: Vec<ContainerIn>,
    #[serde(default)]
    ephemeral_containers: Vec<EphemeralIn>,
}

fn default_pod_name() -> String {
    "pod".into()
}
fn default_namespace() -> String {
    "default".into()
}
fn default_uid() -> String {
    "uid".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ContainerIn {
    name: String,
    #[serde(default)]
    sidecar: bool,
    #[serde(default)]
    probes: Vec<ProbeType>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EphemeralIn {
    name: String,
    #[serde(default)]
    target_container_name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RuntimeIn {
    #[serde(default)]
    sandboxes: Vec<SandboxIn>,
    #[serde(default)]
    containers: Vec<RecordIn>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SandboxIn {
    id: String,
    created: i64,
    state: SandboxState,
    netns: NetnsMode,
    #[serde(default)]
    ip: Option<String>,
    #[serde(default)]
    attempt: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RecordIn {
    #[serde(default)]
    id: Option<String>,
    name: String,
    state: RuntimeState,
    created: i64,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    restart_count: u32,
    #[serde(default)]
    sandbox: Option<String>,
    #[serde(default)]
    spec_changed: bool,
    #[serde(default)]
    started_at: Option<i64>,
    #[serde(default)]
    finished_at: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbeResultsIn {
    #[serde(default)]
    liveness: Option<ProbeResult>,
    #[serde(default)]
    readiness: Option<ProbeResult>,
    #[serde(default)]
    startup: Option<ProbeResult>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ReasonIn {
    Reason(String),
    Full { reason: String, message: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PreviousIn {
    #[serde(default)]
    phase: Option<Phase>,
    #[serde(default)]
    init: Vec<StatusIn>,
    #[serde(default)]
    containers: Vec<StatusIn>,
    #[serde(default)]
    conditions: BTreeMap<String, ConditionIn>,
}

/// The shape of an `apiStatuses` entry of the output.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StatusIn {
    name: String,
    state: ApiStateName,
    #[serde(default)]
    waiting_reason: Option<String>,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    terminated_reason: Option<String>,
    #[serde(default)]
    last_terminated_exit_code: Option<i32>,
    #[serde(default)]
    restart_count: u32,
    // Accepted so that an output can be fed back; they do not influence the next pass.
    #[serde(default)]
    #[allow(dead_code)]
    started: Option<bool>,
    #[serde(default)]
    #[allow(dead_code)]
    ready: Option<bool>,
    #[serde(default)]
    #[allow(dead_code)]
    inferred: Option<bool>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum ApiStateName {
    Waiting,
    Running,
    Terminated,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConditionIn {
    status: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EvictionIn {
    reason: String,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResizeIn {
    #[serde(default)]
    pending: Option<String>,
    #[serde(default)]
    in_progress: bool,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// A sync case mapped onto the model.
pub(crate) struct SyncCase {
    pub pod: PodSpecView,
    pub runtime: RuntimeView,
    pub context: PassContext,
}

impl SyncInput {
    /// Maps onto the model; `path` is the JSON path of `input`, for errors found here.
    pub(crate) fn into_model(self, path: &str) -> Result<SyncCase, Error> {
        let p = self.pod;
        let container = |c: ContainerIn| ContainerSpecView {
            name: c.name,
            sidecar: c.sidecar,
            probes: Probes {
                liveness: c.probes.contains(&ProbeType::Liveness),
                readiness: c.probes.contains(&ProbeType::Readiness),
                startup: c.probes.contains(&ProbeType::Startup),
            },
            hash: 0,
            resize_restart: false,
        };
        let pod = PodSpecView {
            name: p.name,
            namespace: p.namespace,
            uid: p.uid,
            restart_policy: p.restart_policy,
            host_network: p.host_network,
            share_process_namespace: p.share_process_namespace,
            host_pid: p.host_pid,
            deletion_requested: p.deletion_requested,
            readiness_gates: p.readiness_gates,
            init_containers: p.init_containers.into_iter().map(container).collect(),
            containers: p.containers.into_iter().map(container).collect(),
            ephemeral_containers: p
                .ephemeral_containers
                .into_iter()
                .map(|e| EphemeralSpecView {
                    name: e.name,
                    target_container: e.target_container_name,
                })
                .collect(),
        };

        let sandboxes: Vec<SandboxRecord> = self
            .runtime
            .sandboxes
            .into_iter()
            .map(|s| SandboxRecord {
                id: s.id,
                created: s.created,
                state: s.state,
                netns: s.netns,
                ip: s.ip,
                attempt: s.attempt,
            })
            .collect();
        let newest_sandbox = sandboxes
            .iter()
            .max_by_key(|s| s.created)
            .map(|s| s.id.clone())
            .unwrap_or_default();
        let mut containers = Vec::with_capacity(self.runtime.containers.len());
        for (i, r) in self.runtime.containers.into_iter().enumerate() {
            let exit_code = match (r.state, r.exit_code) {
                (RuntimeState::Exited, None) => {
                    return Err(Error::bad(
                        format!("{path}.runtime.containers[{i}].exitCode"),
                        "missing: an exited record needs an exit code",
                    ))
                }
                (_, code) => code.unwrap_or(0),
            };
            containers.push(ContainerRecord {
                id: r.id.unwrap_or_else(|| format!("{}@{}", r.name, r.created)),
                name: r.name,
                state: r.state,
                created: r.created,
                exit_code,
                reason: r.reason.unwrap_or_default(),
                message: String::new(),
                restart_count: r.restart_count,
                sandbox_id: r.sandbox.unwrap_or_else(|| newest_sandbox.clone()),
                hash: u64::from(r.spec_changed),
                started_at: r.started_at,
                finished_at: r.finished_at,
            });
        }
        let runtime = RuntimeView {
            sandboxes,
            containers,
        };

        let probe_results = self
            .probe_results
            .into_iter()
            .filter_map(|(name, r)| {
                let record = runtime.newest(&name)?;
                Some(CachedProbeResults {
                    container_id: record.id.clone(),
                    liveness: r.liveness,
                    readiness: r.readiness,
                    startup: r.startup,
                })
            })
            .collect();
        let start_failures = self
            .reason_cache
            .into_iter()
            .map(|(container, reason)| {
                let (reason, message) = match reason {
                    ReasonIn::Reason(r) => (r, String::new()),
                    ReasonIn::Full { reason, message } => (reason, message),
                };
                StartFailure {
                    container,
                    reason,
                    message,
                }
            })
            .collect();
        let previous = self.previous_status.map(previous_status);
        let resize = match self.resize {
            None => None,
            Some(ResizeIn {
                pending: None,
                in_progress: false,
                ..
            }) => {
                return Err(Error::bad(
                    format!("{path}.resize"),
                    "needs \"pending\": \"Deferred\"|\"Infeasible\" or \"inProgress\": true",
                ))
            }
            Some(r) => Some(ResizeState {
                pending: r.pending.map(|reason| ResizePending {
                    reason,
                    message: r.message.unwrap_or_default(),
                }),
                in_progress: r.in_progress.then_some(ResizeInProgress { error: r.error }),
            }),
        };
        let context = PassContext {
            probe_results,
            start_failures,
            other_conditions: self.other_conditions.into_iter().collect(),
            pod_is_terminal: self.pod_is_terminal,
            previous,
            network_ready: self.network_ready,
            eviction: self.eviction.map(|e| Eviction {
                reason: e.reason,
                message: e.message,
            }),
            resize,
            no_container_statuses: self.no_container_statuses,
        };
        Ok(SyncCase {
            pod,
            runtime,
            context,
        })
    }
}

fn previous_status(p: PreviousIn) -> PreviousStatus {
    let status = |s: StatusIn| {
        let state = match s.state {
            ApiStateName::Waiting => ApiState::Waiting {
                reason: s.waiting_reason,
                message: None,
            },
            ApiStateName::Running => ApiState::Running { started_at: None },
            ApiStateName::Terminated => ApiState::Terminated(Termination {
                exit_code: s.exit_code.unwrap_or(0),
                reason: s.terminated_reason,
                ..Termination::default()
            }),
        };
        PreviousContainerStatus {
            name: s.name,
            state,
            last_state: s.last_terminated_exit_code.map(|exit_code| {
                ApiState::Terminated(Termination {
                    exit_code,
                    ..Termination::default()
                })
            }),
            restart_count: s.restart_count,
        }
    };
    let mut conditions = p.conditions;
    PreviousStatus {
        phase: p.phase,
        init: p.init.into_iter().map(status).collect(),
        containers: p.containers.into_iter().map(status).collect(),
        ephemeral: Vec::new(),
        disruption_target: conditions
            .remove("DisruptionTarget")
            .map(|c| CarriedCondition {
                status: c.status,
                reason: c.reason,
                message: c.message,
            }),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct BackoffInput {
    #[serde(default = "default_initial")]
    initial_seconds: i64,
    #[serde(default = "default_max")]
    max_seconds: i64,
    #[serde(default = "default_reset")]
    reset_after_seconds: i64,
    pub attempts: Vec<AttemptIn>,
}

fn default_initial() -> i64 {
    BackoffPolicy::default().initial
}
fn default_max() -> i64 {
    BackoffPolicy::default().max
}
fn default_reset() -> i64 {
    BackoffPolicy::default().reset_after
}

impl BackoffInput {
    pub(crate) fn policy(&self) -> BackoffPolicy {
        BackoffPolicy {
            initial: self.initial_seconds,
            max: self.max_seconds,
            reset_after: self.reset_after_seconds,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AttemptIn {
    pub finished_at: i64,
    pub now: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ProbeWorkerInput {
    pub probe_type: ProbeType,
    #[serde(default)]
    spec: ProbeSpecIn,
    #[serde(default)]
    pub container_started_at: i64,
    pub ticks: Vec<TickIn>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ProbeSpecIn {
    #[serde(default)]
    initial_delay_seconds: Option<i64>,
    #[serde(default)]
    period_seconds: Option<i64>,
    #[serde(default)]
    timeout_seconds: Option<i64>,
    #[serde(default)]
    success_threshold: Option<u32>,
    #[serde(default)]
    failure_threshold: Option<u32>,
    #[serde(default)]
    termination_grace_period_seconds: Option<i64>,
}

impl ProbeWorkerInput {
    pub(crate) fn spec(&self) -> ProbeSpec {
        let d = ProbeSpec::default();
        let s = &self.spec;
        ProbeSpec {
            initial_delay_seconds: s.initial_delay_seconds.unwrap_or(d.initial_delay_seconds),
            period_seconds: s.period_seconds.unwrap_or(d.period_seconds),
            timeout_seconds: s.timeout_seconds.unwrap_or(d.timeout_seconds),
            success_threshold: s.success_threshold.unwrap_or(d.success_threshold),
            failure_threshold: s.failure_threshold.unwrap_or(d.failure_threshold),
            termination_grace_period_seconds: s.termination_grace_period_seconds,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TickIn {
    pub t: i64,
    pub raw: RawIn,
    #[serde(default)]
    pub container_id: Option<String>,
    #[serde(default)]
    pub started: Option<bool>,
}

#[derive(Deserialize, Clone, Copy, Debug)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawIn {
    Success,
    Failure,
    Error,
}
