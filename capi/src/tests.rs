//! The C ABI called as C calls it: pointers in, strings out, every string freed.

use super::*;
use memplan::graph::SAMPLE_JSON;
use memplan::plan::Instruction;
use memplan::zoo::determinism::without_timing;
use std::ptr;
use std::sync::OnceLock;

/// What one call gave: the code, `*out_json` and `*err` (both freed with `memplan_free`).
#[derive(Debug)]
struct Answer {
    code: i32,
    out: Option<String>,
    err: Option<String>,
}

/// Takes a string the library returned and frees it.
fn take(p: *mut c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    let s = unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string();
    unsafe { memplan_free(p) };
    Some(s)
}

fn c(text: Option<&str>) -> Option<CString> {
    text.map(|t| CString::new(t).unwrap())
}

fn ptr_of(s: &Option<CString>) -> *const c_char {
    s.as_ref().map_or(ptr::null(), |s| s.as_ptr())
}

type Entry =
    unsafe extern "C" fn(*const c_char, *const c_char, *mut *mut c_char, *mut *mut c_char) -> i32;

fn call(f: Entry, a: Option<&str>, b: Option<&str>) -> Answer {
    let (a, b) = (c(a), c(b));
    let mut out: *mut c_char = ptr::null_mut();
    let mut err: *mut c_char = ptr::null_mut();
    let code = unsafe { f(ptr_of(&a), ptr_of(&b), &mut out, &mut err) };
    let answer = Answer {
        code,
        out: take(out),
        err: take(err),
    };
    // Exactly one of the two strings is set.
    assert_eq!(
        answer.code == MEMPLAN_OK,
        answer.out.is_some(),
        "{answer:?}"
    );
    assert_eq!(
        answer.code == MEMPLAN_OK,
        answer.err.is_none(),
        "{answer:?}"
    );
    answer
}

fn plan_c(graph: Option<&str>, options: Option<&str>) -> Answer {
    call(memplan_plan, graph, options)
}

fn check_c(graph: Option<&str>, plan: Option<&str>) -> Answer {
    call(memplan_check, graph, plan)
}

fn sample() -> Graph {
    Graph::parse(SAMPLE_JSON).unwrap()
}

/// The sample planned with the default options, directly in Rust (planned once).
fn sample_plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| {
        pipeline::run(&sample(), &PipelineOptions::default(), &Control::default())
            .unwrap()
            .plan
    })
}

/// The plan text the ABI gave, checked to be a plan in the pipeline's own format.
fn returned_plan(answer: &Answer) -> Plan {
    assert_eq!(answer.code, MEMPLAN_OK, "{answer:?}");
    let text = answer.out.as_deref().unwrap();
    let plan = Plan::parse(text).unwrap();
    assert_eq!(plan.to_json(), text, "the text is Plan::to_json's");
    plan
}

#[test]
fn null_options_plan_with_the_pipeline_defaults() {
    let answer = plan_c(Some(SAMPLE_JSON), None);
    let plan = returned_plan(&answer);
    assert_eq!(without_timing(&plan), without_timing(sample_plan()));
}

#[test]
fn empty_options_are_the_defaults_too() {
    let plan = returned_plan(&plan_c(Some(SAMPLE_JSON), Some("")));
    assert_eq!(without_timing(&plan), without_timing(sample_plan()));
}

#[test]
fn options_with_a_budget_give_the_plan_the_pipeline_gives() {
    let text = r#"{"budget":"80%","effort":1}"#;
    let options: PipelineOptions = serde_json::from_str(text).unwrap();
    assert!(options.budget.is_some());
    let direct = pipeline::run(&sample(), &options, &Control::default())
        .unwrap()
        .plan;
    let plan = returned_plan(&plan_c(Some(SAMPLE_JSON), Some(text)));
    assert!(plan.stats.budget.is_some(), "a budgeted plan");
    assert!(plan.stats.peak_bytes < sample_plan().stats.peak_bytes);
    assert_eq!(without_timing(&plan), without_timing(&direct));
}

