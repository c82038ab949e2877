//! **exact-suite** (`--only exact-suite [--count N] [--first-seed S] [--configs A,B,…]
//! [--class B] [--keep F] [--aligned F] [--capacity-factor F] [--write DIR]`; not part of
//! the default run): the exact placement search on generated hard
//! instances with known answers ([`memplan_solver::generate`]) and on the six challenging
//! MiniMalloc instances of `SHARED_DIR/bench/minimalloc`.
//!
//! Each configuration ([`CONFIGS`]) runs every instance at its capacity with the per-instance
//! time limit (`--time-limit S`, default 10 s here). A *fits* instance is solved when a
//! placement is found, a *below-load* one when infeasibility is proven, a *grown* one when
//! either is established. Per configuration, size class and variant the table gives: solved /
//! total, seconds (median, p90, max over all instances, unsolved ones at the limit) and search
//! nodes (median, max). `minimise` runs [`exact::minimise`] without a capacity from the
//! heuristic portfolio's placement and counts an instance solved when the peak is proven
//! optimal (bound = peak); its rows also give the mean gap. `highs` runs the placement integer
//! program warm-started from the portfolio and counts it solved when its peak is at most the
//! capacity. Unsolved instances are listed by name at the end; for the exact search's
//! configurations, each with its trace ([`exact::SearchTrace`]): the most buffers a run placed
//! at once, and the share of section-check failures that fell in each run's most failing
//! section (near 100 %: the search thrashes on one spot).
//!
//! `--keep F` and `--aligned F` change the shape of every generated instance: the fraction of
//! the cut pieces kept (1: a full rectangle, no holes; default: 0.85–1 per instance) and the
//! share of buffers aligned above the grid (0: none; default 0.1). They are how one measures
//! what makes instances hard; the names then end in `-keepF` / `-alignedF`.
//! `--capacity-factor F` asks the fitting instances at `F` × LOAD (rounded down to the grid;
//! names end in `-capF`): a fit with slack, as under a memory budget.
//! `--class B` replaces the suite's mix by one size class: `--count` fitting instances of `B`
//! buffers, one per seed from `--first-seed` on (`hard-B-fits-SEED`, the same instance as the
//! suite's when the suite gives that seed that size), for samples of one class larger than
//! the suite's eight fits per class per 50 seeds, such as the held-out ones the README quotes.
//!
//! `--write DIR` writes the generated instances as `DIR/NAME.CAPACITY.csv` (the buffer CSV of
//! docs/FORMATS.md §3, alignment column where needed, no offsets) and `DIR/index.csv` (name,
//! buffers, capacity, LOAD, what is known), and runs nothing.

use anyhow::{bail, Context, Result};
use memplan_solver::exact::{self, ExactOptions, ExactStatus, SearchTrace};
use memplan_solver::generate::{self, HardInstance, HardSpec, Known, Variant};
use memplan_solver::placement::{self, program::IlpOptions};
use memplan_solver::{Limits, PlacementProblem};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Default number of generated instances.
pub const DEFAULT_COUNT: usize = 200;

/// Most buffers `--class` accepts (the generator cuts a 1024 × 1024 grid).
pub const MAX_CLASS: usize = 100_000;

/// Default per-instance time limit of this table (seconds).
pub const DEFAULT_TIME_LIMIT_S: f64 = 10.0;

/// The configurations, by name: the exact search with all switches (`default`, the restart
/// portfolio), with one switch off each, each member of the rotation alone (`strategy-4` and
/// `strategy-5` are the learning members), the minimiser and the HiGHS placement program.
pub const CONFIGS: [&str; 22] = [
    "default",
    "no-sections",
    "no-dominance",
    "no-dynamic-ordering",
    "no-restarts",
    "no-decomposition",
    "no-memo",
    "no-reversal",
    "no-discrepancy",
    "no-learning",
    "no-blocks",
    "no-backjumping",
    "no-located",
    "one-thread",
    "strategy-0",
    "strategy-1",
    "strategy-2",
    "strategy-3",
    "strategy-4",
    "strategy-5",
    "minimise",
    "highs",
];

