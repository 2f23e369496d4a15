//! `podlab layers`: docker and containerd side by side, with the kernel as the witness.
//!
//! "Docker 和 containerd 的关系: docker is the car, containerd the engine." The demo first tells
//! the two stacks apart in words:
//!
//! ```text
//! docker CLI --REST--> dockerd --gRPC--> containerd --> containerd-shim-runc-v2 --> runc --> process
//! kubelet ---CRI gRPC--------------> containerd --> containerd-shim-runc-v2 --> runc --> pause + containers
//! ```
//!
//! and then, where dockerd, containerd, ctr and runc are installed, it starts private instances
//! of them in a [`Lab`], runs a container through each stack (and a pod the way containerd's
//! CRI plugin builds one: a sandbox, and a container joining its net, ipc and uts namespaces),
//! and prints what the kernel reports: the process trees from `/proc`, the namespace inode ids
//! from `/proc/PID/ns/*`, and the image layers as containerd's overlayfs snapshotter and
//! dockerd's overlay2 graph driver lay them out, next to the container's real overlay mount from
//! `/proc/PID/mountinfo`. Each claim is checked; one that does not hold fails the demo.

use std::io::Write;
use std::path::{Path, PathBuf};

use podlab_ns::NsKind;

use crate::engines::containerd::Containerd;
use crate::engines::dockerd::Dockerd;
use crate::image::{self, Busybox};
use crate::lab::{run_text, Lab};
use crate::overlay::{self, Overlay};
use crate::procs::{self, Proc, Table};
use crate::tools::{self, Tool};
use crate::{Error, Result};

/// What the demo showed.
#[derive(Debug)]
pub enum Outcome {
    /// The peers are not all installed: only the comparison in words was printed.
    TextOnly { missing: Vec<Tool> },
    /// The real stacks ran; every check held.
    Live { checks: Vec<Check> },
}

/// One claim and what the kernel showed.
#[derive(Debug, Clone)]
pub struct Check {
    pub claim: String,
    pub found: String,
    pub holds: bool,
}

const STACKS: &str = "\
Two stacks, one engine (docker is the car, containerd the engine):

  docker run                                    kubelet (a pod)
  ----------                                    ---------------
  docker CLI                                    kubelet
    | REST over /run/docker.sock                  | CRI gRPC (RunPodSandbox, CreateContainer)
  dockerd  (images, networks, volumes, API)       |
    | gRPC, containerd namespace \"moby\"           |
  containerd  (content store, snapshots, tasks) containerd + its CRI plugin (namespace \"k8s.io\")
    | starts one per container                    | starts one per pod
  containerd-shim-runc-v2  (holds stdio and     containerd-shim-runc-v2
    |  the exit code; re-parented away from       |
    |  containerd, so containerd can restart)     |
  runc create/start  (sets up the namespaces,   runc: the sandbox (pause) first, then each
    |  cgroups and rootfs, then exits)            |  container joining its net/ipc/uts namespaces
  your process                                  pause + containers

Without dockerd, kubelet talks to containerd directly (dockershim left Kubernetes in 1.24);
with it, docker is one more client of the same engine.
";

/// Runs the demo, writing to `out`. See the module doc.
pub fn run_layers_demo(out: &mut dyn Write) -> Result<Outcome> {
    say(out, STACKS)?;
    let missing = tools::missing(tools::DEMO_TOOLS);
    if !missing.is_empty() {
        return text_only(out, missing);
    }
    let mut lab = Lab::new()?;
    let result = live(out, &mut lab);
    let torn = lab.teardown();
    let checks = result?;
    torn?;
    say(
        out,
        "\nThe lab is gone: daemons stopped by pid, no process, mount, cgroup or file of it left.\n",
    )?;
    Ok(Outcome::Live { checks })
}

/// Without the peers: what to install to see them.
fn text_only(out: &mut dyn Write, missing: Vec<Tool>) -> Result<Outcome> {
    let names: Vec<&str> = missing.iter().map(|t| t.binary).collect();
    say(
        out,
        &format!(
            "\nTo see the real stacks, install what is missing ({}):\n    {}\nand run this again as root.\n",
            names.join(", "),
            tools::install_line(&missing)
        ),
    )?;
    Ok(Outcome::TextOnly { missing })
}

fn say(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())
        .map_err(|e| Error::io("writing the demo to", "its output", e))
}

/// The containers the demo runs, and their pids.
struct Running {
    docker_id: String,
    docker_pid: i32,
    ctr_pid: i32,
    sandbox_pid: i32,
    app_pid: i32,
}

