//! The HiGHS model of one window `[a, b)` of an op order (the order program's integer program;
//! the model is described in [`super::program`]): [`solve_window`] builds it ([`Window`] for
//! the movable nodes and their step ranges, then the step columns, the assignment and
//! dependency rows, the memory rows), solves it through [`crate::mip`] and decodes the order
//! and the bound HiGHS found.

use super::program::{
    OrderIlpError, OrderIlpOptions, DEFAULT_NODES_PER_MODEL, DEFAULT_WORK_PER_MODEL,
    MIN_ITERATIONS_PER_ROW,
};
use super::{LifetimeOptions, OrderProblem};
use crate::limits::{LimitsClock, SolveStatus};
use crate::mip::{self, Col, MipOptions, MipSolution, MipStatus, Model, Watch};

/// One model's result.
pub(crate) struct WindowResult {
    /// The order HiGHS found (whole order, window rearranged), if any.
    pub order: Option<Vec<usize>>,
    /// Proven bound on the window's peak (bytes; rounded down).
    pub bound: u64,
    /// Set when a limit stopped HiGHS.
    pub stopped: Option<SolveStatus>,
    /// HiGHS proved its solution optimal (no rearrangement of the window has a lower peak).
    pub optimal: bool,
    /// Work spent: LP iterations × the model's nonzeros (the iterations HiGHS reports; the
    /// model's cap when it reports none).
    pub work: u64,
}

/// Builds and solves the model of window `[a, b)` of `order` (`prof` = its live bytes);
/// `None` when the model is over its work cap before its first LP (module doc of
/// [`super::program`], *Work*). The cap: [`OrderIlpOptions::work_per_model`] (or its
/// default), at most `work_left` (what [`OrderIlpOptions::work_total`] leaves), which must
/// also allow [`MIN_ITERATIONS_PER_ROW`] LP iterations per row.
pub(crate) fn solve_window(
    problem: &OrderProblem,
    order: &[usize],
    prof: &[u64],
    (a, b): (usize, usize),
    opts: &OrderIlpOptions,
    work_left: Option<u64>,
    clock: &LimitsClock,
) -> Result<Option<WindowResult>, OrderIlpError> {
    let win = Window::new(problem, order, a, b);
    let scale = byte_scale(problem);
    let old_peak = prof[a..b].iter().copied().max().unwrap_or(0);
    let built = build(&win, prof, opts, scale);
    let (rows, nonzeros) = (
        built.model.num_rows() as u64,
        built.model.num_nonzeros().max(1) as u64,
    );
    let per_model = opts
        .work_per_model
        .or(match (opts.limits.time, opts.limits.nodes) {
            (None, None) => Some(DEFAULT_WORK_PER_MODEL),
            _ => None,
        });
    let work = per_model.into_iter().chain(work_left).min();
    let first_lp = rows.saturating_mul(nonzeros);
    // What the windows' total leaves must also allow a few iterations per row
    // ([`MIN_ITERATIONS_PER_ROW`]): HiGHS would run past a smaller cap.
    let too_little_left =
        work_left.is_some_and(|l| first_lp.saturating_mul(MIN_ITERATIONS_PER_ROW) > l);
    if work.is_some_and(|w| first_lp > w) || too_little_left {
        return Ok(None);
    }
    let limits = &opts.limits;
    let options = MipOptions {
        threads: i32::try_from(opts.threads.max(1)).unwrap_or(1),
        mip_rel_gap: opts.mip_rel_gap.max(0.0),
        presolve: false,
        time_limit: limits
            .time
            .map(|t| t.saturating_sub(clock.elapsed()).as_secs_f64().max(0.001)),
        max_nodes: match (limits.time, limits.nodes) {
            (None, None) => Some(DEFAULT_NODES_PER_MODEL),
            (_, n) => n,
        },
        max_lp_iterations: work.map(|w| w / nonzeros),
        // Root heuristics whose sub-MIPs the iteration count does not see.
        switched_off: if work.is_some() {
            mip::NODE_CAPPED_OFF.to_vec()
        } else {
            Vec::new()
        },
        ..MipOptions::default()
    };
    let watch = Watch {
        cancel: limits.cancel.as_ref().map(|t| t.flag()),
        progress: opts.progress.as_ref(),
        scale,
    };
    let Built {
        model, warm, xs, ..
    } = built;
    let solution = mip::solve(model, &options, &warm, &watch)
        .map_err(|e| OrderIlpError::Solver(e.to_string()))?;
    let stopped = match solution.status {
        MipStatus::TimeLimit | MipStatus::Interrupt => Some(SolveStatus::TimeLimit),
        MipStatus::IterationLimit => Some(SolveStatus::NodeLimit),
        _ => None,
    };
    Ok(Some(WindowResult {
        order: decode_order(&win, &xs, &solution),
        bound: decode_bound(&solution, scale, old_peak),
        stopped,
        optimal: solution.status == MipStatus::Optimal && opts.mip_rel_gap <= 0.0,
        work: solution
            .lp_iterations
            .map(|i| i.saturating_mul(nonzeros))
            .or(work)
            .unwrap_or(0),
    }))
}