/// Configurations run when `--configs` is not given.
pub const DEFAULT_CONFIGS: [&str; 9] = [
    "default",
    "strategy-0",
    "strategy-1",
    "strategy-2",
    "strategy-3",
    "strategy-4",
    "strategy-5",
    "minimise",
    "highs",
];

/// Settings of the table.
#[derive(Debug, Clone)]
pub struct SuiteArgs {
    /// Generated instances.
    pub count: usize,
    /// Seed of the first generated instance.
    pub first_seed: u64,
    /// Per-instance time limit.
    pub time_limit: Duration,
    /// Configurations to run (names of [`CONFIGS`]).
    pub configs: Vec<String>,
    /// Write the instances here instead of running.
    pub write: Option<PathBuf>,
    /// Fraction of the cut pieces kept, in `(0, 1]` (`None`: each instance's own, 0.85–1).
    pub keep: Option<f64>,
    /// Share of buffers aligned above the grid, in `[0, 1]` (`None`: 0.1).
    pub aligned: Option<f64>,
    /// Fitting instances are asked at this multiple of LOAD (≥ 1; rounded down to the grid).
    pub capacity_factor: Option<f64>,
    /// One size class instead of the suite's mix: every instance fits and has this many
    /// buffers (`None`: [`generate::suite`]).
    pub class: Option<usize>,
}

/// One instance of the table.
struct Case {
    name: String,
    class: String,
    variant: &'static str,
    problem: PlacementProblem,
    capacity: u64,
    known: Known,
}

/// One configuration's answer on one case.
struct Run {
    solved: bool,
    seconds: f64,
    /// Search nodes (0 for `highs`, whose branch-and-bound nodes are not reported).
    nodes: u64,
    /// `minimise`: (peak − bound) / peak.
    gap: Option<f64>,
    /// The exact search's trace (its configurations only).
    trace: Option<SearchTrace>,
}

fn exact_options(config: &str, limits: Limits) -> Result<ExactOptions> {
    let mut o = ExactOptions::with_limits(limits);
    match config {
        "default" | "minimise" => {}
        "no-sections" => o.section_inference = false,
        "no-dominance" => o.dominance = false,
        "no-dynamic-ordering" => o.dynamic_ordering = false,
        "no-restarts" => o.restarts = false,
        "no-decomposition" => o.decomposition = false,
        "no-memo" => o.memo = false,
        "no-reversal" => o.time_reversal = false,
        "no-discrepancy" => o.discrepancy_passes = false,
        "no-learning" => o.learning = false,
        "no-blocks" => o.blocks = false,
        "no-backjumping" => o.backjumping = false,
        "no-located" => o.located_failures = false,
        "one-thread" => o.threads = 1,
        s if s.starts_with("strategy-") => {
            let k: usize = s["strategy-".len()..]
                .parse()
                .with_context(|| format!("configuration `{s}`: strategy-K needs a number"))?;
            if k >= exact::strategy_count() {
                bail!(
                    "configuration `{s}`: there are {} strategies (0..{})",
                    exact::strategy_count(),
                    exact::strategy_count() - 1
                );
            }
            o.only_strategy = Some(k);
        }
        other => bail!(
            "unknown configuration `{other}`; known: {}",
            CONFIGS.join(", ")
        ),
    }
    Ok(o)
}

