//! `peers-report DIR [PREFIX]`: draws the plots of `DIR/PREFIX.csv` again (`PREFIX-*.svg`;
//! PREFIX is `peers` for a full run, the default, or `peers-quick`), after a change
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
    let prefix = std::env::args().nth(2).unwrap_or_else(|| "peers".into());
    let csv = dir.join(format!("{prefix}.csv"));
    let text =
        std::fs::read_to_string(&csv).with_context(|| format!("reading {}", csv.display()))?;
    let rows = record::from_csv(&text)?;
    for (_, file) in report::plot_all(&dir, &prefix, &rows)? {
        println!("wrote {}", dir.join(file).display());
    }
    Ok(())
}
