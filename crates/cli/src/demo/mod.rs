//! `podlab demo`: one concept a step, built for real, each step checking its own evidence.
//!
//! Every demo narrates what it does, prints the evidence side by side (host vs inside), and
//! records each claim in an [`Evidence`] list. A claim that does not hold makes the demo fail
//! (exit status 1), so a demo is also a test that a learner can read. Evidence is told in
//! words and aligned tables ([`Shown`]), never in Rust's debug notation.
//!
//! A demo is one entry of [`DEMOS`]: adding one is adding a line there (and to the README's
//! demo table). `podlab demo all` runs every demo, `namespaces` the six that need no pod.

mod cni;
mod indexer;
mod interrupt;
mod ipc;
mod isolation;
mod kit;
mod lab;
mod layers;
mod mnt;
mod net;
mod pid;
mod pod;
mod probes;
mod restarts;
mod sandbox;
mod user;
mod uts;

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Result};

/// What a demo needs of the caller.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Only namespaces: runs as root, or as a user inside a new user namespace.
    Namespaces,
    /// Whole pods (overlay mounts of image layers, the runtime's shim, the node agent): root.
    Root,
}

/// One demo: the name it is run by, its line in `podlab demo --help`, and its body.
pub struct Demo {
    pub name: &'static str,
    pub about: &'static str,
    pub needs: Needs,
    pub run: fn(&mut Evidence) -> Result<()>,
}

/// Every demo, in the order `podlab demo all` runs them.
pub const DEMOS: &[Demo] = &[
    Demo {
        name: "pod",
        about: "a whole pod: pause, an init container, two containers sharing net/ipc/uts",
        needs: Needs::Root,
        run: pod::run,
    },
    Demo {
        name: "uts",
        about: "a hostname and domainname that only the namespace sees",
        needs: Needs::Namespaces,
        run: uts::run,
    },
    Demo {
        name: "ipc",
        about: "SysV queues, semaphores, shared memory and a POSIX mqueue kept inside",
        needs: Needs::Namespaces,
        run: ipc::run,
    },
    Demo {
        name: "net",
        about: "a network namespace: lo, a veth pair born inside, TCP across it",
        needs: Needs::Namespaces,
        run: net::run,
    },
    Demo {
        name: "pid",
        about: "one process, two pids; PID 1 reaps orphans and ignores unhandled signals",
        needs: Needs::Namespaces,
        run: pid::run,
    },
    Demo {
        name: "mnt",
        about: "private propagation, an overlay of layers with a whiteout, pivot_root",
        needs: Needs::Namespaces,
        run: mnt::run,
    },
    Demo {
        name: "user",
        about: "uid/gid maps: root inside, an unprivileged user outside",
        needs: Needs::Namespaces,
        run: user::run,
    },
    Demo {
        name: "cni",
        about: "two pods on the bridge podlab0 through the real CNI plugins",
        needs: Needs::Root,
        run: cni::run,
    },
    Demo {
        name: "cni-failure",
        about: "CNI ADD fails: FailedCreatePodSandBox, retries, recovery",
        needs: Needs::Root,
        run: cni::run_failure,
    },
    Demo {
        name: "restarts",
        about: "the three restart policies with real exit codes, and CrashLoopBackOff",
        needs: Needs::Root,
        run: restarts::run,
    },
    Demo {
        name: "probes",
        about: "a failing liveness probe restarts a container; readiness flips Ready",
        needs: Needs::Root,
        run: probes::run,
    },
    Demo {
        name: "sandbox",
        about: "kill -9 of the pause process: a new sandbox, and the rule that decided it",
        needs: Needs::Root,
        run: sandbox::run,
    },
    Demo {
        name: "isolation",
        about: "a container's escapes tried from inside, each blocked, and by what",
        needs: Needs::Root,
        run: isolation::run,
    },
    Demo {
        name: "indexer",
        about: "a ReplicaSet finds its pods by the controller-UID index; adoption, release",
        needs: Needs::Root,
        run: indexer::run,
    },
    Demo {
        name: "layers",
        about: "docker and containerd side by side: process trees, namespaces, layers",
        needs: Needs::Root,
        run: layers::run,
    },
];

/// The names that stand for several demos.
const SETS: [(&str, &str); 2] = [
    ("all", "every demo above, one after the other"),
    (
        "namespaces",
        "the six namespace demos (uts ipc net pid mnt user); no root needed",
    ),
];

