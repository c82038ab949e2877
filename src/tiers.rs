//! Memory tiers (placed apart, so each can live in its own memory): persistent (weights and constants),
//! activations (graph inputs, activations, outputs) and temporaries (op workspaces), each in a
//! region of its own with an alignment of its own.
//!
//! **Layout.** Weights stay in the weights region (docs/FORMATS.md §2), packed in tensor order at the
//! persistent alignment. The arena is split: the activations region `[0, A)` is placed by the
//! ordinary planner on a copy of the graph whose workspaces are zeroed (so orders and offsets
//! are chosen for the activations alone), and the temporaries region `[A, A + T)` holds every
//! op's workspace at offset `A`. One op runs at a time, so workspaces never overlap in time
//! and `T` is the largest workspace rounded up to the temporaries alignment; `A` is the
//! activations' peak rounded up to the temporaries alignment (and the graph's alignment, which
//! the format requires of workspace offsets). The result is an ordinary memplan-plan/1 plan
//! (`arena_bytes = A + T`) that [`crate::validate`](fn@crate::validate) and `tools/check_plan.py` accept against
//! the unchanged graph; the layout is recorded in the optional `stats.tiers`. The planner's
//! other figures (method, members, LOAD) describe the activations placement; the lower bound
//! is the activations' bound rounded to the temporaries alignment plus the largest workspace.
//!
//! **Alignment.** A tier's alignment is a floor: a tensor is placed at a multiple of the larger
//! of its own alignment (from the graph) and its tier's, so the plan stays valid for the graph.
//!
//! **Trade-off.** Untiered plans let a workspace fill any gap between live activations; here
//! workspaces get a region of their own, so the tiered peak is at least the activations' peak
//! plus the largest workspace, and can exceed the untiered peak by up to that much (less when
//! the untiered placement left no gap big enough anyway).
//!
//! Cost: one planner call plus a replay of the plan, O(I + S·L log L) for the statistics
//! (`analysis::profile`).

/// The arena's fragmentation at its peak, now in [`crate::analysis`] (kept under its old path).
pub use crate::analysis::fragmentation_at_peak;
use crate::analysis::profile::{free_space, profile, FreeSpace};
use crate::graph::{Graph, GraphError, TensorKind};
/// A tier's figures in a plan's stats, defined with the plan format.
pub use crate::plan::TierStat;
use crate::plan::{Instruction, Plan};
use crate::planner::{PlanError, PlanOptions};
use memplan_solver::align_up;
use std::str::FromStr;
use thiserror::Error;

/// A memory tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Weights and constants, valid the whole run (the weights region).
    Persistent,
    /// Graph inputs, activations and outputs (the arena's first region).
    Activations,
    /// Op workspaces, reserved only while their op runs (the arena's second region).
    Temporaries,
}

impl Tier {
    /// Every tier, in region order.
    pub const ALL: [Tier; 3] = [Tier::Persistent, Tier::Activations, Tier::Temporaries];

    /// Stable lower-case name (CLI `--tier-alignment`, `stats.tiers[].tier`).
    pub fn name(self) -> &'static str {
        match self {
            Tier::Persistent => "persistent",
            Tier::Activations => "activations",
            Tier::Temporaries => "temporaries",
        }
    }

    /// The tier called `name`, if any.
    pub fn from_name(name: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// Default alignment of every tier (bytes).
pub const DEFAULT_TIER_ALIGNMENT: u64 = 256;

/// Each tier's alignment (bytes, powers of two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierAlignment {
    /// Weights region.
    pub persistent: u64,
    /// Activations region.
    pub activations: u64,
    /// Temporaries region.
    pub temporaries: u64,
}

impl Default for TierAlignment {
    fn default() -> Self {
        TierAlignment::uniform(DEFAULT_TIER_ALIGNMENT)
    }
}

