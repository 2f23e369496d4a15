//! Lab 16, securityContext: a container as a non-root user on a read-only root filesystem, and
//! what breaks when it is made so (an app that writes to /tmp) until a volume gives it a
//! writable place. The check reads the container process's uids in `/proc/PID/status`, its
//! root mount's options in `/proc/PID/mountinfo`, and the file the app keeps writing.

use std::time::Duration;

use anyhow::Result;

use crate::env::Env;
use crate::kit::{pods, procs};
use crate::{Lab, Level, Verdict};

const POD: &str = "secure";
const UID: u32 = 1000;

pub static LAB: Lab = Lab {
    number: 16,
    name: "security",
    title: "securityContext: non-root, read-only root, and a place to write",
    level: Level::Advanced,
    minutes: 15,
    goal: "Pod secure runs app as root on a writable root filesystem; app writes /tmp/heartbeat
every second. Make it meet the platform's rules, and keep it working:
1. app runs as uid 1000 (and the pod says runAsNonRoot);
2. app's root filesystem is read-only;
3. app still writes /tmp/heartbeat (the manifest is {work}/secure.yaml).",
    hints: &[
        "A container's `securityContext` has runAsUser, runAsNonRoot and \
readOnlyRootFilesystem. Pods cannot be changed in place: delete, edit, apply. Then watch it: \
`podlab get pods -w`, `podlab logs secure --previous`.",
        "With a read-only root, a container can only write to volumes. An `emptyDir` mounted at \
/tmp gives it a writable /tmp, which lives as long as the pod.",
        "(in {work}/secure.yaml, on container app)\n\
    securityContext: {runAsUser: 1000, runAsNonRoot: true, readOnlyRootFilesystem: true}\n\
    volumeMounts: [{name: tmp, mountPath: /tmp}]\n\
(and on the pod: volumes: [{name: tmp, emptyDir: {}}])\n\
podlab delete pod secure; podlab apply -f {work}/secure.yaml",
    ],
    not_yet: "app runs as uid 0",
    mistake_story: "a read-only root without a volume for /tmp: app cannot write its heartbeat \
and crash-loops",
    scene,
    check,
    solve,
    mistake,
    reset,
};

fn manifest(secure: bool, tmp_volume: bool) -> String {
    let context = if secure {
        "    securityContext: {runAsUser: 1000, runAsNonRoot: true, readOnlyRootFilesystem: true}\n"
    } else {
        ""
    };
    let (mounts, volumes) = if tmp_volume {
        (
            "    volumeMounts: [{name: tmp, mountPath: /tmp}]\n",
            "  volumes: [{name: tmp, emptyDir: {}}]\n",
        )
    } else {
        ("", "")
    };
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {POD}
spec:
  terminationGracePeriodSeconds: 1
{volumes}  containers:
  - name: app
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; while date > /tmp/heartbeat; do sleep 1 & wait $!; done; echo cannot write /tmp/heartbeat; exit 1\"]
{context}{mounts}"
    )
}

fn scene(env: &Env) -> Result<()> {
    env.apply("secure.yaml", &manifest(false, false))?;
    pods::wait_running(env, POD)?;
    env.podlab(&["exec", POD, "-c", "app", "--", "id"])?;
    Ok(())
}

/// The mount options of `/` as the process sees it.
fn root_options(pid: i32) -> Option<String> {
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    mountinfo
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some("/"))
        .and_then(|l| l.split(' ').nth(5).map(str::to_string))
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(pod) = pods::get(env, POD)? else {
        verdict.missing(format!("there is no pod {POD}"));
        return Ok(verdict);
    };
    let non_root = pod
        .spec
        .as_ref()
        .and_then(|s| {
            let c = s.containers.iter().find(|c| c.name == "app")?;
            c.security_context
                .as_ref()
                .and_then(|sc| sc.run_as_non_root)
                .or(s
                    .security_context
                    .as_ref()
                    .and_then(|sc| sc.run_as_non_root))
        })
        .unwrap_or(false);
    verdict.part(
        non_root,
        "the pod says runAsNonRoot: true",
        "the pod does not say runAsNonRoot: true",
    );
    let Some(pid) = pods::running_pid_or_say(env, &pod, "app", &mut verdict)? else {
        return Ok(verdict);
    };
    let (real, effective) = procs::uids(pid).unwrap_or((0, 0));
    verdict.part(
        real == UID && effective == UID,
        format!("app (pid {pid}) runs as uid {UID}"),
        format!("app runs as uid {effective}, not {UID}"),
    );
    let options = root_options(pid).unwrap_or_default();
    verdict.part(
        options.split(',').any(|o| o == "ro"),
        "app's root filesystem is mounted read-only",
        format!("app's root filesystem is mounted {options}"),
    );
    let file = format!("/proc/{pid}/root/tmp/heartbeat");
    let fresh = procs::written_within(std::path::Path::new(&file), Duration::from_secs(5));
    verdict.part(
        fresh,
        "app keeps writing /tmp/heartbeat",
        "app's /tmp/heartbeat is not being written",
    );
    Ok(verdict)
}

fn remake(env: &Env, tmp_volume: bool) -> Result<()> {
    pods::delete(env, &[POD])?;
    env.apply("secure.yaml", &manifest(true, tmp_volume))?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    remake(env, true)?;
    pods::wait_running(env, POD)?;
    std::thread::sleep(Duration::from_millis(1500));
    env.podlab(&["exec", POD, "-c", "app", "--", "id"])?;
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    remake(env, false)?;
    pods::wait_restarted(env, POD, "app")?;
    Ok(())
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])
}