/// The demos a name stands for: one demo, or a set of [`SETS`].
fn select(what: &str) -> Option<Vec<&'static Demo>> {
    match what {
        "all" => Some(DEMOS.iter().collect()),
        "namespaces" => Some(
            DEMOS
                .iter()
                .filter(|d| d.needs == Needs::Namespaces)
                .collect(),
        ),
        name => DEMOS.iter().find(|d| d.name == name).map(|d| vec![d]),
    }
}

/// The list `podlab demo --help` ends with: each demo and set with its one line.
pub fn catalogue() -> String {
    let width = DEMOS
        .iter()
        .map(|d| d.name.len())
        .chain(SETS.iter().map(|(n, _)| n.len()))
        .max()
        .unwrap_or(0);
    let mut text = String::from("Demos:\n");
    for demo in DEMOS {
        let root = if demo.needs == Needs::Root {
            " (root)"
        } else {
            ""
        };
        text += &format!("  {:<width$}  {}{root}\n", demo.name, demo.about);
    }
    text += "\nSets:\n";
    for (name, about) in SETS {
        text += &format!("  {name:<width$}  {about}\n");
    }
    text
}

/// Whether `--keep` was given: the demo leaves what it made running and says how to look at
/// it and how to remove it. Set once, before any demo runs.
static KEEP: AtomicBool = AtomicBool::new(false);

pub fn keep() -> bool {
    KEEP.load(Ordering::Relaxed)
}

pub fn run(what: &str, keep: bool) -> Result<()> {
    let Some(selected) = select(what) else {
        let names: Vec<_> = DEMOS
            .iter()
            .map(|d| d.name)
            .chain(SETS.iter().map(|(n, _)| *n))
            .collect();
        return Err(crate::UsageError(format!(
            "unknown demo {what:?} (expected one of {}; see podlab demo --help)",
            names.join(", ")
        ))
        .into());
    };
    if keep && selected.len() > 1 {
        return Err(crate::UsageError(format!(
            "--keep keeps one demo's pods: name one demo, not {what}"
        ))
        .into());
    }
    if keep && selected.iter().any(|d| d.needs == Needs::Namespaces) {
        return Err(crate::UsageError(format!(
            "--keep keeps a pod demo's pods; demo {what} ends its namespaces with the processes \
             that hold them. To explore one, make it and stay in it: podlab ns run --uts \
             --ipc --net --pid --mount --hostname demo -- sh"
        ))
        .into());
    }
    KEEP.store(keep, Ordering::Relaxed);
    if selected.iter().any(|d| d.needs == Needs::Root) {
        if !nix::unistd::geteuid().is_root() {
            return Err(crate::UsageError(format!(
                "podlab demo {what} builds real pods (overlay rootfs, shim, node agent) and needs root; \
                 the namespace demos (podlab demo namespaces) run without it"
            ))
            .into());
        }
    } else {
        crate::privilege::ensure_namespace_privileges()?;
    }
    interrupt::install();
    let mut failed = Vec::new();
    for demo in selected {
        say(format!("\n=== podlab demo {} ===", demo.name));
        let mut evidence = Evidence::default();
        let outcome = (demo.run)(&mut evidence);
        evidence.print();
        // A signal that came while the demo ran: it has cleaned up by now (its scratch root's
        // drop ran on the way out); no further demo starts.
        interrupt::checkpoint();
        match outcome {
            Err(err) => {
                say(format!("demo {}: error: {err:#}", demo.name));
                failed.push(demo.name);
            }
            Ok(()) if !evidence.holds() => failed.push(demo.name),
            Ok(()) => say(format!("demo {}: all evidence holds", demo.name)),
        }
        for root in kit::take_kept() {
            kit::print_kept(&root);
        }
    }
    if !failed.is_empty() {
        bail!("evidence did not hold in: {}", failed.join(", "));
    }
    Ok(())
}

/// How a value reads in the evidence: words and plain numbers, never Rust's `{:?}`.
pub trait Shown {
    fn shown(&self) -> String;
}

impl Shown for str {
    fn shown(&self) -> String {
        if self.is_empty() {
            "(empty)".into()
        } else {
            self.to_string()
        }
    }
}

impl Shown for String {
    fn shown(&self) -> String {
        self.as_str().shown()
    }
}

impl Shown for bool {
    fn shown(&self) -> String {
        if *self { "yes" } else { "no" }.into()
    }
}

