//! `podlab demo mnt`.
use anyhow::Result;

use super::Evidence;

pub fn run(_evidence: &mut Evidence) -> Result<()> {
    anyhow::bail!("the mnt demo is not written yet")
}
