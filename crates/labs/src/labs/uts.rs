//! Lab 2, hostname and domainname: the uts namespace is the pod's, held by pause and shared by
//! its containers. The hostname comes from the pod (`spec.hostname`, else its name); the NIS
//! domainname (`setdomainname(2)`, not DNS) is nothing Kubernetes sets, so the student sets it
//! from the host with `nsenter` into the pause process, and both containers see it. The check
//! reads both names inside each container's uts namespace and the host's own.

use anyhow::Result;
use podlab_ns::NsKind;

use crate::env::Env;
use crate::kit::{pods, procs};
use crate::{Lab, Level, Verdict};

const POD: &str = "uts-lab";
const HOSTNAME: &str = "frontend";
const DOMAIN: &str = "lab.example";
const CONTAINERS: [&str; 2] = ["web", "sidecar"];

pub static LAB: Lab = Lab {
    number: 2,
    name: "uts",
    title: "Hostname and domainname in the uts namespace",
    level: Level::Beginner,
    minutes: 15,
    goal: "Pod uts-lab runs two containers, web and sidecar, in one uts namespace.
1. Give the pod the hostname frontend, the Kubernetes way (its manifest is {work}/uts-lab.yaml).
2. Give the pod's uts namespace the NIS domainname lab.example, from the host, without
   changing the host's own hostname or domainname. Both containers must see both names.",
    hints: &[
        "A pod's hostname is its name unless `spec.hostname` says otherwise. A pod's spec cannot \
be changed once it runs: delete it, edit the manifest, apply it again.",
        "The containers cannot call sethostname/setdomainname (no CAP_SYS_ADMIN), but root on the \
host can enter the pod's uts namespace: the pause process holds it. Find pause with `podlab ns \
ls -t uts` or `ps -C podlab-pause`, then `nsenter --target PID --uts ...`.",
        "podlab delete pod uts-lab\n\
(add `hostname: frontend` under spec: in {work}/uts-lab.yaml)\n\
podlab apply -f {work}/uts-lab.yaml\n\
nsenter --target $(pgrep -n podlab-pause) --uts domainname lab.example\n\
podlab exec uts-lab -c sidecar -- sh -c 'hostname; cat /proc/sys/kernel/domainname'",
    ],
    not_yet: "hostname is uts-lab",
    mistake_story: "setting the names in a uts namespace of your own (`unshare --uts`) instead \
of the pod's: they vanish with it",
    scene,
    check,
    solve,
    mistake,
    reset,
};

fn manifest(hostname: Option<&str>) -> String {
    let hostname = hostname.map_or(String::new(), |h| format!("  hostname: {h}\n"));
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {POD}
spec:
{hostname}  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]
  - name: sidecar
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]
"
    )
}

fn scene(env: &Env) -> Result<()> {
    env.apply("uts-lab.yaml", &manifest(None))?;
    pods::wait_running(env, POD)?;
    env.podlab(&["exec", POD, "-c", "web", "--", "hostname"])?;
    Ok(())
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let Some(pod) = pods::get(env, POD)?.filter(pods::all_running) else {
        verdict.missing(format!(
            "pod {POD} does not run (apply {}/uts-lab.yaml and wait for Running)",
            env.work.display()
        ));
        return Ok(verdict);
    };
    let spec_hostname = pod.spec.as_ref().and_then(|s| s.hostname.clone());
    verdict.part(
        spec_hostname.as_deref() == Some(HOSTNAME),
        format!("the pod's spec.hostname is {HOSTNAME}"),
        format!(
            "the pod's spec.hostname is {}, not {HOSTNAME}",
            spec_hostname.as_deref().unwrap_or("unset")
        ),
    );
    let mut names = Vec::new();
    for container in CONTAINERS {
        let Some(pid) = pods::container_pid(env, &pod, container)? else {
            verdict.missing(format!("container {container} has no running process"));
            return Ok(verdict);
        };
        names.push((container, pid, procs::uts_names(pid)?));
    }
    for (container, pid, (hostname, domain)) in &names {
        let uts = procs::read(*pid)
            .and_then(|p| p.ns(NsKind::Uts))
            .unwrap_or(0);
        verdict.part(
            hostname == HOSTNAME,
            format!("{container} (pid {pid}, uts {uts}) has hostname {HOSTNAME}"),
            format!("{container}'s hostname is {hostname}, not {HOSTNAME}"),
        );
        verdict.part(
            domain == DOMAIN,
            format!("{container} has domainname {DOMAIN}"),
            format!("{container}'s domainname is {domain}, not {DOMAIN}"),
        );
    }
    let host_hostname = podlab_ns::uts::hostname()?;
    let host_domain = podlab_ns::uts::domainname()?;
    verdict.part(
        host_hostname != HOSTNAME && host_domain != DOMAIN,
        format!("the host kept its own names ({host_hostname}, {host_domain})"),
        format!(
            "the HOST's names changed ({host_hostname}, {host_domain}): set them back; only the \
pod's uts namespace should change"
        ),
    );
    Ok(verdict)
}

fn solve(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])?;
    env.say("(spec.hostname: frontend added to the manifest)");
    env.apply("uts-lab.yaml", &manifest(Some(HOSTNAME)))?;
    let pod = pods::wait_running(env, POD)?;
    let pause = pods::pause_pid(env, &pod)?.ok_or_else(|| anyhow::anyhow!("no pause process"))?;
    env.run(
        "nsenter",
        &[
            "--target",
            &pause.to_string(),
            "--uts",
            "domainname",
            DOMAIN,
        ],
    )?;
    Ok(())
}

fn mistake(env: &Env) -> Result<()> {
    env.run(
        "unshare",
        &[
            "--uts",
            "sh",
            "-c",
            &format!("hostname {HOSTNAME} && domainname {DOMAIN} && hostname && domainname"),
        ],
    )?;
    Ok(())
}

fn reset(env: &Env) -> Result<()> {
    pods::delete(env, &[POD])
}
