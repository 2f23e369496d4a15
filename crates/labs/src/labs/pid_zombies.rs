//! Lab 5, pid namespace sharing and zombie reaping. By default each container of a pod has a
//! pid namespace of its own, and its first process is PID 1 there. If that process never calls
//! `wait()` (here `sleep`, exec'd by a shell that left an orphan behind), orphans it inherits
//! stay zombies. With `shareProcessNamespace: true` the pod has one pid namespace whose PID 1 is
//! the pause process, which reaps every orphan. The check compares the containers' pid
//! namespace inodes with pause's, reads pause's pid inside (`NSpid`), and looks for zombies.

use std::time::Duration;

use anyhow::{Context, Result};
use podlab_ns::NsKind;

use crate::env::Env;
use crate::kit::{pods, procs};
use crate::{Lab, Level, Verdict};

const POD: &str = "zombies";
/// How long after app's start its orphan has exited (it sleeps 1 s).
const ORPHAN_DONE: Duration = Duration::from_secs(2);

pub static LAB: Lab = Lab {
    number: 5,
    name: "pid-zombies",
    title: "Sharing the pid namespace, and who reaps zombies",
    level: Level::Intermediate,
    minutes: 15,
    goal: "Pod zombies runs app and sidecar. app's shell leaves an orphan and then execs `sleep`,
which never calls wait(): the orphan stays a zombie. And sidecar cannot see app's processes.
Make the pod (its manifest is {work}/zombies.yaml) run so that:
1. app and sidecar share ONE pid namespace, whose PID 1 is the pause process;
2. no zombie is left in the pod.",
    hints: &[
        "Look first: `ps -eo pid,ppid,stat,comm | grep -w Z` on the host; `podlab exec zombies \
-c sidecar -- ps` in the pod. Who is the zombie's parent? What is PID 1 in app's namespace?",
        "A pod field puts all containers in one pid namespace, held by pause (which reaps every \
child it inherits: see crates/pause). Pods cannot be changed in place: delete, edit, apply.",
        "podlab delete pod zombies\n\
(add `shareProcessNamespace: true` under spec: in {work}/zombies.yaml)\n\
podlab apply -f {work}/zombies.yaml\n\
podlab exec zombies -c sidecar -- ps",
    ],
    not_yet: "pid namespace of its own",
    mistake_story: "`kill -9` of the zombie: a zombie is already dead; only its parent's wait() \
removes it",
    scene,
    check,
    solve,
    mistake,
    reset,
};

fn manifest(shared: bool) -> String {
    let share = if shared {
        "  shareProcessNamespace: true\n"
    } else {
        ""
    };
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {POD}
spec:
{share}  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    # the inner shell leaves `sleep 1` behind; then `sleep` replaces the outer shell
    command: [sh, -c, \"sh -c 'sleep 1 &'; exec sleep 100000\"]
  - name: sidecar
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]
"
    )
}

fn scene(env: &Env) -> Result<()> {
    env.apply("zombies.yaml", &manifest(false))?;
    pods::wait_running(env, POD)?;
    Ok(())
}

/// The pid a process has in its own (innermost) pid namespace, from `NSpid`.
fn inner_pid(pid: i32) -> Option<i32> {
    podlab_ns::pid::pid_in_own_ns(pid)
        .ok()
        .and_then(|pids| pids.last().copied())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(pod) = pods::get(env, POD)?.filter(pods::all_running) else {
        verdict.missing(format!("pod {POD} does not run"));
        return Ok(verdict);
    };
    let pause = pods::pause_pid(env, &pod)?.context("the pod has no pause process")?;
    let app = pods::container_pid(env, &pod, "app")?.context("app has no process")?;
    let sidecar = pods::container_pid(env, &pod, "sidecar")?.context("sidecar has no process")?;
    let ns = |pid| {
        procs::read(pid)
            .and_then(|p| p.ns(NsKind::Pid))
            .unwrap_or(0)
    };
    let (pause_ns, app_ns, sidecar_ns) = (ns(pause), ns(app), ns(sidecar));
    let shared = app_ns == pause_ns && sidecar_ns == pause_ns;
    verdict.part(
        shared,
        format!("app and sidecar are in pause's pid namespace {pause_ns}"),
        format!(
            "app has pid namespace {app_ns}, sidecar {sidecar_ns}, pause {pause_ns}: each container \
has a pid namespace of its own, so sidecar cannot see app"
        ),
    );
    if shared {
        let one = inner_pid(pause);
        verdict.part(
            one == Some(1),
            "pause is PID 1 of the pod's pid namespace",
            format!("pause is pid {one:?} inside, not 1"),
        );
    }
    // The orphan exits a second after app starts: look once it has.
    let started = pods::container(&pod, "app")
        .and_then(|c| c.state?.running?.started_at)
        .map(|t| t.0);
    if let Some(started) = started {
        let now = crate::progress::now() as i64;
        let age = Duration::from_secs(now.saturating_sub(started.as_second()).max(0) as u64);
        if age < ORPHAN_DONE {
            std::thread::sleep(ORPHAN_DONE - age);
        }
    }
    let zombies: Vec<String> = procs::all()
        .into_iter()
        .filter(|p| p.is_zombie() && p.ns(NsKind::Pid).is_some_and(|n| n == app_ns))
        .map(|p| {
            let parent = procs::read(p.ppid).map(|q| q.name).unwrap_or_default();
            format!(
                "zombie pid {} ({}), whose parent is pid {} ({parent}, PID {} inside), which never calls wait()",
                p.pid,
                p.name,
                p.ppid,
                inner_pid(p.ppid).unwrap_or(0)
            )
        })
        .collect();
    verdict.part(
        zombies.is_empty(),
        "no zombie in the pod: its orphan was reaped",
        zombies.join("\n"),
    );
    Ok(verdict)
}

fn solve(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])?;
    env.say("(shareProcessNamespace: true added to the manifest)");
    env.apply("zombies.yaml", &manifest(true))?;
    pods::wait_running(env, POD)?;
    std::thread::sleep(ORPHAN_DONE);
    env.podlab(&["exec", POD, "-c", "sidecar", "--", "ps"])?;
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    let pod = pods::get(env, POD)?.context("pod zombies is gone")?;
    let app = pods::container_pid(env, &pod, "app")?.context("app has no process")?;
    let app_ns = procs::read(app).and_then(|p| p.ns(NsKind::Pid));
    let zombie = procs::wait_for(Duration::from_secs(10), || {
        procs::all()
            .into_iter()
            .find(|p| p.is_zombie() && p.ns(NsKind::Pid) == app_ns)
    })
    .context("no zombie appeared in app's pid namespace within 10 s")?;
    env.run("kill", &["-9", &zombie.pid.to_string()])?;
    Ok(())
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])
}
