//! Processes as the kernel lists them in `/proc`: who is whose parent, what each is called, which
//! namespaces it is in and how much memory it holds.
//!
//! The demo prints the real process trees of docker and containerd from here, and the benchmarks
//! add up the memory of the processes each pod keeps alive (`Pss` from `smaps_rollup`: shared
//! pages are split between the processes that map them, so a sum of Pss does not count the
//! shared binary once per shim).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use podlab_ns::NsKind;

/// One process: `/proc/PID/stat` (pid, comm, ppid) and `/proc/PID/cmdline`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    /// The kernel's name for it (at most 15 bytes: `containerd-shim` for the runc v2 shim).
    pub comm: String,
    /// Its arguments, empty for kernel threads and zombies.
    pub cmdline: Vec<String>,
    /// `R`, `S`, `Z`, ... (the third field of stat).
    pub state: char,
}

impl Proc {
    /// The command line as one string, or `[comm]` when it has none.
    pub fn command_text(&self) -> String {
        if self.cmdline.is_empty() {
            format!("[{}]", self.comm)
        } else {
            self.cmdline.join(" ")
        }
    }

    /// The value after `flag` in the command line (`-id`, `-address`, `-namespace` of a shim).
    pub fn arg_after(&self, flag: &str) -> Option<&str> {
        let at = self.cmdline.iter().position(|a| a == flag)?;
        self.cmdline.get(at + 1).map(String::as_str)
    }
}

/// Parses `/proc/PID/stat`. The comm is in parentheses and may itself hold spaces and `)`, so
/// the fields after it are found from the *last* `)`.
pub fn parse_stat(text: &str) -> Option<(i32, String, char, i32)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut rest = text.get(close + 1..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((pid, comm, state, ppid))
}

/// One process read from /proc, or None when it is gone (processes end while we read).
pub fn read(pid: i32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (pid, comm, state, ppid) = parse_stat(&stat)?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| parse_cmdline(&bytes))
        .unwrap_or_default();
    Some(Proc {
        pid,
        ppid,
        comm,
        cmdline,
        state,
    })
}

/// `/proc/PID/cmdline`: arguments separated (and ended) by NUL bytes.
pub fn parse_cmdline(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Every process this pid namespace's /proc shows, by pid.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub procs: BTreeMap<i32, Proc>,
}

impl Table {
    pub fn read() -> Table {
        let procs = std::fs::read_dir("/proc")
            .map(|dir| {
                dir.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                    .filter_map(read)
                    .map(|p| (p.pid, p))
                    .collect()
            })
            .unwrap_or_default();
        Table { procs }
    }

    pub fn from_procs(procs: impl IntoIterator<Item = Proc>) -> Table {
        Table {
            procs: procs.into_iter().map(|p| (p.pid, p)).collect(),
        }
    }

    pub fn get(&self, pid: i32) -> Option<&Proc> {
        self.procs.get(&pid)
    }

    pub fn children(&self, pid: i32) -> Vec<&Proc> {
        self.procs.values().filter(|p| p.ppid == pid).collect()
    }

    /// Every process below `pid` (not `pid` itself), parents before their children.
    pub fn descendants(&self, pid: i32) -> Vec<&Proc> {
        let mut out = Vec::new();
        let mut todo = vec![pid];
        while let Some(parent) = todo.pop() {
            for child in self.children(parent) {
                // A pid seen twice would mean a cycle in a torn read; stop there.
                if out.iter().any(|p: &&Proc| p.pid == child.pid) {
                    continue;
                }
                out.push(child);
                todo.push(child.pid);
            }
        }
        out
    }

    /// The chain of parents from `pid` up to the top of this pid namespace (`pid` first).
    pub fn ancestry(&self, pid: i32) -> Vec<&Proc> {
        let mut out: Vec<&Proc> = Vec::new();
        let mut at = pid;
        while let Some(p) = self.get(at) {
            if out.iter().any(|seen| seen.pid == p.pid) {
                break;
            }
            out.push(p);
            if p.ppid == 0 {
                break;
            }
            at = p.ppid;
        }
        out
    }

    pub fn with_comm(&self, comm: &str) -> Vec<&Proc> {
        self.procs.values().filter(|p| p.comm == comm).collect()
    }

    /// The tree below `root` drawn with one process a line: `pid ppid comm  args`, indented by
    /// depth; `annotate` may add a note at the end of a line.
    pub fn render_tree(&self, root: i32, annotate: &dyn Fn(&Proc) -> String) -> String {
        let mut out = String::new();
        self.render_into(&mut out, root, 0, annotate);
        out
    }

