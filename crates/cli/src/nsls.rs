//! `podlab ns ls`: the host's namespaces, like `lsns`: one row per namespace with the number of
//! processes in it and the lowest of them, read from `/proc/*/ns/*`.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use podlab_ns::ops::{self, NsEntry};
use serde::Serialize;

/// One row: a namespace and the name of its lowest process's owner.
#[derive(Serialize)]
struct Row {
    #[serde(flatten)]
    entry: NsEntry,
    user: String,
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
    let rows: Vec<Row> = entries
        .into_iter()
        .map(|entry| {
            let user = names
                .entry(entry.uid)
                .or_insert_with(|| user_name(entry.uid))
                .clone();
            Row { entry, user }
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

/// The table as `lsns` prints it: numbers right-aligned, the command last and unpadded.
fn table(rows: &[Row]) -> String {
    let header = ["NS", "TYPE", "NPROCS", "PID", "USER", "COMMAND"];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|row| {
            let e = &row.entry;
            [
                e.inode.to_string(),
                e.kind.to_string(),
                e.nprocs.to_string(),
                e.pid.to_string(),
                row.user.clone(),
                e.command.clone(),
            ]
        })
        .collect();
    let width = |column: usize| {
        cells
            .iter()
            .map(|c| c[column].len())
            .chain([header[column].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |c: [&str; 6]| {
        format!(
            "{:>w0$} {:<w1$} {:>w2$} {:>w3$} {:<w4$} {}\n",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
            w4 = widths[4],
        )
    };
    let mut out = line(header);
    for c in &cells {
        out.push_str(&line([&c[0], &c[1], &c[2], &c[3], &c[4], &c[5]]));
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
        }
    }

    #[test]
    fn columns_line_up_like_lsns() {
        let rows = [
            row(NsKind::Uts, 4026531838, 120, 1, "root", "/sbin/init splash"),
            row(NsKind::Net, 4026532301, 2, 31337, "podlab", "podlab-pause"),
        ];
        let expected = concat!(
            "        NS TYPE NPROCS   PID USER   COMMAND\n",
            "4026531838 uts     120     1 root   /sbin/init splash\n",
            "4026532301 net       2 31337 podlab podlab-pause\n",
        );
        assert_eq!(table(&rows), expected);
    }

    #[test]
    fn an_empty_listing_is_the_header() {
        assert_eq!(table(&[]), "NS TYPE NPROCS PID USER COMMAND\n");
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