/// Why a tier specification or a tiered plan failed.
#[derive(Debug, Error)]
pub enum TierError {
    /// An alignment that is not a power of two (or not a number).
    #[error("{tier} alignment {value:?} is not a power of two >= 1")]
    BadAlignment {
        /// The tier (`all` for a bare number).
        tier: String,
        /// The value as written.
        value: String,
    },
    /// A tier name that does not exist.
    #[error("unknown tier {0:?} (expected persistent, activations or temporaries)")]
    UnknownTier(String),
    /// A tier given twice.
    #[error("tier {0} is given twice")]
    Duplicate(String),
    /// An item that is not `TIER=BYTES`.
    #[error("{0:?} is not TIER=BYTES (e.g. activations=256) or a bare BYTES for every tier")]
    Syntax(String),
    /// A specification with spaces (items are written `TIER=BYTES,TIER=BYTES`).
    #[error(
        "{0:?} has spaces: write one power of two, or TIER=BYTES items separated by commas \
         without spaces (e.g. persistent=256,activations=512)"
    )]
    Spaces(String),
    /// A size that does not fit in 64 bits.
    #[error("the {0} region does not fit in 64 bits")]
    Overflow(&'static str),
    /// The tier alignments round the graph's tensor sizes past 64 bits.
    #[error(
        "tier_alignment persistent={persistent}, activations={activations}: with it {source}; \
         choose smaller alignments"
    )]
    AlignedSizes {
        /// The weights' alignment floor (bytes).
        persistent: u64,
        /// The other tensors' alignment floor (bytes).
        activations: u64,
        /// What overflowed.
        source: GraphError,
    },
    /// The planner failed.
    #[error(transparent)]
    Plan(#[from] PlanError),
}

impl TierAlignment {
    /// Every tier at `bytes`.
    pub fn uniform(bytes: u64) -> Self {
        TierAlignment {
            persistent: bytes,
            activations: bytes,
            temporaries: bytes,
        }
    }

    /// The alignment of `tier`.
    pub fn get(&self, tier: Tier) -> u64 {
        match tier {
            Tier::Persistent => self.persistent,
            Tier::Activations => self.activations,
            Tier::Temporaries => self.temporaries,
        }
    }

    fn set(&mut self, tier: Tier, bytes: u64) {
        match tier {
            Tier::Persistent => self.persistent = bytes,
            Tier::Activations => self.activations = bytes,
            Tier::Temporaries => self.temporaries = bytes,
        }
    }

    /// Parses `persistent=256,activations=256,temporaries=512` (tiers not named keep
    /// [`DEFAULT_TIER_ALIGNMENT`]) or a bare `512` for every tier, as
    /// [`tier_alignment_pattern`] writes them (decimal powers of two without a leading zero,
    /// no spaces; each tier at most once). Errors name the culprit.
    pub fn parse(spec: &str) -> Result<Self, TierError> {
        let number = |tier: &str, v: &str| -> Result<u64, TierError> {
            let decimal = !v.is_empty()
                && v.bytes().all(|b| b.is_ascii_digit())
                && !(v.len() > 1 && v.starts_with('0'));
            decimal
                .then(|| v.parse::<u64>().ok())
                .flatten()
                .filter(|n| n.is_power_of_two())
                .ok_or_else(|| TierError::BadAlignment {
                    tier: tier.to_string(),
                    value: v.to_string(),
                })
        };
        if spec.contains(char::is_whitespace) {
            return Err(TierError::Spaces(spec.to_string()));
        }
        if !spec.contains('=') {
            if spec.contains(',') {
                return Err(TierError::Syntax(spec.to_string()));
            }
            return Ok(TierAlignment::uniform(number("all", spec)?));
        }
        let mut out = TierAlignment::default();
        let mut seen = Vec::new();
        for item in spec.split(',') {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| TierError::Syntax(item.to_string()))?;
            let tier = Tier::from_name(name).ok_or_else(|| TierError::UnknownTier(name.into()))?;
            if seen.contains(&tier) {
                return Err(TierError::Duplicate(name.into()));
            }
            seen.push(tier);
            out.set(tier, number(name, value)?);
        }
        Ok(out)
    }
}

