//! The node agent's settings: kubelet's flags that matter here (crash-loop backoff, sync
//! frequency, node name), with kubelet's defaults, and the environment variables a detached
//! agent reads them from (the CLI maps its flags onto the same fields).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use podlab_runtime::{NetworkPlugin, RuntimeConfig};

use crate::backoff::BackoffPolicy;
use crate::probe::ProbeSpec;

use super::NodeError;

/// `PODLAB_NODE_BACKOFF`: `INITIAL[,MAX[,RESET]]`, see [`parse_backoff`].
pub const ENV_BACKOFF: &str = "PODLAB_NODE_BACKOFF";
/// `PODLAB_NODE_RESYNC`: the interval between two passes of a pod with nothing going on.
pub const ENV_RESYNC: &str = "PODLAB_NODE_RESYNC";
/// `PODLAB_NODE_FULL_RESYNC`: the longest a pod goes without a full pass.
pub const ENV_FULL_RESYNC: &str = "PODLAB_NODE_FULL_RESYNC";
/// `PODLAB_NODE_ERROR_BACKOFF`: how long a failed RunPodSandbox or container start waits.
pub const ENV_ERROR_BACKOFF: &str = "PODLAB_NODE_ERROR_BACKOFF";
pub const ENV_NODE_NAME: &str = "PODLAB_NODE_NAME";
/// `PODLAB_NODE_PULL_BACKOFF`: `INITIAL[,MAX]` of the image pull backoff (kubelet: 10s,5m).
pub const ENV_PULL_BACKOFF: &str = "PODLAB_NODE_PULL_BACKOFF";
/// `PODLAB_NODE_IMAGE_GC`: `HIGH,LOW[,MIN_AGE]`, kubelet's `--image-gc-high-threshold`,
/// `--image-gc-low-threshold` (percent of the image filesystem) and `--minimum-image-gc-age`
/// (85,80,2m; a HIGH of 100 turns image GC off).
pub const ENV_IMAGE_GC: &str = "PODLAB_NODE_IMAGE_GC";
/// `PODLAB_NODE_IMAGE_GC_PERIOD`: how often image GC looks at the image filesystem (5m).
pub const ENV_IMAGE_GC_PERIOD: &str = "PODLAB_NODE_IMAGE_GC_PERIOD";
/// `PODLAB_NODE_VERBOSE=1`: narrate every pass that decides something.
pub const ENV_VERBOSE: &str = "PODLAB_NODE_VERBOSE";
/// `PODLAB_NODE_EXIT_WHEN_IDLE`: a duration; the agent exits after that long without pods.
/// `PODLAB_NODE_EVICTION_PERIOD`: how often a pod's limited emptyDirs are measured.
pub const ENV_EVICTION_PERIOD: &str = "PODLAB_NODE_EVICTION_PERIOD";
pub const ENV_EXIT_WHEN_IDLE: &str = "PODLAB_NODE_EXIT_WHEN_IDLE";
/// `PODLAB_NODE_RUNTIME_ENDPOINT`: `unix:///…` of a CRI runtime to drive the pods through
/// (kubelet's `--container-runtime-endpoint`); unset: podlab-runtime in the agent's process.
pub const ENV_RUNTIME_ENDPOINT: &str = "PODLAB_NODE_RUNTIME_ENDPOINT";

/// The longest resync podlab allows: a pass at least once a second.
pub const MAX_RESYNC: Duration = Duration::from_secs(1);