#[test]
fn an_unknown_option_field_returns_the_bad_options_code_naming_the_field() {
    let answer = plan_c(Some(SAMPLE_JSON), Some(r#"{"effort":1,"speed":"max"}"#));
    assert_eq!(answer.code, MEMPLAN_ERR_BAD_OPTIONS);
    let err = answer.err.unwrap();
    assert!(err.contains("unknown field `speed`"), "{err}");
    assert!(err.starts_with("options: "), "{err}");
}

#[test]
fn options_read_as_python_and_the_http_service_read_them() {
    // A comma list of rewrites, a strip count as an integer, nulls as absent: the plan of the
    // same options spelt out (they were refused, or planned untiled without a word).
    let spelt = returned_plan(&plan_c(
        Some(SAMPLE_JSON),
        Some(r#"{"rewrite":["fuse","tile"],"tile":"2"}"#),
    ));
    for text in [
        r#"{"rewrite":"fuse,tile","tile":2}"#,
        r#"{"rewrite":"fuse","tile":2,"budget":null}"#,
    ] {
        let plan = returned_plan(&plan_c(Some(SAMPLE_JSON), Some(text)));
        assert_eq!(without_timing(&plan), without_timing(&spelt), "{text}");
    }
    for text in ["[]", r#"[["fuse"]]"#, "null", "3"] {
        let answer = plan_c(Some(SAMPLE_JSON), Some(text));
        assert_eq!(answer.code, MEMPLAN_ERR_BAD_OPTIONS, "{text}");
        assert!(
            answer
                .err
                .unwrap()
                .contains("expected a JSON object of options"),
            "{text}"
        );
    }
}

#[test]
fn malformed_options_json_returns_the_bad_options_code() {
    let answer = plan_c(Some(SAMPLE_JSON), Some("{\"effort\":"));
    assert_eq!(answer.code, MEMPLAN_ERR_BAD_OPTIONS, "{answer:?}");
}

#[test]
fn an_option_out_of_range_is_refused_as_the_options_error_python_gives() {
    let answer = plan_c(Some(SAMPLE_JSON), Some(r#"{"time_limit_s":-1}"#));
    assert_eq!(answer.code, MEMPLAN_ERR_BAD_OPTIONS);
    let options = PipelineOptions {
        time_limit_s: -1.0,
        ..PipelineOptions::default()
    };
    let e = options.check().unwrap_err();
    // The options' own error, not the graph's (no graph name in front).
    assert_eq!(answer.err.unwrap(), format!("options: {e}"));
    // An option given twice is refused, as over HTTP.
    let answer = plan_c(Some(SAMPLE_JSON), Some(r#"{"effort":1,"effort":2}"#));
    assert_eq!(answer.code, MEMPLAN_ERR_BAD_OPTIONS, "{answer:?}");
    assert!(answer.err.unwrap().contains("duplicate field `effort`"));
}

#[test]
fn a_budget_no_plan_fits_returns_the_planning_failed_code() {
    let answer = plan_c(Some(SAMPLE_JSON), Some(r#"{"budget":256}"#));
    assert_eq!(answer.code, MEMPLAN_ERR_PLANNING_FAILED, "{answer:?}");
    let err = answer.err.unwrap();
    assert!(err.starts_with(&format!("{}: ", sample().name)), "{err}");
}

#[test]
fn a_malformed_graph_returns_the_bad_graph_code_with_line_and_column() {
    let answer = plan_c(
        Some("{\n  \"format\": \"memplan-graph/1\",\n  oops\n}"),
        None,
    );
    assert_eq!(answer.code, MEMPLAN_ERR_BAD_GRAPH);
    let err = answer.err.unwrap();
    assert!(
        err.starts_with("graph JSON error at line 3, column 3: "),
        "{err}"
    );
    let check = check_c(Some("[1,"), Some(&sample_plan().to_json()));
    assert_eq!(check.code, MEMPLAN_ERR_BAD_GRAPH);
}

#[test]
fn a_graph_that_breaks_a_format_rule_returns_the_bad_graph_code() {
    let answer = plan_c(Some(r#"{"format":"memplan-graph/9"}"#), None);
    assert_eq!(answer.code, MEMPLAN_ERR_BAD_GRAPH);
    let expected = Graph::parse(r#"{"format":"memplan-graph/9"}"#).unwrap_err();
    assert_eq!(answer.err.unwrap(), expected.to_string());
}

#[test]
fn a_valid_plan_checks_with_the_validator_figures() {
    let answer = check_c(Some(SAMPLE_JSON), Some(&sample_plan().to_json()));
    assert_eq!(answer.code, MEMPLAN_OK, "{answer:?}");
    let r = memplan::validate(&sample(), sample_plan(), None).unwrap();
    let report: serde_json::Value = serde_json::from_str(&answer.out.unwrap()).unwrap();
    assert_eq!(
        report,
        serde_json::json!({
            "valid": true,
            "peak_bytes": r.peak,
            "max_live_bytes": r.max_live,
            "host_peak_bytes": r.host_peak,
            "execs": r.execs,
            "spills": r.spills,
        })
    );
    assert_eq!(r.peak, sample_plan().stats.peak_bytes);
}

/// The sample plan with the second of two tensors live together moved onto the first.
fn overlapping_plan() -> Plan {
    let mut plan = sample_plan().clone();
    let allocs: Vec<usize> = plan
        .instructions
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, Instruction::Alloc { .. }))
        .map(|(k, _)| k)
        .take(2)
        .collect();
    let (first, second) = (allocs[0], allocs[1]);
    assert!(
        plan.instructions[first..second]
            .iter()
            .all(|i| !matches!(i, Instruction::Free { .. })),
        "both live at the second alloc"
    );
    let Instruction::Alloc { offset: at, .. } = plan.instructions[first] else {
        unreachable!()
    };
    if let Instruction::Alloc { offset, .. } = &mut plan.instructions[second] {
        *offset = at;
    }
    plan
}

#[test]
fn an_overlap_returns_the_invalid_plan_code_with_the_validator_message() {
    let plan = overlapping_plan();
    let v = memplan::validate(&sample(), &plan, None).unwrap_err();
    let answer = check_c(Some(SAMPLE_JSON), Some(&plan.to_json()));
    assert_eq!(answer.code, MEMPLAN_ERR_INVALID_PLAN);
    assert_eq!(answer.err.unwrap(), v.to_string());
}

#[test]
fn a_removed_alloc_returns_the_invalid_plan_code_with_the_validator_message() {
    let mut plan = sample_plan().clone();
    let k = plan
        .instructions
        .iter()
        .position(|i| matches!(i, Instruction::Alloc { .. }))
        .unwrap();
    plan.instructions.remove(k);
    let v = memplan::validate(&sample(), &plan, None).unwrap_err();
    let answer = check_c(Some(SAMPLE_JSON), Some(&plan.to_json()));
    assert_eq!(answer.code, MEMPLAN_ERR_INVALID_PLAN);
    assert_eq!(answer.err.unwrap(), v.to_string());
}

#[test]
fn malformed_plan_json_returns_the_bad_plan_code_with_line_and_column() {
    let answer = check_c(Some(SAMPLE_JSON), Some("{\"format\": }"));
    assert_eq!(answer.code, MEMPLAN_ERR_BAD_PLAN);
    let err = answer.err.unwrap();
    assert!(
        err.starts_with("plan JSON error at line 1, column "),
        "{err}"
    );
}

#[test]
fn a_null_graph_pointer_returns_the_null_argument_code() {
    let answer = plan_c(None, None);
    assert_eq!(answer.code, MEMPLAN_ERR_NULL_ARGUMENT);
    assert_eq!(answer.err.unwrap(), "graph_json is NULL");
    let answer = check_c(None, Some("{}"));
    assert_eq!(answer.code, MEMPLAN_ERR_NULL_ARGUMENT);
}

#[test]
fn a_null_plan_pointer_returns_the_null_argument_code() {
    let answer = check_c(Some(SAMPLE_JSON), None);
    assert_eq!(answer.code, MEMPLAN_ERR_NULL_ARGUMENT);
    assert_eq!(answer.err.unwrap(), "plan_json is NULL");
}

#[test]
fn null_out_parameters_return_the_null_argument_code_without_writing() {
    let graph = CString::new(SAMPLE_JSON).unwrap();
    let mut err: *mut c_char = ptr::null_mut();
    let mut out: *mut c_char = ptr::null_mut();
    for f in [memplan_plan as Entry, memplan_check as Entry] {
        // No err: nothing to say it with, the code alone.
        let code = unsafe { f(graph.as_ptr(), ptr::null(), &mut out, ptr::null_mut()) };
        assert_eq!(code, MEMPLAN_ERR_NULL_ARGUMENT);
        assert!(out.is_null());
        // No out_json: err says so.
        let code = unsafe { f(graph.as_ptr(), ptr::null(), ptr::null_mut(), &mut err) };
        assert_eq!(code, MEMPLAN_ERR_NULL_ARGUMENT);
        assert_eq!(take(err).as_deref(), Some("out_json is NULL"));
        // Neither.
        let code = unsafe {
            f(
                graph.as_ptr(),
                ptr::null(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        assert_eq!(code, MEMPLAN_ERR_NULL_ARGUMENT);
    }
}

#[test]
fn text_that_is_not_utf8_returns_the_invalid_utf8_code() {
    let bad = CString::new(vec![b'{', 0xff, b'}']).unwrap();
    let mut out: *mut c_char = ptr::null_mut();
    let mut err: *mut c_char = ptr::null_mut();
    let code = unsafe { memplan_plan(bad.as_ptr(), ptr::null(), &mut out, &mut err) };
    assert_eq!(code, MEMPLAN_ERR_INVALID_UTF8);
    assert!(out.is_null());
    let msg = take(err).unwrap();
    assert!(msg.starts_with("graph_json is not valid UTF-8"), "{msg}");
    let graph = CString::new(SAMPLE_JSON).unwrap();
    let code = unsafe { memplan_plan(graph.as_ptr(), bad.as_ptr(), &mut out, &mut err) };
    assert_eq!(code, MEMPLAN_ERR_INVALID_UTF8);
    assert!(take(err)
        .unwrap()
        .starts_with("options_json is not valid UTF-8"));
}

#[test]
fn stale_out_values_are_cleared_on_entry() {
    let mut out: *mut c_char = ptr::dangling_mut();
    let mut err: *mut c_char = ptr::null_mut();
    let code = unsafe { memplan_plan(ptr::null(), ptr::null(), &mut out, &mut err) };
    assert_eq!(code, MEMPLAN_ERR_NULL_ARGUMENT);
    assert!(out.is_null());
    take(err);
}

#[test]
fn a_panic_inside_is_answered_with_the_internal_code() {
    let mut out: *mut c_char = ptr::null_mut();
    let mut err: *mut c_char = ptr::null_mut();
    let code = unsafe { entry(&mut out, &mut err, || panic!("boom")) };
    assert_eq!(code, MEMPLAN_ERR_INTERNAL);
    assert!(out.is_null());
    assert_eq!(take(err).as_deref(), Some("internal error: boom"));
}

#[test]
fn a_nul_inside_a_message_does_not_cut_it() {
    let s = take(to_c("a\0b")).unwrap();
    assert_eq!(s, "a\u{FFFD}b");
}

#[test]
fn freeing_null_is_a_no_op() {
    unsafe { memplan_free(ptr::null_mut()) };
}

#[test]
fn the_version_is_the_crate_version() {
    let v = unsafe { CStr::from_ptr(memplan_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

/// The bundled symbolic sample (B in 1..=32).
const SYMBOLIC: &str = include_str!("../../samples/resnet_block.train.symbolic.json");

#[test]
fn a_symbolic_graph_gets_the_symbolic_plan_and_instantiates_to_a_valid_plan() {
    use memplan::symbolic::{plan_symbolic_with, Binding, SymbolicGraph, SymbolicOptions};
    let a = call(memplan_plan, Some(SYMBOLIC), Some(r#"{"max_pieces": 3}"#));
    assert_eq!(a.code, MEMPLAN_OK, "{a:?}");
    let text = a.out.unwrap();
    // The library's plan with the same switches: the same document.
    let sg = SymbolicGraph::parse(SYMBOLIC).unwrap();
    let split = SymbolicOptions {
        max_pieces: 3,
        ..SymbolicOptions::default()
    };
    let sp = plan_symbolic_with(&sg, &PipelineOptions::default(), &split).unwrap();
    assert_eq!(text, sp.to_json());
    for b in [1u64, 9, 32] {
        let a = call(
            memplan_instantiate,
            Some(&text),
            Some(&format!(r#"{{"B": {b}}}"#)),
        );
        assert_eq!(a.code, MEMPLAN_OK, "{a:?}");
        let plan = Plan::parse(&a.out.unwrap()).unwrap();
        let g = sg.instantiate(&Binding::new().with("B", b)).unwrap();
        memplan::validate(&g, &plan, None).unwrap();
        // The concrete pair checks through the C ABI too.
        let c = call(memplan_check, Some(&g.to_json()), Some(&plan.to_json()));
        assert_eq!(c.code, MEMPLAN_OK, "{c:?}");
    }
}

#[test]
fn bad_bindings_symbolic_plans_and_split_switches_get_their_codes_and_messages() {
    let plan = call(memplan_plan, Some(SYMBOLIC), None).out.unwrap();
    for (binding, says) in [
        (r#"{"B": 33}"#, "\"B\" = 33 is out of its range 1..=32"),
        (r#"{"S": 1, "B": 1}"#, "symbol \"S\" is not declared"),
        (r#"{}"#, "\"B\""),
        (r#"{"B": -1}"#, "binding: expected a JSON object"),
        ("[1]", "binding: expected a JSON object"),
    ] {
        let a = call(memplan_instantiate, Some(&plan), Some(binding));
        assert_eq!(a.code, MEMPLAN_ERR_BAD_BINDING, "{binding}: {a:?}");
        assert!(a.err.as_deref().unwrap().contains(says), "{binding}: {a:?}");
    }
    let a = call(memplan_instantiate, Some(SAMPLE_JSON), Some(r#"{"B": 1}"#));
    assert_eq!(a.code, MEMPLAN_ERR_BAD_PLAN, "{a:?}");
    let a = call(memplan_instantiate, Some(&plan), None);
    assert_eq!(a.code, MEMPLAN_ERR_NULL_ARGUMENT, "{a:?}");
    let a = call(memplan_plan, Some(SYMBOLIC), Some(r#"{"budget": "80%"}"#));
    assert_eq!(a.code, MEMPLAN_ERR_BAD_OPTIONS, "{a:?}");
    assert!(a.err.unwrap().contains("a budget is not supported"));
    let a = call(
        memplan_plan,
        Some(SYMBOLIC),
        Some(r#"{"max_pieces": "two"}"#),
    );
    assert_eq!(a.code, MEMPLAN_ERR_BAD_OPTIONS, "{a:?}");
    let a = call(memplan_plan, Some(SYMBOLIC), Some(r#"{"max_ratio": 0.5}"#));
    assert_eq!(a.code, MEMPLAN_ERR_BAD_OPTIONS, "{a:?}");
    // The split switches belong to symbolic graphs: a concrete graph refuses them saying so,
    // in Python's words.
    for k in ["max_pieces", "max_ratio"] {
        let a = call(
            memplan_plan,
            Some(SAMPLE_JSON),
            Some(&format!(r#"{{"{k}": 2}}"#)),
        );
        assert_eq!(a.code, MEMPLAN_ERR_BAD_OPTIONS, "{a:?}");
        assert_eq!(
            a.err.unwrap(),
            format!("options: {k} applies to symbolic graphs (with \"symbols\") only")
        );
    }
}
