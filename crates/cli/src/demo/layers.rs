//! `podlab demo layers`: docker and containerd side by side (podlab-layers). Where dockerd,
//! containerd, ctr and runc are installed it runs a container through each stack in a private
//! lab and checks the process trees, namespace ids and overlay layers the kernel shows; where
//! they are not, it prints the two stacks and the install line.

use anyhow::Result;
use podlab_layers::demo::Outcome;

use super::Evidence;

pub fn run(evidence: &mut Evidence) -> Result<()> {
    match podlab_layers::run_layers_demo(&mut std::io::stdout())? {
        // The demo printed every claim with what the kernel showed; it fails when one does not
        // hold, so here they are only counted.
        Outcome::Live { checks } => {
            let held = checks.iter().filter(|c| c.holds).count();
            evidence.check(
                "every claim of the two stacks holds",
                held == checks.len(),
                format!("{held} of {}", checks.len()),
            );
        }
        Outcome::TextOnly { missing } => {
            let names: Vec<&str> = missing.iter().map(|t| t.binary).collect();
            super::say(format!(
                "(only the comparison in words: {} not installed)",
                names.join(", ")
            ));
        }
    }
    Ok(())
}
