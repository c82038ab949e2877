use super::*;
use std::time::{Duration, Instant};

fn chain() -> Graph {
    Graph::parse(
        r#"{"format": "memplan-graph/1", "name": "g", "alignment": 1,
            "tensors": [
              {"name": "x", "size": 10, "kind": "input"},
              {"name": "a", "size": 100, "kind": "activation"},
              {"name": "b", "size": 10, "kind": "activation"},
              {"name": "c", "size": 10, "kind": "activation"},
              {"name": "d", "size": 10, "kind": "activation"},
              {"name": "y", "size": 10, "kind": "output"}],
            "ops": [
              {"name": "pa", "type": "relu", "inputs": ["x"], "outputs": ["a"]},
              {"name": "pb", "inputs": ["a"], "outputs": ["b"], "time_us": 1000},
              {"name": "pc", "inputs": ["b"], "outputs": ["c"], "time_us": 1000, "workspace": 5},
              {"name": "pd", "inputs": ["c"], "outputs": ["d"], "time_us": 1000},
              {"name": "py", "inputs": ["d", "a", "x"], "outputs": ["y"]}]}"#,
    )
    .unwrap()
}

fn opts(budget: u64, strategy: &str) -> BudgetOptions {
    BudgetOptions {
        budget,
        strategy: strategy.into(),
        ..BudgetOptions::default()
    }
}

#[test]
fn a_tight_budget_is_met_with_a_valid_plan_that_spills_or_recomputes() {
    let g = chain();
    for s in strategy_names() {
        if s == "chen" || s == "spill-all" {
            continue;
        }
        let p = plan_with_budget(&g, &[0, 1, 2, 3, 4], &opts(130, s)).unwrap();
        crate::validate::validate(&g, &p, Some(130)).unwrap();
        let st = p.stats.budget.as_ref().unwrap();
        assert!(p.arena_bytes <= 130);
        assert!(st.spills + st.recomputed_ops > 0, "{st:?}");
        // The gap is the placement's against the spilled schedule's LOAD, as without a budget.
        let (peak, lb) = (p.stats.peak_bytes, p.stats.lower_bound_bytes);
        assert!(lb <= peak, "{s}: bound {lb} above the peak {peak}");
        let gap = p
            .stats
            .gap
            .unwrap_or_else(|| panic!("{s}: a budgeted plan without a gap"));
        assert_eq!(gap, (peak - lb) as f64 / peak as f64, "{s}");
    }
}

#[test]
fn recompute_is_chosen_when_the_producer_is_cheap_and_its_inputs_stay() {
    let g = chain();
    let p = plan_with_budget(&g, &[0, 1, 2, 3, 4], &opts(130, "sweep")).unwrap();
    let st = p.stats.budget.unwrap();
    // x stays resident until py, so relu(x) can be replayed instead of a round trip.
    assert_eq!((st.recomputed_ops, st.spills), (1, 0), "{st:?}");
}

#[test]
fn a_budget_below_the_largest_op_names_the_minimum() {
    let g = chain();
    let e = plan_with_budget(&g, &[0, 1, 2, 3, 4], &opts(120, "best")).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("130 bytes") && msg.contains("\"py\""), "{msg}");
    assert!(matches!(
        plan_with_budget(&g, &[0, 1, 2, 3, 4], &opts(0, "best")),
        Err(BudgetError::Zero)
    ));
    assert!(matches!(
        plan_with_budget(&g, &[0, 1, 2, 3, 4], &opts(100, "nope")),
        Err(BudgetError::UnknownStrategy(..))
    ));
}

#[test]
fn a_plan_without_spills_has_no_modelled_overhead() {
    let g = chain();
    let p = plan_with_budget(&g, &[0, 1, 2, 3, 4], &opts(1000, "sweep")).unwrap();
    let st = p.stats.budget.unwrap();
    assert_eq!(st.spills + st.recomputed_ops, 0);
    assert!(
        st.overhead_us.abs() < 1e-9 && st.base_step_us >= 3000.0,
        "{st:?}"
    );
}

