//! kubelet's image manager (`pkg/kubelet/images`) as pure rules: whether a container's image is
//! pulled (`imagePullPolicy`, `shouldPullImage`), the pull backoff (client-go's
//! `flowcontrol.Backoff` per pod and image: 10 s doubling to 5 min), the words of its events,
//! and image garbage collection's choice (`realImageGCManager`: above the high threshold of the
//! image filesystem, free down to the low one, least recently used unused images first).
//!
//! The node agent ([`crate::node::images`]) does the pulls and the removals; here is only what
//! it decides, so that it is unit tested without a registry or a disk.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

/// Event reasons of the image manager (`pkg/kubelet/events`).
pub const PULLING: &str = "Pulling";
pub const PULLED: &str = "Pulled";
pub const FAILED: &str = "Failed";
pub const BACK_OFF: &str = "BackOff";
pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
/// A pod's `imagePullSecrets` names a Secret that is not there (a pod event, Warning).
pub const FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET: &str = "FailedToRetrieveImagePullSecret";
/// Image GC could not free enough (a node event, Warning).
pub const FREE_DISK_SPACE_FAILED: &str = "FreeDiskSpaceFailed";

/// Waiting reasons (`pkg/kubelet/images/types.go`).
pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";

/// kubelet's image pull backoff: `flowcontrol.NewBackOff(backOffPeriod, MaxContainerBackOff)`.
pub const PULL_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const PULL_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// `--image-gc-high-threshold` and `--image-gc-low-threshold` defaults (percent of the image
/// filesystem), and `ImageGCPeriod`.
pub const GC_HIGH_THRESHOLD_PERCENT: u8 = 85;
pub const GC_LOW_THRESHOLD_PERCENT: u8 = 80;
pub const GC_PERIOD: Duration = Duration::from_secs(300);
/// `--minimum-image-gc-age` default: an image the node has known for less is not removed.
pub const GC_MIN_AGE: Duration = Duration::from_secs(120);

/// `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    /// The container's policy; unset (a pod written without the API server's defaulting) is
    /// defaulted from the image as the API server does.
    pub fn of(policy: Option<&str>, image: &str) -> PullPolicy {
        let policy = policy.unwrap_or_else(|| podlab_api::defaults::pull_policy_for(Some(image)));
        match policy {
            "Always" => PullPolicy::Always,
            "Never" => PullPolicy::Never,
            _ => PullPolicy::IfNotPresent,
        }
    }
}

/// What EnsureImageExists does for one container start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageStep {
    /// Pull it (Always; IfNotPresent and absent).
    Pull,
    /// Use the image on the node (`Pulled`: already present on machine).
    Present,
    /// Never and absent: `ErrImageNeverPull`.
    NeverPull,
}

/// `shouldPullImage`, then the Never case.
pub fn image_step(policy: PullPolicy, present: bool) -> ImageStep {
    match (policy, present) {
        (PullPolicy::Always, _) | (PullPolicy::IfNotPresent, false) => ImageStep::Pull,
        (PullPolicy::Never, false) => ImageStep::NeverPull,
        (_, true) => ImageStep::Present,
    }
}

/// client-go's `flowcontrol.Backoff` without jitter (kubelet's image backoff has none): one
/// entry per key (kubelet's `<pod uid>_<image>`), doubling from `initial` to `max` on each
/// failure, forgotten once idle for twice `max`.
#[derive(Debug, Clone)]
pub struct PullBackoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, BackoffEntry>,
}

#[derive(Debug, Clone, Copy)]
struct BackoffEntry {
    backoff: Duration,
    last_update: Instant,
}

impl PullBackoff {
    pub fn new(initial: Duration, max: Duration) -> PullBackoff {
        PullBackoff {
            initial,
            max: max.max(initial),
            entries: HashMap::new(),
        }
    }

    /// `IsInBackOffSinceUpdate`: a failure was recorded less than its backoff ago.
    pub fn in_backoff(&self, key: &str, now: Instant) -> bool {
        self.entries
            .get(key)
            .is_some_and(|e| now.saturating_duration_since(e.last_update) < e.backoff)
    }

    /// When the backoff of `key` ends (None: not in backoff).
    pub fn ends_at(&self, key: &str, now: Instant) -> Option<Instant> {
        self.in_backoff(key, now)
            .then(|| self.entries.get(key).map(|e| e.last_update + e.backoff))
            .flatten()
    }

