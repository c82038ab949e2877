//! The strip schedules and the rewritten graph: [`Rewrite`] is one region's schedule (its
//! strip tensors and ops: slices of the entry, the region's ops per strip, crops, the final
//! concat), built by [`Ctx::strips`]; [`emit`] writes the new graph with each tiled region's
//! ops replaced by its schedule.

use super::classify::{input_rows, row_bytes, shape4, Local};
use super::{scaled_u64, Ctx, PassError, Regions, Rows, NAME};
use crate::graph::{Graph, Op, Tensor, TensorId, TensorKind};
use crate::passes::rebuild::Rebuild;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// A tensor reference in a region rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TRef {
    Old(TensorId),
    New(usize),
}

#[derive(Debug, Clone)]
pub(super) struct NewTensor {
    pub(super) base: TensorId,
    pub(super) strip: usize,
    /// `None`: the strip copy; `Some(j)`: the j-th crop of that strip copy.
    pub(super) crop: Option<usize>,
    /// The strip's slice of the region's entry (named apart from the previous region's
    /// strips of the same tensor).
    pub(super) entry: bool,
    pub(super) rows: usize,
    pub(super) size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum NewKind {
    /// Strip `k` of an original op, with its H padding (top, bottom).
    Strip { op: usize, pads: (usize, usize) },
    /// `slice_rows` starting at a row.
    Slice { start: usize },
    /// The final concat.
    Concat,
}

#[derive(Debug, Clone)]
pub(super) struct NewOp {
    pub(super) kind: NewKind,
    pub(super) strip: usize,
    pub(super) inputs: Vec<TRef>,
    pub(super) outputs: Vec<TRef>,
    /// Rows produced / rows of the untiled output (scales flops, time and workspace).
    pub(super) frac: (usize, usize),
}

#[derive(Debug, Clone, Default)]
pub(super) struct Rewrite {
    pub(super) tensors: Vec<NewTensor>,
    pub(super) ops: Vec<NewOp>,
}

impl Ctx<'_> {
    /// Builds the strip schedule of region `ops` (listed order) from `entry` to `output` in
    /// `n` strips; `None` when some strip would read nothing.
    pub(super) fn strips(
        &self,
        ops: &[usize],
        entry: TensorId,
        output: TensorId,
        n: usize,
    ) -> Option<Rewrite> {
        let h_out = self.h(output);
        if n < 2 || n > h_out {
            return None;
        }
        let mut rw = Rewrite::default();
        for k in 0..n {
            let want = (k * h_out / n, (k + 1) * h_out / n);
            // Back-propagate the rows each tensor must hold in this strip.
            let mut need: BTreeMap<TensorId, Rows> = BTreeMap::new();
            need.insert(output, want);
            for &o in ops.iter().rev() {
                let op = &self.g.ops[o];
                let local = self.locals[o].as_ref()?;
                let out_rows = *need.get(&op.outputs[0])?;
                for &slot in &local.spatial {
                    let t = op.inputs[slot];
                    let (r, _, _) = input_rows(local.map, out_rows, self.h(t))?;
                    need.entry(t)
                        .and_modify(|x| *x = (x.0.min(r.0), x.1.max(r.1)))
                        .or_insert(r);
                }
            }
            let mut have: BTreeMap<TensorId, (TRef, Rows)> = BTreeMap::new();
            let mut crops: BTreeMap<(TensorId, Rows), TRef> = BTreeMap::new();
            let entry_rows = *need.get(&entry)?;
            if entry_rows == (0, self.h(entry)) {
                have.insert(entry, (TRef::Old(entry), entry_rows));
            } else {
                let r = self.push_tensor(&mut rw, entry, k, None, entry_rows)?;
                if let TRef::New(i) = r {
                    rw.tensors[i].entry = true;
                }
                rw.ops.push(NewOp {
                    kind: NewKind::Slice {
                        start: entry_rows.0,
                    },
                    strip: k,
                    inputs: vec![TRef::Old(entry)],
                    outputs: vec![r],
                    frac: (entry_rows.1 - entry_rows.0, self.h(entry)),
                });
                have.insert(entry, (r, entry_rows));
            }
            for &o in ops {
                let op = &self.g.ops[o];
                let local = self.locals[o].as_ref()?;
                let main = op.outputs[0];
                let out_rows = *need.get(&main)?;
                let mut inputs: Vec<TRef> = op.inputs.iter().map(|&t| TRef::Old(t)).collect();
                let mut pads = (0, 0);
                for &slot in &local.spatial {
                    let t = op.inputs[slot];
                    let (req, top, bottom) = input_rows(local.map, out_rows, self.h(t))?;
                    pads = (top, bottom);
                    let &(src, avail) = have.get(&t)?;
                    inputs[slot] = if avail == req {
                        src
                    } else if let Some(&c) = crops.get(&(t, req)) {
                        c
                    } else {
                        let j = crops.len();
                        let c = self.push_tensor(&mut rw, t, k, Some(j), req)?;
                        rw.ops.push(NewOp {
                            kind: NewKind::Slice {
                                start: req.0 - avail.0,
                            },
                            strip: k,
                            inputs: vec![src],
                            outputs: vec![c],
                            frac: (req.1 - req.0, self.h(t)),
                        });
                        crops.insert((t, req), c);
                        c
                    };
                }
                let mut outputs = Vec::with_capacity(op.outputs.len());
                for (i, &t) in op.outputs.iter().enumerate() {
                    let spatial =
                        i == 0 || shape4(self.g.tensor(t)).is_some_and(|s| s[2] == self.h(main));
                    let rows = if spatial { out_rows } else { (0, 0) };
                    outputs.push(self.push_tensor(&mut rw, t, k, None, rows)?);
                }
                have.insert(main, (outputs[0], out_rows));
                rw.ops.push(NewOp {
                    kind: NewKind::Strip { op: o, pads },
                    strip: k,
                    inputs,
                    outputs,
                    frac: (out_rows.1 - out_rows.0, self.h(main)),
                });
            }
        }
        // The concat reads every strip's output, in order.
        let parts: Vec<TRef> = (0..rw.tensors.len())
            .filter(|&i| rw.tensors[i].base == output && rw.tensors[i].crop.is_none())
            .map(TRef::New)
            .collect();
        rw.ops.push(NewOp {
            kind: NewKind::Concat,
            strip: n,
            inputs: parts,
            outputs: vec![TRef::Old(output)],
            frac: (h_out, h_out),
        });
        Some(rw)
    }