const CTR_ID: &str = "layers-ctr";
const SANDBOX_ID: &str = "layers-sandbox";
const APP_ID: &str = "layers-app";

fn live(out: &mut dyn Write, lab: &mut Lab) -> Result<Vec<Check>> {
    say(
        out,
        &format!(
            "\nThe real thing, in a lab of its own ({}; network namespace net:[{}] with only lo):\n",
            lab.dir().display(),
            lab.net_inode()
        ),
    )?;
    let built = image::build(&lab.subdir("image")?)?;
    let containerd = Containerd::start(lab)?;
    let archive = built.oci_archive.clone().ok_or(Error::Missing {
        binary: "umoci",
        package: "umoci",
    })?;
    containerd.import(lab, &archive)?;
    let dockerd = Dockerd::start(lab, &containerd)?;
    dockerd.import(lab, &built.tar)?;
    say(
        out,
        &format!(
            "  containerd pid {} (--config in the lab, CRI plugin off), dockerd pid {} (--containerd={})\n  \
             image {} made from /bin/busybox: docker import (dockerd's overlay2), ctr images import (containerd's snapshotter)\n",
            containerd.pid,
            dockerd.pid,
            containerd.socket.display(),
            Busybox::reference()
        ),
    )?;
    let running = start_containers(lab, &containerd, &dockerd)?;
    let table = Table::read();
    let mut checks = Vec::new();
    show_trees(out, &table, &containerd, &dockerd, &running)?;
    check_processes(&table, &containerd, &dockerd, &running, &mut checks);
    show_namespaces(out, &containerd, &dockerd, &running, &mut checks)?;
    show_layers(out, lab, &containerd, &dockerd, &running, &mut checks)?;
    say(out, "\nEvidence:\n")?;
    for c in &checks {
        let mark = if c.holds { "ok  " } else { "FAIL" };
        say(
            out,
            &format!("  [{mark}] {}\n         {}\n", c.claim, c.found),
        )?;
    }
    if let Some(bad) = checks.iter().find(|c| !c.holds) {
        return Err(Error::evidence(bad.claim.clone(), bad.found.clone()));
    }
    Ok(checks)
}

fn start_containers(lab: &Lab, containerd: &Containerd, dockerd: &Dockerd) -> Result<Running> {
    let sleep = ["sleep", "600"];
    let docker_id = run_text(
        dockerd
            .docker(lab)
            .args(["run", "-d", "--name", "layers-docker", "--network", "none"])
            .arg(Busybox::reference())
            .args(sleep),
    )?;
    let docker_pid =
        run_text(
            dockerd
                .docker(lab)
                .args(["inspect", "-f", "{{.State.Pid}}", &docker_id]),
        )?;
    let docker_pid = docker_pid.parse().map_err(|_| Error::Parse {
        what: "docker inspect's pid",
        text: docker_pid.clone(),
    })?;
    let ctr_run = |id: &str, joins: &[String]| -> Result<i32> {
        let mut cmd = containerd.ctr(lab, "default");
        cmd.args(["run", "-d", "--cgroup"])
            .arg(format!("{}/{id}", lab.cgroup_parent("ctr")));
        for join in joins {
            cmd.args(["--with-ns", join]);
        }
        cmd.arg(Busybox::reference()).arg(id).args(sleep);
        crate::lab::run(&mut cmd)?;
        containerd.task_pid(lab, "default", id)
    };
    let ctr_pid = ctr_run(CTR_ID, &[])?;
    let sandbox_pid = ctr_run(SANDBOX_ID, &[])?;
    let joins: Vec<String> = [("network", "net"), ("ipc", "ipc"), ("uts", "uts")]
        .iter()
        .map(|(kind, file)| format!("{kind}:/proc/{sandbox_pid}/ns/{file}"))
        .collect();
    let app_pid = ctr_run(APP_ID, &joins)?;
    Ok(Running {
        docker_id,
        docker_pid,
        ctr_pid,
        sandbox_pid,
        app_pid,
    })
}