macro_rules! shown_as_display {
    ($($t:ty),*) => {$(
        impl Shown for $t {
            fn shown(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
shown_as_display!(
    i32,
    i64,
    u32,
    u64,
    usize,
    std::net::Ipv4Addr,
    std::net::IpAddr
);

impl Shown for std::path::Path {
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

impl Shown for std::path::PathBuf {
    fn shown(&self) -> String {
        self.as_path().shown()
    }
}

impl<T: Shown + ?Sized> Shown for &T {
    fn shown(&self) -> String {
        (**self).shown()
    }
}

/// Absent is "none".
impl<T: Shown> Shown for Option<T> {
    fn shown(&self) -> String {
        self.as_ref().map_or_else(|| "none".into(), T::shown)
    }
}

/// A list reads "a, b, c", or "none".
impl<T: Shown> Shown for [T] {
    fn shown(&self) -> String {
        if self.is_empty() {
            return "none".into();
        }
        self.iter().map(T::shown).collect::<Vec<_>>().join(", ")
    }
}

impl<T: Shown> Shown for Vec<T> {
    fn shown(&self) -> String {
        self.as_slice().shown()
    }
}

/// The claims a demo makes, each checked against the kernel.
#[derive(Default)]
pub struct Evidence {
    claims: Vec<(String, bool, String)>,
}

impl Evidence {
    /// Records one claim: what is claimed, whether it holds, and what was seen.
    pub fn check(&mut self, claim: impl Into<String>, holds: bool, seen: impl Into<String>) {
        self.claims.push((claim.into(), holds, seen.into()));
    }

    /// Records that `seen` equals `expected` (`want_equal`) or differs from it. What was seen
    /// reads "X" when it is as expected, "X, expected Y" when not; for a difference,
    /// "X and Y", or "both X" when they are the same.
    pub fn compare<T: PartialEq + Shown>(
        &mut self,
        claim: impl Into<String>,
        seen: T,
        expected: T,
        want_equal: bool,
    ) {
        let equal = seen == expected;
        let words = match (want_equal, equal) {
            (true, true) => seen.shown(),
            (true, false) => format!("{}, expected {}", seen.shown(), expected.shown()),
            (false, false) => format!("{} and {}", seen.shown(), expected.shown()),
            (false, true) => format!("both {}", seen.shown()),
        };
        self.check(claim, equal == want_equal, words);
    }

    pub fn holds(&self) -> bool {
        self.claims.iter().all(|(_, ok, _)| *ok)
    }

    fn print(&self) {
        if self.claims.is_empty() {
            return;
        }
        say("evidence:");
        for (claim, ok, seen) in &self.claims {
            say(format!(
                "  [{}] {claim}: {seen}",
                if *ok { " ok " } else { "FAIL" }
            ));
        }
    }
}

/// Prints one line of narration. A closed stdout (`podlab demo | head`) ends the demo the
/// way a signal does: what it made is removed, and podlab exits (see [`interrupt`]).
pub fn say(line: impl AsRef<str>) {
    interrupt::say(line.as_ref());
}

/// The pause between two polls of a wait: a checkpoint at which a signal ends the demo.
pub fn poll_pause(pause: std::time::Duration) {
    interrupt::checkpoint();
    std::thread::sleep(pause);
    interrupt::checkpoint();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_reads_as_words() {
        let mut evidence = Evidence::default();
        evidence.compare("same", Some(65534u32), Some(65534), true);
        evidence.compare("expected", None, Some(1u32), true);
        evidence.compare("differ", 4026532179u64, 4026532251, false);
        evidence.compare("alike", "vm", "vm", false);
        evidence.compare("list", vec!["a".to_string(), "b".into()], vec![], false);
        let seen: Vec<(&str, bool, &str)> = evidence
            .claims
            .iter()
            .map(|(c, ok, s)| (c.as_str(), *ok, s.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("same", true, "65534"),
                ("expected", false, "none, expected 1"),
                ("differ", true, "4026532179 and 4026532251"),
                ("alike", false, "both vm"),
                ("list", true, "a, b and none"),
            ]
        );
    }

    #[test]
    fn help_lists_every_demo_and_set_on_one_line() {
        let help = catalogue();
        for demo in DEMOS {
            let line = help
                .lines()
                .find(|l| l.split_whitespace().next() == Some(demo.name))
                .unwrap_or_else(|| panic!("{} not listed:\n{help}", demo.name));
            assert!(line.contains(demo.about), "{line}");
        }
        for (set, _) in SETS {
            assert!(select(set).is_some_and(|d| !d.is_empty()), "{set}");
            assert!(help.lines().any(|l| l.trim_start().starts_with(set)));
        }
        assert_eq!(select("all").map(|d| d.len()), Some(DEMOS.len()));
        assert_eq!(select("namespaces").map(|d| d.len()), Some(6));
        assert!(select("bogus").is_none());
    }
}