/// The decimal powers of two of a u64 as a regular expression alternation, longest first.
fn pow2_decimal() -> String {
    let all: Vec<String> = (0..64).rev().map(|k| (1u64 << k).to_string()).collect();
    format!("(?:{})", all.join("|"))
}

/// The grammar of `tier_alignment` as the OpenAPI document states it: one power of two for
/// every tier, or `tier=N` items (tiers `persistent`, `activations`, `temporaries`),
/// comma-separated, no spaces. [`TierAlignment::parse`] accepts these, and is stricter in one
/// point the pattern cannot state: each tier at most once.
pub fn tier_alignment_pattern() -> String {
    let n = pow2_decimal();
    let item = format!("(?:persistent|activations|temporaries)={n}");
    format!("^(?:{n}|{item}(?:,{item}){{0,2}})$")
}

impl FromStr for TierAlignment {
    type Err = TierError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TierAlignment::parse(s)
    }
}

/// Free space of the weights region as `plan` lays it out (weights never move, so every step
/// is the peak).
fn weights_space(graph: &Graph, plan: &Plan) -> FreeSpace {
    let ids = graph.tensor_ids();
    let mut ranges: Vec<(u64, u64)> = plan
        .weights
        .iter()
        .filter_map(|w| {
            let t = *ids.get(w.tensor.as_str())?;
            Some((w.offset, graph.tensor(t).size))
        })
        .collect();
    ranges.sort_unstable();
    free_space(ranges, 0, plan.weights_bytes)
}

/// Plans `graph` in tiered mode (see the module doc): a valid memplan-plan/1 plan with the
/// activations region `[0, A)`, the temporaries region `[A, A + T)` and `stats.tiers` set.
pub fn plan_tiered(
    graph: &Graph,
    opts: &PlanOptions,
    align: &TierAlignment,
) -> Result<Plan, TierError> {
    for tier in Tier::ALL {
        let a = align.get(tier);
        if !a.is_power_of_two() {
            return Err(TierError::BadAlignment {
                tier: tier.name().into(),
                value: a.to_string(),
            });
        }
    }
    // The activations-only graph: workspaces gone, each tensor at its tier's alignment floor.
    let mut act = graph.clone();
    for t in &mut act.tensors {
        let floor = match t.kind {
            TensorKind::Weight => align.persistent,
            _ => align.activations,
        };
        t.alignment = t.alignment.max(floor);
    }
    for o in &mut act.ops {
        o.workspace = 0;
        // A fused op's members share its workspace: gone with it.
        if let Some(f) = &mut o.fused {
            for m in &mut f.members {
                m.workspace = 0;
            }
        }
    }
    // Re-check sizes and alignments (larger alignments can overflow a sum).
    let act = act.rebuilt().map_err(|source| TierError::AlignedSizes {
        persistent: align.persistent,
        activations: align.activations,
        source,
    })?;
    let mut plan = crate::planner::plan(&act, opts)?;
    let act_peak = plan.stats.peak_bytes;
    let act_bound = plan.stats.lower_bound_bytes;
    let max_ws = graph.ops.iter().map(|o| o.workspace).max().unwrap_or(0);
    let ws_align = align.temporaries.max(graph.alignment);
    let (a, t) = if max_ws == 0 {
        (act_peak, 0)
    } else {
        (
            align_up(act_peak, ws_align).ok_or(TierError::Overflow("activations"))?,
            align_up(max_ws, align.temporaries).ok_or(TierError::Overflow("temporaries"))?,
        )
    };
    let arena = a.checked_add(t).ok_or(TierError::Overflow("arena"))?;
    let ops = graph.op_indices();
    for ins in &mut plan.instructions {
        if let Instruction::Exec {
            node,
            workspace_offset,
            ..
        } = ins
        {
            let ws = ops
                .get(node.as_str())
                .map_or(0, |&k| graph.ops[k].workspace);
            *workspace_offset = (ws > 0).then_some(a);
        }
    }
    plan.arena_bytes = arena;
    plan.stats.peak_bytes = if max_ws == 0 { act_peak } else { a + max_ws };
    let peak = plan.stats.peak_bytes;
    // Every tiered plan has A >= the activations' bound, A a multiple of the workspace
    // alignment, and the largest workspace on top.
    let bound = if max_ws == 0 {
        act_bound
    } else {
        align_up(act_bound, ws_align)
            .unwrap_or(act_bound)
            .saturating_add(max_ws)
    }
    .min(peak);
    plan.stats.lower_bound_bytes = bound;
    plan.stats.gap = Some(crate::plan::PlanStats::gap_of(peak, bound));
    if plan.stats.status == Some(crate::plan::PlanStatus::Optimal) && bound < peak {
        // Optimal for the activations; the alignment padding of A is not proven minimal.
        plan.stats.status = Some(crate::plan::PlanStatus::Feasible);
    }
    crate::validate::validate(graph, &plan, None).map_err(PlanError::from)?;
    let prof = profile(graph, &plan).map_err(|e| PlanError::Internal(e.to_string()))?;
    let ws = weights_space(graph, &plan);
    let acts = prof.fragmentation_at_peak(0, a);
    let temps = prof.fragmentation_at_peak(a, arena);
    let stat = |tier: Tier, region: &str, offset: u64, bytes: u64, space: FreeSpace| TierStat {
        tier: tier.name().into(),
        region: region.into(),
        offset,
        bytes,
        alignment: align.get(tier),
        peak_bytes: space.reserved_bytes,
        free_bytes_at_peak: space.free_bytes,
        fragmentation_at_peak: space.rate(),
    };
    plan.stats.tiers = vec![
        stat(Tier::Persistent, "weights", 0, plan.weights_bytes, ws),
        stat(Tier::Activations, "arena", 0, a, acts.space),
        stat(Tier::Temporaries, "arena", a, t, temps.space),
    ];
    plan.stats.fragmentation_at_peak = Some(prof.fragmentation_at_peak(0, prof.peak).rate);
    Ok(plan)
}

