//! Event reasons and messages the kubelet emits (spec sections 1, 6, 7, 8), so that podlab's
//! events read exactly like a real node's.

pub const SANDBOX_CHANGED: &str = "SandboxChanged";
pub const SANDBOX_CHANGED_MESSAGE: &str = "Pod sandbox changed, it will be killed and re-created.";
pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
pub const FAILED_POD_SANDBOX_STATUS: &str = "FailedPodSandBoxStatus";
pub const NETWORK_NOT_READY: &str = "NetworkNotReady";
/// A volume could not be set up (`MountVolume.SetUp failed for volume "v" : …`).
pub const FAILED_MOUNT: &str = "FailedMount";
pub const CREATED: &str = "Created";
pub const STARTED: &str = "Started";
pub const FAILED: &str = "Failed";
pub const KILLING: &str = "Killing";
pub const BACK_OFF: &str = "BackOff";
pub const UNHEALTHY: &str = "Unhealthy";
pub const PROBE_WARNING: &str = "ProbeWarning";
pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
pub const PULLING: &str = "Pulling";
pub const PULLED: &str = "Pulled";

/// Start-failure reasons the kubelet caches; they become waiting reasons (API-5).
pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
pub const START_FAILURE_REASONS: &[&str] = &[
    CRASH_LOOP_BACK_OFF,
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "PreCreateHookError",
    "CreateContainerError",
    "PreStartHookError",
    "RunContainerError",
    "PostStartHookError",
];

/// Default waiting reasons of a container without a record (API-1).
pub const CONTAINER_CREATING: &str = "ContainerCreating";
pub const POD_INITIALIZING: &str = "PodInitializing";
/// Reason of a status whose container vanished (API-1, API-3).
pub const CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";

/// Seconds the pod worker waits after a failed pass (`backOffPeriod`, + up to 50 % jitter).
pub const SYNC_ERROR_BACKOFF_SECONDS: i64 = 10;
/// Seconds before retrying when the network is not ready (`backOffOnTransientErrorPeriod`).
pub const NETWORK_NOT_READY_RETRY_SECONDS: i64 = 1;
/// kubelet `syncFrequency` default.
pub const RESYNC_INTERVAL_SECONDS: i64 = 60;

pub fn network_not_ready_message(err: &str) -> String {
    format!("network is not ready: {err}")
}

pub fn failed_create_sandbox_message(runtime_error: &str) -> String {
    format!("Failed to create pod sandbox: {runtime_error}")
}

/// The error createPodSandbox returns (`pod` is `name_ns(uid)`).
pub fn create_sandbox_error(pod: &str, err: &str) -> String {
    format!("Failed to create sandbox for pod \"{pod}\": {err}")
}

pub fn sandbox_status_failed_message(err: &str) -> String {
    format!("Unable to get pod sandbox status: {err}")
}

pub fn created_message(container: &str) -> String {
    format!("Created container: {container}")
}

pub fn started_message(container: &str) -> String {
    format!("Started container {container}")
}

pub fn failed_message(err: &str) -> String {
    format!("Error: {err}")
}

pub fn back_off_event_message(container: &str, pod: &str) -> String {
    format!("Back-off restarting failed container {container} in pod {pod}")
}

/// The CrashLoopBackOff error that becomes the waiting message (`backoff` in seconds).
pub fn crash_loop_message(backoff_seconds: i64, container: &str, pod: &str) -> String {
    format!(
        "back-off {} restarting failed container={container} pod={pod}",
        go_duration(backoff_seconds)
    )
}

/// `Liveness probe failed: <output>`.
pub fn probe_failed_message(probe_title: &str, output: &str) -> String {
    format!("{probe_title} probe failed: {output}")
}

pub fn probe_errored_message(probe_title: &str, result: &str, err: &str) -> String {
    format!("{probe_title} probe errored and resulted in {result} state: {err}")
}

pub fn probe_warning_message(probe_title: &str, output: &str) -> String {
    format!("{probe_title} probe warning: {output}")
}

/// Whole seconds as Go's `time.Duration.String()` prints them: `10s`, `5m0s`, `1h0m0s`.
pub fn go_duration(seconds: i64) -> String {
    let (h, m, s) = (seconds / 3600, (seconds % 3600) / 60, seconds % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_like_go() {
        assert_eq!(go_duration(10), "10s");
        assert_eq!(go_duration(300), "5m0s");
        assert_eq!(go_duration(160), "2m40s");
        assert_eq!(go_duration(3600), "1h0m0s");
    }

    #[test]
    fn crash_loop_message_matches_kubelet() {
        assert_eq!(
            crash_loop_message(20, "app", "web_default(u1)"),
            "back-off 20s restarting failed container=app pod=web_default(u1)"
        );
    }
}
