//! The probe worker (spec 6.1 and 6.2, PRB-W1..6): one state machine per (pod, container, probe
//! type) that turns raw transport outcomes into the cached result the sync pass reads. Pure: the
//! caller supplies the time, the container's current status, and the transport's outcome.

use crate::model::{ProbeResult, ProbeType};
use crate::rules::Trace;

/// Probe fields with the API defaults (spec 6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSpec {
    pub initial_delay_seconds: i64,
    pub period_seconds: i64,
    pub timeout_seconds: i64,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    pub termination_grace_period_seconds: Option<i64>,
}

impl Default for ProbeSpec {
    fn default() -> Self {
        ProbeSpec {
            initial_delay_seconds: 0,
            period_seconds: 10,
            timeout_seconds: 1,
            success_threshold: 1,
            failure_threshold: 3,
            termination_grace_period_seconds: None,
        }
    }
}

/// What one attempt of the transport gave (after its internal retries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawOutcome {
    Success,
    Failure,
    /// The probe could not be run at all; the result is thrown away (PRB-W5).
    Error,
}

/// The pod as the worker sees it on a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodObservation {
    pub has_status: bool,
    pub terminal: bool,
    pub deletion_requested: bool,
}

/// The probed container's current API status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerObservation<'a> {
    /// `None`: the container has no id yet (not created or deleted).
    pub container_id: Option<&'a str>,
    pub running: bool,
    pub terminated: bool,
    pub started: bool,
    /// `state.running.startedAt`, seconds.
    pub started_at: i64,
    /// restartPolicy ≠ Never, or the container is a sidecar.
    pub can_restart: bool,
}

/// Why a tick did not run the probe (or did but kept nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    NoPodStatus,
    NoContainerId,
    /// PRB-W3.
    OnHold,
    NotRunning,
    /// PRB-W4.
    InitialDelay,
    /// PRB-W6: a liveness/readiness probe before the container started.
    NotStarted,
    /// PRB-W6: the startup probe once the container started.
    AlreadyStarted,
}

impl Skip {
    /// The spelling of `why` in probeWorker cases.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::NoPodStatus => "noPodStatus",
            Skip::NoContainerId => "noContainerId",
            Skip::OnHold => "onHold",
            Skip::NotRunning => "notRunning",
            Skip::InitialDelay => "initialDelay",
            Skip::NotStarted => "notStarted",
            Skip::AlreadyStarted => "alreadyStarted",
        }
    }
}

/// What the worker does on a tick before probing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepared {
    /// Run the transport, then call [`ProbeWorker::record`].
    Probe,
    Skip(Skip),
    /// The worker ends (terminal pod, deletion, container that will not restart).
    Exit,
}

/// What recording an outcome did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The error was discarded (PRB-W5).
    pub discarded: bool,
    /// The result published to the cache by this tick, if any.
    pub published: Option<ProbeResult>,
    /// A published liveness/startup Failure: the runtime must kill the container.
    pub kill_container: bool,
}

/// One probe worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeWorker {
    pub probe_type: ProbeType,
    pub spec: ProbeSpec,
    container_id: Option<String>,
    on_hold: bool,
    last_result: Option<ProbeResult>,
    result_run: u32,
    cached: Option<ProbeResult>,
}

/// PRB-W1: what the cache holds for a new container before any probe result.
pub fn initial_value(probe_type: ProbeType) -> ProbeResult {
    match probe_type {
        ProbeType::Readiness => ProbeResult::Failure,
        ProbeType::Liveness => ProbeResult::Success,
        ProbeType::Startup => ProbeResult::Unknown,
    }
}

impl ProbeWorker {
    pub fn new(probe_type: ProbeType, spec: ProbeSpec) -> Self {
        ProbeWorker {
            probe_type,
            spec,
            container_id: None,
            on_hold: false,
            last_result: None,
            result_run: 0,
            cached: None,
        }
    }

    /// The cached result for the current container id (`None` before the first container).
    pub fn cached(&self) -> Option<ProbeResult> {
        self.cached
    }

    pub fn container_id(&self) -> Option<&str> {
        self.container_id.as_deref()
    }

