//! How the tiling pass picks its regions and strip counts: the modelled cost of a strip
//! schedule (roofline time of its ops, estimated peak by a live-bytes simulation), the table
//! of every region's choices, the per-component dynamic program over cut partitions
//! ([`partition`]) inside a binary search over the peak bound ([`choose`]), and, for
//! `TileSpec::Auto`, the candidate selections judged by the peak of a heuristic plan.

use super::classify::{region_is_closed, Component};
use super::emit::{emit, NewKind, NewOp, Rewrite, TRef};
use super::{scaled_u64, Ctx, PassError, Regions, Tile, TileSpec, NAME, PRUNE_FACTOR};
use crate::graph::{Graph, TensorId};
use memplan_solver::CancelToken;
use std::collections::{BTreeMap, BTreeSet};

/// Regions picked in one component: (start cut, end cut, choice).
type Picks = Vec<(usize, usize, Choice)>;

/// One op for [`simulate`]: the arena tensors it reads and the tensors it writes, as
/// (id, bytes), and its workspace bytes.
struct SimOp {
    ins: Vec<(usize, u64)>,
    outs: Vec<(usize, u64)>,
    ws: u64,
}

/// Peak live bytes over a listed order: a tensor is live from its producer (or the start,
/// when nothing in the list produces it) to its last reader (or its producer, when unread).
fn simulate(ops: &[SimOp]) -> u64 {
    let mut last: BTreeMap<usize, usize> = BTreeMap::new();
    let mut produced: BTreeSet<usize> = BTreeSet::new();
    let mut size: BTreeMap<usize, u64> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        for &(t, s) in &op.ins {
            last.insert(t, i);
            size.insert(t, s);
        }
        for &(t, s) in &op.outs {
            produced.insert(t);
            size.insert(t, s);
            last.entry(t).or_insert(i);
        }
    }
    let mut live: u64 = size
        .iter()
        .filter(|(t, _)| !produced.contains(t))
        .map(|(_, &s)| s)
        .sum();
    let mut peak = live;
    for (i, op) in ops.iter().enumerate() {
        live += op.outs.iter().map(|&(_, s)| s).sum::<u64>();
        peak = peak.max(live + op.ws);
        let mut dead: BTreeSet<usize> = BTreeSet::new();
        for &(t, _) in op.ins.iter().chain(&op.outs) {
            if last.get(&t) == Some(&i) {
                dead.insert(t);
            }
        }
        for t in dead {
            live = live.saturating_sub(size[&t]);
        }
    }
    peak
}

/// One candidate for a region: strip count (1: untiled), estimated peak, modelled overhead.
#[derive(Debug, Clone, Copy)]
pub(super) struct Choice {
    pub(super) strips: usize,
    pub(super) peak: u64,
    pub(super) overhead_us: f64,
}

impl Ctx<'_> {
    fn new_op_us(&self, rw: &Rewrite, op: &NewOp) -> f64 {
        let size = |r: &TRef| match *r {
            TRef::Old(t) => self.g.tensor(t).size,
            TRef::New(i) => rw.tensors[i].size,
        };
        let bytes: u64 = op.inputs.iter().chain(&op.outputs).map(size).sum();
        let (num, den) = (op.frac.0 as f64, op.frac.1.max(1) as f64);
        let (flops, time_us, wide) = match &op.kind {
            NewKind::Strip { op: o, .. } => {
                let orig = &self.g.ops[*o];
                let wide = orig.outputs.iter().all(|&t| {
                    matches!(
                        self.g.tensor(t).dtype.as_deref(),
                        None | Some("f32") | Some("f64") | Some("float32") | Some("float64")
                    )
                });
                (
                    orig.flops.unwrap_or(0.0) * num / den,
                    orig.time_us.map(|t| t * num / den),
                    wide,
                )
            }
            _ => (0.0, None, true),
        };
        if let Some(t) = time_us {
            return t;
        }
        let thr = if wide {
            self.profile.fp32_flops_per_s
        } else {
            self.profile.half_flops_per_s
        };
        (flops / thr).max(bytes as f64 / self.profile.memory_bytes_per_s) * 1e6
    }

    /// Estimated peak of the rewrite: live bytes over its listed order (the entry is live
    /// from the start, outputs from their op, workspace during its op).
    fn rewrite_peak(&self, rw: &Rewrite) -> u64 {
        let sim: Vec<SimOp> = rw
            .ops
            .iter()
            .map(|op| {
                let r = |x: &TRef| match *x {
                    TRef::Old(t) => (t.index(), self.g.tensor(t).size),
                    TRef::New(i) => (self.g.tensors.len() + i, rw.tensors[i].size),
                };
                let arena = |x: &&TRef| match **x {
                    TRef::Old(t) => self.g.in_arena(t),
                    TRef::New(_) => true,
                };
                let ws = match op.kind {
                    NewKind::Strip { op: o, .. } => {
                        scaled_u64(self.g.ops[o].workspace, op.frac.0, op.frac.1)
                    }
                    _ => 0,
                };
                SimOp {
                    ins: op.inputs.iter().filter(arena).map(r).collect(),
                    outs: op.outputs.iter().map(r).collect(),
                    ws,
                }
            })
            .collect();
        simulate(&sim)
    }

    /// Estimated peak of the region's original ops.
    fn region_peak(&self, ops: &[usize]) -> u64 {
        let r = |t: &TensorId| (t.index(), self.g.tensor(*t).size);
        let sim: Vec<SimOp> = ops
            .iter()
            .map(|&o| {
                let op = &self.g.ops[o];
                SimOp {
                    ins: op
                        .inputs
                        .iter()
                        .filter(|&&t| self.g.in_arena(t))
                        .map(r)
                        .collect(),
                    outs: op.outputs.iter().map(r).collect(),
                    ws: op.workspace,
                }
            })
            .collect();
        simulate(&sim)
    }
}