/// Everything the agent is configured with.
#[derive(Clone)]
pub struct NodeConfig {
    /// `$PODLAB_ROOT`: the store under `store/`, the runtime's sandboxes, pod volumes and logs.
    pub root: PathBuf,
    /// Where the runtime finds podlab-pause and podlab-shim, and the image store.
    pub runtime: RuntimeConfig,
    /// This node's name (`spec.nodeName` of the pods it runs): the hostname by default.
    pub node_name: String,
    /// Crash-loop backoff: kubelet's 10 s doubling to 300 s, reset after 600 s by default.
    pub backoff: BackoffPolicy,
    /// How often each pod's runtime state is looked at (at most [`MAX_RESYNC`]): kubelet's
    /// PLEG relist. A change there, in the store, in a probe result, or a backoff falling due
    /// makes a full sync pass at once.
    pub resync: Duration,
    /// The longest a pod goes without a full sync pass when nothing changes (kubelet's
    /// `syncFrequency`, 1 min).
    pub full_resync: Duration,
    /// How long a failed RunPodSandbox or container create/start waits before it is retried
    /// (kubelet's pod worker `backOffPeriod`, 10 s).
    pub error_backoff: Duration,
    /// The image pull backoff per pod and image: first wait and cap (kubelet: 10 s, 5 min).
    pub pull_backoff: (Duration, Duration),
    /// Image GC thresholds (kubelet: high 85 %, low 80 % of the image filesystem).
    pub image_gc: crate::images::GcPolicy,
    /// How often image GC runs (kubelet's `ImageGCPeriod`, 5 min; and once at start).
    pub image_gc_period: Duration,
    /// Probe fields a pod left unset (the API server defaults them, so this matters only for
    /// pods written to the store without defaulting).
    pub probe_defaults: ProbeSpec,
    /// Narrate each pass that decides something, with its rule IDs, on stdout.
    pub verbose: bool,
    /// With `verbose`: narrate only this pod (`NAME` of namespace default, or
    /// `NAMESPACE/NAME`), and nothing of the node's own.
    pub follow_pod: Option<String>,
    /// Exit after this long without any pod (a detached agent started on demand).
    pub exit_when_idle: Option<Duration>,
    /// The CNI hook handed to the runtime; None: pods get `lo` only.
    pub network: Option<Arc<dyn NetworkPlugin>>,
    /// `--seccomp-default` (on in podlab) and the folder of `Localhost` seccomp profiles.
    pub security: crate::security::NodeSecurity,
    /// How often the usage of a pod's emptyDirs with a `sizeLimit` is measured (kubelet's
    /// `evictionMonitoringPeriod`, 10 s).
    pub eviction_period: Duration,
    /// A CRI runtime's socket (`unix:///run/containerd/containerd.sock`) to run the pods on,
    /// through its RuntimeService and ImageService; None: podlab-runtime in this process.
    pub runtime_endpoint: Option<String>,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("root", &self.root)
            .field("runtime", &self.runtime)
            .field("node_name", &self.node_name)
            .field("backoff", &self.backoff)
            .field("resync", &self.resync)
            .field("full_resync", &self.full_resync)
            .field("error_backoff", &self.error_backoff)
            .field("pull_backoff", &self.pull_backoff)
            .field("image_gc", &self.image_gc)
            .field("image_gc_period", &self.image_gc_period)
            .field("verbose", &self.verbose)
            .field("follow_pod", &self.follow_pod)
            .field("exit_when_idle", &self.exit_when_idle)
            .field("security", &self.security)
            .field("eviction_period", &self.eviction_period)
            .field("runtime_endpoint", &self.runtime_endpoint)
            .field(
                "network",
                &self.network.as_ref().map(|n| n.name().to_string()),
            )
            .finish()
    }
}

