//! From runtime records to API container statuses (kubelet's `convertToAPIContainerStatuses`,
//! spec 3, API-1..6) and the probe manager's `started`/`ready` flags (PRB-1..4).

use crate::events::{CONTAINER_CREATING, CONTAINER_STATUS_UNKNOWN, POD_INITIALIZING};
use crate::model::{
    ApiState, ContainerRecord, ContainerSpecView, PassContext, PodSpecView,
    PreviousContainerStatus, ProbeResult, ProbeType, RuntimeState, RuntimeView, Termination,
};
use crate::restart::should_restart;
use crate::rules::{RuleId, Trace};

/// One container status as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiContainerStatus {
    pub name: String,
    pub state: ApiState,
    pub last_state: Option<ApiState>,
    pub restart_count: u32,
    pub container_id: Option<String>,
    pub started: bool,
    pub ready: bool,
    /// Terminated state inferred without a record (API-2).
    pub inferred: bool,
    pub rules: Vec<RuleId>,
}

impl ApiContainerStatus {
    /// Waiting with a last termination: "stopped" for the phase.
    pub fn waiting_after_termination(&self) -> Option<&Termination> {
        match (&self.state, &self.last_state) {
            (ApiState::Waiting { .. }, Some(ApiState::Terminated(t))) => Some(t),
            _ => None,
        }
    }

    /// The state as the previous status of the next pass.
    pub fn to_previous(&self) -> PreviousContainerStatus {
        PreviousContainerStatus {
            name: self.name.clone(),
            state: self.state.clone(),
            last_state: self.last_state.clone(),
            restart_count: self.restart_count,
        }
    }

    fn fire(&mut self, trace: &mut Trace, rule: RuleId, say: impl FnOnce() -> String) {
        if !self.rules.contains(&rule) {
            self.rules.push(rule);
        }
        trace.fire(rule, say);
    }
}

/// The three status lists of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodStatuses {
    /// Spec order.
    pub init: Vec<ApiContainerStatus>,
    /// Sorted by name.
    pub containers: Vec<ApiContainerStatus>,
    /// Sorted by name.
    pub ephemeral: Vec<ApiContainerStatus>,
}

impl PodStatuses {
    pub fn find(&self, name: &str) -> Option<&ApiContainerStatus> {
        self.init
            .iter()
            .chain(&self.containers)
            .find(|s| s.name == name)
    }

