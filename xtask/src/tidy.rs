//! House rules checked as tests: every Rust module starts with a `//!` doc saying what it is for.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn tidy_every_module_has_a_doc_header() {
    let root = crate::workspace_root();
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "benches"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(
        !files.is_empty(),
        "found no Rust files under {}",
        root.display()
    );
    let missing: Vec<String> = files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "build.rs"))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty() && !l.starts_with("#!["));
            !first.is_some_and(|l| l.starts_with("//!"))
        })
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a `//!` doc header: {missing:#?}"
    );
}
