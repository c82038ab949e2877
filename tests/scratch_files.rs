//! Test runs leave nothing behind: every test that writes files writes them into a
//! `tempfile::tempdir()`, which is removed with its files when the test ends (passed or
//! failed). A folder in the system's temporary folder named after the test process outlives
//! the run: before this check, each `cargo test` left nine such folders (about 1 MB) in `/tmp`.

use std::fs;
use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The test sources of the workspace: `tests/` of the root crate and of every member.
fn test_sources(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&root.join("tests"), &mut files);
    for member in [
        "api",
        "cli",
        "executor",
        "solver",
        "benchmarks",
        "capi",
        "python",
    ] {
        rust_files(&root.join(member).join("tests"), &mut files);
    }
    files.sort();
    files
}

/// The lines of `text` that name the system's temporary folder itself.
fn temp_dir_lines(text: &str) -> Vec<usize> {
    let needle = ["std::env::", "temp_dir()"].concat();
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(&needle))
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn no_test_writes_into_a_temporary_folder_that_outlives_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = test_sources(root);
    assert!(files.len() > 20, "found only {} test files", files.len());
    let mut offenders = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        for line in temp_dir_lines(&text) {
            offenders.push(format!(
                "{}:{line}",
                f.strip_prefix(root).unwrap().display()
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "use tempfile::tempdir() (removed when the test ends) instead of the system's \
         temporary folder itself in {offenders:?}"
    );
}

#[test]
fn the_check_finds_the_temporary_folder_only_where_it_is_named() {
    let named = ["let d = std::env::", "temp_dir().join(\"x\");"].concat();
    let text = format!("let a = 1;\n{named}\nlet t = tempfile::tempdir();\n");
    assert_eq!(temp_dir_lines(&text), [2]);
}