    pub fn is_empty(&self) -> bool {
        self.init.is_empty() && self.containers.is_empty()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ListKind {
    Init,
    Regular,
    Ephemeral,
}

/// All statuses of a pass.
pub fn compute(
    pod: &PodSpecView,
    rt: &RuntimeView,
    ctx: &PassContext,
    trace: &mut Trace,
) -> PodStatuses {
    if ctx.no_container_statuses {
        trace.say(|| "no container statuses are available at all".into());
        return PodStatuses::default();
    }
    let previous = ctx.previous.as_ref();
    let init = pod
        .init_containers
        .iter()
        .map(|c| {
            let prev = previous.and_then(|p| p.init.iter().find(|s| s.name == c.name));
            convert(pod, rt, ctx, c, ListKind::Init, prev, trace)
        })
        .collect();
    let mut containers: Vec<ApiContainerStatus> = pod
        .containers
        .iter()
        .map(|c| {
            let prev = previous.and_then(|p| p.containers.iter().find(|s| s.name == c.name));
            convert(pod, rt, ctx, c, ListKind::Regular, prev, trace)
        })
        .collect();
    containers.sort_by(|a, b| a.name.cmp(&b.name));
    let mut ephemeral: Vec<ApiContainerStatus> = pod
        .ephemeral_containers
        .iter()
        .map(|e| {
            let prev = previous.and_then(|p| p.ephemeral.iter().find(|s| s.name == e.name));
            let spec = ContainerSpecView::new(e.name.clone());
            convert(pod, rt, ctx, &spec, ListKind::Ephemeral, prev, trace)
        })
        .collect();
    ephemeral.sort_by(|a, b| a.name.cmp(&b.name));
    PodStatuses {
        init,
        containers,
        ephemeral,
    }
}

fn convert(
    pod: &PodSpecView,
    rt: &RuntimeView,
    ctx: &PassContext,
    spec: &ContainerSpecView,
    kind: ListKind,
    prev: Option<&PreviousContainerStatus>,
    trace: &mut Trace,
) -> ApiContainerStatus {
    let name = spec.name.as_str();
    let default_reason = if pod.has_init_containers() {
        POD_INITIALIZING
    } else {
        CONTAINER_CREATING
    };
    let (newest, second) = rt.two_newest(name);
    let regular_init = kind == ListKind::Init && !spec.sidecar;

    let mut status = match newest {
        None if regular_init && any_regular_container_created(pod, rt) => {
            let mut s = blank(name, terminated(0, Some("Completed"), None));
            s.restart_count = prev.map_or(0, |p| p.restart_count);
            s.inferred = true;
            s.fire(trace, "API-2", || {
                format!("{name} has no record but a regular container has one: it is shown terminated (Completed, exit 0)")
            });
            s
        }
        None => without_record(pod, name, default_reason, prev, trace),
        Some(record) => {
            let mut s = from_record(record, prev);
            let kind = s.state.kind();
            s.fire(trace, "API-3", || {
                format!(
                    "{name}: newest record {} is {} → API state {kind}",
                    record.id,
                    record.state.as_str()
                )
            });
            if !(record.state == RuntimeState::Unknown
                && prev.is_some_and(|p| p.state.is_running()))
            {
                s.fire(trace, "API-6", || {
                    format!(
                        "{name}: restartCount {} is taken from the newest record",
                        record.restart_count
                    )
                });
            }
            if let Some(older) = second {
                s.last_state = Some(from_record(older, prev).state);
                s.fire(trace, "API-4", || {
                    format!(
                        "{name}: the second-newest record {} becomes lastState",
                        older.id
                    )
                });
            }
            s
        }
    };

    // API-5: a cached start failure turns a restartable container into waiting{reason}.
    let exited_zero_init = kind == ListKind::Init
        && newest.is_some_and(|r| r.state == RuntimeState::Exited && r.exit_code == 0);
    if !exited_zero_init && should_restart(pod, newest).restart {
        if let Some(failure) = ctx.start_failure(name) {
            if let ApiState::Terminated(_) = status.state {
                status.last_state = Some(status.state.clone());
            }
            status.state = ApiState::Waiting {
                reason: Some(failure.reason.clone()),
                message: Some(failure.message.clone()),
            };
            status.fire(trace, "API-5", || {
                format!("{name} will be restarted and the last pass cached {}: it is shown waiting with that reason", failure.reason)
            });
        }
    }

    started_and_ready(ctx, spec, kind, newest, &mut status, trace);
    status
}

/// API-1: the container has no record at all.
fn without_record(
    pod: &PodSpecView,
    name: &str,
    default_reason: &str,
    prev: Option<&PreviousContainerStatus>,
    trace: &mut Trace,
) -> ApiContainerStatus {
    let mut s = blank(name, ApiState::waiting(default_reason));
    if let Some(p) = prev {
        if p.state.terminated().is_some() {
            s.state = p.state.clone();
            s.last_state = p.last_state.clone();
            s.restart_count = p.restart_count;
            s.fire(trace, "API-1", || {
                format!(
                    "{name} has no record and was terminated before: the previous status is kept"
                )
            });
            return s;
        }
        s.restart_count = p.restart_count;
        s.last_state = p.last_state.clone();
        if p.state.is_running()
            && s.last_state
                .as_ref()
                .and_then(ApiState::terminated)
                .is_none()
        {
            s.last_state = Some(ApiState::Terminated(Termination {
                exit_code: 137,
                reason: Some(CONTAINER_STATUS_UNKNOWN.into()),
                message: Some(
                    "The container could not be located when the pod was deleted.  The container used to be Running"
                        .into(),
                ),
                ..Termination::default()
            }));
            if !pod.deletion_requested {
                s.restart_count += 1;
            }
            let restart_count = s.restart_count;
            s.fire(trace, "API-1", || {
                format!(
                    "{name} was running but its record vanished: waiting {default_reason} with lastState terminated \
                     (ContainerStatusUnknown, 137), restartCount {restart_count}"
                )
            });
            return s;
        }
    }
    s.fire(trace, "API-1", || {
        format!("{name} has no record: waiting {default_reason}")
    });
    s
}

fn blank(name: &str, state: ApiState) -> ApiContainerStatus {
    ApiContainerStatus {
        name: name.to_string(),
        state,
        last_state: None,
        restart_count: 0,
        container_id: None,
        started: false,
        ready: false,
        inferred: false,
        rules: Vec::new(),
    }
}

fn terminated(exit_code: i32, reason: Option<&str>, message: Option<&str>) -> ApiState {
    ApiState::Terminated(Termination {
        exit_code,
        reason: reason.map(String::from),
        message: message.map(String::from),
        ..Termination::default()
    })
}

/// API-3 for one record (kubelet's `convertContainerStatus`).
fn from_record(
    record: &ContainerRecord,
    prev: Option<&PreviousContainerStatus>,
) -> ApiContainerStatus {
    let mut restart_count = record.restart_count;
    let state = match record.state {
        RuntimeState::Running => ApiState::Running {
            started_at: record.started_at,
        },
        RuntimeState::Created => ApiState::Waiting {
            reason: None,
            message: None,
        },
        RuntimeState::Exited => ApiState::Terminated(Termination {
            exit_code: record.exit_code,
            reason: (!record.reason.is_empty()).then(|| record.reason.clone()),
            // kubelet's convertContainerStatus: the runtime's message (containerd's start
            // error for a StartError) goes with the reason.
            message: (!record.message.is_empty()).then(|| record.message.clone()),
            started_at: record.started_at,
            finished_at: record.finished_at,
            container_id: Some(record.id.clone()),
        }),
        RuntimeState::Unknown => match prev {
            Some(p) if p.state.is_running() => {
                restart_count = p.restart_count + 1;
                terminated(
                    137,
                    Some(CONTAINER_STATUS_UNKNOWN),
                    Some("The container could not be located when the pod was terminated"),
                )
            }
            _ => ApiState::Waiting {
                reason: None,
                message: None,
            },
        },
    };
    let mut s = blank(&record.name, state);
    s.restart_count = restart_count;
    s.container_id = Some(record.id.clone());
    s
}

/// kubelet's `hasAnyRegularContainerCreated`: a regular container has a created, running or
/// exited record.
pub fn any_regular_container_created(pod: &PodSpecView, rt: &RuntimeView) -> bool {
    pod.containers.iter().any(|c| {
        rt.newest(&c.name).is_some_and(|r| {
            matches!(
                r.state,
                RuntimeState::Created | RuntimeState::Running | RuntimeState::Exited
            )
        })
    })
}

/// PRB-1..4.
fn started_and_ready(
    ctx: &PassContext,
    spec: &ContainerSpecView,
    kind: ListKind,
    newest: Option<&ContainerRecord>,
    status: &mut ApiContainerStatus,
    trace: &mut Trace,
) {
    if kind == ListKind::Ephemeral {
        return;
    }
    let name = spec.name.as_str();
    let running = status.state.is_running();
    let startup = ctx.probe(newest, ProbeType::Startup);
    status.started = running
        && match startup {
            Some(result) => result == ProbeResult::Success,
            None => !spec.probes.startup,
        };
    if spec.probes.startup {
        let started = status.started;
        status.fire(trace, "PRB-2", || {
            format!(
                "{name} has a startup probe (cached: {}): started = {started}",
                startup.map_or("none yet", ProbeResult::as_str)
            )
        });
    }

    if kind == ListKind::Init && !spec.sidecar {
        status.ready = status.state.terminated().is_some_and(|t| t.exit_code == 0);
        let ready = status.ready;
        status.fire(trace, "PRB-4", || {
            format!("{name} is a regular init container: ready = {ready} (only a termination with exit 0 makes it ready)")
        });
        return;
    }
    let readiness = ctx.probe(newest, ProbeType::Readiness);
    status.ready = status.started
        && running
        && (readiness == Some(ProbeResult::Success) || !spec.probes.readiness);
    let (started, ready) = (status.started, status.ready);
    if spec.probes.readiness {
        status.fire(trace, "PRB-3", || {
            format!(
                "{name} has a readiness probe (cached: {}): ready = {ready}",
                readiness.map_or("none yet", ProbeResult::as_str)
            )
        });
    } else if !spec.probes.startup {
        status.fire(trace, "PRB-1", || {
            format!(
                "{name} has no startup or readiness probe: started = ready = running = {started}"
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RestartPolicy;
    use crate::testkit::{exited, record, runtime};

    #[test]
    fn regular_statuses_sorted_by_name_init_in_spec_order() {
        let mut pod = PodSpecView::new(RestartPolicy::Always, &["web", "api"]);
        pod.init_containers = vec![ContainerSpecView::new("z"), ContainerSpecView::new("a")];
        let rt = runtime(vec![record("web", RuntimeState::Running, 10)]);
        let s = compute(&pod, &rt, &PassContext::default(), &mut Trace::quiet());
        let names =
            |list: &[ApiContainerStatus]| list.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&s.containers), ["api", "web"]);
        assert_eq!(names(&s.init), ["z", "a"]);
        // API-2: the regular init containers have no record while web has one.
        assert!(s.init.iter().all(|i| i.inferred && i.ready));
    }

    #[test]
    fn api_4_only_two_newest_records_count() {
        let pod = PodSpecView::new(RestartPolicy::Always, &["app"]);
        let rt = runtime(vec![
            exited("app", 1, 7),
            exited("app", 2, 8),
            exited("app", 3, 9),
        ]);
        let s = compute(&pod, &rt, &PassContext::default(), &mut Trace::quiet());
        let app = &s.containers[0];
        assert_eq!(app.state.terminated().map(|t| t.exit_code), Some(9));
        assert_eq!(
            app.last_state
                .as_ref()
                .and_then(ApiState::terminated)
                .map(|t| t.exit_code),
            Some(8)
        );
        assert_eq!(app.container_id.as_deref(), Some("app-3"));
    }
}