#[test]
fn a_budgeted_plan_with_a_raised_token_stops_at_once_with_a_clear_error() {
    let g = chain();
    let token = memplan_solver::CancelToken::new();
    token.cancel();
    for s in strategy_names() {
        let started = Instant::now();
        let e = plan_with_budget(
            &g,
            &[0, 1, 2, 3, 4],
            &BudgetOptions {
                cancel: Some(token.clone()),
                effort: Some(1),
                ..opts(130, s)
            },
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1), "{s}");
        assert!(
            matches!(
                e,
                BudgetError::Cancelled {
                    budget: 130,
                    reached: None
                }
            ),
            "{s}: {e}"
        );
        assert!(e.to_string().contains("stopped"), "{e}");
    }
}

#[test]
fn an_unraised_token_changes_nothing() {
    let g = chain();
    let plain = plan_with_budget(&g, &[0, 1, 2, 3, 4], &opts(130, "best")).unwrap();
    let watched = plan_with_budget(
        &g,
        &[0, 1, 2, 3, 4],
        &BudgetOptions {
            cancel: Some(memplan_solver::CancelToken::new()),
            ..opts(130, "best")
        },
    )
    .unwrap();
    assert_eq!(plain.instructions, watched.instructions);
    assert_eq!(
        plain.stats.budget.map(|b| b.strategy),
        watched.stats.budget.map(|b| b.strategy)
    );
}

#[test]
fn two_budgeted_plans_with_an_effort_are_identical() {
    let g = chain();
    let run = || {
        plan_with_budget(
            &g,
            &[0, 1, 2, 3, 4],
            &BudgetOptions {
                effort: Some(1),
                ..opts(130, "best")
            },
        )
        .unwrap()
    };
    let (a, b) = (run(), run());
    assert_eq!(a.instructions, b.instructions);
    assert_eq!(a.stats.peak_bytes, b.stats.peak_bytes);
    assert_eq!(a.stats.budget, b.stats.budget);
}

/// [`chain`]'s context in its listed order on the H200 profile.
fn chain_ctx(g: &Graph) -> Ctx<'_> {
    Ctx::new(
        g,
        &[0, 1, 2, 3, 4],
        DeviceProfile::h200(),
        Params::default(),
    )
}

#[test]
fn a_raised_token_stops_the_sweep_with_the_schedule_so_far() {
    let g = chain();
    let mut ctx = chain_ctx(&g);
    let token = memplan_solver::CancelToken::new();
    token.cancel();
    ctx.cancel = Some(token);
    // Nothing evicted: every tensor stays as in the keep-everything schedule.
    assert_eq!(
        sweep::sweep(&ctx, 60, true).live(&ctx),
        Sched::keep_all(&ctx).live(&ctx)
    );
}

/// A training chain of `n` layers with `size`-byte tensors: forward `f1..fn`
/// (`a_i = f_i(a_{i-1})`, `a0` the input), a loss, then backward `bn..b1`
/// (`g_{i-1} = b_i(g_i, a_{i-1})`, `g0` the output). In the listed order every activation is
/// alive at the loss, so without spills or recomputes the peak is over `n · size`.
pub(crate) fn training_chain(n: usize, size: u64) -> Graph {
    let mut tensors = vec![serde_json::json!({"name": "a0", "size": size, "kind": "input"})];
    let mut ops = Vec::new();
    for i in 1..=n {
        tensors
            .push(serde_json::json!({"name": format!("a{i}"), "size": size, "kind": "activation"}));
        ops.push(serde_json::json!({"name": format!("f{i}"), "type": "relu",
            "inputs": [format!("a{}", i - 1)], "outputs": [format!("a{i}")], "time_us": 1000}));
    }
    for i in 0..=n {
        let kind = if i == 0 { "output" } else { "activation" };
        tensors.push(serde_json::json!({"name": format!("g{i}"), "size": size, "kind": kind}));
    }
    ops.push(
        serde_json::json!({"name": "loss", "type": "relu", "inputs": [format!("a{n}")],
        "outputs": [format!("g{n}")], "time_us": 1000}),
    );
    for i in (1..=n).rev() {
        ops.push(serde_json::json!({"name": format!("b{i}"), "type": "add",
            "inputs": [format!("g{i}"), format!("a{}", i - 1)],
            "outputs": [format!("g{}", i - 1)], "time_us": 1000}));
    }
    let g = serde_json::json!({"format": "memplan-graph/1", "name": format!("chain{n}"),
        "alignment": 256, "tensors": tensors, "ops": ops});
    Graph::parse(&g.to_string()).unwrap()
}

