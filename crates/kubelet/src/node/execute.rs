//! Carrying out a pass's actions through podlab-runtime (kubelet's `kuberuntime` SyncPod,
//! section 1 step 5): `SandboxChanged`, KillPod or the single kills, the purge and prune of init
//! records, RunPodSandbox, then ephemeral, init and regular containers — every start through
//! the crash-loop backoff gate (section 8) — with kubelet's events on the way.
//!
//! Failures are remembered the way kubelet remembers them: a start failure's reason becomes the
//! container's waiting reason in the next pass (API-5), a failed RunPodSandbox or container
//! create is retried after the error backoff, and a crash loop wakes the pod worker exactly when
//! the backoff allows the next start.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use podlab_runtime::{ContainerId, ContainerState, ContainerStatus, SandboxId};

use crate::actions::{KillReason, PodActions};
use crate::attempt::{attempt_from_log_files, ContainerAttempt};
use crate::backoff::{Backoff, GateDecision};
use crate::events as reasons;
use crate::images::{self, ImageStep, PullBackoff, PullPolicy};
use crate::kill::{grace_after_pre_stop, grace_period, killing_message, GraceInputs};
use crate::model::{container_hash, PodSpecView, RuntimeView, StartFailure};
use crate::rules::Trace;
use crate::sync::SyncResult;
use crate::translate::{self, ContainerKind, PodDirs};

use super::agent::Node;
use super::events::{NORMAL, WARNING};
use super::probes::now_seconds;
use super::view::PodRuntime;

/// A BackOff event is repeated for the same crash at most this often (kubelet emits one per
/// sync, which it runs about every 10 s for a pod in a crash loop).
const BACKOFF_EVENT_EVERY: Duration = Duration::from_secs(10);

/// kubelet's container GC keeps this many records per container name (the newest one, and the
/// one before it for `lastState` and `logs --previous`).
const RECORDS_KEPT_PER_NAME: usize = 2;

/// What a pod worker remembers between passes, besides the runtime and the store.
#[derive(Debug, Default)]
pub struct PodCaches {
    /// kubelet's reasonCache: the last start failure of a container (API-5).
    pub start_failures: BTreeMap<String, StartFailure>,
    /// Crash-loop backoff entries by (container name, container hash).
    pub backoff: HashMap<(String, u64), Backoff>,
    /// When a BackOff event was last recorded for a container, and for which crash.
    pub backoff_events: HashMap<String, (i64, Instant)>,
    /// A failed create is not retried before this.
    pub start_retry_at: HashMap<String, Instant>,
    /// A failed RunPodSandbox is not retried before this.
    pub sandbox_retry_at: Option<Instant>,
    /// kubelet's image pull backoff, by image (kubelet keys it `<pod uid>_<image>`; these
    /// caches are the pod's).
    pub pull_backoff: PullBackoff,
    /// The last pull error of an image, for the waiting message during its backoff.
    pub pull_errors: HashMap<String, String>,
    /// The containers created since the worker last looked: made with the allocated
    /// resources, which they now have actuated ([`super::allocation`]).
    pub created: Vec<String>,
}

impl PodCaches {
    pub fn new(config: &super::NodeConfig) -> PodCaches {
        PodCaches {
            pull_backoff: PullBackoff::new(config.pull_backoff.0, config.pull_backoff.1),
            ..PodCaches::default()
        }
    }
}

/// kubelet's pod worker requeues a failed sync after `backOffPeriod` plus up to 50 % jitter
/// (`wait.Jitter(backOffPeriod, workerBackOffPeriodJitterFactor)`).
pub fn error_retry_at(backoff: Duration) -> Instant {
    Instant::now() + backoff + backoff.mul_f64(0.5 * super::probes::random_fraction())
}

/// What carrying out the actions did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The runtime was changed: the next pass should come soon to report it.
    pub changed: bool,
    /// The earliest time a postponed action becomes due (backoff, retry).
    pub wake_at: Option<Instant>,
}

impl Outcome {
    fn wake(&mut self, at: Instant) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }
}