    fn render_into(
        &self,
        out: &mut String,
        pid: i32,
        depth: usize,
        annotate: &dyn Fn(&Proc) -> String,
    ) {
        let Some(p) = self.get(pid) else { return };
        let indent = "  ".repeat(depth);
        let branch = if depth == 0 { "" } else { "└─ " };
        let mut args = p.command_text();
        if args.len() > 90 {
            args.truncate(87);
            args.push_str("...");
        }
        let _ = writeln!(
            out,
            "{:>7} {:>7}  {indent}{branch}{:<16} {args}{}",
            p.pid,
            p.ppid,
            p.comm,
            annotate(p)
        );
        for child in self.children(pid) {
            self.render_into(out, child.pid, depth + 1, annotate);
        }
    }
}

/// The namespace inode ids of `pid` for the kinds a pod is made of, in the order
/// mnt uts ipc pid net; None for a kind that could not be read (the process ended).
pub fn pod_namespaces(pid: i32) -> [(NsKind, Option<u64>); 5] {
    [
        NsKind::Mnt,
        NsKind::Uts,
        NsKind::Ipc,
        NsKind::Pid,
        NsKind::Net,
    ]
    .map(|kind| (kind, podlab_ns::ops::ns_inode(pid, kind).ok()))
}

/// Resident memory of one process in kB: `Rss` and `Pss` from `/proc/PID/smaps_rollup`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    pub rss_kb: u64,
    pub pss_kb: u64,
}

impl std::ops::Add for Memory {
    type Output = Memory;
    fn add(self, other: Memory) -> Memory {
        Memory {
            rss_kb: self.rss_kb + other.rss_kb,
            pss_kb: self.pss_kb + other.pss_kb,
        }
    }
}

pub fn memory(pid: i32) -> Option<Memory> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    parse_rollup(&text)
}

/// `Rss:` and `Pss:` of a smaps_rollup text (values are in kB).
pub fn parse_rollup(text: &str) -> Option<Memory> {
    Some(Memory {
        rss_kb: kb_field(text, "Rss:")?,
        pss_kb: kb_field(text, "Pss:")?,
    })
}

fn kb_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32, comm: &str) -> Proc {
        Proc {
            pid,
            ppid,
            comm: comm.into(),
            cmdline: vec![comm.into()],
            state: 'S',
        }
    }

    #[test]
    fn stat_with_spaces_and_parens_in_comm() {
        let text = "4242 (a (weird) name) S 17 4242 4242 0 -1 4194560 100 0 0 0";
        assert_eq!(
            parse_stat(text),
            Some((4242, "a (weird) name".into(), 'S', 17))
        );
        assert_eq!(
            parse_stat("9 (containerd-shim) Z 1 9 9"),
            Some((9, "containerd-shim".into(), 'Z', 1))
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn cmdline_splits_on_nul() {
        let bytes = b"/usr/bin/containerd-shim-runc-v2\0-namespace\0moby\0-id\0abc\0";
        let args = parse_cmdline(bytes);
        assert_eq!(args.len(), 5);
        let shim = Proc {
            cmdline: args,
            ..p(9, 1, "containerd-shim")
        };
        assert_eq!(shim.arg_after("-namespace"), Some("moby"));
        assert_eq!(shim.arg_after("-id"), Some("abc"));
        assert_eq!(shim.arg_after("-address"), None);
    }

    #[test]
    fn tree_walks() {
        let t = Table::from_procs([
            p(1, 0, "init"),
            p(10, 1, "containerd"),
            p(20, 1, "containerd-shim"),
            p(21, 20, "sleep"),
            p(22, 21, "sh"),
            p(30, 10, "ctr"),
        ]);
        let below: Vec<i32> = t.descendants(20).iter().map(|p| p.pid).collect();
        assert_eq!(below, vec![21, 22]);
        let up: Vec<i32> = t.ancestry(22).iter().map(|p| p.pid).collect();
        assert_eq!(up, vec![22, 21, 20, 1]);
        let drawn = t.render_tree(20, &|p| {
            if p.pid == 21 {
                " <-".into()
            } else {
                String::new()
            }
        });
        assert_eq!(drawn.lines().count(), 3);
        assert!(drawn.lines().nth(1).unwrap().contains("└─ sleep"));
        assert!(drawn.lines().nth(1).unwrap().ends_with(" <-"));
    }

    #[test]
    fn rollup_fields() {
        let text = "55d0-7ffd ---p 00000000 00:00 0  [rollup]\nRss:  13512 kB\nPss:   5120 kB\nPss_Dirty: 1 kB\n";
        assert_eq!(
            parse_rollup(text),
            Some(Memory {
                rss_kb: 13512,
                pss_kb: 5120
            })
        );
        assert_eq!(parse_rollup("Rss: 1 kB\n"), None);
    }
}