/// The peak of `g` planned in its listed order without a budget.
pub(crate) fn unbudgeted_peak(g: &Graph) -> u64 {
    let opts = crate::PlanOptions {
        order: crate::OrderMode::Given,
        strategy: crate::Strategy::Heuristic,
        time_limit: None,
        ..crate::PlanOptions::default()
    };
    crate::plan(g, &opts).unwrap().stats.peak_bytes
}

/// Outputs of 4 and 1000 bytes and an activation of 1000 at 256-byte alignment: at the last
/// step all three are resident, and any placement pays the padding of all but the topmost.
fn padded() -> Graph {
    Graph::parse(
        r#"{"format": "memplan-graph/1", "name": "g", "alignment": 256,
            "tensors": [
              {"name": "x", "size": 1000, "kind": "input"},
              {"name": "a", "size": 1000, "kind": "activation"},
              {"name": "y1", "size": 4, "kind": "output"},
              {"name": "y2", "size": 1000, "kind": "output"}],
            "ops": [
              {"name": "p1", "inputs": ["x"], "outputs": ["a"]},
              {"name": "p2", "inputs": ["a"], "outputs": ["y1"]},
              {"name": "p3", "inputs": ["a"], "outputs": ["y2"]}]}"#,
    )
    .unwrap()
}

#[test]
fn packed_bytes_rounds_every_buffer_but_the_topmost_to_the_smallest_alignment() {
    assert_eq!(packed_bytes([(4, 256), (1000, 256), (1000, 256)]), 2052);
    // A 1-byte-aligned buffer may sit anywhere: only the sizes count.
    assert_eq!(packed_bytes([(4, 256), (1000, 1), (1000, 256)]), 2004);
    assert_eq!(packed_bytes([(0, 256), (1000, 256)]), 1000);
    assert_eq!(packed_bytes(std::iter::empty()), 0);
}

#[test]
fn the_proven_minimum_counts_the_alignment_padding_every_placement_pays() {
    let g = padded();
    // a (1024) + y2 (1024) + y1 (4) on top: 2052, not the 2004 the sizes sum to.
    let (min, why) = min_bytes(&g, &[0, 1, 2]);
    assert_eq!(min, 2052, "{why}");
    assert!(
        why.contains("\"p3\"") && why.contains("1004 bytes of outputs"),
        "{why}"
    );
    for s in strategy_names() {
        match plan_with_budget(&g, &[0, 1, 2], &opts(2051, s)) {
            Err(BudgetError::Infeasible {
                reached, min_bytes, ..
            }) => assert!(reached >= min_bytes && min_bytes == 2052, "{s}: {reached}"),
            other => panic!("{s}: 2051 bytes is below any placement: {:?}", other.err()),
        }
    }
}

#[test]
fn the_op_minimum_counts_the_alignment_padding_too() {
    let g = padded();
    // x (1024) + a (1000): p1 alone needs 2024 bytes at 256-byte alignment.
    assert_eq!(op_min_bytes(&g), (2024, "p1".to_string()));
}