    /// The backoff of `key` now (zero without an entry).
    pub fn current(&self, key: &str) -> Duration {
        self.entries.get(key).map_or(Duration::ZERO, |e| e.backoff)
    }

    /// `Next`: a failure at `now`. The first (or the first after the entry expired, 2 × max
    /// idle) waits `initial`; each next one twice the last, at most `max`.
    pub fn next(&mut self, key: &str, now: Instant) {
        let backoff = match self.entries.get(key) {
            Some(e) if now.saturating_duration_since(e.last_update) <= self.max * 2 => {
                (e.backoff * 2).min(self.max)
            }
            _ => self.initial,
        };
        self.entries.insert(
            key.to_string(),
            BackoffEntry {
                backoff,
                last_update: now,
            },
        );
    }

    /// `GC`: entries idle for more than twice `max` are forgotten.
    pub fn gc(&mut self, now: Instant) {
        let max = self.max;
        self.entries
            .retain(|_, e| now.saturating_duration_since(e.last_update) <= max * 2);
    }
}

impl Default for PullBackoff {
    fn default() -> Self {
        PullBackoff::new(PULL_BACKOFF_INITIAL, PULL_BACKOFF_MAX)
    }
}

pub fn pulling_message(image: &str) -> String {
    format!("Pulling image {image:?}")
}

/// kubelet's `Pulled` after a pull: the pull's own time, the time including the wait for the
/// serialized puller, and the image's size.
pub fn pulled_message(
    image: &str,
    pulling: Duration,
    including_waiting: Duration,
    size: u64,
) -> String {
    format!(
        "Successfully pulled image {image:?} in {} ({} including waiting). Image size: {size} bytes.",
        go_duration_ms(pulling),
        go_duration_ms(including_waiting)
    )
}

pub fn already_present_message(image: &str) -> String {
    format!("Container image {image:?} already present on machine")
}

pub fn never_pull_message(image: &str) -> String {
    format!("Container image {image:?} is not present with pull policy of Never")
}

pub fn failed_pull_message(image: &str, err: &str) -> String {
    format!("Failed to pull image {image:?}: {err}")
}

pub fn back_off_pull_message(image: &str) -> String {
    format!("Back-off pulling image {image:?}")
}

/// The waiting message during the backoff: kubelet (1.31+) appends the last pull's error as
/// `ErrImagePull: <message>`.
pub fn back_off_waiting_message(image: &str, last_error: Option<&str>) -> String {
    match last_error {
        Some(err) => format!("{}: {ERR_IMAGE_PULL}: {err}", back_off_pull_message(image)),
        None => back_off_pull_message(image),
    }
}

pub fn missing_pull_secrets_message(names: &[String]) -> String {
    format!(
        "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
        names.join(", ")
    )
}

/// A duration truncated to milliseconds as Go's `time.Duration.String()` prints it: `0s`,
/// `850ms`, `1.234s`, `1m2.5s`.
pub fn go_duration_ms(duration: Duration) -> String {
    let ms = duration.as_millis() as u64;
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m) = (ms / 3_600_000, (ms / 60_000) % 60);
    let (s, frac) = ((ms / 1000) % 60, ms % 1000);
    let seconds = if frac == 0 {
        format!("{s}s")
    } else {
        let frac = format!("{frac:03}");
        format!("{s}.{}s", frac.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Image garbage collection.

/// The image filesystem as `statfs` sees it (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStats {
    pub capacity: u64,
    pub available: u64,
}

impl FsStats {
    /// kubelet's `usagePercent := 100 - int(available*100/capacity)`.
    pub fn usage_percent(&self) -> u64 {
        if self.capacity == 0 {
            return 0;
        }
        100 - (self.available.saturating_mul(100) / self.capacity).min(100)
    }
}

/// `--image-gc-high-threshold` / `--image-gc-low-threshold` / `--minimum-image-gc-age`. A high
/// threshold of 100 turns image GC off, as kubelet's flag documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcPolicy {
    pub high_percent: u8,
    pub low_percent: u8,
    pub min_age: Duration,
}

impl Default for GcPolicy {
    fn default() -> Self {
        GcPolicy {
            high_percent: GC_HIGH_THRESHOLD_PERCENT,
            low_percent: GC_LOW_THRESHOLD_PERCENT,
            min_age: GC_MIN_AGE,
        }
    }
}

