//! Lab 14, docker vs containerd: "docker is the car, containerd the engine". The scene starts
//! real, private containerd and dockerd (podlab-layers' lab: their own network and mount
//! namespaces, nothing on the host's network) and runs one container with `docker run`. The
//! student finds, in the host's real process tree, the containerd-shim-runc-v2 that holds it
//! and the container's process: neither is a child of dockerd or containerd. The check reads
//! `/proc` (parents, names, the shim's `-id`) and the answer file.
//!
//! The daemons must outlive `podlab lab start`, so a holder process (`podlab lab
//! hold-daemons`, hidden) keeps podlab-layers' lab alive until it gets SIGTERM, then tears it
//! down (containers, daemons, mounts, folder).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::unistd::Pid;
use podlab_layers::engines::containerd::Containerd;
use podlab_layers::engines::dockerd::Dockerd;
use podlab_layers::lab::{run_text, Lab as PeersLab};
use serde::{Deserialize, Serialize};

use crate::env::Env;
use crate::kit::procs;
use crate::{Lab, Level, Verdict};

const CONTAINER: &str = "lab-web";
const STATE: &str = "daemons.json";
const ANSWER: &str = "answer.txt";

pub static LAB: Lab = Lab {
    number: 14,
    name: "docker-containerd",
    title: "docker vs containerd: find the shim and the container in the real process tree",
    level: Level::Advanced,
    minutes: 20,
    goal: "Private dockerd and containerd run (in namespaces of their own), and `docker run`
started container lab-web ({work}/docker is docker for them). In the host's process tree, find
the containerd-shim-runc-v2 that holds lab-web, and lab-web's own process (its `sleep`).
Write into {work}/answer.txt:
  shim: PID
  container: PID",
    hints: &[
        "`ps -eo pid,ppid,comm,args --forest` (or `podlab ns ls`) shows the tree. Is the \
container a child of dockerd? Of containerd? dockerd asks containerd, which starts a shim per \
container; the shim runs runc, which starts the container and exits.",
        "`{work}/docker inspect -f '{{.State.Pid}}' lab-web` gives the container's pid as \
docker knows it; `/proc/PID/status` (PPid) its parent; the shim's command line has \
`-namespace moby -id <container id>`.",
        "PID=$({work}/docker inspect -f '{{.State.Pid}}' lab-web)\n\
SHIM=$(awk '/^PPid/ {print $2}' /proc/$PID/status)\n\
printf 'shim: %s\\ncontainer: %s\\n' $SHIM $PID > {work}/answer.txt",
    ],
    not_yet: "answer.txt has no `shim: PID` line",
    mistake_story: "answering dockerd's pid for the shim: docker is the car, but the container \
is not its child",
    scene,
    check,
    solve,
    mistake,
    reset,
};

/// What the holder tells the lab: pids and the docker command for the student.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Daemons {
    holder: i32,
    dockerd: i32,
    containerd: i32,
    container_id: String,
    container_pid: i32,
}

fn scene(env: &Env) -> Result<()> {
    let missing = podlab_layers::tools::missing(podlab_layers::tools::DEMO_TOOLS);
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|t| t.binary).collect();
        bail!(
            "lab 14 needs the real docker and containerd, and {} is missing: {}",
            names.join(", "),
            podlab_layers::tools::install_line(&missing)
        );
    }
    let exe = env.podlab_binary()?.display().to_string();
    env.say("Starting private containerd and dockerd and `docker run -d --name lab-web busybox sleep` (a minute)...");
    let log = env.file("holder.log");
    env.spawn_logged(
        &exe,
        &[
            "lab",
            "hold-daemons",
            "--work",
            &env.work.display().to_string(),
        ],
        Some(&log),
    )?;
    let state = procs::wait_for(Duration::from_secs(180), || {
        std::fs::read(env.file(STATE))
            .ok()
            .and_then(|b| serde_json::from_slice::<Daemons>(&b).ok())
    })
    .context(
        "the daemons did not come up within 3 minutes (see the holder's log in the lab folder)",
    )?;
    env.say(format!(
        "containerd pid {}, dockerd pid {}; docker for them: {}",
        state.containerd,
        state.dockerd,
        env.file("docker").display()
    ));
    Ok(())
}

fn read_state(env: &Env) -> Result<Option<Daemons>> {
    match std::fs::read(env.file(STATE)) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
        Err(_) => Ok(None),
    }
}