fn show_trees(
    out: &mut dyn Write,
    table: &Table,
    containerd: &Containerd,
    dockerd: &Dockerd,
    running: &Running,
) -> Result<()> {
    let note = |p: &Proc| -> String {
        if p.pid == running.docker_pid {
            "   <- docker run (layers-docker)".into()
        } else if p.pid == running.ctr_pid {
            format!("   <- ctr run ({CTR_ID})")
        } else if p.pid == running.sandbox_pid {
            format!("   <- pod sandbox ({SANDBOX_ID})")
        } else if p.pid == running.app_pid {
            format!("   <- pod container ({APP_ID})")
        } else {
            String::new()
        }
    };
    say(
        out,
        "\nProcesses, from /proc (pid, ppid, comm, command line):\n",
    )?;
    for (what, pid) in [("dockerd", dockerd.pid), ("containerd", containerd.pid)] {
        say(out, &format!("\n  {what} and its children:\n"))?;
        say(out, &indent(&table.render_tree(pid, &note)))?;
    }
    for pid in [
        running.docker_pid,
        running.ctr_pid,
        running.sandbox_pid,
        running.app_pid,
    ] {
        let chain: Vec<String> = table
            .ancestry(pid)
            .iter()
            .map(|p| format!("{}({})", p.comm, p.pid))
            .collect();
        say(out, &format!("\n  {}\n", chain.join(" <- ")))?;
        if let Some(shim) = table.get(pid).and_then(|p| table.get(p.ppid)) {
            say(out, &indent(&table.render_tree(shim.pid, &note)))?;
        }
    }
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn check_processes(
    table: &Table,
    containerd: &Containerd,
    dockerd: &Dockerd,
    running: &Running,
    checks: &mut Vec<Check>,
) {
    let socket = containerd.socket.display().to_string();
    let parent = |pid: i32| table.get(pid).and_then(|p| table.get(p.ppid));
    for (what, pid, namespace, id) in [
        (
            "the docker container",
            running.docker_pid,
            "moby",
            running.docker_id.as_str(),
        ),
        ("the ctr container", running.ctr_pid, "default", CTR_ID),
    ] {
        let shim = parent(pid);
        let holds = shim.is_some_and(|s| {
            s.comm == "containerd-shim"
                && s.arg_after("-namespace") == Some(namespace)
                && s.arg_after("-id") == Some(id)
                && s.arg_after("-address") == Some(socket.as_str())
        });
        checks.push(Check {
            claim: format!(
                "{what}'s parent is a containerd-shim-runc-v2 of namespace \"{namespace}\" for its id"
            ),
            found: shim.map_or("no parent".into(), |s| {
                format!("{} {}", s.pid, s.command_text())
            }),
            holds,
        });
        let shim_parent = shim.and_then(|s| table.get(s.ppid));
        checks.push(Check {
            claim: format!(
                "{what}'s shim is not a child of containerd or dockerd (it was re-parented, so a daemon restart leaves the container running)"
            ),
            found: shim_parent.map_or("the shim's parent is gone".into(), |p| {
                format!("the shim's parent is {} ({})", p.pid, p.comm)
            }),
            holds: shim.is_some_and(|s| s.ppid != containerd.pid && s.ppid != dockerd.pid),
        });
    }
    let docker_chain: Vec<i32> = table
        .ancestry(running.docker_pid)
        .iter()
        .map(|p| p.pid)
        .collect();
    checks.push(Check {
        claim: "dockerd does not run the container itself: the container is not below dockerd (nor below containerd)".into(),
        found: format!(
            "the container's ancestry (pid, then its parent's): {}",
            docker_chain
                .iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(" ← ")
        ),
        holds: !docker_chain.contains(&dockerd.pid) && !docker_chain.contains(&containerd.pid),
    });
    let runcs: Vec<String> = table
        .with_comm("runc")
        .iter()
        .map(|p| format!("{} {}", p.pid, p.command_text()))
        .collect();
    checks.push(Check {
        claim: "no runc process is left: runc set the containers up and exited".into(),
        found: if runcs.is_empty() {
            "no process named runc".into()
        } else {
            runcs.join("; ")
        },
        holds: runcs.is_empty(),
    });
}

fn show_namespaces(
    out: &mut dyn Write,
    containerd: &Containerd,
    dockerd: &Dockerd,
    running: &Running,
    checks: &mut Vec<Check>,
) -> Result<()> {
    let rows = [
        ("containerd", containerd.pid),
        ("dockerd", dockerd.pid),
        ("docker container", running.docker_pid),
        ("ctr container", running.ctr_pid),
        ("pod sandbox", running.sandbox_pid),
        ("pod container", running.app_pid),
    ];
    say(out, "\nNamespaces, from /proc/PID/ns/* (inode ids):\n\n")?;
    say(
        out,
        &format!(
            "  {:<17} {:>7}  {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            "process", "pid", "mnt", "uts", "ipc", "pid", "net"
        ),
    )?;
    let mut ids = Vec::new();
    for (what, pid) in rows {
        let ns = procs::pod_namespaces(pid);
        let cells: Vec<String> = ns
            .iter()
            .map(|(_, i)| i.map_or("?".into(), |i| i.to_string()))
            .collect();
        say(
            out,
            &format!(
                "  {what:<17} {pid:>7}  {:>10} {:>10} {:>10} {:>10} {:>10}\n",
                cells[0], cells[1], cells[2], cells[3], cells[4]
            ),
        )?;
        ids.push(ns);
    }
    let inode = |row: usize, kind: NsKind| {
        ids[row]
            .iter()
            .find(|(k, _)| *k == kind)
            .and_then(|(_, i)| *i)
    };
    let kinds = [
        NsKind::Mnt,
        NsKind::Uts,
        NsKind::Ipc,
        NsKind::Pid,
        NsKind::Net,
    ];
    for (row, what) in [(2, "the docker container"), (3, "the ctr container")] {
        let own: Vec<&str> = kinds
            .iter()
            .filter(|k| inode(row, **k).is_some() && inode(row, **k) != inode(0, **k))
            .map(|k| k.proc_name())
            .collect();
        checks.push(Check {
            claim: format!(
                "{what} has its own mnt, uts, ipc, pid and net namespaces (not containerd's)"
            ),
            found: format!("its own: {}", own.join(" ")),
            holds: own.len() == kinds.len(),
        });
    }
    let shared: Vec<&str> = kinds
        .iter()
        .filter(|k| inode(5, **k).is_some() && inode(5, **k) == inode(4, **k))
        .map(|k| k.proc_name())
        .collect();
    checks.push(Check {
        claim: "the pod container joined the sandbox's net, ipc and uts namespaces and kept its own mnt and pid (as the CRI plugin does it)".into(),
        found: format!("shared with the sandbox: {}", shared.join(" ")),
        holds: shared == ["uts", "ipc", "net"],
    });
    Ok(())
}

fn show_layers(
    out: &mut dyn Write,
    lab: &Lab,
    containerd: &Containerd,
    dockerd: &Dockerd,
    running: &Running,
    checks: &mut Vec<Check>,
) -> Result<()> {
    let snapshots = run_text(containerd.ctr(lab, "default").args(["snapshots", "ls"]))?;
    say(
        out,
        &format!(
            "\nImage layers as containerd's overlayfs snapshotter sees them (ctr snapshots ls):\n\n{}\n",
            indent(&snapshots)
        ),
    )?;
    let dir = containerd.snapshots_dir();
    let folders = list_dir(&dir);
    say(
        out,
        &format!(
            "  snapshot folders in {}: {}\n",
            dir.display(),
            folders.join(" ")
        ),
    )?;
    let target = lab.subdir("mnt-preview")?;
    let mounts = run_text(
        containerd
            .ctr(lab, "default")
            .args(["snapshots", "mounts"])
            .arg(&target)
            .arg(CTR_ID),
    )?;
    say(out, &format!("  ctr snapshots mounts {CTR_ID}: {mounts}\n"))?;
    let planned = overlay_from_mount_command(&mounts);
    let ctr_root = root_overlay_of(running.ctr_pid)?;
    say(
        out,
        &describe_overlay("the ctr container", running.ctr_pid, &ctr_root),
    )?;
    let in_snapshots = !ctr_root.lowerdirs.is_empty()
        && ctr_root
            .lowerdirs
            .iter()
            .all(|l| l.starts_with(&dir) && l.ends_with("fs"))
        && ctr_root
            .upperdir
            .as_ref()
            .is_some_and(|u| u.starts_with(&dir));
    checks.push(Check {
        claim: "the ctr container's / is an overlay whose lowerdirs and upperdir are containerd snapshot folders".into(),
        found: format!(
            "lowerdir {}, upperdir {}",
            paths_text(&ctr_root.lowerdirs),
            ctr_root
                .upperdir
                .as_ref()
                .map_or("none".into(), |u| u.display().to_string())
        ),
        holds: in_snapshots,
    });
    checks.push(Check {
        claim:
            "the kernel's overlay of the ctr container is the one `ctr snapshots mounts` describes"
                .into(),
        found: planned
            .as_ref()
            .map_or("ctr described no overlay".into(), |p| {
                format!("ctr says lowerdir {}", paths_text(&p.lowerdirs))
            }),
        holds: planned
            .as_ref()
            .is_some_and(|p| p.lowerdirs == ctr_root.lowerdirs && p.upperdir == ctr_root.upperdir),
    });
    let moby = run_text(containerd.ctr(lab, "moby").args(["snapshots", "ls"]))?;
    let docker_root = root_overlay_of(running.docker_pid)?;
    let graph = dockerd.data_root.join("overlay2");
    say(
        out,
        &format!(
            "\n  containerd namespace \"moby\" (dockerd's) has {} snapshot(s): dockerd 20.10 keeps image layers in its own overlay2 graph driver ({}).\n",
            moby.lines().skip(1).count(),
            graph.display()
        ),
    )?;
    say(
        out,
        &describe_overlay("the docker container", running.docker_pid, &docker_root),
    )?;
    let resolved: Vec<PathBuf> = docker_root
        .lowerdirs
        .iter()
        .map(|l| std::fs::canonicalize(l).unwrap_or_else(|_| l.clone()))
        .collect();
    checks.push(Check {
        claim: "the docker container's / is an overlay whose lowerdirs are dockerd's overlay2 layer folders (…/overlay2/<id>/diff), not containerd snapshots".into(),
        found: format!("lowerdirs resolve to {}", paths_text(&resolved)),
        holds: !resolved.is_empty()
            && resolved.iter().all(|r| r.starts_with(&graph) && r.ends_with("diff") && !r.starts_with(&dir)),
    });
    Ok(())
}

fn root_overlay_of(pid: i32) -> Result<Overlay> {
    let path = format!("/proc/{pid}/mountinfo");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io("reading", &path, e))?;
    overlay::root_overlay(&text).ok_or_else(|| {
        Error::evidence(
            format!("process {pid}'s root is an overlay mount"),
            text.lines().next().unwrap_or("no mounts").to_string(),
        )
    })
}

