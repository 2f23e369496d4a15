//! `podlab demo uts`.
use anyhow::Result;

use super::Evidence;

pub fn run(_evidence: &mut Evidence) -> Result<()> {
    anyhow::bail!("the uts demo is not written yet")
}
