//! The mixed load test, small: 8 clients × 2 rounds of sync plans, jobs and checks on the
//! bundled sample graph against a service in the load test's process, every answer checked.
//! (`--fresh-own-key` keeps the `cache: false` requests on a cache key of their own: with one
//! graph, a cached job submitted while a `cache: false` plan of the same key is stored can
//! otherwise meet the known race of `POST /v1/jobs`, a 500 "FOREIGN KEY constraint failed",
//! which the full-size run reports.)

use std::process::Command;

#[test]
fn the_mixed_mode_loses_nothing_with_a_few_clients() {
    let sample = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../samples/resnet_block.train.json"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["--mixed", "--clients", "8", "--rounds", "2", "--seed", "3"])
        .args(["--graphs", sample, "--fresh-own-key", "--workers", "2"])
        .output()
        .expect("running loadtest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("| failures | 0 |"), "{stdout}");
    assert!(stdout.contains("| **all** | 16 | 16 | 0 |"), "{stdout}");
}