/// Region choices per component: binary search over the peak bound for the lowest bound
/// whose least-overhead partition fits the budget. `filter`: only this strip count (and
/// untiled) is offered.
fn choose(
    components: &[Component],
    table: &[BTreeMap<(usize, usize), Vec<Choice>>],
    budget_us: f64,
    filter: Option<usize>,
) -> Vec<Picks> {
    let table: Vec<BTreeMap<(usize, usize), Vec<Choice>>> = table
        .iter()
        .map(|m| {
            m.iter()
                .map(|(&k, v)| {
                    let kept = v
                        .iter()
                        .filter(|c| c.strips == 1 || filter.is_none_or(|n| c.strips == n))
                        .copied()
                        .collect();
                    (k, kept)
                })
                .collect()
        })
        .collect();
    let mut bounds: Vec<u64> = table
        .iter()
        .flat_map(|m| m.values().flatten().map(|c| c.peak))
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let plan_for = |bound: u64| -> Option<Vec<Picks>> {
        let mut total = 0.0;
        let mut picks = Vec::new();
        for (ci, comp) in components.iter().enumerate() {
            let (cost, pick) = partition(comp, &table[ci], bound)?;
            total += cost;
            picks.push(pick);
        }
        (total <= budget_us).then_some(picks)
    };
    let mut best = None;
    let (mut lo, mut hi) = (0usize, bounds.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        match plan_for(bounds[mid]) {
            Some(p) => {
                best = Some(p);
                hi = mid;
            }
            None => lo = mid + 1,
        }
    }
    best.unwrap_or_default()
}

/// The strip schedules of the picked regions, in graph order.
fn rewrite_regions(ctx: &Ctx<'_>, components: &[Component], picks: &[Picks]) -> Regions {
    let mut regions: Regions = Vec::new();
    for (ci, pick) in picks.iter().enumerate() {
        let comp = &components[ci];
        for &(p, q, choice) in pick {
            if choice.strips < 2 {
                continue;
            }
            let ops = comp.ops[p..q].to_vec();
            let (Some(entry), Some(output)) = (comp.cuts_tensor(p), comp.cuts_tensor(q)) else {
                continue;
            };
            let Some(rw) = ctx.strips(&ops, entry, output, choice.strips) else {
                continue;
            };
            let before = ctx.region_peak(&ops);
            regions.push((ops, entry, output, choice, before, rw));
        }
    }
    regions.sort_by_key(|r| r.0[0]);
    regions
}

/// The peak of a heuristic plan of `g` (the CLI's default order search) at deterministic
/// work caps (no time limit, effort 1), stopped early by `cancel`.
fn planned_peak(g: &Graph, cancel: Option<&CancelToken>) -> Result<u64, PassError> {
    let opts = crate::planner::PlanOptions {
        strategy: crate::planner::Strategy::Heuristic,
        time_limit: None,
        effort: Some(1),
        cancel: cancel.cloned(),
        ..crate::planner::PlanOptions::default()
    };
    crate::planner::plan(g, &opts)
        .map(|p| p.stats.peak_bytes)
        .map_err(|e| PassError::Unsupported {
            pass: NAME,
            message: format!("planning a tiling candidate failed: {e}"),
        })
}

/// Least total overhead of covering the component's cuts with regions whose chosen peak is
/// at most `bound` (untiled stretches between non-adjacent cuts count as regions too, so a
/// component whose first cut is not at its start leaves its head untiled). `None` when no
/// partition fits the bound.
fn partition(
    comp: &Component,
    table: &BTreeMap<(usize, usize), Vec<Choice>>,
    bound: u64,
) -> Option<(f64, Picks)> {
    let k = comp.cuts.len();
    if k < 2 {
        return Some((0.0, Vec::new()));
    }
    // dp[j]: least overhead covering cuts[0]..cuts[j]; back[j]: (i, choice).
    let mut dp: Vec<Option<f64>> = vec![None; k];
    let mut back: Vec<Option<(usize, Choice)>> = vec![None; k];
    dp[0] = Some(0.0);
    for j in 1..k {
        for i in 0..j {
            let Some(base) = dp[i] else { continue };
            let key = (comp.cuts[i].0, comp.cuts[j].0);
            let best = match table.get(&key) {
                Some(choices) => choices
                    .iter()
                    .filter(|c| c.peak <= bound)
                    .min_by(|a, b| a.overhead_us.total_cmp(&b.overhead_us))
                    .copied(),
                // A stretch between adjacent cuts that cannot be a region stays as it is.
                None if j == i + 1 => Some(Choice {
                    strips: 1,
                    peak: 0,
                    overhead_us: 0.0,
                }),
                None => None,
            };
            if let Some(c) = best {
                let v = base + c.overhead_us;
                if dp[j].is_none_or(|d| v < d) {
                    dp[j] = Some(v);
                    back[j] = Some((i, c));
                }
            }
        }
    }
    let total = dp[k - 1]?;
    let mut picks = Vec::new();
    let mut j = k - 1;
    while j > 0 {
        let (i, c) = back[j]?;
        picks.push((comp.cuts[i].0, comp.cuts[j].0, c));
        j = i;
    }
    picks.reverse();
    Some((total, picks))
}