/// Two branches from one input, interleaved in the listed order: `a1, b1, a2, b2, y` holds
/// both 100 MB intermediates at once (peak ≈ 200 MB); `a1, a2, b1, b2, y` holds one at a
/// time (≈ 102 MB).
fn two_branches() -> Graph {
    Graph::parse(
        r#"{"format": "memplan-graph/1", "name": "branches", "alignment": 1,
            "tensors": [
              {"name": "x", "size": 1000000, "kind": "input"},
              {"name": "A", "size": 100000000, "kind": "activation"},
              {"name": "B", "size": 100000000, "kind": "activation"},
              {"name": "a2", "size": 1000000, "kind": "activation"},
              {"name": "b2", "size": 1000000, "kind": "activation"},
              {"name": "y", "size": 1000000, "kind": "output"}],
            "ops": [
              {"name": "a1", "type": "conv", "inputs": ["x"], "outputs": ["A"], "time_us": 1000},
              {"name": "b1", "type": "conv", "inputs": ["x"], "outputs": ["B"], "time_us": 1000},
              {"name": "a2", "type": "conv", "inputs": ["A"], "outputs": ["a2"], "time_us": 1000},
              {"name": "b2", "type": "conv", "inputs": ["B"], "outputs": ["b2"], "time_us": 1000},
              {"name": "y", "type": "add", "inputs": ["a2", "b2"], "outputs": ["y"], "time_us": 10}]}"#,
    )
    .unwrap()
}

#[test]
fn the_joint_program_reorders_two_branches_so_that_nothing_is_spilled() {
    let g = two_branches();
    let order = [0, 1, 2, 3, 4];
    let budget = 150_000_000;
    let best_sequential = ["sweep", "ilp", "chen", "spill-all"]
        .iter()
        .filter_map(|s| plan_with_budget(&g, &order, &opts(budget, s)).ok())
        .map(|p| p.stats.budget.unwrap().overhead_pct)
        .fold(f64::INFINITY, f64::min);
    assert!(best_sequential > 1.0, "{best_sequential}");
    let p = plan_with_budget(&g, &order, &opts(budget, JOINT)).unwrap();
    crate::validate::validate(&g, &p, Some(budget)).unwrap();
    let st = p.stats.budget.as_ref().unwrap();
    assert_eq!(st.strategy, JOINT, "{st:?}");
    assert_eq!((st.spills, st.recomputed_ops), (0, 0), "{st:?}");
    assert!(st.overhead_pct < 0.01, "{st:?}");
    // One branch after the other (either first).
    let o = order_of_plan(&g, &p);
    assert!(o == [0, 2, 1, 3, 4] || o == [1, 3, 0, 2, 4], "{o:?}");
    // The whole graph is one model, so its bound is proven and reported.
    let note = st.solver.clone().unwrap_or_default();
    assert!(
        note.contains("whole graph") && note.contains("proven bound"),
        "{note}"
    );
    // `best` runs the joint program too, and lists it among what it tried.
    let b = plan_with_budget(&g, &order, &opts(budget, BEST)).unwrap();
    let bs = b.stats.budget.unwrap();
    assert_eq!(bs.strategy, JOINT);
    assert!(bs.tried.iter().any(|t| t.name == JOINT && t.fits));
    // Through the pipeline's entry (the listed order first), the order method says that
    // the joint program moved ops.
    let listed = crate::PlanOptions {
        order: crate::OrderMode::Given,
        strategy: crate::Strategy::Heuristic,
        time_limit: None,
        ..crate::PlanOptions::default()
    };
    let p = plan_under_budget(&g, BudgetSpec::Bytes(budget), &listed, &opts(budget, BEST)).unwrap();
    let method = p.stats.order_method.unwrap_or_default();
    assert!(method.ends_with(" + joint"), "{method}");
}