impl NodeConfig {
    /// kubelet's defaults for a node whose state lives under `root`; the runtime's helpers are
    /// looked for next to the running executable, images under `root/images` (or
    /// `$PODLAB_IMAGE_ROOT`).
    pub fn new(root: impl Into<PathBuf>) -> NodeConfig {
        let root = root.into();
        let mut runtime = RuntimeConfig::from_env();
        runtime.image_root = std::env::var_os("PODLAB_IMAGE_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("images"));
        runtime.root = root.clone();
        let runtime_root = root.clone();
        NodeConfig {
            root,
            runtime,
            node_name: default_node_name(),
            backoff: BackoffPolicy::default(),
            resync: MAX_RESYNC,
            full_resync: Duration::from_secs(60),
            error_backoff: Duration::from_secs(crate::events::SYNC_ERROR_BACKOFF_SECONDS as u64),
            pull_backoff: (
                crate::images::PULL_BACKOFF_INITIAL,
                crate::images::PULL_BACKOFF_MAX,
            ),
            image_gc: crate::images::GcPolicy::default(),
            image_gc_period: crate::images::GC_PERIOD,
            probe_defaults: ProbeSpec::default(),
            verbose: false,
            follow_pod: None,
            exit_when_idle: None,
            network: None,
            security: crate::security::NodeSecurity::new(&runtime_root),
            eviction_period: crate::eviction::MONITORING_PERIOD,
            runtime_endpoint: None,
        }
    }

    /// [`NodeConfig::new`] on `$PODLAB_ROOT` (or the runtime's default root), then the
    /// `PODLAB_NODE_*` variables: what `podlab node` starts from before its flags.
    pub fn from_env() -> Result<NodeConfig, NodeError> {
        let mut config = NodeConfig::new(podlab_runtime::config::default_root());
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let bad = |name: &str, message: String| NodeError::Config(format!("{name}: {message}"));
        if let Some(value) = var(ENV_BACKOFF) {
            config.backoff = parse_backoff(&value).map_err(|m| bad(ENV_BACKOFF, m))?;
        }
        if let Some(value) = var(ENV_RESYNC) {
            config.resync = parse_duration(&value).map_err(|m| bad(ENV_RESYNC, m))?;
        }
        if let Some(value) = var(ENV_FULL_RESYNC) {
            config.full_resync = parse_duration(&value).map_err(|m| bad(ENV_FULL_RESYNC, m))?;
        }
        if let Some(value) = var(ENV_EVICTION_PERIOD) {
            config.eviction_period =
                parse_duration(&value).map_err(|m| bad(ENV_EVICTION_PERIOD, m))?;
        }
        if let Some(value) = var(ENV_ERROR_BACKOFF) {
            config.error_backoff = parse_duration(&value).map_err(|m| bad(ENV_ERROR_BACKOFF, m))?;
        }
        if let Some(value) = var(ENV_PULL_BACKOFF) {
            config.pull_backoff =
                parse_pull_backoff(&value).map_err(|m| bad(ENV_PULL_BACKOFF, m))?;
        }
        if let Some(value) = var(ENV_IMAGE_GC) {
            config.image_gc = parse_image_gc(&value).map_err(|m| bad(ENV_IMAGE_GC, m))?;
        }
        if let Some(value) = var(ENV_IMAGE_GC_PERIOD) {
            config.image_gc_period =
                parse_duration(&value).map_err(|m| bad(ENV_IMAGE_GC_PERIOD, m))?;
        }
        if let Some(value) = var(ENV_EXIT_WHEN_IDLE) {
            config.exit_when_idle =
                Some(parse_duration(&value).map_err(|m| bad(ENV_EXIT_WHEN_IDLE, m))?);
        }
        if let Some(value) = var(ENV_NODE_NAME) {
            config.node_name = value;
        }
        config.runtime_endpoint = var(ENV_RUNTIME_ENDPOINT);
        config.security =
            crate::security::NodeSecurity::from_env(&config.root).map_err(NodeError::Config)?;
        config.verbose = var(ENV_VERBOSE).is_some_and(|v| v != "0" && v != "false");
        config.check()?;
        Ok(config)
    }

    /// Whether the pod `namespace/name`'s passes are narrated: `verbose`, and it is the pod
    /// followed, if one is.
    pub fn narrates(&self, namespace: &str, name: &str) -> bool {
        self.verbose
            && self
                .follow_pod
                .as_deref()
                .is_none_or(|followed| match followed.split_once('/') {
                    Some((ns, n)) => ns == namespace && n == name,
                    None => namespace == "default" && followed == name,
                })
    }

    /// Whether the node's own doings (its pods listed, an orphan removed, its exit) are
    /// narrated: `verbose`, and no single pod is followed.
    pub fn narrates_node(&self) -> bool {
        self.verbose && self.follow_pod.is_none()
    }

    /// The settings as `PODLAB_NODE_*` variables, for a detached agent to start with the same.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let b = &self.backoff;
        let mut env = vec![
            ("PODLAB_ROOT", self.root.display().to_string()),
            (
                ENV_BACKOFF,
                format!("{}s,{}s,{}s", b.initial, b.max, b.reset_after),
            ),
            (ENV_RESYNC, format!("{}ms", self.resync.as_millis())),
            (
                ENV_FULL_RESYNC,
                format!("{}ms", self.full_resync.as_millis()),
            ),
            (
                ENV_ERROR_BACKOFF,
                format!("{}ms", self.error_backoff.as_millis()),
            ),
            (
                ENV_PULL_BACKOFF,
                format!(
                    "{}ms,{}ms",
                    self.pull_backoff.0.as_millis(),
                    self.pull_backoff.1.as_millis()
                ),
            ),
            (
                ENV_IMAGE_GC,
                format!(
                    "{},{},{}ms",
                    self.image_gc.high_percent,
                    self.image_gc.low_percent,
                    self.image_gc.min_age.as_millis()
                ),
            ),
            (
                ENV_IMAGE_GC_PERIOD,
                format!("{}ms", self.image_gc_period.as_millis()),
            ),
            (ENV_NODE_NAME, self.node_name.clone()),
            (ENV_VERBOSE, if self.verbose { "1" } else { "0" }.into()),
        ];
        if let Some(idle) = self.exit_when_idle {
            env.push((ENV_EXIT_WHEN_IDLE, format!("{}ms", idle.as_millis())));
        }
        if let Some(endpoint) = &self.runtime_endpoint {
            env.push((ENV_RUNTIME_ENDPOINT, endpoint.clone()));
        }
        env
    }

