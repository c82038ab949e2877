//! A C program over the C ABI (`tests/c/plan_sample.c`), compiled with the system C compiler
//! against `include/memplan.h` and linked with the built cdylib, plans the bundled sample; its
//! figures must be those of the plan the pipeline gives in Rust with the same options.

use memplan::graph::Graph;
use memplan::pipeline::{self, Control, PipelineOptions};
use memplan::plan::Instruction;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const OPTIONS: &str = r#"{"effort":1}"#;

/// The first C compiler found: `cc`, else `gcc`.
fn c_compiler() -> Option<&'static str> {
    ["cc", "gcc"].into_iter().find(|cc| {
        Command::new(cc)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The directory of the cdylib built with this test: cargo writes it to `deps/` (beside the
/// test executable) and may copy it to the profile directory above; the newer one wins.
fn cdylib_dir() -> PathBuf {
    let name = format!(
        "{}memplan_capi{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let candidates = [Some(deps), deps.parent()];
    candidates
        .into_iter()
        .flatten()
        .filter_map(|dir| {
            let modified = std::fs::metadata(dir.join(&name)).ok()?.modified().ok()?;
            Some((modified, dir.to_path_buf()))
        })
        .max()
        .map(|(_, dir)| dir)
        .unwrap_or_else(|| {
            panic!(
                "no {name} in {} or its parent: build it with `cargo build --release -p memplan-capi`",
                deps.display()
            )
        })
}

/// The program's `key value` lines.
fn figures(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_c_program_plans_the_sample_as_the_pipeline_does() {
    if !cfg!(unix) {
        eprintln!("skipped: the C program test runs on Unix-like systems only");
        return;
    }
    let Some(cc) = c_compiler() else {
        eprintln!("skipped: no C compiler (cc or gcc) on PATH");
        return;
    };
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sample = crate_dir.join("../samples/resnet_block.train.json");
    let lib_dir = cdylib_dir();
    // One executable per run: the target directory is shared.
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memplan_plan_sample-{}", std::process::id()));
    let compiled = Command::new(cc)
        .args(["-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I"])
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("tests/c/plan_sample.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib_dir)
        .arg("-lmemplan_capi")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .output()
        .unwrap();
    assert!(
        compiled.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let ran = Command::new(&exe)
        .arg(&sample)
        .arg(OPTIONS)
        .env("LD_LIBRARY_PATH", &lib_dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&exe);
    let stdout = String::from_utf8(ran.stdout).unwrap();
    assert!(
        ran.status.success(),
        "the C program failed ({}):\n{stdout}\n{}",
        ran.status,
        String::from_utf8_lossy(&ran.stderr)
    );
    let got = figures(&stdout);

    // The same plan, in Rust.
    let graph = Graph::parse(&std::fs::read_to_string(&sample).unwrap()).unwrap();
    let options: PipelineOptions = serde_json::from_str(OPTIONS).unwrap();
    let plan = pipeline::run(&graph, &options, &Control::default())
        .unwrap()
        .plan;
    let offsets: Vec<u64> = plan
        .instructions
        .iter()
        .filter_map(|i| match i {
            Instruction::Alloc { offset, .. } => Some(*offset),
            _ => None,
        })
        .collect();
    let joined = offsets
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let replay = memplan::validate(&graph, &plan, None).unwrap();
    let bad = Graph::parse("{\"format\": ").unwrap_err();

    assert_eq!(got["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(got["plan_code"], "0");
    assert!(!offsets.is_empty());
    assert_eq!(got["allocs"], offsets.len().to_string());
    assert_eq!(got["offsets"], joined);
    assert_eq!(got["max_offset"], offsets.iter().max().unwrap().to_string());
    assert_eq!(got["peak_bytes"], plan.stats.peak_bytes.to_string());
    assert_eq!(got["check_code"], "0");
    assert_eq!(got["check_peak_bytes"], replay.peak.to_string());
    assert_eq!(
        got["bad_graph_code"],
        memplan_capi::MEMPLAN_ERR_BAD_GRAPH.to_string()
    );
    assert_eq!(got["bad_graph_error"], bad.to_string());
    assert_eq!(
        got["null_code"],
        memplan_capi::MEMPLAN_ERR_NULL_ARGUMENT.to_string()
    );
}