/// One pass's execution.
pub struct Execution<'a> {
    pub node: &'a Node,
    pub pod: &'a Pod,
    pub spec: &'a PodSpecView,
    pub rt: &'a RuntimeView,
    pub observed: &'a PodRuntime,
    pub dirs: &'a PodDirs,
    pub caches: &'a mut PodCaches,
    /// The pod's sandboxes; a new one is added here.
    pub sandboxes: &'a mut Vec<SandboxId>,
    /// What was done, for the narration (the backoff gate's rules, the events).
    pub trace: &'a mut Trace,
}

impl Execution<'_> {
    pub fn carry_out(&mut self, result: &SyncResult) -> Outcome {
        let actions = &result.actions;
        let mut out = Outcome::default();
        if actions.create_sandbox {
            if let Some(at) = self
                .caches
                .sandbox_retry_at
                .filter(|at| Instant::now() < *at)
            {
                out.wake(at);
                return out;
            }
        }
        for (reason, message) in result.events() {
            self.node
                .recorder
                .pod_event(self.pod, NORMAL, reason, &message);
        }
        if actions.kill_pod {
            let running: Vec<&str> = self
                .observed
                .containers
                .iter()
                .filter(|c| c.state == ContainerState::Running)
                .map(|c| c.metadata.name.as_str())
                .collect();
            let grace: Vec<String> = running
                .iter()
                .map(|name| format!("{name} {}s", kill_grace(self.pod, name, None)))
                .collect();
            self.trace.say(|| {
                format!(
                    "KillPod: Killing events, SIGTERM and grace periods {} then SIGKILL; every sandbox stopped",
                    crate::rules::go_slice(&grace.iter().map(String::as_str).collect::<Vec<_>>())
                )
            });
            out.changed |= kill_pod(self.node, Some(self.pod), self.observed);
            if actions.create_sandbox {
                out.changed |= self.purge_init_records();
            }
        } else if !actions.containers_to_kill.is_empty() {
            for kill in &actions.containers_to_kill {
                let grace = kill_grace(self.pod, &kill.name, Some(kill.reason));
                self.trace.say(|| {
                    format!(
                        "Event Killing ({}): {} (SIGTERM, {grace}s, then SIGKILL)",
                        kill.name, kill.message
                    )
                });
            }
            let requests: Vec<KillRequest> = actions
                .containers_to_kill
                .iter()
                .filter_map(|k| {
                    Some(KillRequest {
                        container: self.observed.container(&k.container_id)?,
                        message: Some(k.message.clone()),
                        reason: Some(k.reason),
                    })
                })
                .collect();
            kill_containers(self.node, Some(self.pod), &requests);
            out.changed = true;
        }
        out.changed |= self.prune_records();

        let sandbox = if actions.create_sandbox {
            match self.create_sandbox(actions.attempt, &mut out) {
                Some(id) => id,
                None => return out,
            }
        } else {
            match SandboxId::parse(&actions.sandbox_id) {
                Ok(id) => id,
                // KillPod without a new sandbox (ACT-2, ACT-4, CTR-6): nothing is started.
                Err(_) => return out,
            }
        };
        self.start_all(actions, &sandbox, &mut out);
        out
    }

    /// Ephemeral, then init (a regular init container that does not start ends the pass),
    /// then regular containers.
    fn start_all(&mut self, actions: &PodActions, sandbox: &SandboxId, out: &mut Outcome) {
        // The attempt of a sandbox made in this pass (one read before has its own).
        let attempt = actions.attempt;
        for &i in &actions.ephemeral_containers_to_start {
            let name = self.spec.ephemeral_containers[i].name.clone();
            self.start(
                (ContainerKind::Ephemeral, &name, None),
                sandbox,
                attempt,
                out,
            );
        }
        for &i in &actions.init_containers_to_start {
            let init = self.spec.init_containers[i].clone();
            let started = self.start(
                (ContainerKind::Init, &init.name, Some(init.hash)),
                sandbox,
                attempt,
                out,
            );
            if !started && !init.sidecar {
                return;
            }
        }
        for &i in &actions.containers_to_start {
            let container = self.spec.containers[i].clone();
            self.start(
                (
                    ContainerKind::Regular,
                    &container.name,
                    Some(container.hash),
                ),
                sandbox,
                attempt,
                out,
            );
        }
    }

    /// One start through the gates; true when the container was started.
    fn start(
        &mut self,
        (kind, name, hash): (ContainerKind, &str, Option<u64>),
        sandbox: &SandboxId,
        new_attempt: u32,
        out: &mut Outcome,
    ) -> bool {
        let now = Instant::now();
        if let Some(at) = self
            .caches
            .start_retry_at
            .get(name)
            .copied()
            .filter(|at| now < *at)
        {
            out.wake(at);
            return false;
        }
        if !self.backoff_allows(name, hash, out) {
            return false;
        }
        // kubelet's startContainer: EnsureImageExists first.
        if !self.ensure_image(name, out) {
            return false;
        }
        let attempt = match ContainerAttempt::for_container(self.rt, name) {
            ContainerAttempt::Next(n) => n,
            ContainerAttempt::FromLogDir => attempt_from_log_dir(&self.dirs.logs.join(name)),
        };
        let env = match self.resolved_env(name, sandbox) {
            Ok(env) => env,
            Err(message) => {
                self.create_failed(name, "CreateContainerConfigError", &message, out);
                return false;
            }
        };
        let security = &self.node.config.security;
        let Some((_, mut config)) =
            translate::container_config_for(self.pod, self.dirs, name, attempt, env, security)
        else {
            return false;
        };
        if let Some((reason, message)) = self.security_refusal(name, &config.image) {
            self.create_failed(name, reason, &message, out);
            return false;
        }
        if kind == ContainerKind::Ephemeral {
            match self.ephemeral_target(name) {
                Ok(target) => config.target_container = target,
                Err(message) => {
                    self.create_failed(name, "CreateContainerConfigError", &message, out);
                    return false;
                }
            }
        }
        // kubelet re-runs volume setup on every sync; this brings back a folder removed
        // under a running pod.
        if let Err(e) =
            crate::volume::set_up(self.pod, self.dirs, &self.node.store).and_then(|()| {
                crate::volume::make_container_log_dir(self.dirs, name)
                    .map_err(crate::volume::SetUpError::PodDirs)
            })
        {
            self.create_failed(name, "CreateContainerError", &e.to_string(), out);
            return false;
        }
        // Held open until the runtime has made the container's mounts (after StartContainer).
        let _subpaths = match crate::subpath::prepare(self.pod, self.dirs, name, &mut config) {
            Ok(held) => held,
            Err(message) => {
                self.create_failed(name, "CreateContainerConfigError", &message, out);
                return false;
            }
        };
        // kubelet's startContainer hands CreateContainer the pod's sandbox config again.
        let attempt = self
            .observed
            .sandboxes
            .iter()
            .find(|s| &s.id == sandbox)
            .map_or(new_attempt, |s| s.metadata.attempt);
        let mut sandbox_config =
            translate::sandbox_config_for(self.pod, self.dirs, attempt, security);
        sandbox_config.linux.security.user_namespace =
            crate::userns::for_pod(self.pod, self.dirs).ok().flatten();
        let id = match self
            .node
            .runtime
            .create_container(sandbox, &config, &sandbox_config)
        {
            Ok(id) => id,
            Err(e @ podlab_runtime::Error::InvalidConfig { .. }) => {
                self.create_failed(name, "CreateContainerConfigError", &e.to_string(), out);
                return false;
            }
            Err(e) => {
                self.create_failed(name, "CreateContainerError", &e.to_string(), out);
                return false;
            }
        };
        out.changed = true;
        self.caches.created.push(name.to_string());
        self.event(
            name,
            NORMAL,
            reasons::CREATED,
            &reasons::created_message(name),
        );
        if let Err(e) = self.node.runtime.start_container(&id) {
            let message = e.to_string();
            self.event(
                name,
                WARNING,
                reasons::FAILED,
                &reasons::failed_message(&message),
            );
            self.remember_failure(name, "RunContainerError", message);
            return false;
        }
        self.event(
            name,
            NORMAL,
            reasons::STARTED,
            &reasons::started_message(name),
        );
        self.caches.start_failures.remove(name);
        self.caches.start_retry_at.remove(name);
        true
    }

    /// BO-1..6: a container that has an exited record waits out its backoff. The gate reads
    /// the newest *exited* record, as kubelet's `doBackOff` does, not the newest record: a
    /// container killed for its liveness probe is started again in the same pass, while this
    /// pass's view still shows it running, and must still be gated by its earlier crash, or
    /// it is restarted without backoff forever and never shows CrashLoopBackOff.
    fn backoff_allows(&mut self, name: &str, hash: Option<u64>, out: &mut Outcome) -> bool {
        let Some(exited) = self.rt.newest_exited(name) else {
            return true;
        };
        let now = now_seconds();
        let finished_at = exited.finished_at.unwrap_or(now);
        let hash = hash.unwrap_or_else(|| container_hash(name, ""));
        let gate = self
            .caches
            .backoff
            .entry((name.to_string(), hash))
            .or_default()
            .request(&self.node.config.backoff, finished_at, now, self.trace);
        let GateDecision::CrashLoopBackOff {
            earliest_start,
            current_backoff,
        } = gate.decision
        else {
            return true;
        };
        let pod_name = self.spec.display_name();
        let last = self.caches.backoff_events.get(name).copied();
        if last
            .is_none_or(|(crash, at)| crash != finished_at || at.elapsed() >= BACKOFF_EVENT_EVERY)
        {
            let message = reasons::back_off_event_message(name, &pod_name);
            self.event(name, WARNING, reasons::BACK_OFF, &message);
            self.caches
                .backoff_events
                .insert(name.to_string(), (finished_at, Instant::now()));
        }
        self.remember_failure(
            name,
            reasons::CRASH_LOOP_BACK_OFF,
            reasons::crash_loop_message(current_backoff, name, &pod_name),
        );
        let wait = (earliest_start - now).max(0) as u64;
        out.wake(Instant::now() + Duration::from_secs(wait));
        false
    }

    /// kubelet's `EnsureImageExists` for the container `name`: the built-in busybox is made
    /// when missing (it is in no registry); otherwise `imagePullPolicy` decides between the
    /// image on the node (`Pulled`: already present), `ErrImageNeverPull`, and a pull —
    /// refused while the image's pull backoff runs (`BackOff`, `ImagePullBackOff`), else
    /// `Pulling`, then `Pulled` with its time and size or `Failed` and `ErrImagePull` (and the
    /// backoff doubles). True when the image is there for the container.
    fn ensure_image(&mut self, name: &str, out: &mut Outcome) -> bool {
        let Some((image, policy)) = super::images::container_image(self.pod, name) else {
            return true;
        };
        if !self.ensure_one_image(name, &image, policy, out) {
            return false;
        }
        // kubelet pulls the image volumes a container mounts the same way, each with its
        // volume's pullPolicy, and the container waits for them.
        for (image, policy) in super::images::image_volumes(self.pod, name) {
            if !self.ensure_one_image(name, &image, policy, out) {
                return false;
            }
        }
        true
    }

    fn ensure_one_image(
        &mut self,
        name: &str,
        image: &str,
        policy: Option<String>,
        out: &mut Outcome,
    ) -> bool {
        let images = &self.node.images;
        // podlab's own busybox is in this process's store only; a CRI runtime pulls it.
        if super::images::ImageManager::is_builtin(image) && images.store().is_some() {
            if let Err(e) = images.ensure_builtin() {
                self.image_failed(name, "CreateContainerError", e.to_string(), out);
                return false;
            }
            self.event(
                name,
                NORMAL,
                images::PULLED,
                &images::already_present_message(image),
            );
            return true;
        }
        let policy = PullPolicy::of(policy.as_deref(), image);
        match images::image_step(policy, images.present(image)) {
            ImageStep::Present => {
                let message = images::already_present_message(image);
                self.event(name, NORMAL, images::PULLED, &message);
                true
            }
            ImageStep::NeverPull => {
                let message = images::never_pull_message(image);
                self.event(name, WARNING, images::ERR_IMAGE_NEVER_PULL, &message);
                self.image_failed(name, images::ERR_IMAGE_NEVER_PULL, message, out);
                false
            }
            ImageStep::Pull => self.pull(name, image, out),
        }
    }

    fn pull(&mut self, name: &str, image: &str, out: &mut Outcome) -> bool {
        let now = Instant::now();
        if self.caches.pull_backoff.in_backoff(image, now) {
            self.event(
                name,
                NORMAL,
                images::BACK_OFF,
                &images::back_off_pull_message(image),
            );
            let last = self.caches.pull_errors.get(image).map(String::as_str);
            let message = images::back_off_waiting_message(image, last);
            self.image_failed(name, images::IMAGE_PULL_BACK_OFF, message, out);
            return false;
        }
        let secrets = super::images::pull_secrets(&self.node.store, self.pod);
        if !secrets.missing.is_empty() {
            let message = images::missing_pull_secrets_message(&secrets.missing);
            self.node.recorder.pod_event(
                self.pod,
                WARNING,
                images::FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET,
                &message,
            );
        }
        self.event(
            name,
            NORMAL,
            images::PULLING,
            &images::pulling_message(image),
        );
        match self.node.images.pull(image, &secrets) {
            Ok(pulled) => {
                let message = images::pulled_message(
                    image,
                    pulled.pulling,
                    pulled.including_waiting,
                    pulled.size,
                );
                self.event(name, NORMAL, images::PULLED, &message);
                self.caches.pull_backoff.gc(Instant::now());
                self.caches.pull_errors.remove(image);
                out.changed = true;
                true
            }
            Err(err) => {
                let message = images::failed_pull_message(image, &err);
                self.event(name, WARNING, images::FAILED, &message);
                self.caches.pull_backoff.next(image, Instant::now());
                self.caches
                    .pull_errors
                    .insert(image.to_string(), err.clone());
                self.image_failed(name, images::ERR_IMAGE_PULL, err, out);
                false
            }
        }
    }

    /// A failed EnsureImageExists: `Failed` with `Error: <reason>`, the reason and message
    /// cached for the waiting state, and the pod worker's retry after its error backoff.
    fn image_failed(&mut self, name: &str, reason: &str, message: String, out: &mut Outcome) {
        self.event(
            name,
            WARNING,
            reasons::FAILED,
            &reasons::failed_message(reason),
        );
        self.remember_failure(name, reason, message);
        let at = error_retry_at(self.node.config.error_backoff);
        self.caches.start_retry_at.insert(name.to_string(), at);
        out.wake(at);
    }

    /// Records a container event and tells it in the narration.
    fn event(&mut self, name: &str, event_type: &str, reason: &str, message: &str) {
        self.node
            .recorder
            .container_event(self.pod, name, event_type, reason, message);
        self.trace
            .say(|| format!("Event {reason} ({name}): {message}"));
    }

    fn remember_failure(&mut self, name: &str, reason: &str, message: String) {
        self.caches.start_failures.insert(
            name.to_string(),
            StartFailure {
                container: name.to_string(),
                reason: reason.to_string(),
                message,
            },
        );
    }

    /// What kubelet refuses before CreateContainer: a `Localhost` seccomp profile that is not
    /// on the node, a runAsNonRoot container whose user would be root (kubelet's
    /// `CreateContainerConfigError` and message); and what containerd's CreateContainer
    /// refuses, an SELinux level of the wrong form.
    fn security_refusal(&self, name: &str, image: &str) -> Option<(&'static str, String)> {
        let effective = crate::security::for_container(self.pod, name, &self.node.config.security)?;
        if let Some(message) = crate::security::missing_profile(&effective) {
            return Some(("CreateContainerError", message));
        }
        if let Some(message) = crate::security::bad_selinux_level(self.pod, name) {
            return Some(("CreateContainerError", message));
        }
        // An image that is not there is reported by CreateContainer itself.
        let user = self.node.runtime.image_user(image).ok()?;
        crate::security::verify_run_as_non_root(self.pod, name, &effective, &user)
            .map(|message| ("CreateContainerConfigError", message))
    }

    /// A create that failed: its reason is cached, `Failed` recorded, and the next try waits
    /// the error backoff.
    fn create_failed(&mut self, name: &str, reason: &str, message: &str, out: &mut Outcome) {
        self.event(
            name,
            WARNING,
            reasons::FAILED,
            &reasons::failed_message(message),
        );
        self.remember_failure(name, reason, message.to_string());
        let at = error_retry_at(self.node.config.error_backoff);
        self.caches.start_retry_at.insert(name.to_string(), at);
        out.wake(at);
    }

    /// The container's env with `envFrom` and `valueFrom` read (ConfigMaps and Secrets from
    /// the store, the downward API from the pod, its sandbox and the node); None when it has
    /// only literal values. Err is the CreateContainerConfigError message.
    fn resolved_env(
        &self,
        name: &str,
        sandbox: &SandboxId,
    ) -> Result<Option<Vec<(String, String)>>, String> {
        let Some(container) = self
            .pod
            .spec
            .iter()
            .flat_map(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .chain(s.containers.iter())
            })
            .find(|c| c.name == name)
        else {
            return Ok(None);
        };
        if !crate::env::needs_sources(container) {
            return Ok(None);
        }
        let pod_ips = match self.node.runtime.pod_sandbox_status(sandbox) {
            Ok(status) => status.ip.into_iter().chain(status.additional_ips).collect(),
            Err(_) => Vec::new(),
        };
        let facts = crate::env::PodRuntimeFacts::of_this_node(pod_ips, self.node.host_ip.clone())
            .with_node_fs(&self.node.config.root);
        crate::env::container_env(self.pod, container, &self.node.store, &facts).map(Some)
    }

    /// EPH-4: the running record of the target container whose pid namespace the ephemeral
    /// container joins (None: the pod's or its own).
    fn ephemeral_target(&self, name: &str) -> Result<Option<ContainerId>, String> {
        let Some(eph) = self
            .spec
            .ephemeral_containers
            .iter()
            .find(|e| e.name == name)
        else {
            return Ok(None);
        };
        match crate::ephemeral::pid_namespace(self.spec, self.rt, eph)? {
            crate::ephemeral::PidNamespace::Target(id) => ContainerId::parse(&id)
                .map(Some)
                .map_err(|e| format!("target container id {id}: {e}")),
            _ => Ok(None),
        }
    }

    /// RunPodSandbox with the pod's folders made first; a failure is `FailedCreatePodSandBox`
    /// and a retry after the error backoff (section 7).
    fn create_sandbox(&mut self, attempt: u32, out: &mut Outcome) -> Option<SandboxId> {
        if let Err(e) = crate::volume::set_up(self.pod, self.dirs, &self.node.store) {
            // kubelet waits for the volumes before RunPodSandbox: nothing is created.
            if !self.spec.deletion_requested {
                let message = e.to_string();
                self.node
                    .recorder
                    .pod_event(self.pod, WARNING, reasons::FAILED_MOUNT, &message);
                self.trace
                    .say(|| format!("Event {}: {message}", reasons::FAILED_MOUNT));
            }
            let at = error_retry_at(self.node.config.error_backoff);
            self.caches.sandbox_retry_at = Some(at);
            out.wake(at);
            return None;
        }
        let mut config =
            translate::sandbox_config_for(self.pod, self.dirs, attempt, &self.node.config.security);
        // `hostUsers: false`: the pod's range of the node's ids, taken at its first sandbox.
        let made = crate::userns::for_pod(self.pod, self.dirs)
            .map_err(|message| podlab_runtime::Error::Invalid(format!("user namespace: {message}")))
            .and_then(|user| {
                config.linux.security.user_namespace = user;
                self.node.runtime.run_pod_sandbox(&config)
            });
        match made {
            Ok(id) => {
                self.trace
                    .say(|| format!("RunPodSandbox: sandbox {id} (attempt {attempt}) is ready"));
                self.sandboxes.push(id.clone());
                self.caches.sandbox_retry_at = None;
                out.changed = true;
                Some(id)
            }
            Err(e) => {
                if !self.spec.deletion_requested {
                    let message = reasons::failed_create_sandbox_message(&e.to_string());
                    self.node.recorder.pod_event(
                        self.pod,
                        WARNING,
                        reasons::FAILED_CREATE_POD_SANDBOX,
                        &message,
                    );
                    self.trace.say(|| {
                        format!(
                            "Event {}: {message}; retried in {:?}",
                            reasons::FAILED_CREATE_POD_SANDBOX,
                            self.node.config.error_backoff
                        )
                    });
                    eprintln!(
                        "podlab node: {}",
                        reasons::create_sandbox_error(&self.spec.display_name(), &e.to_string())
                    );
                }
                let at = error_retry_at(self.node.config.error_backoff);
                self.caches.sandbox_retry_at = Some(at);
                out.wake(at);
                None
            }
        }
    }

    /// A new sandbox re-runs initialization from scratch: every init record goes.
    fn purge_init_records(&self) -> bool {
        let init: Vec<&ContainerStatus> = self
            .observed
            .containers
            .iter()
            .filter(|c| ContainerKind::from_labels(&c.labels) == Some(ContainerKind::Init))
            .collect();
        for record in &init {
            remove_record(self.node, record);
        }
        !init.is_empty()
    }

    /// kubelet's prune of init records (only the newest exited one per name stays) and its
    /// container GC (a name keeps its newest records), then the old stopped sandboxes left
    /// empty.
    fn prune_records(&self) -> bool {
        let mut by_name: HashMap<&str, Vec<&ContainerStatus>> = HashMap::new();
        for record in &self.observed.containers {
            by_name
                .entry(record.metadata.name.as_str())
                .or_default()
                .push(record);
        }
        let mut removed: Vec<&str> = Vec::new();
        for records in by_name.values_mut() {
            records.sort_by_key(|r| std::cmp::Reverse(r.created_at));
            let init = records.first().is_some_and(|r| {
                ContainerKind::from_labels(&r.labels) == Some(ContainerKind::Init)
            });
            let keep = if init { 1 } else { RECORDS_KEPT_PER_NAME };
            for record in records.iter().skip(keep) {
                if matches!(
                    record.state,
                    ContainerState::Exited | ContainerState::Unknown
                ) {
                    remove_record(self.node, record);
                    removed.push(record.id.as_str());
                }
            }
        }
        let newest = self.observed.newest_sandbox().map(|s| s.id.clone());
        for sandbox in &self.observed.sandboxes {
            let stopped = cleanly_stopped(sandbox);
            let holds_records = self
                .observed
                .containers
                .iter()
                .any(|c| c.sandbox_id == sandbox.id && !removed.contains(&c.id.as_str()));
            if stopped && !holds_records && Some(&sandbox.id) != newest.as_ref() {
                if let Err(e) = self.node.runtime.remove_pod_sandbox(&sandbox.id) {
                    eprintln!("podlab node: removing old sandbox {}: {e}", sandbox.id);
                } else {
                    removed.push("sandbox");
                }
            }
        }
        !removed.is_empty()
    }
}