    /// Steps 1-8 of a tick at time `now`.
    pub fn prepare(
        &mut self,
        pod: &PodObservation,
        container: &ContainerObservation,
        now: i64,
        trace: &mut Trace,
    ) -> Prepared {
        let kind = self.probe_type.title();
        if !pod.has_status {
            return Prepared::Skip(Skip::NoPodStatus);
        }
        if pod.terminal {
            trace.say(|| format!("{kind} worker: the pod is terminal, the worker exits"));
            return Prepared::Exit;
        }
        let Some(id) = container.container_id else {
            return Prepared::Skip(Skip::NoContainerId);
        };
        if self.container_id.as_deref() != Some(id) {
            let initial = initial_value(self.probe_type);
            self.container_id = Some(id.to_string());
            self.cached = Some(initial);
            self.on_hold = false;
            trace.fire("PRB-W1", || {
                format!(
                    "{kind} worker sees container {id}: the cache starts at {} and the worker is off hold \
                     (the consecutive-result counter is kept at {})",
                    initial.as_str(),
                    self.result_run
                )
            });
        }
        if self.on_hold {
            trace.fire("PRB-W3", || {
                format!("{kind} worker is on hold until a new container id appears")
            });
            return Prepared::Skip(Skip::OnHold);
        }
        if !container.running {
            self.cached = Some(ProbeResult::Failure);
            trace.say(|| {
                format!("{kind} worker: the container is not running, the cache holds failure")
            });
            if container.terminated && !container.can_restart {
                return Prepared::Exit;
            }
            return Prepared::Skip(Skip::NotRunning);
        }
        if pod.deletion_requested
            && matches!(self.probe_type, ProbeType::Liveness | ProbeType::Startup)
        {
            self.cached = Some(ProbeResult::Success);
            trace.say(|| format!("{kind} worker: the pod is being deleted, success is stored and the worker stops"));
            return Prepared::Exit;
        }
        if now - container.started_at < self.spec.initial_delay_seconds {
            trace.fire("PRB-W4", || {
                format!(
                    "{kind} probe skipped: {} s since the container started is less than initialDelaySeconds {}",
                    now - container.started_at,
                    self.spec.initial_delay_seconds
                )
            });
            return Prepared::Skip(Skip::InitialDelay);
        }
        let startup = self.probe_type == ProbeType::Startup;
        if container.started && startup {
            trace.fire("PRB-W6", || {
                "the container has started, so the startup probe is skipped".into()
            });
            return Prepared::Skip(Skip::AlreadyStarted);
        }
        if !container.started && !startup {
            trace.fire("PRB-W6", || {
                format!("{kind} probe skipped until the container has started")
            });
            return Prepared::Skip(Skip::NotStarted);
        }
        Prepared::Probe
    }

