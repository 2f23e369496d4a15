//! `podlab explain`: the shipped kubelet cases through the real binary.

use crate::support::podlab;

fn case_files() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kubelet/tests/cases");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "expected the kubelet case files in {}",
        dir.display()
    );
    files
}

#[test]
fn every_shipped_case_checks_out_and_the_tally_ends_the_output() {
    for file in case_files() {
        let out = podlab()
            .args(["explain", "--check", "-f"])
            .arg(&file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {stdout}{}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let last = stdout.lines().last().unwrap_or("");
        assert!(
            last.ends_with(" passed, 0 failed"),
            "{}: last line {last:?}",
            file.display()
        );
    }
}

#[test]
fn json_output_is_one_object_with_a_result_per_case_in_order() {
    let file = &case_files()[0];
    let input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let out = podlab()
        .args(["explain", "-o", "json", "-f"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let output: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("exactly one JSON object");
    let ids: Vec<&str> = output["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = input["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, want);
    assert!(output["results"][0]["output"].is_object());
}

#[test]
fn a_wrong_expectation_is_reported_and_fails() {
    let file = &case_files()[0];
    let mut input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let case = &mut input["cases"][0];
    case["expect"] = serde_json::json!({"phase": "NoSuchPhase"});
    let tmp = std::env::temp_dir().join(format!("podlab-explain-{}.json", std::process::id()));
    std::fs::write(&tmp, input.to_string()).unwrap();
    let out = podlab()
        .args(["explain", "--check", "-f"])
        .arg(&tmp)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&tmp);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("MISMATCH"), "{stdout}");
    assert!(
        stdout
            .lines()
            .last()
            .unwrap()
            .ends_with(" passed, 1 failed"),
        "{stdout}"
    );
}

/// Issue 15: the cases format is documented (docs/explain.md) with an example file that
/// `podlab explain --example` prints and `podlab explain -f` accepts, every case checking out.
#[test]
fn explain_example_is_the_documented_file_and_round_trips_through_check() {
    let out = podlab().args(["explain", "--example"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let file = std::fs::read(docs.join("explain-example.json")).unwrap();
    assert_eq!(
        out.stdout, file,
        "--example prints docs/explain-example.json"
    );
    let guide = std::fs::read_to_string(docs.join("explain.md")).unwrap();
    assert!(
        guide.contains("explain-example.json"),
        "docs/explain.md links the example"
    );

    let example: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cases = example["cases"].as_array().unwrap();
    let mut kinds: Vec<&str> = cases.iter().map(|c| c["kind"].as_str().unwrap()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["backoff", "probeWorker", "sync"]);
    assert!(cases.iter().all(|c| c.get("expect").is_some()));

    let mut check = podlab()
        .args(["explain", "--check", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    check.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    let checked = check.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("3 passed, 0 failed"),
        "{stdout}"
    );
}