/// One container to stop, and why.
pub struct KillRequest<'a> {
    pub container: &'a ContainerStatus,
    /// The `Killing` message; None: `Stopping container <n>`.
    pub message: Option<String>,
    pub reason: Option<KillReason>,
}

/// Stops containers (in parallel, as kubelet's kill goroutines do): a `Killing` event each,
/// SIGTERM, the grace period of spec 2.7, SIGKILL. Without a pod (one that is gone from the
/// store) there is nothing to hang events on and the grace is the minimum.
pub fn kill_containers(node: &Node, pod: Option<&Pod>, requests: &[KillRequest]) {
    let kill = |request: &KillRequest| {
        let name = request.container.metadata.name.as_str();
        let grace = match pod {
            Some(pod) => {
                let message = killing_message(name, request.message.as_deref());
                node.recorder
                    .container_event(pod, name, NORMAL, reasons::KILLING, &message);
                kill_grace(pod, name, request.reason)
            }
            None => crate::kill::MINIMUM_GRACE_PERIOD_SECONDS,
        };
        let grace = Duration::from_secs(grace as u64);
        let give_up = || node.is_stopping();
        let stopped = node
            .runtime
            .stop_container_unless(&request.container.id, grace, &give_up);
        if let Err(e) = stopped {
            eprintln!(
                "podlab node: stopping container {name} ({}): {e}",
                request.container.id
            );
        }
    };
    match requests {
        [] => {}
        [one] => kill(one),
        many => std::thread::scope(|scope| {
            for request in many {
                scope.spawn(move || kill(request));
            }
        }),
    }
}