fn answer_line(text: &str, key: &str) -> Option<i32> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .and_then(|v| v.trim().parse().ok())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(state) = read_state(env)? else {
        verdict.missing("the daemons do not run (`podlab lab start 14`)");
        return Ok(verdict);
    };
    let container = procs::read(state.container_pid).filter(|p| !p.is_zombie());
    let Some(container) = container else {
        verdict.missing("lab-web's process is gone (`podlab lab start 14` again)");
        return Ok(verdict);
    };
    let shim = procs::read(container.ppid);
    let text = std::fs::read_to_string(env.file(ANSWER)).unwrap_or_default();
    let name = |pid: i32| procs::read(pid).map_or("gone".into(), |p| p.name);
    match answer_line(&text, "shim") {
        None => verdict.missing("answer.txt has no `shim: PID` line"),
        Some(pid) if Some(pid) == shim.as_ref().map(|s| s.pid) => {
            let args = procs::cmdline(pid);
            verdict.met(format!("shim {pid} ({}) holds lab-web: {args}", name(pid)))
        }
        Some(pid) if pid == state.dockerd || pid == state.containerd => verdict.missing(format!(
            "{pid} is {}: the container is not a daemon's child; the daemons could restart \
without killing it",
            name(pid)
        )),
        Some(pid) => verdict.missing(format!("{pid} ({}) is not lab-web's shim", name(pid))),
    }
    match answer_line(&text, "container") {
        None => verdict.missing("answer.txt has no `container: PID` line"),
        Some(pid) if pid == container.pid => verdict.met(format!(
            "container {pid} ({}) is lab-web's process",
            container.name
        )),
        Some(pid) => verdict.missing(format!("{pid} ({}) is not lab-web's process", name(pid))),
    }
    Ok(verdict)
}

fn write_answer(env: &Env, shim: i32, container: i32) -> Result<()> {
    let path = env.write(ANSWER, &format!("shim: {shim}\ncontainer: {container}\n"))?;
    env.run("cat", &[&path.display().to_string()])?;
    Ok(())
}

fn solve(env: &Env) -> Result<()> {
    let state = read_state(env)?.context("the daemons do not run")?;
    let docker = env.file("docker").display().to_string();
    let pid: i32 = env
        .run(&docker, &["inspect", "-f", "{{.State.Pid}}", CONTAINER])?
        .trim()
        .parse()
        .context("docker inspect's pid")?;
    let shim = procs::read(pid).context("lab-web's process is gone")?.ppid;
    env.run("grep", &["PPid", &format!("/proc/{pid}/status")])?;
    env.say(format!(
        "(pid {}'s parent, {shim}, is {})",
        state.container_pid,
        procs::cmdline(shim)
    ));
    write_answer(env, shim, pid)
}

fn mistake(env: &Env) -> Result<()> {
    let state = read_state(env)?.context("the daemons do not run")?;
    write_answer(env, state.dockerd, state.container_pid)
}

fn reset(env: &Env) -> Result<()> {
    // The holder tears its lab down on SIGTERM (containers, daemons, mounts); whatever of the
    // lab is left after it is killed.
    let holders: Vec<i32> = procs::tagged(&env.lab)
        .into_iter()
        .filter(|p| procs::cmdline(p.pid).contains("hold-daemons"))
        .map(|p| p.pid)
        .collect();
    for pid in &holders {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGTERM);
    }
    if !procs::wait_gone(&holders, Duration::from_secs(60)) {
        env.say("the holder did not stop within 60 s: killing it");
    }
    procs::kill_tagged(&env.lab);
    Ok(())
}

/// `podlab lab hold-daemons --work DIR`: starts the daemons and the container, writes
/// `daemons.json` and the `docker` wrapper into DIR, and holds them until SIGTERM or SIGINT.
pub fn hold(work: &Path) -> Result<()> {
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    // Blocked before any daemon starts, so that a stop request waits in sigwait below.
    signals.thread_block()?;
    let mut lab = PeersLab::new()?;
    let outcome = hold_in(&mut lab, work, &signals);
    let torn = lab.teardown();
    let _ = std::fs::remove_file(work.join(STATE));
    outcome?;
    torn?;
    Ok(())
}

fn hold_in(lab: &mut PeersLab, work: &Path, signals: &SigSet) -> Result<()> {
    let built = podlab_layers::image::build(&lab.subdir("image")?)?;
    let containerd = Containerd::start(lab)?;
    let dockerd = Dockerd::start(lab, &containerd)?;
    dockerd.import(lab, &built.tar)?;
    let id = run_text(
        dockerd
            .docker(lab)
            .args(["run", "-d", "--name", CONTAINER, "--network", "none"])
            .arg(podlab_layers::image::Busybox::reference())
            .args(["sleep", "100000"]),
    )?;
    let pid: i32 = run_text(
        dockerd
            .docker(lab)
            .args(["inspect", "-f", "{{.State.Pid}}", &id]),
    )?
    .trim()
    .parse()
    .context("docker inspect's pid")?;
    let holder = lab.holder_pid().context("the lab has no holder")?;
    let docker = work.join("docker");
    std::fs::write(
        &docker,
        format!(
            "#!/bin/sh\n# docker for lab 14's private dockerd: its socket is in the lab's mount namespace\n\
             exec nsenter --target {holder} --net --mount -- docker --host unix://{} \"$@\"\n",
            dockerd.socket.display()
        ),
    )?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&docker, std::fs::Permissions::from_mode(0o755))?;
    let state = Daemons {
        holder: std::process::id() as i32,
        dockerd: dockerd.pid,
        containerd: containerd.pid,
        container_id: id,
        container_pid: pid,
    };
    let tmp = work.join("daemons.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&state)?)?;
    std::fs::rename(&tmp, work.join(STATE))?;
    signals.wait()?;
    Ok(())
}