#[test]
fn the_joint_program_keeps_the_sequential_plan_when_it_finds_nothing_better() {
    // On the chain there is no other order and the sequential plan recomputes the cheap relu.
    let g = chain();
    let seq = plan_with_budget(&g, &[0, 1, 2, 3, 4], &opts(130, "sweep")).unwrap();
    let p = plan_with_budget(&g, &[0, 1, 2, 3, 4], &opts(130, JOINT)).unwrap();
    let (a, b) = (seq.stats.budget.unwrap(), p.stats.budget.unwrap());
    assert!(b.overhead_pct <= a.overhead_pct + 1e-9, "{a:?} {b:?}");
    let joint = b.tried.iter().find(|t| t.name == JOINT).unwrap();
    assert!(
        joint
            .solver
            .as_deref()
            .unwrap_or("")
            .contains("joint program"),
        "{joint:?}"
    );
}

/// `b = up(relu(x))` is read again at the end, after two steps that need its memory; `a =
/// relu(x)` is dead by then (and too large to keep instead of `b`), so only a chain (`a` from
/// `x`, then `b` from `a`) can replay `b`. The ops between are fast, so a spill of `b` (or
/// `x`) cannot hide its transfers.
fn chain_to_recompute() -> Graph {
    Graph::parse(
        r#"{"format": "memplan-graph/1", "name": "chain", "alignment": 1,
            "tensors": [
              {"name": "x", "size": 50000000, "kind": "input"},
              {"name": "a", "size": 30000000, "kind": "activation"},
              {"name": "b", "size": 50000000, "kind": "activation"},
              {"name": "c1", "size": 40000000, "kind": "activation"},
              {"name": "c2", "size": 40000000, "kind": "activation"},
              {"name": "c3", "size": 10000000, "kind": "activation"},
              {"name": "y", "size": 5000000, "kind": "output"}],
            "ops": [
              {"name": "pa", "type": "relu", "inputs": ["x"], "outputs": ["a"], "time_us": 10},
              {"name": "pb", "type": "upsample", "inputs": ["a"], "outputs": ["b"], "time_us": 10},
              {"name": "p1", "type": "conv", "inputs": ["b"], "outputs": ["c1"], "time_us": 10},
              {"name": "p2", "type": "conv", "inputs": ["c1"], "outputs": ["c2"], "time_us": 10},
              {"name": "p3", "type": "conv", "inputs": ["c2"], "outputs": ["c3"], "time_us": 10},
              {"name": "py", "type": "add", "inputs": ["b", "c3", "x"], "outputs": ["y"], "time_us": 10}]}"#,
    )
    .unwrap()
}

