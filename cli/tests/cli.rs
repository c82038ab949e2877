//! The `memplan` binary: commands, exit codes, and messages on stderr.

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{sample, sample_json, zoo};

fn memplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn plan_of_the_bundled_sample_writes_a_plan_that_check_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sample.plan.json");
    // --no-fuse: the plan is checked against the input graph, not a fused rewrite of it
    let r = memplan(&["plan", "sample", "--no-fuse", "-o", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stderr).contains("peak"));
    let c = memplan(&["check", &sample(), out.to_str().unwrap()]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    assert!(String::from_utf8_lossy(&c.stdout).starts_with("valid"));
}

#[test]
fn plan_prints_json_on_stdout_without_an_output_file() {
    let r = memplan(&["plan", &sample(), "--order", "given"]);
    assert!(r.status.success());
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["format"], "memplan-plan/1");
    assert_eq!(v["stats"]["order_method"], "listed");
}

#[test]
fn check_exits_1_with_the_reason_when_the_budget_is_too_small() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("budget.plan.json");
    assert!(
        memplan(&["plan", &sample(), "--no-fuse", "-o", out.to_str().unwrap()])
            .status
            .success()
    );
    let c = memplan(&[
        "check",
        &sample(),
        out.to_str().unwrap(),
        "--budget",
        "1000",
    ]);
    assert_eq!(c.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&c.stderr).contains("over the budget of 1000"));
}