/// The model of window `win` (`prof`: the order's live bytes), in units of `scale` bytes.
fn build(win: &Window<'_>, prof: &[u64], opts: &OrderIlpOptions, scale: f64) -> Built {
    let (a, b) = (win.a, win.b);
    let old_peak = prof[a..b].iter().copied().max().unwrap_or(0);
    // A window over the whole order bounds every order, so the caller's order-independent
    // bound (e.g. the min-cut bound) is a valid cut on its peak; a smaller window's peak is not
    // bounded by it. Slightly below, so LP tolerances never cut the optimum.
    let floor = if a == 0 && b == win.order.len() {
        (opts.known_bound.min(old_peak) as f64 / scale) * (1.0 - 1e-9)
    } else {
        0.0
    };
    let mut built = Built::steps(win, old_peak as f64 / scale, floor);
    built.memory(win, prof, scale);
    built
}

/// Rows and nonzeros of the model [`solve_window`] would solve (for tests of the work caps).
#[cfg(test)]
pub(crate) fn model_size(
    problem: &OrderProblem,
    order: &[usize],
    prof: &[u64],
    (a, b): (usize, usize),
    opts: &OrderIlpOptions,
) -> (u64, u64) {
    let win = Window::new(problem, order, a, b);
    let built = build(&win, prof, opts, byte_scale(problem));
    (
        built.model.num_rows() as u64,
        built.model.num_nonzeros() as u64,
    )
}

/// The nodes of window `[a, b)` of an order and the steps each may take.
struct Window<'a> {
    problem: &'a OrderProblem,
    order: &'a [usize],
    a: usize,
    b: usize,
    /// Step of every node in `order`.
    step_of: Vec<usize>,
    /// Nodes of the window by local index `k = step − a` (a topological order of the window).
    local: Vec<usize>,
    /// Earliest step of each window node (ASAP: `a` + its ancestors in the window).
    lo: Vec<usize>,
    /// Latest step of each window node (ALAP: `b − 1` − its descendants in the window).
    hi: Vec<usize>,
}

impl<'a> Window<'a> {
    /// The window `[a, b)` of `order`, with ASAP/ALAP ranges from ancestor/descendant counts
    /// (bitsets over the local index).
    fn new(problem: &'a OrderProblem, order: &'a [usize], a: usize, b: usize) -> Self {
        let w = b - a;
        let mut step_of = vec![0usize; problem.nodes.len()];
        for (s, &v) in order.iter().enumerate() {
            step_of[v] = s;
        }
        let mut win = Window {
            problem,
            order,
            a,
            b,
            step_of,
            local: order[a..b].to_vec(),
            lo: Vec::new(),
            hi: Vec::new(),
        };
        let preds = problem.predecessors();
        let words = w.div_ceil(64);
        let mut anc = vec![vec![0u64; words]; w];
        for k in 0..w {
            for &p in &preds[win.local[k]] {
                if win.movable(p) {
                    let j = win.local_of(p);
                    let (src, dst) = if j < k {
                        let (lo, hi) = anc.split_at_mut(k);
                        (&lo[j], &mut hi[0])
                    } else {
                        continue;
                    };
                    for (d, s) in dst.iter_mut().zip(src) {
                        *d |= *s;
                    }
                    dst[j / 64] |= 1 << (j % 64);
                }
            }
        }
        let mut desc_count = vec![0usize; w];
        {
            let mut desc = vec![vec![0u64; words]; w];
            let mut succ_local = vec![Vec::new(); w];
            for k in 0..w {
                for &p in &preds[win.local[k]] {
                    if win.movable(p) {
                        succ_local[win.local_of(p)].push(k);
                    }
                }
            }
            for k in (0..w).rev() {
                for &c in &succ_local[k] {
                    let (lo, hi) = desc.split_at_mut(c);
                    for (d, s) in lo[k].iter_mut().zip(&hi[0]) {
                        *d |= *s;
                    }
                    lo[k][c / 64] |= 1 << (c % 64);
                }
                desc_count[k] = desc[k].iter().map(|x| x.count_ones() as usize).sum();
            }
        }
        win.lo = (0..w)
            .map(|k| {
                a + anc[k]
                    .iter()
                    .map(|x| x.count_ones() as usize)
                    .sum::<usize>()
            })
            .collect();
        win.hi = (0..w).map(|k| b - 1 - desc_count[k]).collect();
        win
    }