/// KillPod: every running container of the pod stopped, then every sandbox not yet cleanly
/// stopped (removal is left to the sandbox GC, or to the pod's deletion). True when anything
/// was done.
pub fn kill_pod(node: &Node, pod: Option<&Pod>, observed: &PodRuntime) -> bool {
    let requests: Vec<KillRequest> = observed
        .containers
        .iter()
        .filter(|c| c.state == ContainerState::Running)
        .map(|container| KillRequest {
            container,
            message: None,
            reason: None,
        })
        .collect();
    kill_containers(node, pod, &requests);
    if node.is_stopping() {
        // The agent exits; the pod keeps what still runs, as when kubelet stops.
        return false;
    }
    let mut stopped = !requests.is_empty();
    for sandbox in observed.sandboxes.iter().filter(|s| !cleanly_stopped(s)) {
        if let Err(e) = node.runtime.stop_pod_sandbox(&sandbox.id) {
            eprintln!("podlab node: stopping sandbox {}: {e}", sandbox.id);
        }
        stopped = true;
    }
    stopped
}

/// A sandbox that StopPodSandbox already stopped. One that is NotReady because its shim or its
/// pause process died is not: its processes, pins and network are still to be cleaned up.
fn cleanly_stopped(sandbox: &podlab_runtime::SandboxStatus) -> bool {
    sandbox.state == podlab_runtime::SandboxState::NotReady
        && sandbox.shim_pid.is_none()
        && sandbox.reason.as_deref() == Some(STOPPED_REASON)
}