#[test]
fn the_joint_program_recomputes_a_chain_where_the_sequential_strategies_must_spill() {
    let g = chain_to_recompute();
    let order = [0, 1, 2, 3, 4, 5];
    let budget = 150_000_000;
    for s in ["sweep", "ilp"] {
        let p = plan_with_budget(&g, &order, &opts(budget, s)).unwrap();
        let st = p.stats.budget.unwrap();
        assert!(st.spills > 0 && st.recomputed_ops == 0, "{s}: {st:?}");
    }
    let p = plan_with_budget(&g, &order, &opts(budget, JOINT)).unwrap();
    crate::validate::validate(&g, &p, Some(budget)).unwrap();
    let st = p.stats.budget.as_ref().unwrap();
    assert_eq!(st.strategy, JOINT, "{st:?}");
    assert_eq!((st.spills, st.recomputed_ops), (0, 2), "{st:?}");
    // The replayed relu runs before the replayed upsample, both right before `py`.
    let execs: Vec<&str> = p
        .instructions
        .iter()
        .filter_map(|i| match i {
            Instruction::Exec { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(execs, ["pa", "pb", "p1", "p2", "p3", "pa", "pb", "py"]);
}

/// `a = conv(x)` (x a 1 MB input) has two cheap copies, `c = clone(a)` and
/// `h = hardtanh(a)`, read only by the last op, after 40 steps whose two live 100 MB tensors
/// leave no room for them. The sequential strategies spill both copies (a recompute needs
/// `a`, which is gone by then); sending the small input out once and replaying the chain
/// `a`, `c`, `h` from it at the end moves 1 MB instead of 100 MB. The graph has over 40
/// ops, so the joint program decomposes it, fixed-order pass first.
fn two_copies_read_late() -> Graph {
    let s = 50_000_000u64;
    let mut tensors = vec![
        serde_json::json!({"name": "x", "size": 1_000_000, "kind": "input"}),
        serde_json::json!({"name": "a", "size": s, "kind": "activation"}),
        serde_json::json!({"name": "c", "size": s, "kind": "activation"}),
        serde_json::json!({"name": "h", "size": s, "kind": "activation"}),
    ];
    let mut ops = vec![
        serde_json::json!({"name": "pa", "type": "conv", "inputs": ["x"], "outputs": ["a"], "time_us": 500}),
        serde_json::json!({"name": "pc", "type": "clone", "inputs": ["a"], "outputs": ["c"], "time_us": 20}),
        serde_json::json!({"name": "ph", "type": "hardtanh", "inputs": ["a"], "outputs": ["h"], "time_us": 20}),
    ];
    let n = 40;
    for i in 1..=n {
        let size = if i == n { 1_000_000 } else { 2 * s };
        tensors
            .push(serde_json::json!({"name": format!("b{i}"), "size": size, "kind": "activation"}));
        let input = if i == 1 {
            "a".to_string()
        } else {
            format!("b{}", i - 1)
        };
        ops.push(
            serde_json::json!({"name": format!("f{i}"), "type": "conv", "inputs": [input],
            "outputs": [format!("b{i}")], "time_us": 50}),
        );
    }
    tensors.push(serde_json::json!({"name": "y", "size": 1_000_000, "kind": "output"}));
    ops.push(serde_json::json!({"name": "end", "type": "add",
        "inputs": ["c", "h", format!("b{n}")], "outputs": ["y"], "time_us": 50}));
    let g = serde_json::json!({"format": "memplan-graph/1", "name": "two_copies",
        "alignment": 256, "tensors": tensors, "ops": ops});
    Graph::parse(&g.to_string()).unwrap()
}

#[test]
fn the_fixed_order_pass_replays_two_late_copies_from_one_spilled_source() {
    let g = two_copies_read_late();
    let order: Vec<usize> = (0..g.ops.len()).collect();
    let budget = 4 * 50_000_000 + 4 * 256;
    let with = |s: &str| BudgetOptions {
        effort: Some(1),
        ..opts(budget, s)
    };
    let sequential: Vec<(String, f64)> = ["sweep", "ilp", "chen", "spill-all"]
        .iter()
        .filter_map(|s| {
            let p = plan_with_budget(&g, &order, &with(s)).ok()?;
            Some((s.to_string(), p.stats.budget?.overhead_pct))
        })
        .collect();
    assert!(!sequential.is_empty());
    let p = plan_with_budget(&g, &order, &with(JOINT)).unwrap();
    crate::validate::validate(&g, &p, Some(budget)).unwrap();
    let st = p.stats.budget.as_ref().unwrap();
    assert_eq!(st.strategy, JOINT, "{st:?}");
    for (s, o) in &sequential {
        assert!(st.overhead_pct < o - 1.0, "joint {st:?} vs {s} {o}");
    }
    // One spill (of the input) and the chain replayed from it.
    assert_eq!((st.spills, st.recomputed_ops), (1, 3), "{st:?}");
    assert_eq!(st.spilled_out_bytes, 1_000_000, "{st:?}");
    let note = st.solver.clone().unwrap_or_default();
    assert!(
        note.contains("windows") && note.contains("(1 with the order fixed)"),
        "{note}"
    );
}

/// The cheapest estimate of `p`'s cost (µs): every spill-in hidden, at [`LINK_SHARE`] of its
/// link time both ways; every replayed op at its time.
fn cheapest_cost(g: &Graph, p: &Plan) -> f64 {
    let profile = DeviceProfile::h200();
    let ids = g.op_indices();
    let mut seen = vec![false; g.ops.len()];
    let mut cost = 0.0;
    for ins in &p.instructions {
        match ins {
            Instruction::Exec { node, .. } => {
                let k = ids[node.as_str()];
                if std::mem::replace(&mut seen[k], true) {
                    cost += profile.op_us(g, &g.ops[k]);
                }
            }
            Instruction::SpillIn { tensor, .. } => {
                let size = g.tensors.iter().find(|t| &t.name == tensor).unwrap().size;
                cost += sweep::LINK_SHARE * (profile.h2d_us(size) + profile.d2h_us(size));
            }
            _ => {}
        }
    }
    cost
}

#[test]
fn the_eviction_bound_is_below_the_cheapest_cost_of_every_plan_and_positive_when_bytes_must_go() {
    let s = 50_000_000u64;
    let cases = [
        (two_copies_read_late(), vec![4 * s + 1024, 5 * s, 6 * s]),
        (
            training_chain(30, 1_000_000),
            vec![8_000_000, 15_000_000, 25_000_000],
        ),
        (chain_to_recompute(), vec![150_000_000, 170_000_000]),
    ];
    let mut positive = 0;
    for (g, budgets) in &cases {
        let order: Vec<usize> = (0..g.ops.len()).collect();
        let ctx = Ctx::new(g, &order, DeviceProfile::h200(), Params::default());
        for &budget in budgets {
            let bound = joint::eviction_bound(&ctx, budget);
            assert!(bound >= 0.0);
            positive += usize::from(bound > 0.0);
            for name in strategy_names() {
                let o = BudgetOptions {
                    effort: Some(1),
                    ..opts(budget, name)
                };
                if let Ok(p) = plan_with_budget(g, &order, &o) {
                    let cost = cheapest_cost(g, &p);
                    assert!(
                        bound <= cost * (1.0 + 1e-9) + 1e-9,
                        "{} at {budget} B, {name}: bound {bound} us > cost {cost} us",
                        g.name
                    );
                }
            }
        }
    }
    assert!(positive >= 4, "{positive}");
}

#[test]
fn the_budget_fit_gets_fewer_nodes_per_buffer_on_large_schedules() {
    assert_eq!(
        fit_nodes(FIT_NODES_PER_BUFFER, 100),
        FIT_NODES_PER_BUFFER * 100
    );
    assert_eq!(fit_nodes(FIT_NODES_PER_BUFFER, 2700), FIT_WORK / 2700);
    assert_eq!(fit_nodes(0, 50), 0);
    assert_eq!(fit_nodes(u64::MAX, 0), FIT_WORK);
}

#[test]
fn with_an_effort_every_joint_model_is_capped_by_work_and_never_by_the_clock() {
    let g = chain();
    let mut ctx = chain_ctx(&g);
    for k in [1, 3] {
        ctx.effort = Some(k);
        let o = joint::JointOptions::for_ctx(&ctx);
        assert_eq!(o.limits.time, None, "effort {k}");
        assert_eq!(o.limits.nodes, Some(k * joint::DEFAULT_NODES), "effort {k}");
        assert_eq!(
            o.fixed_lp_iterations,
            Some(k * joint::FIXED_LP_ITERATIONS),
            "effort {k}"
        );
    }
    // Without an effort the run is clock-capped anyway: 0.5 s a model, no iteration cap.
    ctx.effort = None;
    let o = joint::JointOptions::for_ctx(&ctx);
    assert_eq!(o.limits.time, Some(joint::DEFAULT_TIME));
    assert_eq!(o.fixed_lp_iterations, None);
}