fn run_case(config: &str, case: &Case, tl: Duration) -> Result<Run> {
    let limits = Limits {
        time: Some(tl),
        nodes: None,
        cancel: None,
    };
    let t = Instant::now();
    match config {
        "minimise" | "highs" => {
            let uncapped = PlacementProblem {
                buffers: case.problem.buffers.clone(),
                capacity: None,
            };
            let start = placement::portfolio(&uncapped, &limits)
                .with_context(|| format!("{}: heuristic portfolio", case.name))?;
            let rest = tl.saturating_sub(t.elapsed());
            if config == "minimise" {
                let out = exact::minimise(
                    &uncapped,
                    &start.placement,
                    &exact_options(
                        config,
                        Limits {
                            time: Some(rest),
                            ..limits
                        },
                    )?,
                );
                let gap =
                    (out.peak - out.lower_bound.min(out.peak)) as f64 / out.peak.max(1) as f64;
                Ok(Run {
                    solved: out.status == ExactStatus::Optimal,
                    seconds: t.elapsed().as_secs_f64(),
                    nodes: out.nodes,
                    gap: Some(gap),
                    trace: None,
                })
            } else {
                let opts = IlpOptions {
                    limits: Limits {
                        time: Some(rest),
                        ..limits
                    },
                    max_pairs: usize::MAX,
                    ..IlpOptions::default()
                };
                let out = placement::program::place_ilp(&uncapped, &start.placement, &opts);
                let (solved, nodes) = match out {
                    Ok(o) => {
                        let peak = uncapped.check(&o.placement)?;
                        let proven_infeasible = o.stats.lower_bound > case.capacity;
                        let ok = match case.known {
                            Known::Fits => peak <= case.capacity,
                            Known::Infeasible => proven_infeasible,
                            Known::Unknown => peak <= case.capacity || proven_infeasible,
                        };
                        (ok, 0)
                    }
                    Err(_) => (false, 0),
                };
                Ok(Run {
                    solved,
                    seconds: t.elapsed().as_secs_f64(),
                    nodes,
                    gap: None,
                    trace: None,
                })
            }
        }
        _ => {
            let out = exact::solve(
                &case.problem,
                case.capacity,
                &[],
                &exact_options(config, limits)?,
            );
            if let Some(p) = &out.placement {
                let peak = case.problem.check(p)?;
                if peak > case.capacity {
                    bail!("{}: {config} returned a peak above the capacity", case.name);
                }
            }
            let solved = match (case.known, out.status) {
                (Known::Fits, ExactStatus::Optimal) => true,
                (Known::Infeasible, ExactStatus::Infeasible) => true,
                (Known::Unknown, ExactStatus::Optimal | ExactStatus::Infeasible) => true,
                (Known::Fits, ExactStatus::Infeasible) => {
                    bail!(
                        "{}: {config} claims a fitting instance is infeasible",
                        case.name
                    )
                }
                (Known::Infeasible, ExactStatus::Optimal) => {
                    bail!("{}: {config} placed an infeasible instance", case.name)
                }
                _ => false,
            };
            Ok(Run {
                solved,
                seconds: out.elapsed.as_secs_f64(),
                nodes: out.nodes,
                gap: None,
                trace: Some(out.trace),
            })
        }
    }
}

/// How far an unsolved search got: `deepest K/N, H % of check failures in one section`
/// (a high share: the runs thrash on one spot).
fn describe(t: &SearchTrace, case: &Case) -> String {
    let hot = 100.0 * t.hottest_failures as f64 / t.check_failures.max(1) as f64;
    format!(
        "deepest {}/{}, {hot:.0} % of check failures in one section",
        t.deepest,
        case.problem.buffers.len()
    )
}

/// The generated instances of `args`, with its shape overrides (checked: an override out of
/// range is an error naming the flag).
fn generated(args: &SuiteArgs) -> Result<Vec<HardInstance>> {
    if let Some(k) = args.keep {
        if !(k > 0.0 && k <= 1.0) {
            bail!("--keep {k}: the fraction of pieces kept must lie in (0, 1]");
        }
    }
    if let Some(a) = args.aligned {
        if !(0.0..=1.0).contains(&a) {
            bail!("--aligned {a}: the share of aligned buffers must lie in [0, 1]");
        }
    }
    if let Some(f) = args.capacity_factor {
        if !(f >= 1.0 && f.is_finite()) {
            bail!("--capacity-factor {f}: fitting instances are asked at F × LOAD with F ≥ 1");
        }
    }
    let specs = match args.class {
        None => generate::suite(args.count, args.first_seed),
        Some(b) if !(1..=MAX_CLASS).contains(&b) => {
            bail!("--class {b}: a class has 1 to {MAX_CLASS} buffers")
        }
        Some(b) => (0..args.count as u64)
            .map(|i| HardSpec::challenging(args.first_seed.saturating_add(i), b, Variant::Fits))
            .collect(),
    };
    let mut suffix = String::new();
    if let Some(k) = args.keep {
        let _ = write!(suffix, "-keep{k}");
    }
    if let Some(a) = args.aligned {
        let _ = write!(suffix, "-aligned{a}");
    }
    Ok(specs
        .into_iter()
        .map(|mut spec| {
            spec.keep = args.keep.unwrap_or(spec.keep);
            spec.aligned = args.aligned.unwrap_or(spec.aligned);
            let mut inst = generate::generate(&spec);
            inst.name.push_str(&suffix);
            if let (Some(f), Known::Fits) = (args.capacity_factor, inst.known) {
                let grid = spec.grid.max(1);
                let cap = ((inst.load as f64 * f) as u64 / grid * grid).max(inst.load);
                inst.capacity = cap;
                inst.problem.capacity = Some(cap);
                let _ = write!(inst.name, "-cap{f}");
            }
            inst
        })
        .collect())
}