    /// Refuses settings the agent cannot honour.
    pub fn check(&self) -> Result<(), NodeError> {
        if self.resync.is_zero() || self.resync > MAX_RESYNC {
            return Err(NodeError::Config(format!(
                "the resync interval must be above 0 and at most {MAX_RESYNC:?} (a pass at least once a second), not {:?}",
                self.resync
            )));
        }
        if self.full_resync < self.resync {
            return Err(NodeError::Config(format!(
                "the full resync ({:?}) cannot be shorter than the resync ({:?})",
                self.full_resync, self.resync
            )));
        }
        let b = &self.backoff;
        if b.initial < 1 || b.max < 1 || b.reset_after < 1 {
            return Err(NodeError::Config(format!(
                "backoff durations are whole seconds of at least 1 s, not {}s,{}s,{}s",
                b.initial, b.max, b.reset_after
            )));
        }
        let gc = self.image_gc;
        if gc.high_percent > 100 || gc.low_percent >= gc.high_percent {
            return Err(NodeError::Config(format!(
                "image GC thresholds: the low ({}%) must be below the high ({}%), at most 100%",
                gc.low_percent, gc.high_percent
            )));
        }
        if self.pull_backoff.0.is_zero() || self.image_gc_period.is_zero() {
            return Err(NodeError::Config(
                "the image pull backoff and the image GC period must be above 0".into(),
            ));
        }
        if self.node_name.is_empty() {
            return Err(NodeError::Config("the node name is empty".into()));
        }
        Ok(())
    }

    pub fn store_root(&self) -> PathBuf {
        store_root(&self.root)
    }
}

/// Where the object store lives below `$PODLAB_ROOT`; the CLI opens the same.
pub fn store_root(root: &Path) -> PathBuf {
    root.join("store")
}

/// The hostname, lower-cased as kubelet's `--hostname-override` default is.
fn default_node_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// A duration as Go and kubectl write them: `500ms`, `10s`, `5m`, `1h`, `1m30s`; a bare number is
/// seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return Err("an empty duration".into());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(|| format!("{text:?}: a number needs a unit (ms, s, m, h)"))?;
        let (number, tail) = rest.split_at(digits);
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{text:?}: {number:?} is not a number"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => return Err(format!("{text:?}: unknown unit {other:?} (ms, s, m, h)")),
        };
        total += Duration::from_secs_f64(value * scale);
        rest = next;
    }
    Ok(total)
}

/// `INITIAL[,MAX[,RESET]]` (each a duration of whole seconds): `1s,8s` for demos, `10s,5m,10m`
/// for kubelet's defaults. Omitted parts keep their defaults.
pub fn parse_backoff(text: &str) -> Result<BackoffPolicy, String> {
    let mut policy = BackoffPolicy::default();
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    if parts.len() > 3 {
        return Err(format!("{text:?}: at most INITIAL,MAX,RESET"));
    }
    let fields = [
        &mut policy.initial,
        &mut policy.max,
        &mut policy.reset_after,
    ];
    for (part, field) in parts.iter().zip(fields) {
        if part.is_empty() {
            continue;
        }
        let duration = parse_duration(part)?;
        if duration.subsec_nanos() != 0 || duration.is_zero() {
            return Err(format!(
                "{part:?}: backoff durations are whole seconds, at least 1 s"
            ));
        }
        *field = duration.as_secs() as i64;
    }
    if parts.len() == 1 && policy.max < policy.initial {
        // Only the initial backoff given and above the default cap: the cap follows it.
        policy.max = policy.initial;
    }
    Ok(policy)
}

