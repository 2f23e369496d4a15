//! Lab 1, a pod by hand: a pause process in new uts, ipc and net namespaces (`unshare`), and
//! an app process that joins them (`nsenter`) with a mount namespace of its own. That is all a
//! pod is to the kernel; the check compares `/proc/PID/ns/*` inode ids and reads the hostname
//! inside the uts namespace.

use std::time::Duration;

use anyhow::{Context, Result};
use podlab_ns::NsKind;

use crate::env::Env;
use crate::kit::procs::{self, Proc};
use crate::{Lab, Level, Verdict};

const HOSTNAME: &str = "lab-pod";

pub static LAB: Lab = Lab {
    number: 1,
    name: "pod-by-hand",
    title: "A pod by hand: pause, unshare and nsenter",
    level: Level::Beginner,
    minutes: 20,
    goal: "Build a pod by hand, as a container runtime does:
1. a pause process ({pause}) in NEW uts, ipc and net namespaces, whose hostname is lab-pod;
2. an app process (say `sleep infinity`) that JOINS the pause process's uts, ipc and net
   namespaces, with a mount namespace of its own, as a container has.
Leave both running; the check finds them in /proc.",
    hints: &[
        "`unshare` runs a program in new namespaces (see `unshare --help`: --uts, --ipc, --net, \
--fork). The pause process should be the one that holds them, so set the hostname first, then \
exec pause: `sh -c 'hostname lab-pod && exec PAUSE'`.",
        "`nsenter --target PID` enters the namespaces of process PID: --uts, --ipc, --net. A \
container also has its own mount namespace: run the app under `unshare --mount`. Compare with \
`ls -l /proc/PID/ns` or `podlab ns ls --pid PID`.",
        "unshare --uts --ipc --net --fork -- sh -c 'hostname lab-pod && exec {pause}' &\n\
PAUSE=$(pgrep -n podlab-pause)\n\
nsenter --target $PAUSE --uts --ipc --net -- unshare --mount -- sleep infinity &",
    ],
    not_yet: "no pause process",
    mistake_story: "the app joins only the pause process's network namespace (`nsenter -n`), \
so it has the pod's network but the host's hostname and IPC",
    scene,
    check,
    solve,
    mistake,
    reset,
};

fn scene(env: &Env) -> Result<()> {
    env.say(format!(
        "Nothing runs yet. The pause binary is {}; `unshare`, `nsenter` and `hostname` are \
util-linux's.",
        env.pause_binary()?.display()
    ));
    env.say("Your namespaces now (compare them later with the pause process's):");
    env.run("ls", &["-l", "/proc/self/ns"])?;
    Ok(())
}

/// The pause process of the hand-made pod: a process named *pause* in a uts namespace not the
/// host's whose hostname is lab-pod.
fn find_pause() -> (Option<Proc>, Vec<String>) {
    let host_uts = procs::host_ns(NsKind::Uts);
    let mut others = Vec::new();
    for p in procs::all() {
        if p.is_zombie() || !p.name.contains("pause") || p.ns(NsKind::Uts) == Some(host_uts) {
            continue;
        }
        match procs::uts_names(p.pid) {
            Ok((hostname, _)) if hostname == HOSTNAME => return (Some(p), others),
            Ok((hostname, _)) => {
                others.push(format!("pause pid {} has hostname {hostname:?}", p.pid))
            }
            Err(_) => {}
        }
    }
    (None, others)
}

