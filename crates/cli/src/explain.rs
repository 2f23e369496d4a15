//! `podlab explain -f FILE [-o json] [--check]`: kubelet's decisions for the cases in FILE
//! (the interchange format of the kubelet reference, section 11), each with the rule IDs that
//! made it. `--check` compares every output with the case's `expect` and ends with the line
//! `N passed, M failed` (exit status 1 when any failed). `--example` prints a cases file to
//! start from; docs/explain.md describes the format.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// The example of docs/explain.md: one case of each kind (`sync`, `backoff`, `probeWorker`),
/// each with the `expect` that `--check` confirms.
const EXAMPLE: &str = include_str!("../../../docs/explain-example.json");

pub fn print_example() -> Result<()> {
    print!("{EXAMPLE}");
    Ok(())
}

pub fn run(file: &Path, json: bool, check: bool) -> Result<()> {
    let text = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading the cases from stdin")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let input: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", file.display()))?;
    let verification =
        podlab_kubelet::verify(&input).with_context(|| format!("{}", file.display()))?;

    if json {
        let results: Vec<_> = verification
            .cases
            .iter()
            .map(|c| serde_json::json!({"id": c.result.id, "kind": c.result.kind, "output": c.result.output}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "results": results }))?
        );
    } else {
        for case in &verification.cases {
            println!("case {} ({}):", case.result.id, case.result.kind);
            for line in &case.result.narration {
                println!("  {line}");
            }
            if check {
                match &case.mismatches {
                    None => println!("  (no expect: nothing to check)"),
                    Some(m) if m.is_empty() => println!("  check: as expected"),
                    Some(m) => {
                        for mismatch in m {
                            println!("  check: MISMATCH {mismatch}");
                        }
                    }
                }
            }
        }
    }
    if check {
        let summary = verification.summary();
        // `-o json` prints exactly one JSON object on stdout; the tally then goes to stderr.
        if json {
            eprintln!("{summary}");
        } else {
            println!("{summary}");
        }
        if verification.failed() > 0 {
            bail!("{} case(s) differ from their expect", verification.failed());
        }
    }
    Ok(())
}
