//! `podlab demo`: one concept a step, built for real, each step checking its own evidence.
//!
//! Every demo narrates what it does, prints the evidence side by side (host vs inside), and
//! records each claim in an [`Evidence`] list. A claim that does not hold makes the demo fail
//! (exit status 1), so a demo is also a test that a learner can read.

mod cni;
mod indexer;
mod ipc;
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

use anyhow::{bail, Result};

/// The namespace demos, in the order `podlab demo all` runs them.
pub const NAMESPACE_DEMOS: [(&str, fn(&mut Evidence) -> Result<()>); 6] = [
    ("uts", uts::run),
    ("ipc", ipc::run),
    ("net", net::run),
    ("pid", pid::run),
    ("mnt", mnt::run),
    ("user", user::run),
];

/// The demos built on whole pods: they need real root (overlay mounts of image layers, the
/// runtime's shim, the node agent).
pub const POD_DEMOS: [(&str, fn(&mut Evidence) -> Result<()>); 8] = [
    ("pod", pod::run),
    ("cni", cni::run),
    ("cni-failure", cni::run_failure),
    ("restarts", restarts::run),
    ("probes", probes::run),
    ("sandbox", sandbox::run),
    ("indexer", indexer::run),
    ("layers", layers::run),
];

pub fn run(what: &str) -> Result<()> {
    let namespace_demo = |name: &str| NAMESPACE_DEMOS.iter().find(|(n, _)| *n == name);
    let pod_demo = |name: &str| POD_DEMOS.iter().find(|(n, _)| *n == name);
    let selected: Vec<_> = match what {
        "all" | "namespaces" => NAMESPACE_DEMOS.iter().collect(),
        name => match namespace_demo(name).or_else(|| pod_demo(name)) {
            Some(demo) => vec![demo],
            None => {
                let names: Vec<_> = NAMESPACE_DEMOS
                    .iter()
                    .chain(&POD_DEMOS)
                    .map(|(n, _)| *n)
                    .collect();
                return Err(crate::UsageError(format!(
                    "unknown demo {name:?} (expected one of {}, all)",
                    names.join(", ")
                ))
                .into());
            }
        },
    };
    if selected.iter().any(|(name, _)| pod_demo(name).is_some()) {
        if !nix::unistd::geteuid().is_root() {
            return Err(crate::UsageError(format!(
                "podlab demo {what} builds real pods (overlay rootfs, shim, node agent) and needs root; \
                 the namespace demos (podlab demo all) run without it"
            ))
            .into());
        }
    } else {
        crate::privilege::ensure_namespace_privileges()?;
    }
    let mut failed = Vec::new();
    for (name, demo) in selected {
        println!("\n=== podlab demo {name} ===");
        let mut evidence = Evidence::default();
        let outcome = demo(&mut evidence);
        evidence.print();
        match outcome {
            Err(err) => {
                println!("demo {name}: error: {err:#}");
                failed.push(*name);
            }
            Ok(()) if !evidence.holds() => failed.push(*name),
            Ok(()) => println!("demo {name}: all evidence holds"),
        }
    }
    if !failed.is_empty() {
        bail!("evidence did not hold in: {}", failed.join(", "));
    }
    Ok(())
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

    /// Records that `a` and `b` are equal (`want_equal`) or differ.
    pub fn compare<T: PartialEq + std::fmt::Debug>(
        &mut self,
        claim: impl Into<String>,
        a: T,
        b: T,
        want_equal: bool,
    ) {
        let holds = (a == b) == want_equal;
        self.check(
            claim,
            holds,
            format!("{a:?} {} {b:?}", if a == b { "==" } else { "!=" }),
        );
    }

    pub fn holds(&self) -> bool {
        self.claims.iter().all(|(_, ok, _)| *ok)
    }

    fn print(&self) {
        if self.claims.is_empty() {
            return;
        }
        println!("evidence:");
        for (claim, ok, seen) in &self.claims {
            println!("  [{}] {claim}: {seen}", if *ok { " ok " } else { "FAIL" });
        }
    }
}

/// Prints one line of narration.
pub fn say(line: impl AsRef<str>) {
    println!("{}", line.as_ref());
}