    /// Adds a strip tensor of `base` holding `rows` (`(0, 0)`: a non-spatial side output of
    /// the same size as the original).
    fn push_tensor(
        &self,
        rw: &mut Rewrite,
        base: TensorId,
        strip: usize,
        crop: Option<usize>,
        rows: Rows,
    ) -> Option<TRef> {
        let t = self.g.tensor(base);
        let n = rows.1.checked_sub(rows.0)?;
        let size = if rows == (0, 0) {
            t.size
        } else {
            row_bytes(t)? * n as u64
        };
        if size == 0 {
            return None;
        }
        rw.tensors.push(NewTensor {
            base,
            strip,
            crop,
            entry: false,
            rows: n,
            size,
        });
        Some(TRef::New(rw.tensors.len() - 1))
    }
}

fn strip_name(base: &str, t: &NewTensor) -> String {
    match t.crop {
        None if t.entry => format!("{base}@in{}", t.strip),
        None => format!("{base}@s{}", t.strip),
        Some(j) => format!("{base}@s{}.crop{j}", t.strip),
    }
}

/// Writes the rewritten graph: original ops in listed order, each tiled region's ops
/// replaced (at its first op's place) by its strip schedule.
pub(super) fn emit(ctx: &Ctx<'_>, regions: &Regions) -> Result<Graph, PassError> {
    let g = ctx.g;
    if regions.is_empty() {
        return Ok(g.clone());
    }
    let mut region_of: BTreeMap<usize, usize> = BTreeMap::new();
    let mut dropped: BTreeSet<TensorId> = BTreeSet::new();
    for (ri, (ops, _, output, ..)) in regions.iter().enumerate() {
        for &o in ops {
            region_of.insert(o, ri);
            for &t in &g.ops[o].outputs {
                if t != *output {
                    dropped.insert(t);
                }
            }
        }
    }
    let mut rb = Rebuild::keeping(g, |t| !dropped.contains(&t));
    let region_ids = region_tensors(g, regions, &mut rb)?;
    let mut op_names: BTreeSet<String> = g.ops.iter().map(|o| o.name.clone()).collect();
    let mut ops: Vec<Op> = Vec::new();
    let mut emitted: BTreeSet<usize> = BTreeSet::new();
    for (o, op) in g.ops.iter().enumerate() {
        let Some(&ri) = region_of.get(&o) else {
            let mut op = op.clone();
            for t in op.inputs.iter_mut().chain(op.outputs.iter_mut()) {
                *t = rb.new_id(*t).ok_or_else(|| PassError::Unsupported {
                    pass: NAME,
                    message: format!("op {:?} reads a tensor inside a tiled region", op.name),
                })?;
            }
            ops.push(op);
            continue;
        };
        if !emitted.insert(ri) {
            continue;
        }
        for nop in &regions[ri].5.ops {
            let built = strip_op(ctx, &rb, &region_ids[ri], nop)?;
            if !op_names.insert(built.name.clone()) {
                return Err(clash("op", &built.name));
            }
            ops.push(built);
        }
    }
    rb.finish(ops, NAME)
}

/// The error for a strip tensor or op name that the graph already uses.
fn clash(what: &str, name: &str) -> PassError {
    PassError::Unsupported {
        pass: NAME,
        message: format!("the strip {what} name {name:?} is already taken in the graph"),
    }
}

