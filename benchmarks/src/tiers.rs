//! `--only tiers`: what memory tiers (`memplan plan --tiers`) cost and what
//! they fragment. For every `*.inference.json` of the zoo and a few training graphs, twice:
//! as exported (the zoo carries no workspaces) and with im2col workspaces on every k×k
//! convolution (k > 1; `(C_in/groups)·Kh·Kw × N·Ho·Wo` f32 elements), it plans
//! untiered and tiered (every tier at 256 B) with the heuristics (`--order auto`), both
//! through the pipeline (`tiers` off and on), validates both, and prints the peaks, the
//! tiered/untiered ratio, the bytes of each tier, and the fragmentation at peak (1 − largest free block / total free memory)
//! (whole arena for both plans; the activations tier).

use anyhow::{bail, Context, Result};
use memplan::graph::Graph;
use memplan::pipeline::PipelineOptions;
use memplan::planner::{OrderMode, Strategy};
use memplan::zoo::profile::profile;
use std::path::{Path, PathBuf};

/// Training graphs benchmarked besides every inference graph.
const TRAIN: [&str; 4] = [
    "resnet50.32.train",
    "vgg16.16.train",
    "mobilenet_v2.32.train",
    "alexnet.64.train",
];

/// `graph` with an im2col workspace on every conv the model covers (`conv_algo`).
fn with_im2col(graph: &Graph) -> Result<Graph> {
    Ok(memplan::conv_algo::with_algo(
        &memplan::cost::DeviceProfile::h200(),
        graph,
        memplan::conv_algo::ConvAlgo::Im2col,
    ))
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// The graphs of the table: every inference graph, then [`TRAIN`] (those present).
fn graphs(zoo: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(zoo)
        .with_context(|| format!("reading {}", zoo.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".inference.json"))
        .collect();
    v.sort();
    v.extend(
        TRAIN
            .iter()
            .map(|n| zoo.join(format!("{n}.json")))
            .filter(|p| p.is_file()),
    );
    Ok(v)
}

/// Prints the tiers table for the zoo under `shared`.
pub fn run(shared: &Path, base: &PipelineOptions) -> Result<()> {
    let opts = PipelineOptions {
        order: OrderMode::Auto,
        strategy: Strategy::Heuristic,
        tiers: false,
        tier_alignment: None,
        ..base.clone()
    };
    let tiered = PipelineOptions {
        tiers: true,
        ..opts.clone()
    };
    println!("| graph | workspaces | untiered peak MiB | tiered peak MiB | tiered / untiered | weights MiB | activations MiB | temporaries MiB | frag@peak untiered (free KiB) | frag@peak tiered (free KiB) | frag@peak activations (free KiB) |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for path in graphs(&shared.join("zoo"))? {
        let g = Graph::parse(&std::fs::read_to_string(&path)?)
            .with_context(|| path.display().to_string())?;
        for (what, g) in [("none", g.clone()), ("im2col", with_im2col(&g)?)] {
            let u = crate::plan_checked(&g, &opts, None)
                .with_context(|| format!("{} ({what}) untiered", g.name))?
                .plan;
            let t = crate::plan_checked(&g, &tiered, None)
                .with_context(|| format!("{} ({what}) tiered", g.name))?
                .plan;
            let [w, a, tmp] = &t.stats.tiers[..] else {
                bail!("{}: a tiered plan without three tiers", g.name);
            };
            let (up, tp) = (u.stats.peak_bytes, t.stats.peak_bytes);
            // The whole arena at its peak step, for both plans (the free bytes give the rate
            // its scale: a few padding bytes can make it 50 %).
            let whole = |p: &memplan::Plan| -> Result<String> {
                let f = profile(&g, p)?.fragmentation_at_peak(0, p.stats.peak_bytes);
                Ok(format!(
                    "{:.2}% ({:.1})",
                    f.rate * 100.0,
                    f.space.free_bytes as f64 / 1024.0
                ))
            };
            println!(
                "| {} | {what} | {:.1} | {:.1} | {:.3} | {:.1} | {:.1} | {:.1} | {} | {} | {:.2}% ({:.1}) |",
                g.name,
                mib(up),
                mib(tp),
                if up == 0 { 1.0 } else { tp as f64 / up as f64 },
                mib(w.bytes),
                mib(a.bytes),
                mib(tmp.bytes),
                whole(&u)?,
                whole(&t)?,
                a.fragmentation_at_peak * 100.0,
                a.free_bytes_at_peak as f64 / 1024.0,
            );
        }
    }
    Ok(())
}
