//! `podlab demo pid`.
use anyhow::Result;

use super::Evidence;

pub fn run(_evidence: &mut Evidence) -> Result<()> {
    anyhow::bail!("the pid demo is not written yet")
}