/// One image as GC sees it (kubelet's `imageRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcImage {
    pub name: String,
    /// Bytes the runtime reports for it.
    pub size: u64,
    /// None: never used that the node knows of (the oldest).
    pub last_used: Option<SystemTime>,
    /// A container (running or not) uses it, or it is pinned: never removed.
    pub in_use: bool,
    /// When the node first saw it (kubelet's `firstDetected`): younger than the minimum age,
    /// it stays.
    pub first_detected: SystemTime,
}

/// What one GC run decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GcPlan {
    /// Usage is below the high threshold.
    Nothing { usage_percent: u64 },
    /// Remove `remove` (oldest use first), which frees `freed` of the `amount_to_free` needed
    /// to reach the low threshold; `freed < amount_to_free` is kubelet's FreeDiskSpaceFailed.
    Free {
        usage_percent: u64,
        amount_to_free: u64,
        remove: Vec<String>,
        freed: u64,
    },
}

/// `GarbageCollect` + `freeSpace`: at or above the high threshold, the unused images the node
/// has known for at least the minimum age are removed least recently used first (then first
/// detected first) until the bytes freed reach the amount that brings usage down to the low
/// threshold (`capacity × (100 − low) / 100 − available`).
pub fn gc_plan(policy: GcPolicy, fs: FsStats, images: &[GcImage], now: SystemTime) -> GcPlan {
    let usage_percent = fs.usage_percent();
    if policy.high_percent >= 100 || usage_percent < u64::from(policy.high_percent) {
        return GcPlan::Nothing { usage_percent };
    }
    let target_available = fs
        .capacity
        .saturating_mul(u64::from(100 - policy.low_percent.min(100)))
        / 100;
    let amount_to_free = target_available.saturating_sub(fs.available);
    let old_enough = |i: &GcImage| {
        now.duration_since(i.first_detected)
            .is_ok_and(|age| age >= policy.min_age)
    };
    let mut candidates: Vec<&GcImage> = images
        .iter()
        .filter(|i| !i.in_use && old_enough(i))
        .collect();
    candidates.sort_by(|a, b| {
        a.last_used
            .unwrap_or(SystemTime::UNIX_EPOCH)
            .cmp(&b.last_used.unwrap_or(SystemTime::UNIX_EPOCH))
            .then_with(|| a.first_detected.cmp(&b.first_detected))
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut remove = Vec::new();
    let mut freed = 0u64;
    for image in candidates {
        if freed >= amount_to_free {
            break;
        }
        remove.push(image.name.clone());
        freed += image.size;
    }
    GcPlan::Free {
        usage_percent,
        amount_to_free,
        remove,
        freed,
    }
}

/// kubelet's FreeDiskSpaceFailed message.
pub fn free_disk_space_failed_message(amount_to_free: u64, freed: u64) -> String {
    format!(
        "Failed to garbage collect required amount of images. Attempted to free {amount_to_free} bytes, but only found {freed} bytes eligible to free."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_pull_as_kubelet_does() {
        use ImageStep::*;
        assert_eq!(image_step(PullPolicy::Always, true), Pull);
        assert_eq!(image_step(PullPolicy::Always, false), Pull);
        assert_eq!(image_step(PullPolicy::IfNotPresent, true), Present);
        assert_eq!(image_step(PullPolicy::IfNotPresent, false), Pull);
        assert_eq!(image_step(PullPolicy::Never, true), Present);
        assert_eq!(image_step(PullPolicy::Never, false), NeverPull);
        assert_eq!(PullPolicy::of(None, "busybox"), PullPolicy::Always);
        assert_eq!(
            PullPolicy::of(None, "busybox:1.36"),
            PullPolicy::IfNotPresent
        );
        assert_eq!(PullPolicy::of(Some("Never"), "busybox"), PullPolicy::Never);
    }

    #[test]
    fn the_pull_backoff_doubles_from_10s_to_5m_and_expires() {
        let mut b = PullBackoff::default();
        let t0 = Instant::now();
        assert!(!b.in_backoff("k", t0));
        b.next("k", t0);
        assert!(b.in_backoff("k", t0 + Duration::from_secs(9)));
        assert!(!b.in_backoff("k", t0 + Duration::from_secs(10)));
        assert_eq!(b.ends_at("k", t0), Some(t0 + Duration::from_secs(10)));
        let mut t = t0;
        let mut seen = Vec::new();
        for _ in 0..7 {
            t += b.current("k");
            b.next("k", t);
            seen.push(b.current("k").as_secs());
        }
        assert_eq!(seen, [20, 40, 80, 160, 300, 300, 300]);
        // Idle for more than twice the maximum: it starts again at 10 s.
        let later = t + Duration::from_secs(601);
        b.next("k", later);
        assert_eq!(b.current("k"), Duration::from_secs(10));
        b.gc(later + Duration::from_secs(601));
        assert_eq!(b.current("k"), Duration::ZERO);
    }

    #[test]
    fn messages_read_like_kubelets() {
        assert_eq!(
            pulled_message(
                "nginx:1.27",
                Duration::from_millis(1234),
                Duration::from_millis(1500),
                72_000_000
            ),
            "Successfully pulled image \"nginx:1.27\" in 1.234s (1.5s including waiting). Image size: 72000000 bytes."
        );
        assert_eq!(go_duration_ms(Duration::from_micros(850_400)), "850ms");
        assert_eq!(go_duration_ms(Duration::from_millis(62_500)), "1m2.5s");
        assert_eq!(go_duration_ms(Duration::from_millis(3_600_000)), "1h0m0s");
        assert_eq!(go_duration_ms(Duration::ZERO), "0s");
        assert_eq!(
            back_off_waiting_message("a:1", Some("not found")),
            "Back-off pulling image \"a:1\": ErrImagePull: not found"
        );
        assert_eq!(
            never_pull_message("a:1"),
            "Container image \"a:1\" is not present with pull policy of Never"
        );
    }

    fn image(name: &str, size: u64, used: u64, in_use: bool) -> GcImage {
        GcImage {
            name: name.into(),
            size,
            last_used: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(used)),
            in_use,
            first_detected: SystemTime::UNIX_EPOCH,
        }
    }

    /// A day after every test image was first detected.
    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(86_400)
    }

    #[test]
    fn gc_frees_down_to_the_low_threshold_oldest_unused_first() {
        let images = [
            image("new", 100, 30, false),
            image("old", 100, 10, false),
            image("running", 500, 5, true),
            image("middle", 100, 20, false),
        ];
        let fs = |available| FsStats {
            capacity: 1000,
            available,
        };
        assert_eq!(
            gc_plan(GcPolicy::default(), fs(160), &images, now()),
            GcPlan::Nothing { usage_percent: 84 }
        );
        // 86 % used: 60 bytes to reach 80 %: the oldest unused image is enough.
        assert_eq!(
            gc_plan(GcPolicy::default(), fs(140), &images, now()),
            GcPlan::Free {
                usage_percent: 86,
                amount_to_free: 60,
                remove: vec!["old".into()],
                freed: 100
            }
        );
        // 95 %: 150 bytes, two images; the running one never.
        assert_eq!(
            gc_plan(GcPolicy::default(), fs(50), &images, now()),
            GcPlan::Free {
                usage_percent: 95,
                amount_to_free: 150,
                remove: vec!["old".into(), "middle".into()],
                freed: 200
            }
        );
        // 100 %: 200 bytes; every unused one is not enough.
        let GcPlan::Free {
            remove,
            freed,
            amount_to_free,
            ..
        } = gc_plan(GcPolicy::default(), fs(0), &images[..2], now())
        else {
            panic!("over the threshold")
        };
        assert_eq!((remove.len(), freed, amount_to_free), (2, 200, 200));
        let GcPlan::Free {
            freed,
            amount_to_free,
            ..
        } = gc_plan(GcPolicy::default(), fs(0), &images[2..3], now())
        else {
            panic!("over the threshold")
        };
        assert!(freed < amount_to_free);
    }

    #[test]
    fn gc_spares_images_younger_than_the_minimum_age_and_is_off_at_100() {
        let mut young = image("young", 500, 1, false);
        young.first_detected = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let fs = FsStats {
            capacity: 1000,
            available: 0,
        };
        let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let plan = gc_plan(GcPolicy::default(), fs, &[young.clone()], at(1119));
        assert!(matches!(plan, GcPlan::Free { ref remove, .. } if remove.is_empty()));
        let plan = gc_plan(GcPolicy::default(), fs, &[young.clone()], at(1120));
        assert!(matches!(plan, GcPlan::Free { ref remove, .. } if remove.len() == 1));
        let off = GcPolicy {
            high_percent: 100,
            ..GcPolicy::default()
        };
        assert!(matches!(
            gc_plan(off, fs, &[young], at(5000)),
            GcPlan::Nothing { .. }
        ));
    }
}
