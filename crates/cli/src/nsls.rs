//! `podlab ns ls`: the host's namespaces, like `lsns`: one row per namespace with the number of
//! processes in it and the lowest of them, read from `/proc/*/ns/*`; for the namespaces podlab
//! made, the pod and container they belong to (the POD and CONTAINER columns), from the runtime's
//! records of `$PODLAB_ROOT`.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use podlab_ns::ops::{self, NsEntry};
use serde::Serialize;

/// One row: a namespace, the name of its lowest process's owner, and the pod and container
/// it belongs to when podlab made it.
#[derive(Serialize)]
struct Row {
    #[serde(flatten)]
    entry: NsEntry,
    user: String,
    #[serde(flatten)]
    owner: Option<Owner>,
}

/// The pod (`namespace/name`) and container a namespace belongs to; the container is
/// `(sandbox)` for the namespaces the pause process holds for all of them (net, ipc, uts, and
/// pid when the pod shares it).
#[derive(Serialize, Clone)]
struct Owner {
    pod: String,
    container: String,
}

/// The owners of the namespaces of this root's ready sandboxes and running containers, by
/// inode id. The records keep the ids, so nothing in /proc is read; stopped containers are left
/// out, since the kernel reuses the id of a namespace that is gone. A root that does not exist
/// (or cannot be read) owns nothing, and is not made.
fn owners() -> HashMap<u64, Owner> {
    use podlab_runtime::status::{ContainerFilter, ContainerState, SandboxState};
    let mut owners = HashMap::new();
    let config = podlab_runtime::config::RuntimeConfig::from_env();
    if !config.root.join("sandboxes").is_dir() {
        return owners;
    }
    let Ok(runtime) = podlab_runtime::Runtime::open(config) else {
        return owners;
    };
    let sandboxes = runtime.list_pod_sandboxes().unwrap_or_default();
    let mut pods = HashMap::new();
    for sandbox in sandboxes.iter().filter(|s| s.state == SandboxState::Ready) {
        let pod = format!("{}/{}", sandbox.metadata.namespace, sandbox.metadata.name);
        for pinned in &sandbox.namespaces {
            owners.insert(
                pinned.inode,
                Owner {
                    pod: pod.clone(),
                    container: "(sandbox)".into(),
                },
            );
        }
        pods.insert(sandbox.id.clone(), pod);
    }
    let containers = runtime
        .list_containers(&ContainerFilter::default())
        .unwrap_or_default();
    for container in containers
        .iter()
        .filter(|c| c.state == ContainerState::Running)
    {
        let Some(pod) = pods.get(&container.sandbox_id) else {
            continue;
        };
        for inode in container.namespaces.values() {
            owners.entry(*inode).or_insert_with(|| Owner {
                pod: pod.clone(),
                container: container.metadata.name.clone(),
            });
        }
    }
    owners
}

/// `kind`: only namespaces of that kind (`lsns -t`); an unknown kind, or one this kernel
/// lacks, is a usage error.
pub fn run(pid: Option<i32>, kind: Option<&str>, json: bool) -> Result<()> {
    let kind = match kind {
        Some(name) => {
            let kind: podlab_ns::NsKind = name.parse()?;
            kind.require()?;
            Some(kind)
        }
        None => None,
    };
    let mut entries = match pid {
        Some(pid) => {
            if pid <= 0 || !Path::new(&format!("/proc/{pid}")).exists() {
                return Err(crate::UsageError(format!(
                    "no process with pid {pid} (no /proc/{pid} in this pid namespace)"
                ))
                .into());
            }
            ops::list_for(pid).with_context(|| format!("listing the namespaces of pid {pid}"))?
        }
        None => ops::list().context("listing namespaces")?,
    };
    entries.retain(|e| kind.is_none_or(|k| e.kind == k));
    let mut names = HashMap::new();
    let owners = owners();
    let rows: Vec<Row> = entries
        .into_iter()
        .map(|entry| {
            let user = names
                .entry(entry.uid)
                .or_insert_with(|| user_name(entry.uid))
                .clone();
            let owner = owners.get(&entry.inode).cloned();
            Row { entry, user, owner }
        })
        .collect();
    if json {
        // lsns --json's shape, so that tools reading one read the other.
        #[derive(Serialize)]
        struct Listing<'a> {
            namespaces: &'a [Row],
        }
        let listing = Listing { namespaces: &rows };
        println!("{}", serde_json::to_string_pretty(&listing)?);
    } else {
        print!("{}", table(&rows));
    }
    Ok(())
}