fn describe_overlay(what: &str, pid: i32, o: &Overlay) -> String {
    let mut text = format!("\n  {what} (pid {pid}), / in /proc/{pid}/mountinfo: overlay\n");
    for (i, l) in o.lowerdirs.iter().enumerate() {
        let resolved = std::fs::canonicalize(l).unwrap_or_else(|_| l.clone());
        let role = if resolved
            .parent()
            .is_some_and(|p| p.to_string_lossy().ends_with("-init"))
        {
            format!(
                "-> {}: docker's init layer (stand-ins for /etc/hosts, /etc/resolv.conf)",
                resolved.display()
            )
        } else if &resolved != l {
            format!("-> {}: read-only image layer", resolved.display())
        } else {
            "read-only image layer".to_string()
        };
        text.push_str(&format!("    lowerdir[{i}] {} ({role})\n", l.display()));
    }
    for (name, dir) in [("upperdir", &o.upperdir), ("workdir", &o.workdir)] {
        if let Some(d) = dir {
            text.push_str(&format!("    {name}    {}\n", d.display()));
        }
    }
    text
}

/// The overlay that `ctr snapshots mounts` prints as a command:
/// `mount -t overlay overlay TARGET -o index=off,workdir=W,upperdir=U,lowerdir=L`.
pub fn overlay_from_mount_command(text: &str) -> Option<Overlay> {
    let options = text.split_whitespace().skip_while(|w| *w != "-o").nth(1)?;
    let line = format!("1 0 0:1 / / rw - overlay overlay {options}");
    overlay::root_overlay(&line)
}