    /// Steps in the window.
    fn width(&self) -> usize {
        self.b - self.a
    }

    /// Whether node `v` runs inside the window (and may move).
    fn movable(&self, v: usize) -> bool {
        (self.a..self.b).contains(&self.step_of[v])
    }

    /// Local index of a movable node.
    fn local_of(&self, v: usize) -> usize {
        self.step_of[v] - self.a
    }
}

/// Byte scale of the model: a power of two so that sizes divide exactly in `f64`.
fn byte_scale(problem: &OrderProblem) -> f64 {
    let max_size = problem
        .values
        .iter()
        .map(|v| v.size)
        .chain(problem.nodes.iter().map(|n| n.workspace))
        .max()
        .unwrap_or(1)
        .max(1);
    let shift = (63 - max_size.leading_zeros()).saturating_sub(20);
    (1u64 << shift) as f64
}

/// Adds `lo ≤ Σ terms ≤ hi` with repeated columns merged (HiGHS refuses repeated indices)
/// and zero coefficients dropped.
fn add_row(pb: &mut Model, bounds: impl std::ops::RangeBounds<f64>, terms: Vec<(Col, f64)>) {
    let mut terms = terms;
    terms.sort_by_key(|(c, _)| c.index());
    let mut merged: Vec<(Col, f64)> = Vec::with_capacity(terms.len());
    for (c, v) in terms {
        match merged.last_mut() {
            Some((last, acc)) if last.index() == c.index() => *acc += v,
            _ => merged.push((c, v)),
        }
    }
    merged.retain(|&(_, v)| v != 0.0);
    pb.add_row(bounds, merged);
}

/// "Done by step t" of a node: a constant or a sum of step columns.
enum Cum {
    Const(bool),
    Sum(Vec<Col>),
}

/// The model under construction, with its warm start (the current order).
struct Built {
    model: Model,
    warm: Vec<f64>,
    /// The peak column `P`.
    p_col: Col,
    /// Step columns: `xs[k][t − lo[k]]` = node `k` runs at step `t`.
    xs: Vec<Vec<Col>>,
}

impl Built {
    /// The column "node `k` runs at step `t`", if `t` is in its range.
    fn x(&self, win: &Window<'_>, k: usize, t: usize) -> Option<Col> {
        (win.lo[k]..=win.hi[k])
            .contains(&t)
            .then(|| self.xs[k][t - win.lo[k]])
    }

    /// The peak column (warm value `old_peak`, at least `floor`, in model units), the step
    /// columns, one step per node and one node per step, and the dependencies between movable
    /// nodes.
    fn steps(win: &Window<'_>, old_peak: f64, floor: f64) -> Built {
        let (a, w) = (win.a, win.width());
        let mut model = Model::new();
        let mut warm: Vec<f64> = Vec::new();
        let p_col = model.add_column(1.0, floor.max(0.0)..);
        warm.push(old_peak);
        let mut xs: Vec<Vec<Col>> = Vec::with_capacity(w);
        for k in 0..w {
            let cols = (win.lo[k]..=win.hi[k])
                .map(|t| {
                    warm.push(if t == a + k { 1.0 } else { 0.0 });
                    model.add_integer_column(0.0, 0.0..=1.0)
                })
                .collect();
            xs.push(cols);
        }
        let mut built = Built {
            model,
            warm,
            p_col,
            xs,
        };
        for k in 0..w {
            let terms = built.xs[k].iter().map(|&c| (c, 1.0)).collect();
            add_row(&mut built.model, 1.0..=1.0, terms);
        }
        for t in a..win.b {
            let terms: Vec<(Col, f64)> = (0..w)
                .filter_map(|k| built.x(win, k, t).map(|c| (c, 1.0)))
                .collect();
            add_row(&mut built.model, 1.0..=1.0, terms);
        }
        // Dependencies between movable nodes.
        let preds = win.problem.predecessors();
        for k in 0..w {
            for &p in &preds[win.local[k]] {
                if !win.movable(p) {
                    continue;
                }
                let j = win.local_of(p);
                for t in win.lo[k]..=win.hi[k] {
                    // Σ_{t'≤t} x[k,t'] − Σ_{t'<t} x[j,t'] ≤ 0
                    let mut terms: Vec<(Col, f64)> = (win.lo[k]..=t)
                        .filter_map(|s| built.x(win, k, s))
                        .map(|c| (c, 1.0))
                        .collect();
                    terms.extend(
                        (win.lo[j]..t)
                            .filter_map(|s| built.x(win, j, s))
                            .map(|c| (c, -1.0)),
                    );
                    add_row(&mut built.model, ..=0.0, terms);
                }
            }
        }
        built
    }

