//! `podlab ns ls`: the host's namespaces, like `lsns`.
use anyhow::Result;

pub fn run(_pid: Option<i32>, _json: bool) -> Result<()> {
    anyhow::bail!("not yet")
}
