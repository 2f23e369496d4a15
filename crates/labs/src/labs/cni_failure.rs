//! Lab 10, a CNI failure: the scene breaks podlab's conflist (a plugin type misspelt), so CNI
//! ADD fails inside RunPodSandbox. Kubelet records `FailedCreatePodSandBox`, the pod stays in
//! ContainerCreating, and the pod worker retries on the same node until it works: the student
//! reads the events, fixes the file, and the next retry gives the pod its address. The check
//! reads the pod's IP and events, and `eth0` in the pause process's network namespace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use podlab_ns::net::Netlink;
use podlab_ns::NsKind;

use crate::env::Env;
use crate::kit::pods;
use crate::{Lab, Level, Verdict};

const POD: &str = "cni-lab";
const BACKUP: &str = "conflist.before-lab";
const GOOD: &str = "\"type\": \"bridge\"";
const BROKEN: &str = "\"type\": \"brigde\"";

pub static LAB: Lab = Lab {
    number: 10,
    name: "cni-failure",
    title: "A CNI failure: read the events, fix the conflist",
    level: Level::Intermediate,
    minutes: 15,
    goal: "Pod cni-lab is stuck in ContainerCreating: its sandbox cannot get a network.
Find out why from what kubelet recorded, fix the cause in podlab's CNI configuration (the
conflist the scene printed), and let kubelet's retries do the rest: the pod must run with an
IP address on its eth0. Do not delete the pod: kubelet retries on the same node by itself.",
    hints: &[
        "`podlab describe pod cni-lab` and `podlab get events` show FailedCreatePodSandBox with \
the plugin's own error message. Which plugin does it say it cannot find?",
        "The conflist is JSON: a list of plugins, each with a `type`, the name of a binary in \
/usr/lib/cni (`ls /usr/lib/cni`). Fix the misspelt type; kubelet retries with a back-off.",
        "sed -i 's/\"brigde\"/\"bridge\"/' CONFLIST     # the path `podlab lab start 10` printed\n\
podlab get pods -w",
    ],
    not_yet: "pod cni-lab has no IP",
    mistake_story: "fixing a copy of the conflist (in the lab's folder) instead of the file \
podlab reads: kubelet keeps failing",
    scene,
    check,
    solve,
    mistake,
    reset,
};

const MANIFEST: &str = "apiVersion: v1
kind: Pod
metadata:
  name: cni-lab
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]
";

/// podlab's network folder for this network namespace (as `podlab`'s network glue computes it).
fn net_root() -> Result<PathBuf> {
    let inode = podlab_ns::ops::self_inode(NsKind::Net)?;
    Ok(PathBuf::from("/run/podlab-net").join(inode.to_string()))
}

fn conflist() -> Result<PathBuf> {
    Ok(net_root()?
        .join("cni/net.d")
        .join(podlab_cni::podlab_net::DEFAULT_CONFLIST_FILE))
}

fn refuse_other_networks() -> Result<()> {
    match std::env::var("PODLAB_NETWORK").as_deref() {
        Ok("none") | Ok("builtin") => bail!(
            "lab 10 breaks podlab's CNI conflist, but PODLAB_NETWORK says pods use no CNI here: \
unset it"
        ),
        _ => {}
    }
    if std::env::var_os("PODLAB_CNI_CONF_DIR").is_some_and(|d| !d.is_empty()) {
        bail!("lab 10 breaks podlab's own conflist; PODLAB_CNI_CONF_DIR points at yours: unset it");
    }
    Ok(())
}

fn scene(env: &Env) -> Result<()> {
    refuse_other_networks()?;
    let path = conflist()?;
    let good = match std::fs::read_to_string(&path) {
        Ok(text) => {
            env.write(BACKUP, &text)?;
            text
        }
        Err(_) => podlab_cni::PodlabNet::podlab(&net_root()?).conflist_text(),
    };
    if !good.contains(GOOD) {
        bail!(
            "{} has no bridge plugin to break: is it podlab's?",
            path.display()
        );
    }
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
    std::fs::write(&path, good.replace(GOOD, BROKEN))
        .with_context(|| format!("writing {}", path.display()))?;
    env.say(format!(
        "podlab's conflist for this network namespace: {}",
        path.display()
    ));
    env.apply("cni-lab.yaml", MANIFEST)?;
    pods::wait(env, POD, "failing", Duration::from_secs(60), |p| {
        pods::has_event(env, p, "FailedCreatePodSandBox").unwrap_or(false)
    })?;
    env.podlab(&["get", "pods", POD])?;
    Ok(())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(pod) = pods::get(env, POD)? else {
        verdict.missing(format!("there is no pod {POD}"));
        return Ok(verdict);
    };
    verdict.part(
        pods::has_event(env, &pod, "FailedCreatePodSandBox")?,
        "kubelet recorded FailedCreatePodSandBox while the conflist was broken",
        "this pod never failed to get a sandbox: was it re-made after the fix? Keep the pod, \
kubelet retries by itself",
    );
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
    let Some(ip) = ip.filter(|_| pods::all_running(&pod)) else {
        verdict.missing(format!(
            "pod {POD} has no IP and does not run: see `podlab describe pod {POD}`"
        ));
        return Ok(verdict);
    };
    verdict.met(format!("pod {POD} runs with IP {ip}"));
    let pause = pods::pause_pid(env, &pod)?.context("the pod has no pause process")?;
    let mut netlink = Netlink::open_path(&podlab_ns::ops::ns_path(pause, NsKind::Net))?;
    let on_eth0 = netlink
        .addresses()?
        .iter()
        .any(|a| a.ifname == "eth0" && a.addr.to_string() == ip);
    verdict.part(
        on_eth0,
        format!("eth0 in the pod's network namespace has {ip}"),
        format!("the pod's eth0 does not have {ip}"),
    );
    Ok(verdict)
}

fn solve(env: &Env) -> Result<()> {
    let path = conflist()?.display().to_string();
    env.run("sed", &["-i", "s/\"brigde\"/\"bridge\"/", &path])?;
    pods::wait(
        env,
        POD,
        "running with an IP",
        Duration::from_secs(90),
        |p| pods::all_running(p) && p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some(),
    )?;
    env.podlab(&["get", "pods", POD, "-o", "wide"])?;
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    let path = conflist()?.display().to_string();
    let copy = env.file("10-podlab.conflist").display().to_string();
    env.run("cp", &[&path, &copy])?;
    env.run("sed", &["-i", "s/\"brigde\"/\"bridge\"/", &copy])?;
    Ok(())
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])?;
    let path = conflist()?;
    let folder_left = path.parent().is_some_and(Path::exists);
    match std::fs::read_to_string(env.file(BACKUP)) {
        // Put back what was there, unless the last pod's detach removed the network's folder.
        Ok(before) if folder_left => std::fs::write(&path, before)?,
        Ok(_) => {}
        // podlab writes its default again into an empty folder.
        Err(_) if std::fs::read_to_string(&path).is_ok_and(|t| t.contains(BROKEN)) => {
            std::fs::remove_file(&path)?
        }
        Err(_) => {}
    }
    Ok(())
}