    /// Whether node `v` ran at or before step `t` (`strict`: before `t`).
    fn done_by(&self, win: &Window<'_>, v: usize, t: usize, strict: bool) -> Cum {
        let last = if strict { t.checked_sub(1) } else { Some(t) };
        if !win.movable(v) {
            return Cum::Const(last.is_some_and(|l| win.step_of[v] <= l));
        }
        let k = win.local_of(v);
        match last {
            None => Cum::Const(false),
            Some(l) if l < win.lo[k] => Cum::Const(false),
            Some(l) if l >= win.hi[k] => Cum::Const(true),
            Some(l) => Cum::Sum((win.lo[k]..=l).filter_map(|s| self.x(win, k, s)).collect()),
        }
    }

    /// The memory rows: per window step, the bytes of values not touching the window (as in
    /// `prof`), the workspaces of the nodes there and the live values touching the window
    /// stay under `P`.
    fn memory(&mut self, win: &Window<'_>, prof: &[u64], scale: f64) {
        let (problem, a, w) = (win.problem, win.a, win.width());
        let bytes = |x: u64| x as f64 / scale;
        let touching: Vec<bool> = problem
            .values
            .iter()
            .map(|v| {
                v.producer.is_some_and(|p| win.movable(p))
                    || v.consumers.iter().any(|&c| win.movable(c))
            })
            .collect();
        let lt_now = super::lifetimes(problem, win.order, &LifetimeOptions::default());
        let fixed = fixed_bytes(win, prof, &touching, &lt_now);
        let mut mem_terms: Vec<Vec<(Col, f64)>> = vec![Vec::new(); w];
        let mut mem_const: Vec<f64> = fixed.iter().map(|&f| bytes(f)).collect();
        for k in 0..w {
            let ws = problem.nodes[win.local[k]].workspace;
            if ws > 0 {
                for t in win.lo[k]..=win.hi[k] {
                    if let Some(c) = self.x(win, k, t) {
                        mem_terms[t - a].push((c, bytes(ws)));
                    }
                }
            }
        }
        for (e, v) in problem.values.iter().enumerate() {
            if !touching[e] {
                continue;
            }
            // Readers: consumers; a value nobody reads is read by its producer (lives one
            // step); an unread graph input is never reserved.
            let readers: Vec<usize> = if v.consumers.is_empty() {
                match v.producer {
                    Some(p) => vec![p],
                    None => continue,
                }
            } else {
                v.consumers.clone()
            };
            // Warm values of `live` follow the current order's lifetimes.
            let warm_live = |t: usize| {
                lt_now.value_buffer[e].is_some_and(|bi| {
                    let l = lt_now.problem.buffers[bi].lifetime;
                    (l.start as usize..l.end as usize).contains(&t)
                })
            };
            for t in a..win.b {
                let live = self.liveness(win, e, &readers, t, warm_live(t));
                match live {
                    Live::Never => {}
                    Live::Always => mem_const[t - a] += bytes(v.size),
                    Live::Col(col) => mem_terms[t - a].push((col, bytes(v.size))),
                }
            }
        }
        for t in 0..w {
            // Σ terms + const ≤ P  ⇔  Σ terms − P ≤ −const
            let mut terms = std::mem::take(&mut mem_terms[t]);
            terms.push((self.p_col, -1.0));
            add_row(&mut self.model, ..=-mem_const[t], terms);
        }
    }

