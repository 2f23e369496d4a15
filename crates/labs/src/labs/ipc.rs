//! Lab 3, IPC across containers, not across pods: the ipc namespace holds System V message
//! queues, semaphore sets and shared memory, and POSIX message queues. A pod's containers share
//! the pause process's, another pod has its own. The check reads `/proc/sysvipc/*` and opens
//! the POSIX queue from children that joined each container's ipc namespace.

use std::os::fd::AsFd;

use anyhow::{Context, Result};
use podlab_ns::ipc::{SysvKind, SysvObject};
use podlab_ns::{ops, NsKind};

use crate::env::Env;
use crate::kit::pods;
use crate::{Lab, Level, Verdict};

const POD_A: &str = "ipc-a";
const POD_B: &str = "ipc-b";
const QUEUE: &str = "/lab";

pub static LAB: Lab = Lab {
    number: 3,
    name: "ipc",
    title: "SysV and POSIX IPC: shared in a pod, not across pods",
    level: Level::Beginner,
    minutes: 15,
    goal: "Pod ipc-a runs containers writer and reader; pod ipc-b runs container other.
Make, in pod ipc-a's IPC namespace, a System V message queue, a semaphore set, a shared memory
segment, and a POSIX message queue named /lab, so that writer AND reader see all four, and
pod ipc-b sees none of them. (busybox has no ipcmk: use the host's, in the pod's namespace.)",
    hints: &[
        "The ipc namespace is the pod's: pause holds it, writer and reader joined it. Compare \
`podlab ns ls -t ipc` with the pods. Whatever you make in it is seen by both containers.",
        "`nsenter --target PID --ipc ipcmk -Q` makes a message queue in the ipc namespace of \
process PID (-S 1 a semaphore set, -M 4096 shared memory). A POSIX queue is a file in an \
mqueue filesystem, which shows the queues of the ipc namespace of whoever mounted it: mount \
one in a private mount namespace and `touch` a file there.",
        "PAUSE_OF_IPC_A=<pid of ipc-a's pause process: `podlab ns ls -t ipc` lists each namespace with its processes>\n\
nsenter --target PAUSE_OF_IPC_A --ipc ipcmk -Q\n\
nsenter --target PAUSE_OF_IPC_A --ipc ipcmk -S 1\n\
nsenter --target PAUSE_OF_IPC_A --ipc ipcmk -M 4096\n\
nsenter --target PAUSE_OF_IPC_A --ipc unshare --mount sh -c 'mount -t mqueue mqueue /mnt && touch /mnt/lab'",
    ],
    not_yet: "does not see: a System V message queue",
    mistake_story: "making the objects from the other pod's container (ipc-b): IPC is per pod, \
so ipc-a does not see them",
    scene,
    check,
    solve,
    mistake,
    reset,
};

