//! The prober (spec 6): one thread per (container, probe type) of a pod's regular containers and
//! sidecars, each driving a pure [`ProbeWorker`] on the probe's period. A tick reads the pod as
//! the pod worker last saw it ([`ProbeTargets`]), runs the transport when the worker says so,
//! and publishes the cached result; a changed result wakes the pod worker, whose next pass acts
//! on it (liveness CTR-3, startup CTR-4, readiness PRB-3 → Ready and ContainersReady).
//!
//! Every failed attempt is an `Unhealthy` event (`Liveness probe failed: <output>`), as kubelet's
//! prober records them; the event recorder folds repeats into one event with a count.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::events as reasons;
use crate::model::{CachedProbeResults, ProbeResult, ProbeType};
use crate::probe::{
    ContainerObservation, PodObservation, Prepared, ProbeSpec, ProbeWorker, RawOutcome,
};
use crate::rules::Trace;

use super::agent::Node;
use super::events::WARNING;
use super::transport::{self, HttpRequest, Outcome, PodNet};

/// A transport that errors is tried this often before the tick gives up (PRB-W5).
const TRIES_ON_ERROR: usize = 3;

/// What the probe threads know of their pod, rewritten by the pod worker after every pass.
#[derive(Debug, Clone, Default)]
pub struct ProbeTargets {
    pub has_status: bool,
    pub terminal: bool,
    pub deletion_requested: bool,
    pub containers: HashMap<String, ContainerTarget>,
    /// The newest sandbox's pinned network namespace (None with hostNetwork).
    pub netns: Option<PathBuf>,
    pub pod_ip: Option<String>,
}

/// One container as its probes see it.
#[derive(Debug, Clone, Default)]
pub struct ContainerTarget {
    pub container_id: Option<String>,
    pub running: bool,
    pub terminated: bool,
    pub started: bool,
    /// `state.running.startedAt`, seconds.
    pub started_at: i64,
    pub can_restart: bool,
}

struct Shared {
    targets: Mutex<ProbeTargets>,
    results: Mutex<HashMap<String, CachedProbeResults>>,
    stopped: Mutex<bool>,
    stop: Condvar,
    /// Wakes the pod worker.
    notify: Box<dyn Fn() + Send + Sync>,
}

