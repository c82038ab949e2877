//! `--only mutations [--mutants N]`: the differential mutation test of the validator at scale
//!. N seeded single and double mutations (default 10,000) of valid plans — plain,
//! in-place and budgeted (spills, recomputes) plans of small copies of the bundled sample and
//! of zoo graphs (sizes divided so that a run takes milliseconds) — each checked by
//! `memplan::validate`, by `SHARED_DIR/tools/check_plan.py` (one Python process) and, when the
//! validator accepts it, run by the CPU executor (mixing kernels) against the reference.
//!
//! Per subject and in total: mutants, accepted, executed, accepted-and-corrupt (target 0),
//! accepted but refused by the executor (target 0), disagreements with check_plan.py outside
//! the `inplace_of` extension and the graph-name rule (target 0), seconds; then every finding.
//! The mutator and harness are `tests/support/mutate.rs` (shared with
//! `tests/validator_mutations.rs`).

#[path = "../../tests/support/mutate.rs"]
mod mutate;

use anyhow::{anyhow, Context, Result};
use memplan::graph::Graph;
use mutate::{Finding, Tally, Variant};
use std::path::Path;
use std::time::Instant;

/// Default number of mutants.
pub const DEFAULT_MUTANTS: usize = 10_000;

/// The graphs and plans mutated: (graph, variant).
fn subjects(shared: &Path) -> Result<Vec<(Graph, Variant)>> {
    let sample_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/resnet_block.train.json");
    let sample = Graph::parse(
        &std::fs::read_to_string(&sample_path)
            .with_context(|| sample_path.display().to_string())?,
    )?;
    let mini = |g: &Graph, f| mutate::mini(g, f).map_err(|e| anyhow!(e));
    let s = mini(&sample, 1024)?;
    let mut v = vec![
        (s.clone(), Variant::Plain),
        (s.clone(), Variant::Inplace),
        (s.clone(), Variant::Budget(60.0)),
        (s, Variant::Budget(75.0)),
    ];
    for (name, factor, variants) in [
        (
            "resnet18.1.inference",
            256,
            &[Variant::Plain, Variant::Inplace][..],
        ),
        (
            "mobilenet_v2.1.inference",
            512,
            &[Variant::Plain, Variant::Inplace][..],
        ),
        (
            "squeezenet1_0.32.train",
            4096,
            &[Variant::Budget(65.0), Variant::Inplace][..],
        ),
        ("alexnet.64.train", 4096, &[Variant::Budget(80.0)][..]),
    ] {
        match mutate::zoo_graph(shared, name).map_err(|e| anyhow!(e))? {
            Some(g) => {
                let m = mini(&g, factor)?;
                v.extend(variants.iter().map(|&x| (m.clone(), x)));
            }
            None => eprintln!("note: {name} not found under {}", shared.display()),
        }
    }
    Ok(v)
}

/// Runs the table.
pub fn run(shared: &Path, mutants: usize) -> Result<()> {
    let started = Instant::now();
    let mut py = mutate::PyChecker::start(&shared.join("tools")).map_err(|e| anyhow!(e))?;
    let dir = std::env::temp_dir().join(format!("memplan-mutations-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    let subjects = subjects(shared)?;
    let per = mutants.div_ceil(subjects.len().max(1));
    println!("| subject | mutants | double | in place | accepted | executed | accepted & corrupt | refused by executor | disagreements | s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut total = Tally::default();
    let mut findings: Vec<Finding> = Vec::new();
    for (k, (g, variant)) in subjects.iter().enumerate() {
        let t0 = Instant::now();
        let s =
            mutate::subject(g, *variant, 1, true, &dir, Some(&mut py)).map_err(|e| anyhow!(e))?;
        let (t, f) = mutate::differential(
            &s,
            &mutate::project_validator,
            per,
            0xbe9c + k as u64,
            true,
            Some(&mut py),
            None,
        )
        .map_err(|e| anyhow!(e))?;
        let refused = f.iter().filter(|x| x.class == "accepted-refused").count();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
            s.label,
            t.mutants,
            t.doubles,
            t.inplace,
            t.accepted,
            t.executed,
            t.corrupt,
            refused,
            t.disagreements,
            t0.elapsed().as_secs_f64()
        );
        total.add(&t);
        findings.extend(f);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let refused = findings
        .iter()
        .filter(|x| x.class == "accepted-refused")
        .count();
    println!(
        "| **total** | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
        total.mutants,
        total.doubles,
        total.inplace,
        total.accepted,
        total.executed,
        total.corrupt,
        refused,
        total.disagreements,
        started.elapsed().as_secs_f64()
    );
    println!();
    println!(
        "{} mutants, {} accepted ({} rejected), {} executed ({} not run: a region over the cap), \
         accepted-and-corrupt {} (target 0), refused by the executor {} (target 0), \
         disagreements with check_plan.py outside the extension {} of {} compared (target 0), \
         {:.1} s",
        total.mutants,
        total.accepted,
        total.rejected,
        total.executed,
        total.skipped,
        total.corrupt,
        refused,
        total.disagreements,
        total.compared,
        started.elapsed().as_secs_f64()
    );
    for f in &findings {
        println!("- {f}");
    }
    Ok(())
}
