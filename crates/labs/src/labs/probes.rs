//! Lab 7, the three probes: a startup probe gates the other two; readiness decides Ready (and
//! keeps running the whole life of the container); liveness kills and restarts. Breaking
//! liveness for good makes the restarts pile up, and kubelet's back-off between them is
//! CrashLoopBackOff. The check reads the restart count, the Ready condition and the events
//! (`Unhealthy`, `Killing`, `BackOff`) that the node agent recorded.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;

use crate::env::Env;
use crate::kit::pods;
use crate::{Lab, Level, Verdict};

const POD: &str = "probes";
const RESTARTS: i32 = 2;

pub static LAB: Lab = Lab {
    number: 7,
    name: "probes",
    title: "The three probes: break liveness, watch CrashLoopBackOff",
    level: Level::Intermediate,
    minutes: 15,
    goal: "Pod probes runs web with a startup, a readiness and a liveness probe, all reading
files in /state, an emptyDir volume that outlives restarts (manifest: {work}/probes.yaml).
Break web's LIVENESS so that kubelet restarts it at least twice, and the pod goes into
CrashLoopBackOff. Watch READY and RESTARTS change while it does.",
    hints: &[
        "Read the probes in {work}/probes.yaml: which file does each one read? Which of them \
does web create again when it restarts?",
        "`podlab exec` can change files in /state. A liveness probe that fails failureThreshold \
times in a row makes kubelet kill the container; restartPolicy Always starts it again, after a \
back-off that doubles each time (CrashLoopBackOff).",
        "podlab exec probes -c web -- rm /state/healthy\n\
podlab get pods -w\n\
podlab describe pod probes      # Unhealthy, Killing, BackOff events",
    ],
    not_yet: "web has restarted 0 times",
    mistake_story: "killing web's process by hand (`kill 1` inside): it restarts, but not \
because of the liveness probe, and it comes back healthy",
    scene,
    check,
    solve,
    mistake,
    reset,
};

const MANIFEST: &str = "apiVersion: v1
kind: Pod
metadata:
  name: probes
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: state
    emptyDir: {}
  containers:
  - name: web
    image: busybox
    # /state/healthy is made on the first start only: the volume outlives restarts
    command: [sh, -c, \"[ -e /state/started ] || touch /state/started /state/healthy; trap 'exit 0' TERM; sleep 100000 & wait\"]
    volumeMounts: [{name: state, mountPath: /state}]
    startupProbe:
      exec: {command: [cat, /state/started]}
      periodSeconds: 1
      failureThreshold: 10
    readinessProbe:
      exec: {command: [cat, /state/healthy]}
      periodSeconds: 1
    livenessProbe:
      exec: {command: [cat, /state/healthy]}
      periodSeconds: 1
      failureThreshold: 2
";

fn scene(env: &Env) -> Result<()> {
    env.apply("probes.yaml", MANIFEST)?;
    pods::wait(env, POD, "Ready", Duration::from_secs(60), |p| {
        pods::condition(p, "Ready") == "True"
    })?;
    env.podlab(&["get", "pods", POD])?;
    Ok(())
}

fn restarts(pod: &Pod) -> i32 {
    pods::container(pod, "web").map_or(0, |c| c.restart_count)
}

fn event_messages(env: &Env, pod: &Pod, reason: &str) -> Result<Vec<String>> {
    Ok(pods::events(env, pod)?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.message.unwrap_or_default())
        .collect())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(pod) = pods::get(env, POD)? else {
        verdict.missing(format!("there is no pod {POD}"));
        return Ok(verdict);
    };
    let count = restarts(&pod);
    verdict.part(
        count >= RESTARTS,
        format!("web has restarted {count} times"),
        format!("web has restarted {count} times (at least {RESTARTS} wanted)"),
    );
    let liveness = event_messages(env, &pod, "Unhealthy")?
        .into_iter()
        .filter(|m| m.starts_with("Liveness probe failed"))
        .count();
    let killed = event_messages(env, &pod, "Killing")?
        .into_iter()
        .filter(|m| m.contains("liveness"))
        .count();
    verdict.part(
        liveness > 0 && killed > 0,
        "kubelet recorded `Liveness probe failed` and killed web for it (`Killing`)",
        format!(
            "no restart was the liveness probe's doing ({liveness} `Liveness probe failed` \
events, {killed} `Killing` for liveness)"
        ),
    );
    let backoff = !event_messages(env, &pod, "BackOff")?.is_empty()
        || pods::container(&pod, "web")
            .and_then(|c| c.state?.waiting?.reason)
            .as_deref()
            == Some("CrashLoopBackOff");
    verdict.part(
        backoff,
        "kubelet backed off restarting web (CrashLoopBackOff)",
        "web has not been in CrashLoopBackOff",
    );
    let ready = pods::condition(&pod, "Ready");
    verdict.part(
        ready != "True",
        format!("the pod is not Ready (Ready={ready}): readiness reads the same file"),
        "the pod is still Ready: readiness reads the same file as liveness",
    );
    Ok(verdict)
}

fn solve(env: &Env) -> Result<()> {
    env.podlab(&["exec", POD, "-c", "web", "--", "rm", "/state/healthy"])?;
    let done = |p: &Pod| {
        restarts(p) >= RESTARTS
            && pods::container(p, "web")
                .and_then(|c| c.state?.waiting?.reason)
                .as_deref()
                == Some("CrashLoopBackOff")
    };
    pods::wait(
        env,
        POD,
        "in CrashLoopBackOff",
        Duration::from_secs(90),
        done,
    )?;
    env.podlab(&["get", "pods", POD])?;
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    // The exec'd `kill` dies with the container's pid namespace when PID 1 exits, so its own
    // exit status (0, or 137) says nothing: the restart below is what counts.
    let (code, _, _) = env.podlab_quiet(&["exec", POD, "-c", "web", "--", "kill", "1"])?;
    env.say(format!(
        "$ podlab exec {POD} -c web -- kill 1\n  (exit {code})"
    ));
    pods::wait(env, POD, "restarted", Duration::from_secs(60), |p| {
        restarts(p) >= 1 && pods::running(p, "web")
    })?;
    Ok(())
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])
}