const MANIFEST: &str = "apiVersion: v1
kind: Pod
metadata:
  name: ipc-a
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: writer
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]
  - name: reader
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]
---
apiVersion: v1
kind: Pod
metadata:
  name: ipc-b
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: other
    image: busybox
    command: [sh, -c, \"trap 'exit 0' TERM; sleep 100000 & wait\"]
";

fn scene(env: &Env) -> Result<()> {
    env.apply("ipc-pods.yaml", MANIFEST)?;
    pods::wait_running(env, POD_A)?;
    pods::wait_running(env, POD_B)?;
    Ok(())
}

/// What one ipc namespace holds: its System V objects and whether it has the POSIX queue.
fn ipc_view(pid: i32) -> Result<(u64, Vec<SysvObject>, bool)> {
    let inode = ops::ns_inode(pid, NsKind::Ipc)?;
    let fd = ops::open_pid(pid, NsKind::Ipc)?;
    let (objects, queue) = podlab_ns::child::run_in_child(move || {
        ops::join(fd.as_fd(), NsKind::Ipc)?;
        Ok((
            podlab_ns::ipc::list_sysv()?,
            podlab_ns::ipc::posix_mqueue_exists(QUEUE)?,
        ))
    })?;
    Ok((inode, objects, queue))
}

fn describe(objects: &[SysvObject], queue: bool) -> String {
    let mut parts: Vec<String> = SysvKind::ALL
        .iter()
        .map(|k| (k, objects.iter().filter(|o| o.kind == *k).count()))
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{n} {}", k.name()))
        .collect();
    if queue {
        parts.push(format!("POSIX queue {QUEUE}"));
    }
    if parts.is_empty() {
        "nothing".into()
    } else {
        parts.join(", ")
    }
}

fn check(env: &Env) -> Result<Verdict> {
    let mut verdict = Verdict::new();
    let mut pids = Vec::new();
    for (pod, container) in [(POD_A, "writer"), (POD_A, "reader"), (POD_B, "other")] {
        let pid = match pods::get(env, pod)? {
            Some(p) => pods::container_pid(env, &p, container)?,
            None => None,
        };
        let Some(pid) = pid else {
            verdict.missing(format!(
                "container {container} of pod {pod} does not run (`podlab lab start 3` sets the scene again)"
            ));
            return Ok(verdict);
        };
        pids.push((container, pid));
    }
    let views: Vec<_> = pids
        .iter()
        .map(|(c, pid)| ipc_view(*pid).map(|v| (*c, v)))
        .collect::<Result<_>>()?;
    for (container, (inode, objects, queue)) in &views[..2] {
        let mut lacking: Vec<String> = SysvKind::ALL
            .iter()
            .filter(|k| !objects.iter().any(|o| o.kind == **k))
            .map(|k| format!("a System V {}", k.name()))
            .collect();
        if !queue {
            lacking.push(format!("the POSIX message queue {QUEUE}"));
        }
        verdict.part(
            lacking.is_empty(),
            format!(
                "{container} (ipc {inode}) sees all four: {}",
                describe(objects, *queue)
            ),
            format!(
                "in pod ipc-a, {container} (ipc {inode}) does not see: {}",
                lacking.join(", ")
            ),
        );
    }
    let (_, (inode_b, objects_b, queue_b)) = &views[2];
    verdict.part(
        objects_b.is_empty() && !queue_b,
        format!("pod ipc-b (ipc {inode_b}) sees none of them"),
        format!(
            "pod ipc-b (ipc {inode_b}) sees {}: its IPC namespace should stay empty",
            describe(objects_b, *queue_b)
        ),
    );
    Ok(verdict)
}

/// Makes the four objects in the ipc namespace of process `pid`, as the hint says.
fn make_objects(env: &Env, pid: i32) -> Result<()> {
    let target = pid.to_string();
    for args in [["-Q", ""], ["-S", "1"], ["-M", "4096"]] {
        let mut all = vec!["--target", &target, "--ipc", "ipcmk", args[0]];
        if !args[1].is_empty() {
            all.push(args[1]);
        }
        env.run("nsenter", &all)?;
    }
    env.run(
        "nsenter",
        &[
            "--target",
            &target,
            "--ipc",
            "unshare",
            "--mount",
            "sh",
            "-c",
            "mount -t mqueue mqueue /mnt && touch /mnt/lab && ls -l /mnt",
        ],
    )?;
    Ok(())
}

fn pause_of(env: &Env, pod: &str) -> Result<i32> {
    let pod = pods::get(env, pod)?.with_context(|| format!("pod {pod} is gone"))?;
    pods::pause_pid(env, &pod)?.context("the pod has no pause process")
}

fn solve(env: &Env) -> Result<()> {
    let pause = pause_of(env, POD_A)?;
    env.say(format!("(pod ipc-a's pause process is pid {pause})"));
    make_objects(env, pause)
}

fn mistake(env: &Env) -> Result<()> {
    let pod = pods::get(env, POD_B)?.context("pod ipc-b is gone")?;
    let other = pods::container_pid(env, &pod, "other")?.context("ipc-b's container")?;
    env.say(format!("(container other of pod ipc-b is pid {other})"));
    make_objects(env, other)
}

fn reset(env: &Env) -> Result<()> {
    // The objects go with the pods' ipc namespaces.
    pods::delete(env, &[POD_A, POD_B])
}