fn check(_env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let host = |k| procs::host_ns(k);
    let (pause, others) = find_pause();
    let Some(pause) = pause else {
        let mut words =
            format!("no pause process runs in a uts namespace of its own with hostname {HOSTNAME}");
        if !others.is_empty() {
            words.push_str(&format!(" (found: {})", others.join("; ")));
        }
        verdict.missing(words);
        verdict.missing("no app process has joined a pause process's namespaces yet");
        return Ok(verdict);
    };
    verdict.met(format!(
        "pause pid {} runs in uts namespace {} (hostname {HOSTNAME}), not the host's {}",
        pause.pid,
        pause.ns(NsKind::Uts).unwrap_or(0),
        host(NsKind::Uts)
    ));
    for kind in [NsKind::Ipc, NsKind::Net] {
        let inode = pause.ns(kind).unwrap_or(0);
        verdict.part(
            inode != host(kind),
            format!("pause has its own {kind} namespace {inode}"),
            format!(
                "pause pid {} shares the host's {kind} namespace {inode}: unshare --{kind} makes a new one",
                pause.pid
            ),
        );
    }
    let shared = [NsKind::Uts, NsKind::Ipc, NsKind::Net];
    let pod_ns: Vec<Option<u64>> = shared.iter().map(|k| pause.ns(*k)).collect();
    let candidates: Vec<(Proc, Vec<bool>)> = procs::all()
        .into_iter()
        // `unshare --fork` itself is in the new namespaces too: the pause process's parent is
        // the wrapper that made them, not an app that joined them.
        .filter(|p| {
            p.pid != pause.pid && p.pid != pause.ppid && !p.is_zombie() && !p.name.contains("pause")
        })
        .map(|p| {
            let same: Vec<bool> = shared
                .iter()
                .zip(&pod_ns)
                .map(|(k, ns)| p.ns(*k) == *ns && ns.is_some())
                .collect();
            (p, same)
        })
        .filter(|(_, same)| same.iter().any(|s| *s))
        .collect();
    let joined_all = |(p, same): &&(Proc, Vec<bool>)| {
        same.iter().all(|s| *s) && p.ns(NsKind::Mnt) != Some(host(NsKind::Mnt))
    };
    let best = candidates
        .iter()
        .find(joined_all)
        .or_else(|| candidates.iter().find(|(_, same)| same.iter().all(|s| *s)));
    match best {
        Some((app, _)) => {
            verdict.met(format!(
                "app pid {} ({}) shares pause's uts, ipc and net namespaces",
                app.pid, app.name
            ));
            let mnt = app.ns(NsKind::Mnt).unwrap_or(0);
            verdict.part(
                mnt != host(NsKind::Mnt),
                format!("app has a mount namespace of its own ({mnt})"),
                format!(
                    "app pid {} shares the host's mount namespace {mnt}: a container has its own \
(run it under `unshare --mount`)",
                    app.pid
                ),
            );
        }
        None => {
            let mut words =
                "no app process shares the pause process's uts, ipc AND net namespaces".to_string();
            for (p, same) in &candidates {
                let (joined, not): (Vec<_>, Vec<_>) =
                    shared.iter().zip(same).partition(|(_, s)| **s);
                let names = |v: Vec<(&NsKind, &bool)>| {
                    v.iter()
                        .map(|(k, _)| k.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                words.push_str(&format!(
                    "\npid {} ({}) shares its {} but not its {}",
                    p.pid,
                    p.name,
                    names(joined),
                    names(not)
                ));
            }
            verdict.missing(words);
        }
    }
    Ok(verdict)
}

/// Starts the pause process as the hint says; its pid once it runs.
fn start_pause(env: &Env) -> Result<i32> {
    let pause = env.pause_binary()?.display().to_string();
    env.spawn(
        "unshare",
        &[
            "--uts",
            "--ipc",
            "--net",
            "--fork",
            "--",
            "sh",
            "-c",
            &format!("hostname {HOSTNAME} && exec {pause}"),
        ],
    )?;
    let host_uts = procs::host_ns(NsKind::Uts);
    let pid = procs::wait_for(Duration::from_secs(10), || {
        procs::tagged(&env.lab)
            .into_iter()
            .find(|p| p.name.contains("pause") && p.ns(NsKind::Uts).is_some_and(|u| u != host_uts))
    })
    .context("the pause process did not start within 10 s")?
    .pid;
    env.say(format!("(pause runs as pid {pid})"));
    Ok(pid)
}

fn join(env: &Env, pause: i32, args: &[&str]) -> Result<()> {
    let target = pause.to_string();
    let mut all = vec!["--target", target.as_str()];
    all.extend(args);
    env.spawn("nsenter", &all)?;
    procs::wait_for(Duration::from_secs(10), || {
        procs::tagged(&env.lab)
            .into_iter()
            .find(|p| p.name == "sleep")
    })
    .context("the app process did not start within 10 s")?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    let pause = start_pause(env)?;
    join(
        env,
        pause,
        &[
            "--uts", "--ipc", "--net", "--", "unshare", "--mount", "--", "sleep", "infinity",
        ],
    )
}

fn mistake(env: &Env) -> Result<()> {
    let pause = start_pause(env)?;
    join(
        env,
        pause,
        &[
            "--net", "--", "unshare", "--mount", "--", "sleep", "infinity",
        ],
    )
}

fn reset(env: &Env) -> Result<()> {
    let mut pids: Vec<i32> = procs::tagged(&env.lab).iter().map(|p| p.pid).collect();
    // What the student started by hand: every process in a lab-pod uts namespace.
    let host_uts = procs::host_ns(NsKind::Uts);
    for p in procs::all() {
        if p.is_zombie() || pids.contains(&p.pid) || p.ns(NsKind::Uts) == Some(host_uts) {
            continue;
        }
        if procs::uts_names(p.pid).is_ok_and(|(h, _)| h == HOSTNAME) {
            pids.push(p.pid);
        }
    }
    if !pids.is_empty() {
        env.say(format!("killing the lab's processes: {pids:?}"));
    }
    procs::kill_all(&pids);
    Ok(())
}
