//! `podlab demo net`.
use anyhow::Result;

use super::Evidence;

pub fn run(_evidence: &mut Evidence) -> Result<()> {
    anyhow::bail!("the net demo is not written yet")
}