/// Adds every region's strip tensors to `rb`; returns their new ids, per region.
fn region_tensors(
    g: &Graph,
    regions: &Regions,
    rb: &mut Rebuild<'_>,
) -> Result<Vec<Vec<TensorId>>, PassError> {
    let mut names: BTreeSet<String> = g.tensors.iter().map(|t| t.name.clone()).collect();
    let mut region_ids: Vec<Vec<TensorId>> = Vec::new();
    for (_, _, _, _, _, rw) in regions {
        let mut ids = Vec::with_capacity(rw.tensors.len());
        for nt in &rw.tensors {
            let base = g.tensor(nt.base);
            let name = strip_name(&base.name, nt);
            if !names.insert(name.clone()) {
                return Err(clash("tensor", &name));
            }
            let shape = match (&base.shape, shape4(base)) {
                (Some(s), Some(s4)) if nt.size != base.size || s4[2] == nt.rows => {
                    let mut s = s.clone();
                    s[2] = nt.rows as u64;
                    Some(s)
                }
                (s, _) => s.clone(),
            };
            ids.push(rb.push(Tensor {
                name,
                size: nt.size,
                alignment: base.alignment,
                kind: TensorKind::Activation,
                shape,
                dtype: base.dtype.clone(),
            }));
        }
        region_ids.push(ids);
    }
    Ok(region_ids)
}

/// The graph op of one op of a strip schedule (`ids`: the region's strip tensors' new ids).
fn strip_op(
    ctx: &Ctx<'_>,
    rb: &Rebuild<'_>,
    ids: &[TensorId],
    nop: &NewOp,
) -> Result<Op, PassError> {
    let g = ctx.g;
    let map = |r: &TRef| -> Result<TensorId, PassError> {
        match *r {
            TRef::New(i) => Ok(ids[i]),
            TRef::Old(t) => rb.new_id(t).ok_or_else(|| PassError::Unsupported {
                pass: NAME,
                message: format!("tiled region reads dropped tensor {:?}", g.tensor(t).name),
            }),
        }
    };
    let inputs = nop.inputs.iter().map(map).collect::<Result<Vec<_>, _>>()?;
    let outputs = nop.outputs.iter().map(map).collect::<Result<Vec<_>, _>>()?;
    let first_out = &rb.tensor(outputs[0]).name;
    Ok(match &nop.kind {
        NewKind::Slice { start } => Op {
            stream: None,
            name: format!("slice:{first_out}"),
            op_type: "slice_rows".into(),
            inputs,
            outputs,
            flops: Some(0.0),
            time_us: None,
            workspace: 0,
            attrs: Some(json!({"dim": 2, "start": start})),
            inplace: Vec::new(),
            fused: None,
            recompute: None,
        },
        NewKind::Concat => Op {
            stream: None,
            name: format!("concat:{first_out}"),
            op_type: "concat".into(),
            inputs,
            outputs,
            flops: Some(0.0),
            time_us: None,
            workspace: 0,
            attrs: Some(json!({"dim": 2})),
            inplace: Vec::new(),
            fused: None,
            recompute: None,
        },
        NewKind::Strip { op: base, pads } => {
            let orig = &g.ops[*base];
            let local = ctx.locals[*base]
                .as_ref()
                .ok_or_else(|| PassError::Unsupported {
                    pass: NAME,
                    message: format!("op {:?} is not tileable", orig.name),
                })?;
            let (num, den) = nop.frac;
            Op {
                stream: None,
                name: format!("{}@s{}", orig.name, nop.strip),
                op_type: orig.op_type.clone(),
                inputs,
                outputs,
                flops: orig.flops.map(|f| f * num as f64 / den.max(1) as f64),
                time_us: orig.time_us.map(|t| t * num as f64 / den.max(1) as f64),
                workspace: scaled_u64(orig.workspace, num, den),
                attrs: strip_attrs(orig, local, *pads),
                inplace: orig.inplace.clone(),
                // Fused ops are not row-local (the pass runs before fusion).
                fused: None,
                // Ops that may not be recomputed are never tiled (classify), so a strip
                // copies an allowed flag at most.
                recompute: orig.recompute,
            }
        }
    })
}

fn strip_attrs(orig: &Op, local: &Local, (top, bottom): (usize, usize)) -> Option<Value> {
    let mut attrs = match &orig.attrs {
        Some(Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    if let Some(pw) = local.conv_pad_w {
        attrs.insert("padding".into(), json!([top, pw]));
        attrs.insert("pad_bottom".into(), json!(bottom));
    } else if let Some((kernel, stride, pw, ceil_w)) = local.pool {
        attrs.insert("kernel_size".into(), json!([kernel.0, kernel.1]));
        attrs.insert("stride".into(), json!([stride.0, stride.1]));
        attrs.insert("padding".into(), json!([top, pw]));
        attrs.insert("pad_bottom".into(), json!(bottom));
        attrs.insert("ceil_mode".into(), json!(ceil_w));
    } else if attrs.is_empty() {
        return orig.attrs.clone();
    }
    Some(Value::Object(attrs))
}
