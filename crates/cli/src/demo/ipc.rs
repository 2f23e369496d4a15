//! `podlab demo ipc`.
use anyhow::Result;

use super::Evidence;

pub fn run(_evidence: &mut Evidence) -> Result<()> {
    anyhow::bail!("the ipc demo is not written yet")
}
