//! Where tests find `../shared` (the zoo, `tools/check_plan.py`, benchmark traces) and
//! python3, and what a test does without them: by default it skips (the whole test or the
//! part that needs them) with a note written straight to stderr, past the test harness's
//! output capture, so that a plain `cargo test` shows every skip; under
//! `MEMPLAN_REQUIRE_SHARED=1` (CI) a missing `../shared` or python3 fails the test instead.
//! Optional dependencies (torch, a GPU) only ever get the note ([`optional`]).
//!
//! `MEMPLAN_SHARED_DIR` points the tests at another copy of the shared folder.
//!
//! Every crate's tests include this file (`#[path]`), so it uses std only.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The variable that turns a missing `../shared` or python3 into a failure.
pub const REQUIRE: &str = "MEMPLAN_REQUIRE_SHARED";

/// The variable that overrides where the shared folder is.
pub const DIR: &str = "MEMPLAN_SHARED_DIR";

/// Whether `../shared` and python3 are required (`MEMPLAN_REQUIRE_SHARED` set, not to `0`).
pub fn required() -> bool {
    std::env::var(REQUIRE).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A test, or part of it, cannot run because of `why` (something under `../shared`, or
/// python3, is missing): panics when they are required, else writes a note and returns (the
/// caller then skips that part).
#[track_caller]
pub fn skip(why: &str) {
    if required() {
        panic!("{why} ({REQUIRE} is set: ../shared and python3 must be present)");
    }
    note(&format!("skipped, {why} (with {REQUIRE}=1 this fails)"));
}

/// An optional dependency (torch, a GPU) is missing: a note, never a failure.
pub fn optional(why: &str) {
    note(&format!("skipped, {why} (optional)"));
}

/// Writes `msg` to the process's stderr directly: `eprintln!` would be captured and shown
/// only for failing tests.
fn note(msg: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test");
    let _ = writeln!(std::io::stderr().lock(), "note: {test}: {msg}");
}

/// The workspace root: the nearest folder above the including crate with a `Cargo.lock`.
pub fn workspace_root() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .unwrap_or(crate_dir)
        .to_path_buf()
}

/// The shared folder (`MEMPLAN_SHARED_DIR`, else `../shared` next to the workspace), whether
/// or not it exists.
pub fn shared_dir() -> PathBuf {
    match std::env::var_os(DIR) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => workspace_root().join("../shared"),
    }
}

/// `relative` under the shared folder if it exists; otherwise [`skip`] and `None`.
#[track_caller]
pub fn shared_path(relative: &str) -> Option<PathBuf> {
    let p = shared_dir().join(relative);
    if p.exists() {
        Some(p)
    } else {
        skip(&format!("{} not found", p.display()));
        None
    }
}

/// The zoo graph `../shared/zoo/NAME.json` if it exists; otherwise [`skip`] and `None`.
#[track_caller]
pub fn zoo_path(name: &str) -> Option<PathBuf> {
    shared_path(&format!("zoo/{name}.json"))
}

/// Whether `python3` runs; otherwise [`skip`] and false.
#[track_caller]
pub fn python3() -> bool {
    static RUNS: OnceLock<bool> = OnceLock::new();
    let runs = *RUNS.get_or_init(|| {
        Command::new("python3")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !runs {
        skip("python3 not found");
    }
    runs
}

/// `../shared/tools/check_plan.py` when it and python3 are there; otherwise [`skip`] and
/// `None`.
#[track_caller]
pub fn check_plan_py() -> Option<PathBuf> {
    let script = shared_path("tools/check_plan.py")?;
    python3().then_some(script)
}