    /// Steps 9-11: count `raw` and publish once a threshold is reached.
    pub fn record(&mut self, raw: RawOutcome, trace: &mut Trace) -> Recorded {
        let kind = self.probe_type.title();
        let result = match raw {
            RawOutcome::Error => {
                trace.fire("PRB-W5", || {
                    format!("{kind} probe errored: the result is discarded, nothing is counted")
                });
                return Recorded {
                    discarded: true,
                    published: None,
                    kill_container: false,
                };
            }
            RawOutcome::Success => ProbeResult::Success,
            RawOutcome::Failure => ProbeResult::Failure,
        };
        if self.last_result == Some(result) {
            self.result_run += 1;
        } else {
            self.last_result = Some(result);
            self.result_run = 1;
        }
        let threshold = match result {
            ProbeResult::Failure => self.spec.failure_threshold,
            _ => self.spec.success_threshold,
        };
        if self.result_run < threshold {
            let (run, cached) = (self.result_run, self.cached);
            trace.fire("PRB-W2", || {
                format!(
                    "{kind} {} {run} of {threshold} in a row: below the threshold, the cache keeps {}",
                    result.as_str(),
                    cached.map_or("nothing", ProbeResult::as_str)
                )
            });
            return Recorded {
                discarded: false,
                published: None,
                kill_container: false,
            };
        }
        self.cached = Some(result);
        let run = self.result_run;
        trace.fire("PRB-W2", || {
            format!(
                "{kind} {} {run} of {threshold} in a row: published",
                result.as_str()
            )
        });
        let kill = result == ProbeResult::Failure && self.probe_type != ProbeType::Readiness;
        if (self.probe_type == ProbeType::Liveness && result == ProbeResult::Failure)
            || self.probe_type == ProbeType::Startup
        {
            self.on_hold = true;
            self.result_run = 0;
            trace.fire("PRB-W3", || {
                if kill {
                    format!("{kind} failure published: the container will be killed, the worker goes on hold")
                } else {
                    format!("{kind} result published: the worker goes on hold until a new container id")
                }
            });
        }
        Recorded {
            discarded: false,
            published: Some(result),
            kill_container: kill,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: PodObservation = PodObservation {
        has_status: true,
        terminal: false,
        deletion_requested: false,
    };

    fn container(id: &str, started: bool) -> ContainerObservation<'_> {
        ContainerObservation {
            container_id: Some(id),
            running: true,
            terminated: false,
            started,
            started_at: 0,
            can_restart: true,
        }
    }

    fn tick(
        w: &mut ProbeWorker,
        id: &str,
        started: bool,
        now: i64,
        raw: RawOutcome,
    ) -> Option<Recorded> {
        let mut t = Trace::quiet();
        match w.prepare(&POD, &container(id, started), now, &mut t) {
            Prepared::Probe => Some(w.record(raw, &mut t)),
            _ => None,
        }
    }

    #[test]
    fn prb_w1_initial_values() {
        assert_eq!(initial_value(ProbeType::Readiness), ProbeResult::Failure);
        assert_eq!(initial_value(ProbeType::Liveness), ProbeResult::Success);
        assert_eq!(initial_value(ProbeType::Startup), ProbeResult::Unknown);
    }

    #[test]
    fn prb_w2_liveness_needs_failure_threshold_in_a_row() {
        let mut w = ProbeWorker::new(ProbeType::Liveness, ProbeSpec::default());
        assert_eq!(
            tick(&mut w, "c1", true, 0, RawOutcome::Failure)
                .unwrap()
                .published,
            None
        );
        assert_eq!(
            tick(&mut w, "c1", true, 10, RawOutcome::Failure)
                .unwrap()
                .published,
            None
        );
        let third = tick(&mut w, "c1", true, 20, RawOutcome::Failure).unwrap();
        assert_eq!(
            (third.published, third.kill_container),
            (Some(ProbeResult::Failure), true)
        );
        // PRB-W3: on hold until a new container id.
        assert_eq!(tick(&mut w, "c1", true, 30, RawOutcome::Failure), None);
        assert_eq!(w.cached(), Some(ProbeResult::Failure));
    }

    #[test]
    fn prb_w1_counter_survives_a_new_container() {
        let spec = ProbeSpec {
            success_threshold: 3,
            ..ProbeSpec::default()
        };
        let mut w = ProbeWorker::new(ProbeType::Readiness, spec);
        tick(&mut w, "c1", true, 0, RawOutcome::Success);
        tick(&mut w, "c1", true, 10, RawOutcome::Success);
        let r = tick(&mut w, "c2", true, 20, RawOutcome::Success).unwrap();
        assert_eq!(r.published, Some(ProbeResult::Success));
    }

    #[test]
    fn prb_w6_and_w4_skips() {
        let spec = ProbeSpec {
            initial_delay_seconds: 5,
            ..ProbeSpec::default()
        };
        let mut w = ProbeWorker::new(ProbeType::Readiness, spec);
        let mut t = Trace::quiet();
        assert_eq!(
            w.prepare(&POD, &container("c1", true), 4, &mut t),
            Prepared::Skip(Skip::InitialDelay)
        );
        assert_eq!(
            w.prepare(&POD, &container("c1", false), 5, &mut t),
            Prepared::Skip(Skip::NotStarted)
        );
        let mut s = ProbeWorker::new(ProbeType::Startup, ProbeSpec::default());
        assert_eq!(
            s.prepare(&POD, &container("c1", true), 0, &mut t),
            Prepared::Skip(Skip::AlreadyStarted)
        );
    }

    #[test]
    fn deletion_stores_success_for_liveness_and_exits() {
        let mut w = ProbeWorker::new(ProbeType::Liveness, ProbeSpec::default());
        let pod = PodObservation {
            deletion_requested: true,
            ..POD
        };
        assert_eq!(
            w.prepare(&pod, &container("c1", true), 0, &mut Trace::quiet()),
            Prepared::Exit
        );
        assert_eq!(w.cached(), Some(ProbeResult::Success));
    }
}