/// The user's name from the passwd database, or the number when it has none.
fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}

/// The table as `lsns` prints it (numbers right-aligned, the command last and unpadded), with
/// POD and CONTAINER before the command (`-` for a namespace podlab did not make).
fn table(rows: &[Row]) -> String {
    const HEADER: [&str; 8] = [
        "NS",
        "TYPE",
        "NPROCS",
        "PID",
        "USER",
        "POD",
        "CONTAINER",
        "COMMAND",
    ];
    /// Right-aligned columns: the numbers.
    const RIGHT: [bool; 8] = [true, false, true, true, false, false, false, false];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|row| {
            let e = &row.entry;
            let (pod, container) = row.owner.as_ref().map_or(("-".into(), "-".into()), |o| {
                (o.pod.clone(), o.container.clone())
            });
            [
                e.inode.to_string(),
                e.kind.to_string(),
                e.nprocs.to_string(),
                e.pid.to_string(),
                row.user.clone(),
                pod,
                container,
                e.command.clone(),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|column| {
            cells
                .iter()
                .map(|c| c[column].len())
                .chain([HEADER[column].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: [&str; 8]| {
        let mut line = String::new();
        for (column, cell) in cells.iter().enumerate() {
            let width = widths[column];
            if column == HEADER.len() - 1 {
                line.push_str(cell);
            } else if RIGHT[column] {
                line.push_str(&format!("{cell:>width$} "));
            } else {
                line.push_str(&format!("{cell:<width$} "));
            }
        }
        line + "\n"
    };
    let mut out = line(HEADER);
    for c in &cells {
        out.push_str(&line(std::array::from_fn(|i| c[i].as_str())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use podlab_ns::NsKind;

    fn row(kind: NsKind, inode: u64, nprocs: usize, pid: i32, user: &str, command: &str) -> Row {
        Row {
            entry: NsEntry {
                kind,
                inode,
                nprocs,
                pid,
                uid: 0,
                command: command.into(),
            },
            user: user.into(),
            owner: None,
        }
    }

    #[test]
    fn columns_line_up_like_lsns() {
        let mut pause = row(NsKind::Net, 4026532301, 2, 31337, "podlab", "podlab-pause");
        pause.owner = Some(Owner {
            pod: "default/web".into(),
            container: "(sandbox)".into(),
        });
        let rows = [
            row(NsKind::Uts, 4026531838, 120, 1, "root", "/sbin/init splash"),
            pause,
        ];
        let expected = concat!(
            "        NS TYPE NPROCS   PID USER   POD         CONTAINER COMMAND\n",
            "4026531838 uts     120     1 root   -           -         /sbin/init splash\n",
            "4026532301 net       2 31337 podlab default/web (sandbox) podlab-pause\n",
        );
        assert_eq!(table(&rows), expected);
    }

    #[test]
    fn an_empty_listing_is_the_header() {
        assert_eq!(
            table(&[]),
            "NS TYPE NPROCS PID USER POD CONTAINER COMMAND\n"
        );
    }

    #[test]
    fn json_rows_carry_the_user_name() {
        let json = serde_json::to_value(row(NsKind::Ipc, 7, 1, 2, "root", "sh")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "ipc", "inode": 7, "nprocs": 1, "pid": 2, "uid": 0,
                               "command": "sh", "user": "root"})
        );
    }
}
