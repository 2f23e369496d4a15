//! `podlab demo isolation`: the escapes of issue 14, tried from inside a default busybox pod as
//! an attacker would, each shown blocked and by what: a read-only mount, a masked path, a
//! `/dev` without the host's devices, the device cgroup, a missing capability, the seccomp
//! filter. The evidence is the kernel's: the errno each attempt gets, the mount flags in the
//! container's mountinfo, `CapEff`, `Seccomp` and `NoNewPrivs` in its status.
//!
//! No attempt ever changes a host value, even where a protection is missing: a write is probed
//! by opening the file for appending and writing nothing, a device node made in the
//! container's own `/dev` tmpfs is opened and closed, and a mount is tried on the container's
//! own folder. An attempt that works is a failed claim: the demo then exits non-zero.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use podlab_runtime::{ContainerId, Runtime};

use super::lab::{container, Lab};
use super::{say, Evidence};

const MANIFEST: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: attacker}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: shell, image: busybox, command: [sleep, "1000"]}
"#;

const LIMIT: Duration = Duration::from_secs(30);

/// What a blocked attempt looks like.
enum Blocked {
    /// It fails, and its error says this.
    Refused(&'static str),
    /// It "works" but shows nothing (a masked file reads empty, a masked folder lists empty).
    ShowsNothing,
}

/// One escape: what it is, the shell line that tries it inside, how its failure looks, and
/// what stops it.
struct Escape {
    what: &'static str,
    script: &'static str,
    blocked: Blocked,
    held_by: &'static str,
}

const ESCAPES: &[Escape] = &[
    Escape {
        what: "rewrite the host's kernel.core_pattern (root on the host at the next crash)",
        script: ": >> /proc/sys/kernel/core_pattern",
        blocked: Blocked::Refused("Read-only file system"),
        held_by: "read-only mount: /proc/sys bound over itself read-only (runc's readonlyPaths)",
    },
    Escape {
        what: "change which CPUs take the host's interrupts",
        script: ": >> /proc/irq/default_smp_affinity",
        blocked: Blocked::Refused("Read-only file system"),
        held_by: "read-only mount: /proc/irq",
    },
    Escape {
        what: "read the host's keyrings and kernel timers",
        script: "cat /proc/keys /proc/timer_list",
        blocked: Blocked::ShowsNothing,
        held_by: "masked paths: /dev/null bound over each file",
    },
    Escape {
        what: "look at the host's firmware tables",
        script: "ls -A /sys/firmware",
        blocked: Blocked::ShowsNothing,
        held_by: "masked path: an empty read-only tmpfs over /sys/firmware",
    },
    Escape {
        what: "open the host's kernel log for writing",
        script: "ls /dev/kmsg",
        blocked: Blocked::Refused("No such file or directory"),
        held_by: "/dev: a tmpfs with only null, zero, full, random, urandom, tty",
    },
    Escape {
        what: "make the kernel log's device node (c 1 11) and open it for writing",
        script: "mknod /dev/kmsg-x c 1 11 && : >> /dev/kmsg-x; status=$?; rm -f /dev/kmsg-x; exit $status",
        blocked: Blocked::Refused("Operation not permitted"),
        held_by: "device cgroup: only the default devices may be made or opened",
    },
    Escape {
        what: "mount a filesystem (the way to undo every mount above)",
        script: "mount -t tmpfs none /mnt",
        // busybox's words for the EPERM.
        blocked: Blocked::Refused("permission denied"),
        held_by: "seccomp: mount is not in the profile (and no CAP_SYS_ADMIN either)",
    },
    Escape {
        what: "make a user namespace (root with every capability inside it)",
        script: "unshare -U true",
        blocked: Blocked::Refused("Operation not permitted"),
        held_by: "seccomp: unshare needs CAP_SYS_ADMIN in containerd's profile; no capability would",
    },
];

pub fn run(evidence: &mut Evidence) -> Result<()> {
    let lab = Lab::open("isolation", &[("PODLAB_NETWORK", "none")])?;
    say("A default pod, as an attacker would see it from a shell inside. Each attempt below is");
    say("an escape a container without runc's hardening allows; each must fail, and the demo");
    say("shows what stopped it. No attempt changes anything outside the container.");
    say("\n$ podlab apply -f attacker.yaml");
    let names = lab.apply(MANIFEST, "attacker.yaml")?;
    let outcome = attempts(&lab, evidence);
    if super::keep() {
        return outcome;
    }
    say("\n$ podlab delete pod attacker");
    let deleted = lab.delete(&names);
    outcome?;
    deleted
}

fn running(pod: &Pod) -> bool {
    container(pod, "shell")
        .and_then(|s| s.state)
        .is_some_and(|s| s.running.is_some())
}

fn attempts(lab: &Lab, evidence: &mut Evidence) -> Result<()> {
    let pod = lab.wait_for("attacker", "running", LIMIT, running)?;
    let runtime = lab.ctx.runtime()?;
    let id = super::kit::container_id(&pod, "shell")?;
    let pid = runtime
        .container_status(&id)?
        .pid
        .context("the container's pid")?;

    say("\nWho the attacker is (/proc/PID/status of the container's process, read on the host):");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    for name in ["Uid", "CapEff", "CapBnd", "Seccomp", "NoNewPrivs"] {
        say(format!("  {name:<11} {}", field(name)));
    }
    evidence.compare(
        "root inside, with containerd's 14 capabilities only",
        field("CapEff"),
        "00000000a80425fb".to_string(),
        true,
    );
    evidence.compare(
        "the seccomp filter is on (mode 2)",
        field("Seccomp"),
        "2".to_string(),
        true,
    );

    say("\nThe mounts that hold (/proc/PID/mountinfo):");
    for (point, want) in [("/proc/sys", "ro"), ("/proc/irq", "ro"), ("/sys", "ro")] {
        let options = mount_options(pid, point).unwrap_or_else(|| "not a mount".into());
        say(format!("  {point:<18} {options}"));
        evidence.check(
            format!("{point} is mounted read-only"),
            options.split(',').any(|o| o == want),
            options,
        );
    }

    say("\nThe attempts:");
    for escape in ESCAPES {
        try_escape(&runtime, &id, escape, evidence)?;
    }
    Ok(())
}

fn try_escape(
    runtime: &Runtime,
    id: &ContainerId,
    escape: &Escape,
    evidence: &mut Evidence,
) -> Result<()> {
    let cmd = vec![
        "sh".to_string(),
        "-c".to_string(),
        escape.script.to_string(),
    ];
    let result = runtime.exec_sync(id, &cmd, Some(Duration::from_secs(10)))?;
    let stdout = String::from_utf8_lossy(&result.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&result.stderr);
    let said = stderr.lines().last().unwrap_or("").trim().to_string();
    let (blocked, answer) = match escape.blocked {
        Blocked::Refused(error) => (
            // busybox words some errnos its own way ("permission denied (are you root?)").
            result.exit_code != 0 && said.to_lowercase().contains(&error.to_lowercase()),
            if said.is_empty() {
                format!("exit {}, no error: it worked", result.exit_code)
            } else {
                said.clone()
            },
        ),
        Blocked::ShowsNothing => (
            result.exit_code == 0 && stdout.is_empty(),
            if stdout.is_empty() {
                format!("exit {}, nothing shown", result.exit_code)
            } else {
                format!("{} bytes shown", stdout.len())
            },
        ),
    };
    say(format!("\n  try:     {}", escape.what));
    say(format!("  $ {}", first_command(escape.script)));
    say(format!("  answer:  {answer}"));
    say(format!("  held by: {}", escape.held_by));
    evidence.check(
        format!("blocked: {}", escape.what),
        blocked,
        if blocked {
            format!("{answer}, by {}", short(escape.held_by))
        } else {
            answer
        },
    );
    Ok(())
}

/// The attempt itself, without the shell around it that reads its result.
fn first_command(script: &str) -> &str {
    script.split(';').next().unwrap_or(script).trim()
}

/// The mechanism's name: what comes before its explanation.
fn short(held_by: &str) -> &str {
    held_by.split(':').next().unwrap_or(held_by)
}

/// The options of the last mount on `point` in the process's mount table.
fn mount_options(pid: i32, point: &str) -> Option<String> {
    let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    table.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        (fields.get(4) == Some(&point)).then(|| fields[5].to_string())
    })
}