    /// Whether value `e` (read by `readers`) is reserved at step `t`: never, always, or as a
    /// `live` column (warm value `warm_live`) bounded below by `S(t) − D_c(t)` for each
    /// reader `c` not surely after `t` (by `S(t)` alone when one is).
    fn liveness(
        &mut self,
        win: &Window<'_>,
        e: usize,
        readers: &[usize],
        t: usize,
        warm_live: bool,
    ) -> Live {
        let v = &win.problem.values[e];
        let s = match v.producer {
            None => Cum::Const(true),
            Some(p) => self.done_by(win, p, t, false),
        };
        if matches!(s, Cum::Const(false)) {
            return Live::Never;
        }
        // Readers that are surely at or after t make the value live whenever S holds.
        let mut sure = v.live_at_end;
        let mut open: Vec<Vec<Col>> = Vec::new();
        for &c in readers {
            match self.done_by(win, c, t, true) {
                Cum::Const(false) => sure = true,
                Cum::Const(true) => {}
                Cum::Sum(cols) => open.push(cols),
            }
        }
        match (&s, sure) {
            (Cum::Const(true), true) => return Live::Always,
            (_, false) if open.is_empty() => return Live::Never,
            _ => {}
        }
        let live = self.model.add_column(0.0, 0.0..=1.0);
        self.warm.push(if warm_live { 1.0 } else { 0.0 });
        let s_terms: Vec<(Col, f64)> = match &s {
            Cum::Sum(cols) => cols.iter().map(|&c| (c, -1.0)).collect(),
            _ => Vec::new(),
        };
        let s_const = if matches!(s, Cum::Const(true)) {
            1.0
        } else {
            0.0
        };
        if sure {
            // live ≥ S(t)
            let mut terms = vec![(live, 1.0)];
            terms.extend(s_terms.iter().copied());
            add_row(&mut self.model, s_const.., terms);
        } else {
            for cols in &open {
                // live ≥ S(t) − D_c(t)  ⇔  live − S + D_c ≥ 0
                let mut terms = vec![(live, 1.0)];
                terms.extend(s_terms.iter().copied());
                terms.extend(cols.iter().map(|&c| (c, 1.0)));
                add_row(&mut self.model, s_const.., terms);
            }
        }
        Live::Col(live)
    }
}

/// Whether a value is reserved at a step.
enum Live {
    Never,
    Always,
    Col(Col),
}

/// Fixed bytes per window step: the profile minus the values touching the window and the
/// window's workspaces, from the current order's lifetimes `lt`.
fn fixed_bytes(
    win: &Window<'_>,
    prof: &[u64],
    touching: &[bool],
    lt: &super::OrderLifetimes,
) -> Vec<u64> {
    let (problem, a, b) = (win.problem, win.a, win.b);
    let mut fixed = prof[a..b].to_vec();
    for (e, buf) in lt.value_buffer.iter().enumerate() {
        if let (true, Some(bi)) = (touching[e], buf) {
            let lt_b = &lt.problem.buffers[*bi];
            for t in (lt_b.lifetime.start as usize).max(a)..(lt_b.lifetime.end as usize).min(b) {
                fixed[t - a] = fixed[t - a].saturating_sub(problem.values[e].size);
            }
        }
    }
    for (f, &v) in fixed.iter_mut().zip(&win.local) {
        *f = f.saturating_sub(problem.nodes[v].workspace);
    }
    fixed
}

/// HiGHS' bound on the window's peak in bytes: rounded up after a tolerance for LP noise
/// (peaks are whole bytes), at most `old_peak`; 0 without one.
fn decode_bound(solution: &MipSolution, scale: f64, old_peak: u64) -> u64 {
    solution
        .dual_bound
        .map(|d| {
            let bytes = d * scale;
            let bytes = (bytes - 1e-6 * bytes.abs().max(1.0)).ceil();
            if bytes <= 0.0 {
                0
            } else {
                (bytes as u64).min(old_peak)
            }
        })
        .unwrap_or(0)
}

/// The whole order with the window rearranged as HiGHS' solution says, when it has one that
/// gives every window node one step and every step one node.
fn decode_order(win: &Window<'_>, xs: &[Vec<Col>], solution: &MipSolution) -> Option<Vec<usize>> {
    let cols = solution.columns.as_ref()?;
    let (a, w) = (win.a, win.width());
    let mut at: Vec<Option<usize>> = vec![None; w];
    for k in 0..w {
        for t in win.lo[k]..=win.hi[k] {
            let c = xs[k][t - win.lo[k]];
            if cols.get(c.index()).is_some_and(|&v| v > 0.5) {
                at[k] = Some(t);
            }
        }
    }
    if !at.iter().all(Option::is_some) {
        return None;
    }
    let mut o = win.order.to_vec();
    let mut slots = vec![usize::MAX; w];
    let mut ok = true;
    for (k, t) in at.iter().enumerate() {
        let t = t.unwrap_or(a) - a;
        if slots[t] != usize::MAX {
            ok = false;
        }
        slots[t] = win.local[k];
    }
    if !ok {
        return None;
    }
    o[a..win.b].copy_from_slice(&slots);
    debug_assert_eq!(o.len(), win.order.len());
    Some(o)
}