fn list_dir(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort_by_key(|n| (n.len(), n.clone()));
    names
}

/// Paths for a claim's evidence: one after another, `:`-separated as in an overlay's options.
fn paths_text(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "none".into();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctr_snapshots_mounts_output() {
        let text = "mount -t overlay overlay /tmp/x -o index=off,workdir=/s/3/work,upperdir=/s/3/fs,lowerdir=/s/2/fs:/s/1/fs";
        let o = overlay_from_mount_command(text).unwrap();
        assert_eq!(
            o.lowerdirs,
            vec![PathBuf::from("/s/2/fs"), PathBuf::from("/s/1/fs")]
        );
        assert_eq!(o.upperdir, Some(PathBuf::from("/s/3/fs")));
        assert!(overlay_from_mount_command("mount --bind /a /b").is_none());
    }

    #[test]
    fn without_the_peers_it_says_what_to_install() {
        let mut out = Vec::new();
        let outcome = text_only(
            &mut out,
            vec![tools::CONTAINERD, tools::CTR, tools::DOCKERD],
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("containerd, ctr, dockerd"), "{text}");
        assert!(
            text.contains("apt-get install -y containerd docker.io"),
            "{text}"
        );
        assert!(matches!(outcome, Outcome::TextOnly { missing } if missing.len() == 3));
        assert!(
            STACKS.contains("containerd-shim-runc-v2") && STACKS.contains("pause + containers")
        );
    }
}