/// `INITIAL[,MAX]` of the image pull backoff; MAX is at least INITIAL.
pub fn parse_pull_backoff(text: &str) -> Result<(Duration, Duration), String> {
    let (initial, max) = match text.split_once(',') {
        Some((i, m)) => (parse_duration(i)?, parse_duration(m)?),
        None => {
            let initial = parse_duration(text)?;
            (initial, crate::images::PULL_BACKOFF_MAX.max(initial))
        }
    };
    if initial.is_zero() {
        return Err(format!("{text:?}: the first backoff must be above 0"));
    }
    Ok((initial, max.max(initial)))
}

/// `HIGH,LOW[,MIN_AGE]`: image GC thresholds in percent and the minimum age of an image.
pub fn parse_image_gc(text: &str) -> Result<crate::images::GcPolicy, String> {
    let parts: Vec<&str> = text.split(',').collect();
    let (high, low, min_age) = match parts[..] {
        [high, low] => (high, low, None),
        [high, low, age] => (high, low, Some(parse_duration(age)?)),
        _ => return Err(format!("{text:?}: HIGH,LOW[,MIN_AGE] (85,80,2m)")),
    };
    let percent = |p: &str| {
        p.trim()
            .trim_end_matches('%')
            .parse::<u8>()
            .ok()
            .filter(|v| *v <= 100)
            .ok_or_else(|| format!("{p:?} is not a percentage"))
    };
    Ok(crate::images::GcPolicy {
        high_percent: percent(high)?,
        low_percent: percent(low)?,
        min_age: min_age.unwrap_or(crate::images::GC_MIN_AGE),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn backoff_flags_fill_from_the_left() {
        let p = parse_backoff("1s,8s").unwrap();
        assert_eq!((p.initial, p.max, p.reset_after), (1, 8, 600));
        let p = parse_backoff("10s,5m,10m").unwrap();
        assert!(p.is_default());
        assert_eq!(parse_backoff("400s").unwrap().max, 400);
        assert!(parse_backoff("500ms").is_err());
        assert!(parse_backoff("1,2,3,4").is_err());
    }

    #[test]
    fn settings_round_trip_through_the_environment_form() {
        let mut config = NodeConfig::new("/r");
        config.backoff = parse_backoff("2s,4s,30s").unwrap();
        config.resync = Duration::from_millis(250);
        let env = config.to_env();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(
            parse_backoff(&get(ENV_BACKOFF).unwrap()),
            Ok(config.backoff)
        );
        assert_eq!(parse_duration(&get(ENV_RESYNC).unwrap()), Ok(config.resync));
        config.pull_backoff = parse_pull_backoff("1s,4s").unwrap();
        config.image_gc = parse_image_gc("90,70,0s").unwrap();
        let env = config.to_env();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(
            parse_pull_backoff(&get(ENV_PULL_BACKOFF).unwrap()),
            Ok(config.pull_backoff)
        );
        assert_eq!(
            parse_image_gc(&get(ENV_IMAGE_GC).unwrap()),
            Ok(config.image_gc)
        );
        assert!(parse_image_gc("80,85").is_ok_and(|gc| gc.low_percent == 85));
        assert!(parse_image_gc("101,80").is_err());
        assert!(config.check().is_ok());
        config.resync = Duration::from_secs(2);
        assert!(config.check().is_err());
    }

    #[test]
    fn following_one_pod_narrates_it_alone() {
        let mut config = NodeConfig::new("/r");
        assert!(!config.narrates("default", "web") && !config.narrates_node());
        config.verbose = true;
        assert!(config.narrates("default", "web") && config.narrates_node());
        config.follow_pod = Some("web".into());
        assert!(config.narrates("default", "web"));
        assert!(!config.narrates("default", "db"));
        assert!(!config.narrates("other", "web"));
        assert!(!config.narrates_node());
        config.follow_pod = Some("other/web".into());
        assert!(config.narrates("other", "web") && !config.narrates("default", "web"));
    }
}