impl Shared {
    fn is_stopped(&self) -> bool {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sleeps `duration` unless stopped first; false when stopped.
    fn sleep(&self, duration: Duration) -> bool {
        let deadline = Instant::now() + duration;
        let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        while !*stopped {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            stopped = self
                .stop
                .wait_timeout(stopped, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        false
    }

    /// Stores a worker's cached result; true when it changed.
    fn publish(&self, kind: ProbeType, container_id: &str, result: Option<ProbeResult>) -> bool {
        let mut results = self.results.lock().unwrap_or_else(|e| e.into_inner());
        let entry = results
            .entry(container_id.to_string())
            .or_insert_with(|| CachedProbeResults {
                container_id: container_id.to_string(),
                ..CachedProbeResults::default()
            });
        let slot = match kind {
            ProbeType::Liveness => &mut entry.liveness,
            ProbeType::Readiness => &mut entry.readiness,
            ProbeType::Startup => &mut entry.startup,
        };
        let changed = *slot != result;
        *slot = result;
        changed
    }
}

/// A pod's probe threads.
pub struct ProbeManager {
    shared: Arc<Shared>,
    started: BTreeSet<(String, &'static str)>,
    threads: Vec<JoinHandle<()>>,
}

impl ProbeManager {
    /// `notify` wakes the pod worker when a result changes.
    pub fn new(notify: impl Fn() + Send + Sync + 'static) -> ProbeManager {
        ProbeManager {
            shared: Arc::new(Shared {
                targets: Mutex::new(ProbeTargets::default()),
                results: Mutex::new(HashMap::new()),
                stopped: Mutex::new(false),
                stop: Condvar::new(),
                notify: Box::new(notify),
            }),
            started: BTreeSet::new(),
            threads: Vec::new(),
        }
    }

    /// Starts a worker for every probe of the pod's regular containers and sidecars that has
    /// none yet (section 1 step 4). `just_restarted`: the agent came up with this pod already
    /// running, so each worker first sleeps a random part of its period, as kubelet's do.
    pub fn ensure(&mut self, node: &Arc<Node>, pod: &Pod, just_restarted: bool) {
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let probed: Vec<&Container> = spec.containers.iter().chain(sidecars).collect();
        for container in probed {
            let probes = [
                (ProbeType::Liveness, &container.liveness_probe),
                (ProbeType::Readiness, &container.readiness_probe),
                (ProbeType::Startup, &container.startup_probe),
            ];
            for (kind, probe) in probes {
                let Some(probe) = probe else { continue };
                if !self.started.insert((container.name.clone(), kind.title())) {
                    continue;
                }
                let thread = ProbeThread {
                    node: Arc::clone(node),
                    shared: Arc::clone(&self.shared),
                    pod: pod.clone(),
                    container: container.clone(),
                    probe: probe.clone(),
                    kind,
                    spec: probe_spec(probe, &node.config.probe_defaults),
                    jitter: just_restarted,
                };
                let name = format!("probe-{}-{}", container.name, kind.title());
                match std::thread::Builder::new()
                    .name(name)
                    .spawn(move || thread.run())
                {
                    Ok(handle) => self.threads.push(handle),
                    Err(e) => eprintln!("podlab node: starting a probe worker: {e}"),
                }
            }
        }
    }

    /// The pod as the latest pass saw it; results of containers that are gone are dropped.
    pub fn publish(&self, targets: ProbeTargets) {
        let live: BTreeSet<String> = targets
            .containers
            .values()
            .filter_map(|c| c.container_id.clone())
            .collect();
        *self
            .shared
            .targets
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = targets;
        self.shared
            .results
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|id, _| live.contains(id));
    }

    /// The cached results, for the next pass.
    pub fn results(&self) -> Vec<CachedProbeResults> {
        let results = self
            .shared
            .results
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        results.values().cloned().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.started.is_empty()
    }

    /// Stops and joins every probe thread.
    pub fn stop(&mut self) {
        *self
            .shared
            .stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.stop.notify_all();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for ProbeManager {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The probe's fields, with `defaults` for the unset ones.
pub fn probe_spec(probe: &Probe, defaults: &ProbeSpec) -> ProbeSpec {
    ProbeSpec {
        initial_delay_seconds: probe
            .initial_delay_seconds
            .map_or(defaults.initial_delay_seconds, i64::from),
        period_seconds: probe
            .period_seconds
            .map_or(defaults.period_seconds, i64::from)
            .max(1),
        timeout_seconds: probe
            .timeout_seconds
            .map_or(defaults.timeout_seconds, i64::from)
            .max(1),
        success_threshold: probe
            .success_threshold
            .map_or(defaults.success_threshold, |t| t.max(1) as u32),
        failure_threshold: probe
            .failure_threshold
            .map_or(defaults.failure_threshold, |t| t.max(1) as u32),
        termination_grace_period_seconds: probe.termination_grace_period_seconds,
    }
}

struct ProbeThread {
    node: Arc<Node>,
    shared: Arc<Shared>,
    pod: Pod,
    container: Container,
    probe: Probe,
    kind: ProbeType,
    spec: ProbeSpec,
    jitter: bool,
}

impl ProbeThread {
    fn run(self) {
        let period = Duration::from_secs(self.spec.period_seconds as u64);
        if self.jitter && !self.shared.sleep(period.mul_f64(random_fraction())) {
            return;
        }
        let mut worker = ProbeWorker::new(self.kind, self.spec);
        loop {
            if self.shared.is_stopped() {
                return;
            }
            let exit = self.tick(&mut worker);
            if exit || !self.shared.sleep(period) {
                return;
            }
        }
    }

    /// One tick; true when the worker ends.
    fn tick(&self, worker: &mut ProbeWorker) -> bool {
        let targets = self
            .shared
            .targets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let pod = PodObservation {
            has_status: targets.has_status,
            terminal: targets.terminal,
            deletion_requested: targets.deletion_requested,
        };
        let target = targets
            .containers
            .get(&self.container.name)
            .cloned()
            .unwrap_or_default();
        let container = ContainerObservation {
            container_id: target.container_id.as_deref(),
            running: target.running,
            terminated: target.terminated,
            started: target.started,
            started_at: target.started_at,
            can_restart: target.can_restart,
        };
        let (namespace, name, _) = crate::translate::identity(&self.pod);
        let mut trace = if self.node.config.narrates(&namespace, &name) {
            Trace::narrated()
        } else {
            Trace::quiet()
        };
        let prepared = worker.prepare(&pod, &container, now_seconds(), &mut trace);
        let mut exit = false;
        match prepared {
            Prepared::Probe => {
                let outcome = self.attempt(&targets, &target);
                self.record_event(&outcome);
                let raw = match outcome {
                    Outcome::Success(_) | Outcome::Warning(_) => RawOutcome::Success,
                    Outcome::Failure(_) => RawOutcome::Failure,
                    Outcome::Error(_) => RawOutcome::Error,
                };
                worker.record(raw, &mut trace);
            }
            Prepared::Skip(_) => {}
            Prepared::Exit => exit = true,
        }
        if let Some(id) = worker.container_id() {
            if self.shared.publish(self.kind, id, worker.cached()) {
                self.narrate(trace);
                (self.shared.notify)();
            }
        }
        exit
    }

    /// Runs the transport, again while it errors (up to [`TRIES_ON_ERROR`] times).
    fn attempt(&self, targets: &ProbeTargets, target: &ContainerTarget) -> Outcome {
        let mut outcome = Outcome::Error("not run".into());
        for _ in 0..TRIES_ON_ERROR {
            outcome = self.run_transport(targets, target);
            if !matches!(outcome, Outcome::Error(_)) {
                break;
            }
        }
        outcome
    }

    fn run_transport(&self, targets: &ProbeTargets, target: &ContainerTarget) -> Outcome {
        let timeout = Duration::from_secs(self.spec.timeout_seconds as u64);
        let net = PodNet {
            netns: targets.netns.as_deref(),
            pod_ip: targets.pod_ip.as_deref(),
        };
        if let Some(exec) = &self.probe.exec {
            let Some(id) = target.container_id.as_deref() else {
                return Outcome::Error("the container has no id".into());
            };
            let env: std::collections::BTreeMap<&str, &str> = self
                .container
                .env
                .iter()
                .flatten()
                .filter_map(|e| e.value.as_deref().map(|v| (e.name.as_str(), v)))
                .collect();
            let command: Vec<String> = exec
                .command
                .iter()
                .flatten()
                .map(|arg| crate::translate::expand(arg, &env))
                .collect();
            return transport::exec(&*self.node.runtime, id, &command, timeout);
        }
        if let Some(tcp) = &self.probe.tcp_socket {
            return match self.port(&tcp.port) {
                Ok(port) => transport::tcp(net, tcp.host.as_deref(), port, timeout),
                Err(e) => Outcome::Error(e),
            };
        }
        if let Some(http) = &self.probe.http_get {
            let port = match self.port(&http.port) {
                Ok(port) => port,
                Err(e) => return Outcome::Error(e),
            };
            let headers: Vec<(String, String)> = http
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect();
            let request = HttpRequest {
                scheme: http.scheme.as_deref().unwrap_or("HTTP"),
                host: http.host.as_deref(),
                port,
                path: http.path.as_deref().unwrap_or("/"),
                headers: &headers,
            };
            return transport::http(net, &request, timeout);
        }
        Outcome::Error(
            "the probe names no handler podlab supports (exec, tcpSocket, httpGet)".into(),
        )
    }

    /// A numeric port, or a named one from the container's `ports`.
    fn port(&self, port: &IntOrString) -> Result<u16, String> {
        let number = match port {
            IntOrString::Int(n) => *n,
            IntOrString::String(name) => match name.parse::<i32>() {
                Ok(n) => n,
                Err(_) => self
                    .container
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref() == Some(name.as_str()))
                    .map(|p| p.container_port)
                    .ok_or_else(|| {
                        format!(
                            "couldn't find port {name:?} in container {}",
                            self.container.name
                        )
                    })?,
            },
        };
        u16::try_from(number)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("invalid port number: {number}"))
    }

    fn record_event(&self, outcome: &Outcome) {
        let title = self.kind.title();
        let (event_type, reason, message) = match outcome {
            Outcome::Success(_) => return,
            Outcome::Warning(output) => (
                WARNING,
                reasons::PROBE_WARNING,
                reasons::probe_warning_message(title, output),
            ),
            Outcome::Failure(output) => (
                WARNING,
                reasons::UNHEALTHY,
                reasons::probe_failed_message(title, output.trim_end()),
            ),
            Outcome::Error(err) => (
                WARNING,
                reasons::UNHEALTHY,
                reasons::probe_errored_message(title, ProbeResult::Unknown.as_str(), err),
            ),
        };
        self.node.recorder.container_event(
            &self.pod,
            &self.container.name,
            event_type,
            reason,
            &message,
        );
    }

    fn narrate(&self, trace: Trace) {
        let (_, lines) = trace.into_parts();
        if lines.is_empty() {
            return;
        }
        let (namespace, name, _) = crate::translate::identity(&self.pod);
        for line in lines {
            println!("{namespace}/{name} {}: {line}", self.container.name);
        }
    }
}

pub(crate) fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A number in [0, 1) that differs from thread to thread (jitter needs no better randomness).
pub(crate) fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_fields_take_the_defaults() {
        let probe = Probe {
            period_seconds: Some(2),
            failure_threshold: Some(5),
            ..Probe::default()
        };
        let spec = probe_spec(&probe, &ProbeSpec::default());
        assert_eq!(spec.period_seconds, 2);
        assert_eq!(spec.failure_threshold, 5);
        assert_eq!(spec.timeout_seconds, 1);
        assert_eq!(spec.success_threshold, 1);
        assert_eq!(spec.initial_delay_seconds, 0);
    }

    #[test]
    fn jitter_is_a_fraction() {
        for _ in 0..100 {
            let f = random_fraction();
            assert!((0.0..1.0).contains(&f));
        }
    }
}
