//! The HiGHS options a program sets: threads, relative gap, presolve, time and node limits and
//! switched-off phases. HiGHS' own output is always off.

use super::MipError;

/// Options of one [`solve`](super::solve).
#[derive(Debug, Clone, PartialEq)]
pub struct MipOptions {
    /// HiGHS `threads` (1 = deterministic). HiGHS keeps one scheduler per OS thread and only
    /// honours the option the first time it runs on one: a guarded solve (a time limit or a
    /// watch; [`super::overrun`]) runs on a new thread, so there it always takes effect.
    pub threads: i32,
    /// HiGHS `mip_rel_gap`: relative gap at which the search stops (0 = prove optimality).
    pub mip_rel_gap: f64,
    /// HiGHS `presolve`: `false` sets it `"off"`, `true` keeps HiGHS' default. With presolve
    /// on, a model that presolve solves outright hands back the warm start's column values as
    /// its solution (HiGHS 1.x: the objective value is right, the columns stale).
    pub presolve: bool,
    /// HiGHS `time_limit` in seconds (`None`: none).
    pub time_limit: Option<f64>,
    /// HiGHS `mip_max_nodes`, branch-and-bound nodes (`None`: none); unlike time, a limit
    /// that keeps results deterministic. Capped at `i32::MAX`.
    pub max_nodes: Option<u64>,
    /// Cap on HiGHS' simplex iterations in all (its `mip_total_lp_iterations`: the root's, the
    /// nodes' and separation's LPs, not those of the sub-MIPs its heuristics solve, so a program
    /// that wants the cap to bound its work switches those off, [`NODE_CAPPED_OFF`]; `None`:
    /// none), checked by the callback at every MIP-interrupt check. Unlike a node cap it also bounds the root node, where a large model
    /// can spend minutes in cut rounds without a node; unlike time it is deterministic: the
    /// same model stops at the same check on any machine. A check comes between LP solves, so
    /// an LP in progress (the root LP above all) finishes first. Ends with
    /// [`MipStatus::IterationLimit`](super::MipStatus::IterationLimit).
    pub max_lp_iterations: Option<u64>,
    /// Boolean HiGHS options set to `false` (e.g. root heuristics a node cap does not bound).
    pub switched_off: Vec<&'static str>,
    /// Ignore an option or warm start HiGHS refuses and solve anyway (for a program with a
    /// fallback of its own), instead of failing with [`MipError::Option`] /
    /// [`MipError::WarmStart`].
    pub lenient: bool,
}

/// HiGHS root heuristics a node cap does not bound (switched off by the node-capped programs
/// so that their effort stays in work units: the budget program and the conflict placement
/// model).
pub const NODE_CAPPED_OFF: [&str; 5] = [
    "mip_heuristic_run_feasibility_jump",
    "mip_detect_symmetry",
    "mip_heuristic_run_rens",
    "mip_heuristic_run_rins",
    "mip_heuristic_run_root_reduced_cost",
];

impl Default for MipOptions {
    fn default() -> Self {
        MipOptions {
            threads: 1,
            mip_rel_gap: 0.0,
            presolve: false,
            time_limit: None,
            max_nodes: None,
            max_lp_iterations: None,
            switched_off: Vec::new(),
            lenient: false,
        }
    }
}

impl MipOptions {
    /// Sets every option on `model`: the first refused one is an error unless
    /// [`MipOptions::lenient`], in which case every option is still tried.
    pub(crate) fn apply(&self, model: &mut highs::Model) -> Result<(), MipError> {
        let mut refused = None;
        let mut note = |name: &'static str, ok: bool| {
            if !ok && refused.is_none() {
                refused = Some(name);
            }
        };
        note(
            "output_flag",
            model.try_set_option("output_flag", false).is_ok(),
        );
        note(
            "threads",
            model.try_set_option("threads", self.threads).is_ok(),
        );
        note(
            "mip_rel_gap",
            model
                .try_set_option("mip_rel_gap", self.mip_rel_gap)
                .is_ok(),
        );
        if !self.presolve {
            note("presolve", model.try_set_option("presolve", "off").is_ok());
        }
        if let Some(t) = self.time_limit {
            note("time_limit", model.try_set_option("time_limit", t).is_ok());
        }
        if let Some(n) = self.max_nodes {
            let n = i32::try_from(n).unwrap_or(i32::MAX);
            note(
                "mip_max_nodes",
                model.try_set_option("mip_max_nodes", n).is_ok(),
            );
        }
        for &name in &self.switched_off {
            note(name, model.try_set_option(name, false).is_ok());
        }
        match refused {
            Some(name) if !self.lenient => Err(MipError::Option(name)),
            _ => Ok(()),
        }
    }
}
