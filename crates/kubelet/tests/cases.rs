//! Runs every case of `tests/cases/*.json` through `explain` and `check`, and checks that the
//! cases together exercise every rule ID of the spec and every surprise of its section 12.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use podlab_kubelet::rules::SURPRISES;
use podlab_kubelet::{check, explain, CASES_SCHEMA, SPEC_RULE_IDS};
use serde_json::Value;

/// A case with what explaining it gave.
struct Ran {
    file: String,
    case: Value,
    declared: Vec<String>,
    fired: Vec<String>,
    mismatches: Vec<String>,
    narration: Vec<String>,
}

fn case_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no case files in {}", dir.display());
    files
}

fn run_all() -> Vec<Ran> {
    let mut out = Vec::new();
    for path in case_files() {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(doc["schema"], CASES_SCHEMA, "{file}: schema");
        let results = explain(&doc).unwrap_or_else(|e| panic!("{file}: {e}"));
        let cases = doc["cases"].as_array().expect("cases array");
        assert_eq!(results.len(), cases.len());
        for (case, result) in cases.iter().zip(results) {
            let declared = case["rules"]
                .as_array()
                .unwrap_or_else(|| panic!("{file}: case {} has no rules array", result.id))
                .iter()
                .map(|r| r.as_str().expect("rule ids are strings").to_string())
                .collect();
            out.push(Ran {
                file: file.clone(),
                case: case.clone(),
                declared,
                mismatches: check(case, &result.output)
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                fired: result.rules,
                narration: result.narration,
            });
        }
    }
    out
}

fn id(ran: &Ran) -> &str {
    ran.case["id"].as_str().unwrap_or("?")
}

#[test]
fn every_case_matches_its_expectation() {
    let ran = run_all();
    let failed: Vec<String> = ran
        .iter()
        .filter(|r| !r.mismatches.is_empty())
        .map(|r| {
            format!(
                "{} / {}:\n    {}\n  narration:\n    {}",
                r.file,
                id(r),
                r.mismatches.join("\n    "),
                r.narration.join("\n    ")
            )
        })
        .collect();
    println!(
        "{} passed, {} failed",
        ran.len() - failed.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} case(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn at_least_sixty_cases_with_unique_ids() {
    let ran = run_all();
    assert!(ran.len() >= 60, "only {} cases", ran.len());
    let mut seen = BTreeSet::new();
    for r in &ran {
        assert!(
            seen.insert(id(r).to_string()),
            "duplicate case id {}",
            id(r)
        );
    }
}

#[test]
fn declared_rules_are_spec_rules_and_actually_fire() {
    for r in run_all() {
        for rule in &r.declared {
            assert!(
                SPEC_RULE_IDS.contains(&rule.as_str()),
                "{}: {rule} is not a spec rule ID",
                id(&r)
            );
            assert!(
                r.fired.contains(rule),
                "{}: declares {rule} but the engine fired {:?}",
                id(&r),
                r.fired
            );
        }
        for rule in &r.fired {
            assert!(
                SPEC_RULE_IDS.contains(&rule.as_str()),
                "{}: fired unknown rule {rule}",
                id(&r)
            );
        }
    }
}

#[test]
fn every_spec_rule_is_covered_by_a_case() {
    let ran = run_all();
    let declared: BTreeSet<&str> = ran
        .iter()
        .flat_map(|r| r.declared.iter().map(String::as_str))
        .collect();
    let missing: Vec<&str> = SPEC_RULE_IDS
        .iter()
        .copied()
        .filter(|id| !declared.contains(id))
        .collect();
    assert!(missing.is_empty(), "rules no case declares: {missing:?}");
}

#[test]
fn every_section_12_surprise_has_a_case_firing_its_rules() {
    let ran = run_all();
    for (n, rules) in SURPRISES {
        let prefix = format!("surprise-{n:02}-");
        let Some(r) = ran.iter().find(|r| id(r).starts_with(&prefix)) else {
            panic!("no case for section 12 point {n} (id prefix {prefix})");
        };
        for rule in *rules {
            assert!(
                r.fired.iter().any(|f| f == rule),
                "{}: does not fire {rule}",
                id(r)
            );
        }
    }
}

#[test]
fn narration_names_the_rules() {
    for r in run_all() {
        for rule in &r.fired {
            let prefix = format!("{rule}: ");
            assert!(
                r.narration.iter().any(|line| line.starts_with(&prefix)),
                "{}: no narration line for {rule}",
                id(&r)
            );
        }
    }
}