fn write_instances(dir: &Path, instances: &[HardInstance]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut index = String::from("name,buffers,capacity,load,known\n");
    for inst in instances {
        let ids: Vec<String> = (0..inst.problem.buffers.len())
            .map(|i| i.to_string())
            .collect();
        let csv = memplan_solver::csv::write_buffers(&ids, &inst.problem);
        let path = dir.join(format!("{}.{}.csv", inst.name, inst.capacity));
        std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
        let known = match inst.known {
            Known::Fits => "fits",
            Known::Infeasible => "infeasible",
            Known::Unknown => "unknown",
        };
        let _ = writeln!(
            index,
            "{},{},{},{},{known}",
            inst.name,
            inst.problem.buffers.len(),
            inst.capacity,
            inst.load
        );
    }
    let path = dir.join("index.csv");
    std::fs::write(&path, index).with_context(|| format!("writing {}", path.display()))?;
    println!(
        "wrote {} instances and index.csv to {}",
        instances.len(),
        dir.display()
    );
    Ok(())
}

/// The six challenging instances (`NAME.CAPACITY.csv`), when present.
fn shared_cases(shared: &Path) -> Result<Vec<Case>> {
    let dir = shared.join("bench/minimalloc");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    paths.sort();
    let mut cases = Vec::new();
    for path in paths {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some((name, cap)) = stem.rsplit_once('.') else {
            continue;
        };
        let Ok(capacity) = cap.parse::<u64>() else {
            continue;
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let parsed = memplan_solver::csv::parse(&text, 1)
            .with_context(|| format!("parsing {}", path.display()))?;
        cases.push(Case {
            name: format!("minimalloc-{name}"),
            class: "shared six".into(),
            variant: "fits",
            problem: parsed.problem,
            capacity,
            known: Known::Fits,
        });
    }
    Ok(cases)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs the table (or writes the instances).
pub fn run(shared: &Path, args: &SuiteArgs) -> Result<()> {
    for c in &args.configs {
        if !CONFIGS.contains(&c.as_str()) {
            bail!("unknown configuration `{c}`; known: {}", CONFIGS.join(", "));
        }
    }
    let instances = generated(args)?;
    if let Some(dir) = &args.write {
        return write_instances(dir, &instances);
    }
    let mut cases = shared_cases(shared)?;
    // Classes by the size asked (with `--keep 1` a last pinwheel cut may add a few buffers).
    let sizes: Vec<usize> = match args.class {
        Some(b) => vec![b; instances.len()],
        None => generate::suite(args.count, args.first_seed)
            .iter()
            .map(|spec| spec.buffers)
            .collect(),
    };
    for (size, inst) in sizes.into_iter().zip(instances) {
        let variant = match inst.known {
            Known::Fits => Variant::Fits.as_str(),
            Known::Infeasible => Variant::BelowLoad.as_str(),
            Known::Unknown => Variant::Grown(0).as_str(),
        };
        cases.push(Case {
            class: format!("{size} buffers"),
            name: inst.name,
            variant,
            capacity: inst.capacity,
            problem: inst.problem,
            known: inst.known,
        });
    }
    println!(
        "## exact-suite: {} generated instances (first seed {}) + {} shared, {:.0} s per instance",
        args.count,
        args.first_seed,
        cases.len() - args.count,
        args.time_limit.as_secs_f64()
    );
    println!();
    println!("| config | class | variant | solved | s median | s p90 | s max | nodes median | nodes max | gap mean |");
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut unsolved: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut summary = Vec::new();
    for config in &args.configs {
        // class → variant → runs, in first-seen order of classes.
        let mut groups: Vec<((String, &'static str), Vec<Run>)> = Vec::new();
        for case in &cases {
            let r = run_case(config, case, args.time_limit)?;
            if !r.solved {
                unsolved
                    .entry(config.clone())
                    .or_default()
                    .push(match r.trace {
                        Some(t) => format!("{} ({})", case.name, describe(&t, case)),
                        None => case.name.clone(),
                    });
            }
            let key = (case.class.clone(), case.variant);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.push(r),
                None => groups.push((key, vec![r])),
            }
        }
        let (mut fits_solved, mut fits_total) = (0, 0);
        for ((class, variant), runs) in &groups {
            let solved = runs.iter().filter(|r| r.solved).count();
            if *variant == "fits" && class != "shared six" {
                fits_solved += solved;
                fits_total += runs.len();
            }
            let mut secs: Vec<f64> = runs.iter().map(|r| r.seconds).collect();
            secs.sort_by(f64::total_cmp);
            let mut nodes: Vec<f64> = runs.iter().map(|r| r.nodes as f64).collect();
            nodes.sort_by(f64::total_cmp);
            let gaps: Vec<f64> = runs.iter().filter_map(|r| r.gap).collect();
            let gap = if gaps.is_empty() {
                "".to_string()
            } else {
                format!(
                    "{:.3} %",
                    100.0 * gaps.iter().sum::<f64>() / gaps.len() as f64
                )
            };
            println!(
                "| {config} | {class} | {variant} | {solved}/{} | {:.3} | {:.3} | {:.3} | {:.0} | {:.0} | {gap} |",
                runs.len(),
                quantile(&secs, 0.5),
                quantile(&secs, 0.9),
                quantile(&secs, 1.0),
                quantile(&nodes, 0.5),
                quantile(&nodes, 1.0),
            );
        }
        summary.push((config.clone(), fits_solved, fits_total));
    }
    println!();
    let at = args
        .capacity_factor
        .map_or_else(|| "LOAD".to_string(), |f| format!("{f} × LOAD"));
    println!("Generated *fits* instances solved at capacity = {at}, per configuration:");
    println!();
    for (config, solved, total) in &summary {
        println!(
            "- {config}: {solved}/{total} ({:.1} %)",
            100.0 * *solved as f64 / (*total).max(1) as f64
        );
    }
    if !unsolved.is_empty() {
        println!();
        println!("Unsolved:");
        for (config, names) in &unsolved {
            println!("- {config} ({}): {}", names.len(), names.join(", "));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` instances from seed 1, 1 s each, default shape and capacity.
    fn args(count: usize) -> SuiteArgs {
        SuiteArgs {
            count,
            first_seed: 1,
            time_limit: Duration::from_secs(1),
            configs: vec![],
            write: None,
            keep: None,
            aligned: None,
            capacity_factor: None,
            class: None,
        }
    }

    #[test]
    fn written_instances_parse_back_to_the_generated_buffers() {
        let dir = std::env::temp_dir().join(format!("memplan-suite-{}", std::process::id()));
        let args = SuiteArgs {
            first_seed: 3,
            write: Some(dir.clone()),
            ..args(10)
        };
        let instances = generated(&args).unwrap();
        write_instances(&dir, &instances).unwrap();
        for inst in &instances {
            let path = dir.join(format!("{}.{}.csv", inst.name, inst.capacity));
            let text = std::fs::read_to_string(&path).unwrap();
            let parsed = memplan_solver::csv::parse(&text, 1).unwrap();
            assert_eq!(
                parsed.problem.buffers, inst.problem.buffers,
                "{}",
                inst.name
            );
            assert!(parsed.offsets.is_none(), "the answer is not written");
        }
        let index = std::fs::read_to_string(dir.join("index.csv")).unwrap();
        assert_eq!(index.lines().count(), 11);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shape_overrides_give_full_unaligned_rectangles_under_their_own_names() {
        let args = SuiteArgs {
            keep: Some(1.0),
            aligned: Some(0.0),
            ..args(10)
        };
        let plain = generated(&SuiteArgs {
            keep: None,
            aligned: None,
            ..args.clone()
        })
        .unwrap();
        let shaped = generated(&args).unwrap();
        let mut holes = 0;
        for (p, inst) in plain.iter().zip(&shaped) {
            assert_eq!(inst.name, format!("{}-keep1-aligned0", p.name));
            assert!(inst.problem.buffers.iter().all(|b| b.alignment <= 1024));
            let area = |i: &HardInstance| -> u128 {
                i.problem
                    .buffers
                    .iter()
                    .map(|b| u128::from(b.lifetime.len()) * u128::from(b.size))
                    .sum()
            };
            if inst.known == Known::Fits {
                // No piece deleted: the buffers tile the whole 2^20 x 2^20 rectangle.
                assert_eq!(area(inst), 1u128 << 40, "{}", inst.name);
                holes += usize::from(area(p) < 1u128 << 40);
            }
        }
        assert!(holes > 0, "the default shape deletes pieces");
    }

    #[test]
    fn a_class_gives_fitting_instances_of_one_size_that_match_the_suite() {
        let sample = SuiteArgs {
            class: Some(250),
            first_seed: 101,
            ..args(12)
        };
        let class = generated(&sample).unwrap();
        assert_eq!(class.len(), 12);
        for (i, inst) in class.iter().enumerate() {
            assert_eq!(inst.name, format!("hard-250-fits-{}", 101 + i));
            assert_eq!(inst.problem.buffers.len(), 250);
            assert_eq!((inst.known, inst.capacity), (Known::Fits, inst.load));
        }
        // Seed 102 is a 250-buffer fit in the suite too: the same instance.
        let suite = generated(&SuiteArgs {
            first_seed: 101,
            ..args(5)
        })
        .unwrap();
        assert_eq!(suite[1].name, class[1].name);
        assert_eq!(suite[1].problem, class[1].problem);
        for b in [0, MAX_CLASS + 1] {
            let err = generated(&SuiteArgs {
                class: Some(b),
                ..args(1)
            })
            .unwrap_err()
            .to_string();
            assert!(err.contains("--class"), "{err}");
        }
    }

    #[test]
    fn shape_overrides_out_of_range_name_the_flag() {
        let args = SuiteArgs {
            keep: Some(0.0),
            ..args(1)
        };
        let err = generated(&args).unwrap_err().to_string();
        assert!(err.contains("--keep"), "{err}");
        let err = generated(&SuiteArgs {
            keep: None,
            aligned: Some(1.5),
            ..args.clone()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("--aligned"), "{err}");
        let err = generated(&SuiteArgs {
            keep: None,
            capacity_factor: Some(0.5),
            ..args
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("--capacity-factor"), "{err}");
    }

    #[test]
    fn a_capacity_factor_lifts_only_the_fitting_instances() {
        let args = SuiteArgs {
            capacity_factor: Some(1.1),
            ..args(10)
        };
        for inst in generated(&args).unwrap() {
            if inst.known == Known::Fits {
                assert!(inst.capacity > inst.load, "{}", inst.name);
                assert!(inst.capacity <= inst.load + inst.load / 10, "{}", inst.name);
                assert_eq!(inst.capacity % 1024, 0);
                assert_eq!(inst.problem.capacity, Some(inst.capacity));
                assert!(inst.name.ends_with("-cap1.1"), "{}", inst.name);
            } else {
                assert!(inst.capacity <= inst.load, "{}", inst.name);
            }
        }
    }

    #[test]
    fn an_unknown_configuration_is_named_in_the_error() {
        let err = exact_options("no-such", Limits::UNLIMITED).unwrap_err();
        assert!(err.to_string().contains("no-such"), "{err}");
        let err = exact_options("strategy-9", Limits::UNLIMITED).unwrap_err();
        assert!(err.to_string().contains("strategy-9"), "{err}");
    }
}
