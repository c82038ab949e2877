use super::*;

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