/// The tier table `memplan plan --tiers` prints (one line per tier).
pub fn tier_table(tiers: &[TierStat]) -> String {
    let mut s = format!(
        "{:<12} {:<8} {:>14} {:>14} {:>6} {:>14} {:>12} {:>9}\n",
        "tier", "region", "offset", "bytes", "align", "peak bytes", "free@peak", "frag@peak"
    );
    for t in tiers {
        s.push_str(&format!(
            "{:<12} {:<8} {:>14} {:>14} {:>6} {:>14} {:>12} {:>8.2}%\n",
            t.tier,
            t.region,
            t.offset,
            t.bytes,
            t.alignment,
            t.peak_bytes,
            t.free_bytes_at_peak,
            t.fragmentation_at_peak * 100.0
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::{OrderMode, Strategy};

    fn opts() -> PlanOptions {
        PlanOptions {
            order: OrderMode::Auto,
            strategy: Strategy::Heuristic,
            time_limit: None,
            ..PlanOptions::default()
        }
    }

    /// The sample graph with a 16-byte default alignment, so every tier floor above it binds.
    fn sample16() -> Graph {
        let mut v: serde_json::Value = serde_json::from_str(crate::graph::SAMPLE_JSON).unwrap();
        v["alignment"] = 16.into();
        Graph::parse(&v.to_string()).unwrap()
    }

    #[test]
    fn tier_alignments_parse_by_name_or_as_one_number() {
        let a = TierAlignment::parse("persistent=64,temporaries=512").unwrap();
        assert_eq!((a.persistent, a.activations, a.temporaries), (64, 256, 512));
        // One grammar with the OpenAPI pattern: no spaces, no leading zero.
        for bad in ["persistent=64, temporaries=512", " 128", "0128", "+128"] {
            assert!(TierAlignment::parse(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            TierAlignment::parse("persistent=64, temporaries=512"),
            Err(TierError::Spaces(_))
        ));
        assert_eq!(
            TierAlignment::parse("128").unwrap(),
            TierAlignment::uniform(128)
        );
        assert_eq!(
            TierAlignment::parse("activations=1").unwrap().activations,
            1
        );
        assert_eq!(TierAlignment::default(), TierAlignment::uniform(256));
    }

    #[test]
    fn bad_tier_alignments_name_the_culprit() {
        let cases = [
            ("activations=100", "activations alignment \"100\""),
            ("temporaries=0", "temporaries alignment \"0\""),
            ("persistent=-8", "persistent alignment \"-8\""),
            ("scratch=256", "unknown tier \"scratch\""),
            (
                "activations=64,activations=128",
                "activations is given twice",
            ),
            ("activations", "not a power of two"),
            ("activations=64,512", "\"512\" is not TIER=BYTES"),
            ("64,512", "\"64,512\" is not TIER=BYTES"),
            ("", "all alignment \"\""),
        ];
        for (spec, want) in cases {
            let e = TierAlignment::parse(spec).unwrap_err().to_string();
            assert!(e.contains(want), "{spec:?}: {e}");
        }
    }

    #[test]
    fn alignments_that_round_the_sizes_past_64_bits_are_refused_naming_them_as_bad_input() {
        // Each tensor of the sample rounded up to 2^62 bytes: their sum overflows u64.
        let align = TierAlignment::uniform(1 << 62);
        let e = plan_tiered(&sample16(), &opts(), &align).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, TierError::AlignedSizes { .. }), "{msg}");
        assert!(
            msg.contains(
                "tier_alignment persistent=4611686018427387904, activations=4611686018427387904"
            ) && msg.contains("overflows u64"),
            "{msg}"
        );
        assert!(crate::pipeline::PipelineError::Tiers(e).is_bad_input());
    }

    #[test]
    fn every_offset_is_a_multiple_of_its_tier_alignment_and_the_regions_stack() {
        let g = sample16();
        for (act, tmp, per) in [(64, 512, 128), (256, 256, 256), (512, 64, 64)] {
            let align = TierAlignment {
                persistent: per,
                activations: act,
                temporaries: tmp,
            };
            let p = plan_tiered(&g, &opts(), &align).unwrap();
            crate::validate::validate(&g, &p, None).unwrap();
            let [w, a, t] = &p.stats.tiers[..] else {
                panic!("three tiers: {:?}", p.stats.tiers)
            };
            assert_eq!(
                (w.tier.as_str(), a.tier.as_str()),
                ("persistent", "activations")
            );
            assert_eq!((t.offset, a.offset + a.bytes), (a.bytes, t.offset));
            assert_eq!(p.arena_bytes, a.bytes + t.bytes);
            assert_eq!(t.offset % tmp, 0);
            let max_ws = g.ops.iter().map(|o| o.workspace).max().unwrap();
            assert_eq!(t.bytes, align_up(max_ws, tmp).unwrap());
            assert_eq!(p.stats.peak_bytes, t.offset + max_ws);
            for s in &p.weights {
                assert_eq!(s.offset % per, 0, "{}", s.tensor);
            }
            let mut ws_seen = 0;
            for i in &p.instructions {
                match i {
                    Instruction::Alloc { tensor, offset, .. } => {
                        assert_eq!(offset % act, 0, "{tensor}");
                        let size = g.tensor(g.tensor_by_name(tensor).unwrap()).size;
                        assert!(offset + size <= a.bytes, "{tensor} leaves its region");
                    }
                    Instruction::Exec {
                        workspace_offset: Some(o),
                        ..
                    } => {
                        assert_eq!(*o, t.offset);
                        ws_seen += 1;
                    }
                    _ => {}
                }
            }
            assert_eq!(ws_seen, g.ops.iter().filter(|o| o.workspace > 0).count());
            assert!(w.fragmentation_at_peak >= 0.0 && a.fragmentation_at_peak < 1.0);
            // The temporaries peak is the largest workspace, with only padding free after it.
            assert_eq!((t.peak_bytes, t.fragmentation_at_peak), (max_ws, 0.0));
        }
    }

    #[test]
    fn padding_between_weights_is_free_space_of_the_persistent_tier() {
        // Two 10-byte weights at 64-byte alignment: [0,10) and [64,74); one 54-byte hole.
        let g = Graph::parse(
            r#"{"format": "memplan-graph/1", "name": "w", "alignment": 1,
                "tensors": [{"name": "x", "size": 8, "kind": "input"},
                            {"name": "w1", "size": 10, "kind": "weight"},
                            {"name": "w2", "size": 10, "kind": "weight"},
                            {"name": "y", "size": 8, "kind": "output"}],
                "ops": [{"name": "f", "inputs": ["x", "w1", "w2"], "outputs": ["y"],
                         "workspace": 5}]}"#,
        )
        .unwrap();
        let p = plan_tiered(&g, &opts(), &TierAlignment::uniform(64)).unwrap();
        let w = &p.stats.tiers[0];
        assert_eq!(
            (w.bytes, w.peak_bytes, w.fragmentation_at_peak),
            (74, 20, 0.0)
        );
        // x and y are live together at f: 8 + 8 B, y at 64; free [8, 64): one hole.
        let a = &p.stats.tiers[1];
        assert_eq!((a.bytes, a.peak_bytes), (128, 16));
        // Free at the peak: [8,64) and [72,128): 56 + 56, largest 56 → 0.5.
        assert!((a.fragmentation_at_peak - 0.5).abs() < 1e-12, "{a:?}");
        assert_eq!(p.arena_bytes, 128 + 64);
        assert_eq!(p.stats.peak_bytes, 128 + 5);
    }

    #[test]
    fn a_fused_op_whose_member_needs_a_workspace_is_tiered() {
        use crate::passes::{fuse::Fuse, Pass};
        let mut v: serde_json::Value = serde_json::from_str(crate::graph::SAMPLE_JSON).unwrap();
        for op in v["ops"].as_array_mut().unwrap() {
            if op["name"] == "l0.relu0" {
                op["workspace"] = 3.into();
            }
        }
        let g = Fuse::default()
            .run(&Graph::parse(&v.to_string()).unwrap())
            .unwrap()
            .graph;
        let fused = g
            .ops
            .iter()
            .find(|o| {
                o.fused
                    .as_ref()
                    .is_some_and(|f| f.members.iter().any(|m| m.workspace == 3))
            })
            .expect("l0.relu0 is fused with its workspace");
        assert!(fused.workspace >= 3);
        let p = plan_tiered(&g, &opts(), &TierAlignment::default()).unwrap();
        crate::validate::validate(&g, &p, None).unwrap();
    }

    #[test]
    fn tiering_costs_at_least_the_largest_workspace_over_the_activations_alone() {
        let g = Graph::parse(crate::graph::SAMPLE_JSON).unwrap();
        let untiered = crate::planner::plan(&g, &opts()).unwrap();
        let tiered = plan_tiered(&g, &opts(), &TierAlignment::default()).unwrap();
        let max_ws = g.ops.iter().map(|o| o.workspace).max().unwrap();
        assert!(tiered.stats.peak_bytes >= tiered.stats.tiers[1].peak_bytes + max_ws);
        assert!(tiered.stats.lower_bound_bytes <= tiered.stats.peak_bytes);
        assert!(untiered.stats.fragmentation_at_peak.is_some());
        // Outside tiered mode nothing changes: no tier stats.
        assert!(untiered.stats.tiers.is_empty());
        // Compared as text: serde_json's default float parsing may be one ulp off for the
        // timing fields, which the writer then prints the same way.
        let back = Plan::parse(&tiered.to_json()).unwrap();
        assert_eq!(back.to_json(), tiered.to_json());
        assert_eq!(back.stats.tiers, tiered.stats.tiers);
    }
}