/// The runtime's `reason` of a sandbox stopped by StopPodSandbox.
const STOPPED_REASON: &str = "stopped";

/// The grace period (spec 2.7) of a kill: the deletion's, else the probe's for a probe kill,
/// else the pod's; never below 2 s.
pub fn kill_grace(pod: &Pod, container: &str, reason: Option<KillReason>) -> i64 {
    let spec = pod.spec.as_ref();
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let probe = spec
        .and_then(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == container)
        })
        .and_then(|c| match reason {
            Some(KillReason::LivenessProbe) => c.liveness_probe.as_ref(),
            Some(KillReason::StartupProbe) => c.startup_probe.as_ref(),
            _ => None,
        })
        .and_then(|p| p.termination_grace_period_seconds);
    let grace = grace_period(&GraceInputs {
        deletion_grace_period: pod
            .metadata
            .deletion_grace_period_seconds
            .filter(|_| deleting),
        pod_grace_period: spec.and_then(|s| s.termination_grace_period_seconds),
        probe_grace_period: probe,
        reason,
        override_grace_period: None,
    });
    grace_after_pre_stop(grace, None)
}

/// A record removed with its log file (the runtime keeps logs outside the container folder).
fn remove_record(node: &Node, record: &ContainerStatus) {
    if let Err(e) = node.runtime.remove_container(&record.id) {
        eprintln!("podlab node: removing container {}: {e}", record.id);
        return;
    }
    let _ = std::fs::remove_file(&record.log_path);
}