#[test]
fn bad_graph_input_exits_2_naming_the_culprit() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"format":"memplan-graph/1","tensors":[{"name":"t","size":0,"kind":"input"}],"ops":[]}"#,
    )
    .unwrap();
    let r = memplan(&["plan", bad.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("tensor \"t\" has size 0"), "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn a_missing_file_exits_2() {
    let r = memplan(&["stats", "/nonexistent/graph.json"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("/nonexistent/graph.json"));
}

#[test]
fn a_plan_file_with_a_syntax_error_exits_2_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("broken.plan.json");
    std::fs::write(&p, "{\"format\": \"memplan-plan/1\",\n \"arena_bytes\": }").unwrap();
    let r = memplan(&["check", &sample(), p.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("line 2"));
}

#[test]
fn place_writes_offsets_and_exits_1_when_the_capacity_is_below_load() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("bufs.csv");
    std::fs::write(
        &csv,
        "id,lower,upper,size\n0,0,2,100\n1,1,3,50\n2,2,4,100\n",
    )
    .unwrap();
    let placed = dir.path().join("placed.csv");
    let r = memplan(&[
        "place",
        csv.to_str().unwrap(),
        "-o",
        placed.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let text = std::fs::read_to_string(&placed).unwrap();
    assert!(text.starts_with("id,lower,upper,size,offset\n"));
    assert_eq!(text.lines().count(), 4);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("LOAD 150 B") && err.contains("peak 150 B"),
        "{err}"
    );
    let r = memplan(&["place", csv.to_str().unwrap(), "--capacity", "149"]);
    assert_eq!(r.status.code(), Some(1));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("does not fit") && err.contains("(proven)"),
        "{err}"
    );
}

#[test]
fn place_that_misses_its_capacity_writes_nothing_and_says_why_with_or_without_search() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("bufs.csv");
    // LOAD 300 B: two buffers alive together at every step of [1, 3).
    std::fs::write(
        &csv,
        "id,lower,upper,size\n0,0,2,100\n1,1,3,200\n2,2,4,50\n",
    )
    .unwrap();
    let out = dir.path().join("out.csv");
    std::fs::write(&out, "ORIGINAL\n").unwrap();
    for extra in [&[][..], &["--heuristic"][..]] {
        let mut args = vec!["place", csv.to_str().unwrap(), "--capacity", "299"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-o", out.to_str().unwrap()]);
        let r = memplan(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{extra:?}: {err}");
        // Below LOAD: proven by the bound, search or not.
        assert!(
            err.contains("does not fit") && err.contains("(proven)"),
            "{extra:?}: {err}"
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "ORIGINAL\n");
    }
    // At LOAD of a generated fit the heuristics miss (1.1–1.25 × LOAD); --heuristic then
    // says that no search ran rather than that one ran out of time.
    use memplan_solver::generate::{generate, HardSpec, Variant};
    let inst = generate(&HardSpec::challenging(5, 100, Variant::Fits));
    let ids: Vec<String> = (0..inst.problem.buffers.len())
        .map(|i| i.to_string())
        .collect();
    let hard = dir.path().join("hard.csv");
    std::fs::write(
        &hard,
        memplan_solver::csv::write_buffers(&ids, &inst.problem),
    )
    .unwrap();
    let cap = inst.capacity.to_string();
    let r = memplan(&[
        "place",
        hard.to_str().unwrap(),
        "--heuristic",
        "--capacity",
        &cap,
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(
        err.contains("by the heuristics") && err.contains("--heuristic runs no exact search"),
        "{err}"
    );
    assert!(!err.contains("time limit"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "ORIGINAL\n");
}

#[test]
fn place_proves_optimal_a_peak_above_load_that_only_alignment_causes() {
    let dir = tempfile::tempdir().unwrap();
    // Three 256-aligned buffers alive together: LOAD 315 B, but only the topmost can end
    // short of a multiple of 256, so 773 B (300 and 10 rounded up, 5 on top) is the optimum,
    // which the bound proves without the exact search (`--heuristic`).
    let csv = dir.path().join("aligned.csv");
    std::fs::write(
        &csv,
        "id,lower,upper,size,alignment\na,0,2,5,256\nb,0,2,300,256\nc,1,3,10,256\n",
    )
    .unwrap();
    let r = memplan(&[
        "place",
        csv.to_str().unwrap(),
        "--heuristic",
        "-o",
        dir.path().join("aligned.placed.csv").to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("LOAD 315 B")
            && err.contains("peak 773 B")
            && err.contains("lower bound 773 B")
            && err.contains("status optimal"),
        "{err}"
    );
}

/// `memplan place` at LOAD on a generated fitting instance of `buffers` buffers (`seed`)
/// with `time_limit` seconds; its exit code (1: no placement) and what it said.
fn place_generated_at_load(seed: u64, buffers: usize, time_limit: &str) -> (Option<i32>, String) {
    use memplan_solver::generate::{generate, HardSpec, Variant};
    let dir = tempfile::tempdir().unwrap();
    let inst = generate(&HardSpec::challenging(seed, buffers, Variant::Fits));
    let ids: Vec<String> = (0..inst.problem.buffers.len())
        .map(|i| i.to_string())
        .collect();
    let csv = dir.path().join(format!("hard-{buffers}.csv"));
    std::fs::write(
        &csv,
        memplan_solver::csv::write_buffers(&ids, &inst.problem),
    )
    .unwrap();
    let cap = inst.capacity.to_string();
    let r = memplan(&[
        "place",
        csv.to_str().unwrap(),
        "--capacity",
        &cap,
        "--time-limit",
        time_limit,
        "-o",
        dir.path()
            .join(format!("hard-{buffers}.placed.csv"))
            .to_str()
            .unwrap(),
    ]);
    (
        r.status.code(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
    )
}

#[test]
fn place_says_a_search_that_ran_out_of_time_proved_nothing() {
    // 1000 buffers cut from a full rectangle, asked at LOAD: a placement exists, but not one
    // that 50 ms of search finds.
    let (code, err) = place_generated_at_load(5, 1000, "0.05");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("not proven impossible")
            && err.contains("time limit")
            && !err.contains("does not fit"),
        "{err}"
    );
}

#[test]
fn place_tells_how_far_an_unfinished_search_got() {
    // 450 buffers cut from a full rectangle at LOAD: a second of search stops well short.
    let (code, err) = place_generated_at_load(8, 450, "1");
    assert_eq!(code, Some(1), "{err}");
    let placed: usize = err
        .split("it placed at most ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no trace in: {err}"));
    assert!(
        0 < placed && placed < 450 && err.contains("of the 450 buffers at once"),
        "{err}"
    );
}

#[test]
fn place_rejects_a_malformed_csv_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("malformed.csv");
    std::fs::write(&csv, "id,lower,upper,size\n0,0,2,ten\n").unwrap();
    let r = memplan(&["place", csv.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("line 2, column `size`"));
}

#[cfg(unix)]
#[test]
fn a_reader_that_goes_away_ends_the_command_by_the_signal_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("sample.plan.json");
    let r = memplan(&[
        "plan",
        &sample(),
        "--order",
        "given",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let mut child = Command::new(env!("CARGO_BIN_EXE_memplan"))
        .args(["run", &sample(), plan.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before the command prints its first line (`… | head -0`).
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(13), "SIGPIPE, as Unix tools end");
}

#[test]
fn files_that_start_with_a_byte_order_mark_are_read_as_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let bom = |name: &str, text: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, [b"\xef\xbb\xbf".as_slice(), text].concat()).unwrap();
        path.to_str().unwrap().to_string()
    };
    let csv = bom("bom.csv", b"id,lower,upper,size\na,0,2,10\nb,1,3,10\n");
    let r = memplan(&["place", &csv]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stdout).starts_with("id,lower,upper,size,offset\n"));
    let graph = bom("graph.json", &std::fs::read(sample()).unwrap());
    let r = memplan(&["plan", &graph, "--order", "given"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let plan = bom("plan.json", &r.stdout);
    let c = memplan(&["check", &graph, &plan]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
}

#[test]
fn place_names_the_line_of_a_buffer_whose_alignment_overflows_and_a_missing_header() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("huge-alignment.csv");
    std::fs::write(
        &csv,
        "id,lower,upper,size\nfoo,0,2,4\nbar,0,2,9223372036854775809\n",
    )
    .unwrap();
    let r = memplan(&[
        "place",
        csv.to_str().unwrap(),
        "--alignment",
        "9223372036854775808",
    ]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("line 2, buffer `foo` (size 4, alignment 9223372036854775808)")
            && err.contains("--alignment"),
        "{err}"
    );
    let csv = dir.path().join("no-header.csv");
    std::fs::write(&csv, "0,0,1,4\n1,0,2,8\n").unwrap();
    let r = memplan(&["place", csv.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("line 1 is not a header"), "{err}");
}

#[test]
fn place_answers_a_capacity_below_the_bound_at_once_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    // LOAD 30 B: a capacity of 29 B is refused by the bound, without a placement searched.
    let csv = dir.path().join("two.csv");
    std::fs::write(&csv, "id,lower,upper,size\na,0,2,10\nb,1,3,20\n").unwrap();
    let out = dir.path().join("out.csv");
    std::fs::write(&out, "ORIGINAL\n").unwrap();
    let r = memplan(&[
        "place",
        csv.to_str().unwrap(),
        "--capacity",
        "29",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(1));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("the capacity 29 B is below the lower bound 30 B")
            && err.contains("no placement searched")
            && err.contains("does not fit")
            && err.contains("(proven)")
            && !err.contains("gap"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "ORIGINAL\n");
    // At the bound it fits, and the line says so.
    let r = memplan(&["place", csv.to_str().unwrap(), "--capacity", "30"]);
    assert!(r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("fits the capacity 30 B"), "{err}");
}

#[test]
fn place_refuses_buffers_that_no_64_bit_arena_holds_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    // Three buffers of 2^63 - 1 bytes alive together: before, a placer's overflow ended the
    // run with exit 3 and "buffer 2: offset + size overflows u64".
    let csv = dir.path().join("too-large.csv");
    let big = i64::MAX;
    std::fs::write(
        &csv,
        format!("id,lower,upper,size\na,0,2,{big}\nb,0,2,{big}\nc,0,2,{big}\n"),
    )
    .unwrap();
    let r = memplan(&["place", csv.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("line 4 (buffer `c`): with it the buffers alive at step 0 need"),
        "{err}"
    );
}

#[test]
fn stats_prints_the_figures_of_the_sample() {
    let r = memplan(&["stats", "sample"]);
    assert!(r.status.success());
    let out = String::from_utf8_lossy(&r.stdout);
    for key in [
        "ops              28",
        "naive bytes",
        "LOAD (listed)",
        "weights bytes",
        "order bound",
        "peak bound",
    ] {
        assert!(out.contains(key), "{out}");
    }
}

#[test]
fn stats_bounds_the_peak_of_resnet18_with_its_alignment_padding() {
    let Some(zoo) = common::shared::zoo_path("resnet18.1.inference") else {
        return;
    };
    let r = memplan(&["stats", zoo.to_str().unwrap()]);
    assert!(r.status.success());
    let out = String::from_utf8_lossy(&r.stdout);
    // LOAD and its bound count exact bytes; the peak bound is the plan's peak, 255 B more.
    assert!(out.contains("order bound      6422530 "), "{out}");
    assert!(out.contains("peak bound       6422785 "), "{out}");
}

#[test]
fn every_command_has_help() {
    for cmd in ["plan", "check", "place", "stats"] {
        let r = memplan(&[cmd, "--help"]);
        assert!(r.status.success());
        assert!(String::from_utf8_lossy(&r.stdout).contains("Usage"));
    }
}

#[test]
fn run_executes_a_plan_and_reports_equal_outputs_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.plan.json");
    assert!(memplan(&[
        "plan",
        "sample",
        "--no-fuse",
        "-o",
        out.to_str().unwrap(),
        "--strategy",
        "heuristic"
    ])
    .status
    .success());
    let r = memplan(&[
        "run",
        "sample",
        out.to_str().unwrap(),
        "--seed",
        "5",
        "--kernels",
        "mix",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(text.contains("outputs equal     yes"), "{text}");
    assert!(text.contains("one allocation"), "{text}");
    let j = memplan(&[
        "run",
        &sample(),
        out.to_str().unwrap(),
        "--json",
        "--kernels",
        "mix",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["outputs_equal"], true);
    assert_eq!(v["device"], "cpu");
}

#[test]
fn run_rejects_an_invalid_plan_and_shows_its_damage_with_skip_validation() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("corrupt.plan.json");
    assert!(memplan(&[
        "plan",
        "sample",
        "--no-fuse",
        "-o",
        out.to_str().unwrap(),
        "--order",
        "given",
        "--strategy",
        "heuristic"
    ])
    .status
    .success());
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // Put every alloc at offset 0: live tensors overlap.
    for ins in v["instructions"].as_array_mut().unwrap() {
        if ins["op"] == "alloc" {
            ins["offset"] = serde_json::json!(0);
        }
    }
    std::fs::write(&out, v.to_string()).unwrap();
    let r = memplan(&["run", "sample", out.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("invalid"));
    let r = memplan(&[
        "run",
        "sample",
        out.to_str().unwrap(),
        "--skip-validation",
        "--kernels",
        "mix",
    ]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stdout).contains("outputs equal     NO"));
}

#[test]
fn run_on_cuda_without_a_gpu_build_or_device_exits_2_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cuda.plan.json");
    assert!(memplan(&[
        "plan",
        "sample",
        "--no-fuse",
        "-o",
        out.to_str().unwrap(),
        "--strategy",
        "heuristic"
    ])
    .status
    .success());
    let r = memplan(&["run", "sample", out.to_str().unwrap(), "--device", "cuda"]);
    if r.status.success() {
        common::shared::optional("a GPU is present: --device cuda ran, no error to check");
        return;
    }
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("cuda") || err.contains("CUDA"), "{err}");
}

#[test]
fn every_strategy_plans_the_sample_optimally_and_the_solving_ones_report_the_order_program() {
    let dir = tempfile::tempdir().unwrap();
    for strategy in ["heuristic", "ilp", "auto"] {
        let out = dir.path().join(format!("sample.{strategy}.plan.json"));
        // The default effort and cap: work limits decide, so the status is the same on any
        // machine under any load.
        let r = memplan(&[
            "plan",
            "sample",
            "--no-fuse",
            "--strategy",
            strategy,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let c = memplan(&["check", &sample(), out.to_str().unwrap()]);
        assert!(
            c.status.success(),
            "{strategy}: {}",
            String::from_utf8_lossy(&c.stdout)
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        // Even the heuristics reach the sample's proven lower bound.
        assert_eq!(
            v["stats"]["status"], "optimal",
            "{strategy}: {}",
            v["stats"]
        );
        assert_eq!(
            v["stats"]["peak_bytes"], v["stats"]["lower_bound_bytes"],
            "{strategy}"
        );
        assert_eq!(v["stats"]["order_ilp"].is_object(), strategy != "heuristic");
    }
}

#[test]
fn plan_with_a_percentage_budget_fits_it_and_check_and_run_accept_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("budget60.plan.json");
    let r = memplan(&[
        "plan",
        "sample",
        "--no-fuse",
        "--budget",
        "60%",
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains("budget") && err.contains("overhead"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let budget = v["stats"]["budget"]["budget_bytes"].as_u64().unwrap();
    assert!(v["arena_bytes"].as_u64().unwrap() <= budget);
    // The summary's gap is the plan's, not a 0.00 % standing in for a missing one.
    let gap = v["stats"]["gap"]
        .as_f64()
        .expect("a budgeted plan reports its gap");
    assert!(
        err.contains(&format!("(gap {:.2}%)", gap * 100.0)),
        "{gap}: {err}"
    );
    let c = memplan(&[
        "check",
        &sample(),
        out.to_str().unwrap(),
        "--budget",
        &budget.to_string(),
    ]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    common::check_plan_py(sample(), &out, Some(budget));
    let run = memplan(&["run", &sample(), out.to_str().unwrap()]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
}

#[test]
fn zero_unparsable_and_unreachable_budgets_exit_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    for (budget, needle) in [
        ("0", "more than 0 bytes"),
        ("lots", "is not BYTES"),
        ("-5%", "is not BYTES"),
        ("1000", "no plan can go below"),
    ] {
        let r = memplan(&["plan", "sample", "--budget", budget]);
        assert_eq!(r.status.code(), Some(2), "--budget {budget}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains(needle), "--budget {budget}: {err}");
    }
    let profile = dir.path().join("bad-profile.json");
    std::fs::write(&profile, r#"{"h2d_bytes_per_s": -1}"#).unwrap();
    let r = memplan(&[
        "plan",
        "sample",
        "--budget",
        "80%",
        "--device-profile",
        profile.to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("h2d_bytes_per_s"));
}

/// Plans the bundled sample (listed order, heuristics: fast) with `extra` flags; returns the
/// run's output.
fn plan_sample(extra: &[&str]) -> Output {
    let mut args = vec![
        "plan",
        "sample",
        "--order",
        "given",
        "--strategy",
        "heuristic",
    ];
    args.extend_from_slice(extra);
    memplan(&args)
}

#[test]
fn plan_to_a_symlink_replaces_the_file_it_points_to_and_keeps_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target.json");
    std::fs::write(&target, "old").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink("target.json", &link).unwrap();
    let r = plan_sample(&["-o", link.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_symlink(), "the link is kept");
    let text = std::fs::read_to_string(&target).unwrap();
    assert!(text.contains("\"memplan-plan/1\""), "{text}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "no temporary file is left: {names:?}");
}

#[test]
fn plan_to_a_fifo_writes_into_it_and_leaves_it_a_fifo() {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    /// Linux's O_NONBLOCK: opening the read end returns at once, without a writer.
    const O_NONBLOCK: i32 = 0o4000;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("plan.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // The read end first (opening a FIFO for writing waits for a reader); the plan (13 kB)
    // fits the pipe's buffer, so the writer never waits for reads.
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let r = plan_sample(&["-o", fifo.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let mut text = String::new();
    reader.read_to_string(&mut text).unwrap();
    assert!(
        text.contains("\"memplan-plan/1\""),
        "the plan went into the FIFO: {text:?}"
    );
    let meta = std::fs::symlink_metadata(&fifo).unwrap();
    assert!(meta.file_type().is_fifo(), "still a FIFO");
    assert!(!dir.path().join("plan.fifo.tmp~").exists());
}

#[test]
fn plan_to_a_null_device_writes_into_it_and_leaves_it_a_character_device() {
    use std::os::unix::fs::FileTypeExt;
    // A null device of the test's own where it may make one (as root: a binary that replaced
    // device nodes would replace this one, not the machine's /dev/null); elsewhere /dev/null,
    // which a user other than root cannot replace.
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("null");
    let made = Command::new("mknod")
        .arg(&own)
        .args(["c", "1", "3"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let null = if made {
        own.as_path()
    } else {
        Path::new("/dev/null")
    };
    let n = null.to_str().unwrap();
    // The same device as two outputs at once: special files may take several outputs.
    let r = plan_sample(&["-o", n, "--trace", n]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let meta = std::fs::symlink_metadata(null).unwrap();
    assert!(meta.file_type().is_char_device(), "{n} is still a device");
}

#[test]
fn plan_to_a_directory_exits_2_naming_it_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d");
    std::fs::create_dir(&d).unwrap();
    let r = plan_sample(&["-o", d.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains(d.to_str().unwrap()) && err.contains("is a directory"),
        "{err}"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "only the directory: {names:?}");
}

#[test]
fn plan_refuses_an_output_that_is_its_input_or_another_of_its_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.json");
    std::fs::copy(sample(), &input).unwrap();
    let original = std::fs::read(&input).unwrap();
    let i = input.to_str().unwrap();
    // The same file by another spelling: `DIR/./in.json`.
    let dotted = dir.path().join(".").join("in.json");
    let p = dir.path().join("p.json");
    let p = p.to_str().unwrap();
    let link = dir.path().join("in.link.json");
    std::os::unix::fs::symlink(&input, &link).unwrap();
    for (flags, says) in [
        (vec!["-o", i], "-o"),
        (vec!["--trace", i], "--trace"),
        (vec!["--graph-out", dotted.to_str().unwrap()], "--graph-out"),
        (vec!["-o", link.to_str().unwrap()], "-o"),
    ] {
        let mut args = vec!["plan", i, "--order", "given", "--strategy", "heuristic"];
        args.extend_from_slice(&flags);
        let r = memplan(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{flags:?}: {err}");
        assert!(
            err.contains(&format!("{says} ")) && err.contains("is also the input graph"),
            "{flags:?}: {err}"
        );
        assert_eq!(std::fs::read(&input).unwrap(), original, "{flags:?}");
    }
    let r = plan_sample(&["-o", p, "--trace", p]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--trace") && err.contains("-o") && err.contains(p),
        "{err}"
    );
    assert!(!Path::new(p).exists(), "nothing is written");
}

#[test]
fn plan_with_an_output_in_a_missing_folder_fails_at_once_writing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.json");
    let missing = dir.path().join("nonexistent").join("g.json");
    let r = plan_sample(&[
        "-o",
        p.to_str().unwrap(),
        "--graph-out",
        missing.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--graph-out") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!err.contains("peak"), "no planning: {err}");
    assert!(!p.exists(), "-o is not written when --graph-out cannot be");
}

#[test]
fn place_refuses_to_overwrite_its_buffer_csv() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("in.csv");
    let text = "id,lower,upper,size\na,0,2,100\nb,1,3,100\n";
    std::fs::write(&csv, text).unwrap();
    let c = csv.to_str().unwrap();
    let r = memplan(&["place", c, "-o", c]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains("is also the buffer CSV"), "{err}");
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), text);
}

#[test]
fn place_blames_an_alignment_whose_offsets_overflow_on_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("aligned.csv");
    std::fs::write(
        &csv,
        "id,lower,upper,size\na,0,2,100\nb,0,2,100\nc,0,2,100\n",
    )
    .unwrap();
    let r = memplan(&[
        "place",
        csv.to_str().unwrap(),
        "--alignment",
        "9223372036854775808",
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains("--alignment 9223372036854775808"), "{err}");
}

#[test]
fn run_refuses_outputs_out_over_its_plan() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("p.json");
    let p = plan.to_str().unwrap();
    assert!(plan_sample(&["--no-fuse", "-o", p]).status.success());
    let before = std::fs::read(&plan).unwrap();
    let r = memplan(&["run", "sample", p, "--kernels", "mix", "--outputs-out", p]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--outputs-out") && err.contains("is also the plan"),
        "{err}"
    );
    assert_eq!(std::fs::read(&plan).unwrap(), before);
}

#[test]
fn run_refuses_a_perturbation_delay_above_one_second() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("p.json");
    let p = plan.to_str().unwrap();
    assert!(plan_sample(&["--no-fuse", "-o", p]).status.success());
    let r = memplan(&[
        "run",
        "sample",
        p,
        "--perturb-seed",
        "1",
        "--perturb-us",
        "18446744073709551615",
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--perturb-us") && err.contains("1000000"),
        "{err}"
    );
}

#[test]
fn run_refuses_switches_that_would_do_nothing_naming_what_they_need() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("p.json");
    let p = plan.to_str().unwrap();
    assert!(plan_sample(&["--no-fuse", "-o", p]).status.success());
    for (args, needs) in [
        (vec!["--perturb-us", "5"], "--perturb-seed"),
        (vec!["--original-tolerance", "0.5"], "--original"),
    ] {
        let mut all = vec!["run", "sample", p];
        all.extend(args);
        let r = memplan(&all);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{all:?}: {err}");
        assert!(err.contains(all[3]) && err.contains(needs), "{err}");
    }
    // With what they need, they run.
    let r = memplan(&[
        "run",
        "sample",
        p,
        "--perturb-seed",
        "3",
        "--perturb-us",
        "5",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

#[test]
fn run_with_an_original_graph_of_another_interface_is_invalid_naming_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    let (graph, plan) = (dir.path().join("g.json"), dir.path().join("p.json"));
    let (g, p) = (graph.to_str().unwrap(), plan.to_str().unwrap());
    assert!(plan_sample(&["--no-fuse", "--graph-out", g, "-o", p])
        .status
        .success());
    // The same graph with its first output renamed is no rewrite of GRAPH.
    let mut other = sample_json();
    let tensors = other["tensors"].as_array_mut().unwrap();
    let out = tensors.iter_mut().find(|t| t["kind"] == "output").unwrap();
    let name = out["name"].as_str().unwrap().to_string();
    out["name"] = serde_json::json!("renamed_output");
    for op in other["ops"].as_array_mut().unwrap() {
        for list in ["inputs", "outputs"] {
            for t in op[list].as_array_mut().unwrap() {
                if t == name.as_str() {
                    *t = serde_json::json!("renamed_output");
                }
            }
        }
    }
    let original = dir.path().join("other.json");
    std::fs::write(&original, other.to_string()).unwrap();
    let r = memplan(&["run", g, p, "--original", original.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not derived from the --original graph") && err.contains("renamed_output"),
        "{err}"
    );
    // Its own original: the same outputs.
    let r = memplan(&["run", g, p, "--original", &sample()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

#[test]
fn run_honours_an_original_tolerance_of_zero_as_bitwise_and_says_why_in_json_too() {
    let Some(zoo) = zoo("resnet18.1.inference") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("p.json");
    let p = plan.to_str().unwrap();
    let r = memplan(&["plan", &zoo, "--rewrite", "all", "-o", p]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    // By default chosen conv algorithms are compared at 1e-3.
    let r = memplan(&["run", &zoo, p, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["original"]["tolerance"], serde_json::json!(1e-3));
    assert!(r.status.success());
    // An explicit 0 is bitwise: the algorithms round differently, and the note says so.
    let r = memplan(&["run", &zoo, p, "--json", "--original-tolerance", "0"]);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["original"]["tolerance"], serde_json::json!(0.0));
    assert_eq!(v["original"]["outputs_equal"], serde_json::json!(false));
    assert_eq!(r.status.code(), Some(1));
    let notes = v["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("--original-tolerance 1e-3")),
        "{notes:?}"
    );
}

#[test]
fn run_exits_1_when_a_valid_plan_arena_cannot_be_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("p.json");
    let p = plan.to_str().unwrap();
    assert!(plan_sample(&["--no-fuse", "-o", p]).status.success());
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    v["arena_bytes"] = serde_json::json!(u64::MAX);
    let huge = dir.path().join("huge.json");
    std::fs::write(&huge, v.to_string()).unwrap();
    let h = huge.to_str().unwrap();
    assert!(
        memplan(&["check", &sample(), h]).status.success(),
        "check accepts it"
    );
    let r = memplan(&["run", "sample", h, "--kernels", "mix"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot allocate"), "{err}");
}

#[test]
fn run_names_a_missing_data_file_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("p.json");
    let p = plan.to_str().unwrap();
    assert!(plan_sample(&["--no-fuse", "-o", p]).status.success());
    let missing = dir.path().join("missing.safetensors");
    let r = memplan(&["run", "sample", p, "--data", missing.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
}

#[test]
fn plan_help_says_multi_stream_plans_use_an_extension_plain_checkers_reject() {
    let r = memplan(&["plan", "--help"]);
    let help = String::from_utf8_lossy(&r.stdout);
    let streams = help
        .split("--streams <K>")
        .nth(1)
        .unwrap_or_else(|| panic!("{help}"));
    let streams = streams.split("--stream-peak-ratio").next().unwrap();
    let flat = streams.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("record_event")
            && flat.contains("extension")
            && flat.contains("check_plan.py"),
        "{flat}"
    );
}
