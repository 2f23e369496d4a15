//! `peers-report DIR`: draws the plots of `DIR/peers.csv` again (`peers-*.svg`), after a change
//! to the plots or to look at an older run. `peers-bench` writes the CSV, the Markdown and the
//! plots of a run in the first place.

use std::path::PathBuf;

use anyhow::{Context, Result};
use podlab_layers::bench::{record, report};

fn main() -> Result<()> {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .context("usage: peers-report DIR (a folder with peers.csv)")?;
    let csv = dir.join("peers.csv");
    let text =
        std::fs::read_to_string(&csv).with_context(|| format!("reading {}", csv.display()))?;
    let rows = record::from_csv(&text)?;
    for (_, file) in report::plot_all(&dir, &rows)? {
        println!("wrote {}", dir.join(file).display());
    }
    Ok(())
}