/// 2.6: the attempt of a container without records, from its log folder.
fn attempt_from_log_dir(dir: &Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    attempt_from_log_files(names.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        podlab_api::decode_pod(yaml, "test").unwrap()
    }

    #[test]
    fn grace_follows_deletion_then_probe_then_pod_and_never_drops_below_two() {
        let mut p = pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  terminationGracePeriodSeconds: 20\n  containers:\n  - name: app\n    image: busybox\n    livenessProbe: {exec: {command: [\"true\"]}, terminationGracePeriodSeconds: 5}\n",
        );
        assert_eq!(kill_grace(&p, "app", None), 20);
        assert_eq!(kill_grace(&p, "app", Some(KillReason::LivenessProbe)), 5);
        p.metadata.deletion_timestamp = Some(podlab_control::names::now());
        p.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(kill_grace(&p, "app", Some(KillReason::LivenessProbe)), 2);
    }

    #[test]
    fn the_log_folder_gives_the_next_attempt() {
        let dir = std::env::temp_dir().join(format!("podlab-attempts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(attempt_from_log_dir(&dir), 0);
        std::fs::write(dir.join("0.log"), "").unwrap();
        std::fs::write(dir.join("3.log"), "").unwrap();
        assert_eq!(attempt_from_log_dir(&dir), 4);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(attempt_from_log_dir(&dir), 0);
    }
}