/// Every region's choices, per component: `(start cut, end cut) -> choices` (untiled first,
/// then each strip count in `options` whose overhead fits `budget_us`). A raised cancel
/// token stops the search with the regions found so far (a partial table still partitions:
/// the stretches between adjacent cuts stay untiled).
pub(super) fn region_table(
    ctx: &Ctx<'_>,
    tile: &Tile,
    components: &[Component],
    options: &[usize],
    budget_us: f64,
) -> Vec<BTreeMap<(usize, usize), Vec<Choice>>> {
    let g = ctx.g;
    let mut table: Vec<BTreeMap<(usize, usize), Vec<Choice>>> = Vec::new();
    for comp in components {
        let mut m = BTreeMap::new();
        for (pi, &(p, entry)) in comp.cuts.iter().enumerate() {
            // Stopped: the regions found so far.
            if tile.cancelled() {
                break;
            }
            // Strip counts still worth trying from cut p: a region whose overhead alone
            // exceeds the budget is not extended further with that count (halos only grow
            // with the region), which keeps long graphs fast.
            let mut alive: Vec<usize> = options.to_vec();
            for &(q, output) in &comp.cuts[pi + 1..] {
                if tile.cancelled() {
                    break;
                }
                let ops = &comp.ops[p..q];
                if !region_is_closed(ctx, ops, output) {
                    continue;
                }
                let orig_us: f64 = ops.iter().map(|&o| tile.profile.op_us(g, &g.ops[o])).sum();
                let mut choices = vec![Choice {
                    strips: 1,
                    peak: ctx.region_peak(ops),
                    overhead_us: 0.0,
                }];
                let mut over = Vec::new();
                for &n in &alive {
                    if let Some(rw) = ctx.strips(ops, entry, output, n) {
                        let us: f64 = rw.ops.iter().map(|o| ctx.new_op_us(&rw, o)).sum();
                        let overhead_us = (us - orig_us).max(0.0);
                        if overhead_us > budget_us {
                            // Unusable here; stop extending once far past the limit (slice
                            // and concat costs can shrink with a smaller output, halos not).
                            if overhead_us > PRUNE_FACTOR * budget_us {
                                over.push(n);
                            }
                            continue;
                        }
                        choices.push(Choice {
                            strips: n,
                            peak: ctx.rewrite_peak(&rw),
                            overhead_us,
                        });
                    }
                }
                alive.retain(|n| !over.contains(n));
                m.insert((p, q), choices);
            }
        }
        table.push(m);
    }
    table
}

/// The rewritten graph of the best candidate selection and its regions (the graph itself
/// and no regions when no candidate was built). With `Auto`, the candidates are the
/// per-region mix of strip counts and every single count, each judged by the peak the
/// planner (heuristics) gives its rewritten graph, then by overhead.
pub(super) fn best_selection(
    ctx: &Ctx<'_>,
    tile: &Tile,
    components: &[Component],
    table: &[BTreeMap<(usize, usize), Vec<Choice>>],
    options: &[usize],
    budget_us: f64,
) -> Result<(Graph, Regions), PassError> {
    let filters: Vec<Option<usize>> = match tile.spec {
        TileSpec::Strips(_) => vec![None],
        TileSpec::Auto => std::iter::once(None)
            .chain(options.iter().map(|&n| Some(n)))
            .collect(),
    };
    let mut best: Option<(u64, f64, Graph, Regions)> = None;
    for filter in filters {
        if best.is_some() && tile.cancelled() {
            break;
        }
        let picks = choose(components, table, budget_us, filter);
        let regions = rewrite_regions(ctx, components, &picks);
        if filter.is_some() && regions.is_empty() {
            continue;
        }
        let out = emit(ctx, &regions)?;
        let overhead: f64 = regions.iter().map(|r| r.3.overhead_us).sum();
        let peak = if tile.spec == TileSpec::Auto {
            planned_peak(&out, tile.cancel.as_ref())?
        } else {
            0
        };
        if best
            .as_ref()
            .is_none_or(|b| (peak, overhead) < (b.0, b.1) || (peak == b.0 && overhead < b.1))
        {
            best = Some((peak, overhead, out, regions));
        }
    }
    Ok(match best {
        Some((_, _, out, regions)) => (out, regions),
        None => (ctx.g.clone(), Vec::new()),
    })
}
