//! A guarded HiGHS solve (`memplan_solver::mip::solve`) on a model where HiGHS 1.16 overruns
//! its time limit: the solve returns soon after the limit, or after the stop flag, with what
//! HiGHS reported. A test binary of its own, so that the HiGHS thread each test leaves behind
//! (it runs for minutes) ends with this process instead of slowing other tests.

use memplan_solver::mip::{
    self, overrun::LIMIT_GRACE, overrun::STOP_GRACE, MipOptions, MipStatus, Model, Watch,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The MPS file HiGHS wrote of a throw-away partition program (a binary per buffer of a
/// generated 450-buffer instance, below or above a line, with a no-good row), on which HiGHS
/// 1.16 with presolve on and its root heuristics on stays minutes in a RENS sub-MIP's presolve
/// (`HPresolve::strengthenInequalities`), past a 2 s time limit and the interrupt callback.
/// `highspy` 1.16.0 reading the same file does the same.
const OVERRUN_MPS: &str = include_str!("data/highs_overrun.mps");

/// Reads the MPS subset HiGHS writes (free-form tokens; N, E, L and G rows; integer markers;
/// RHS, RANGES; UP, LO, UI, LI and BV bounds) into a [`Model`], columns and rows in file order.
fn read_mps(text: &str) -> Model {
    #[derive(Default, Clone)]
    struct Column {
        cost: f64,
        integer: bool,
        lower: f64,
        upper: f64,
        terms: Vec<(usize, f64)>,
    }
    let mut section = "";
    let mut rows: Vec<(char, f64, Option<f64>)> = Vec::new();
    let mut row_of: HashMap<String, usize> = HashMap::new();
    let mut objective = String::new();
    let mut columns: Vec<Column> = Vec::new();
    let mut col_of: HashMap<String, usize> = HashMap::new();
    let mut integer = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            section = line.split_whitespace().next().unwrap_or("");
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        match section {
            "ROWS" if f[0] == "N" => objective = f[1].to_string(),
            "ROWS" => {
                row_of.insert(f[1].to_string(), rows.len());
                rows.push((f[0].chars().next().unwrap(), 0.0, None));
            }
            "COLUMNS" if f.get(1) == Some(&"'MARKER'") => integer = f[2] == "'INTORG'",
            "COLUMNS" => {
                let j = *col_of.entry(f[0].to_string()).or_insert_with(|| {
                    columns.push(Column {
                        integer,
                        upper: f64::INFINITY,
                        ..Column::default()
                    });
                    columns.len() - 1
                });
                for pair in f[1..].chunks(2) {
                    let v: f64 = pair[1].parse().unwrap();
                    if pair[0] == objective {
                        columns[j].cost = v;
                    } else {
                        columns[j].terms.push((row_of[pair[0]], v));
                    }
                }
            }
            "RHS" => {
                for pair in f[1..].chunks(2) {
                    if let Some(&i) = row_of.get(pair[0]) {
                        rows[i].1 = pair[1].parse().unwrap();
                    }
                }
            }
            "RANGES" => {
                for pair in f[1..].chunks(2) {
                    rows[row_of[pair[0]]].2 = Some(pair[1].parse().unwrap());
                }
            }
            "BOUNDS" => {
                let c = &mut columns[col_of[f[2]]];
                let v = || f[3].parse::<f64>().unwrap();
                match f[0] {
                    "UP" | "UI" => c.upper = v(),
                    "LO" | "LI" => c.lower = v(),
                    "BV" => (c.lower, c.upper) = (0.0, 1.0),
                    other => panic!("bound type {other} not read"),
                }
            }
            _ => {}
        }
    }
    let mut model = Model::new();
    let mut terms: Vec<Vec<(mip::Col, f64)>> = vec![Vec::new(); rows.len()];
    for c in &columns {
        let col = if c.integer {
            model.add_integer_column(c.cost, c.lower..=c.upper)
        } else {
            model.add_column(c.cost, c.lower..=c.upper)
        };
        for &(i, v) in &c.terms {
            terms[i].push((col, v));
        }
    }
    for ((kind, rhs, range), terms) in rows.into_iter().zip(terms) {
        let r = range.map(f64::abs);
        let (lo, hi) = match (kind, range) {
            ('E', Some(x)) if x < 0.0 => (rhs + x, rhs),
            ('E', Some(x)) => (rhs, rhs + x),
            ('E', None) => (rhs, rhs),
            ('L', _) => (r.map_or(f64::NEG_INFINITY, |r| rhs - r), rhs),
            ('G', _) => (rhs, r.map_or(f64::INFINITY, |r| rhs + r)),
            (other, _) => panic!("row type {other} not read"),
        };
        model.add_row(lo..=hi, terms);
    }
    model
}

/// The options under which HiGHS overruns on the fixture: presolve and HiGHS' default root
/// heuristics on, stop at the first solution, a 2 s limit.
fn overrunning_options() -> MipOptions {
    MipOptions {
        presolve: true,
        mip_rel_gap: 1.0,
        time_limit: Some(2.0),
        lenient: true,
        ..MipOptions::default()
    }
}

/// Asserts that the solve started at `started` gave up on HiGHS with `status` within `due`
/// (plus 2 s of slack for building the model and a loaded machine; unguarded, HiGHS returns
/// after minutes), and hands its solution back.
fn abandoned_within(
    solution: mip::MipSolution,
    started: Instant,
    due: Duration,
    status: MipStatus,
) -> mip::MipSolution {
    let elapsed = started.elapsed();
    assert!(
        elapsed < due + Duration::from_secs(2),
        "returned after {elapsed:?}"
    );
    assert!(
        solution.abandoned,
        "HiGHS returned on its own: {solution:?}"
    );
    assert_eq!(solution.status, status);
    solution
}

#[test]
fn a_solve_returns_soon_after_its_time_limit_when_highs_overruns_it() {
    let model = read_mps(OVERRUN_MPS);
    assert_eq!(model.num_cols(), 220);
    let started = Instant::now();
    let solution = mip::solve(model, &overrunning_options(), &[], &Watch::NONE).unwrap();
    let solution = abandoned_within(
        solution,
        started,
        Duration::from_secs(2) + LIMIT_GRACE,
        MipStatus::TimeLimit,
    );
    // HiGHS found its first solution before it stalled: the answer keeps it.
    let columns = solution.columns.expect("the last improving solution");
    assert_eq!(columns.len(), 220);
}

#[test]
fn a_raised_stop_flag_returns_soon_when_highs_overruns() {
    let model = read_mps(OVERRUN_MPS);
    let options = MipOptions {
        time_limit: Some(600.0),
        ..overrunning_options()
    };
    let flag = AtomicBool::new(false);
    let started = Instant::now();
    let solution = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_secs(3));
            flag.store(true, Ordering::Relaxed);
        });
        let watch = Watch {
            cancel: Some(&flag),
            ..Watch::NONE
        };
        mip::solve(model, &options, &[], &watch).unwrap()
    });
    abandoned_within(
        solution,
        started,
        Duration::from_secs(3) + STOP_GRACE,
        MipStatus::Interrupt,
    );
}
