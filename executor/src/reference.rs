//! The reference run: the graph executed in its listed topological order with **every
//! tensor in its own allocation** (weights, inputs, each op's outputs and workspace), no
//! plan involved. A tensor's allocation is dropped after its last reader unless it is a
//! graph output, so the run needs the listed order's live bytes, not the sum of all
//! tensors. Its outputs are what a correct plan must reproduce.

use super::arena::AlignedBuf;
use super::data::{self, Fill, Source};
use super::kernels::cpu::{self as kernels, Operands, Scratch};
use super::kernels::Kernel;
use super::replay::fills;
use super::ExecError;
use memplan::graph::{Graph, TensorId, TensorKind};
use memplan::plan::{Instruction, Plan};
use std::time::Instant;

/// Outputs and figures of a reference run.
pub struct Reference {
    /// Bytes of every graph output, by tensor id (`None` for other tensors).
    pub outputs: Vec<Option<Vec<u8>>>,
    /// Largest sum of live allocations (bytes).
    pub peak_bytes: u64,
    /// Kernel scratch peak (bytes).
    pub scratch_bytes: u64,
    /// Wall time (ms).
    pub ms: f64,
}

/// `len` zero bytes for `what`, or [`ExecError::OutOfMemory`] where the machine has not
/// got them (instead of aborting the process).
fn zeroed(len: u64, what: &str) -> Result<Vec<u8>, ExecError> {
    let oom = || ExecError::OutOfMemory {
        what: what.to_string(),
        bytes: len,
    };
    let n = usize::try_from(len).map_err(|_| oom())?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| oom())?;
    v.resize(n, 0);
    Ok(v)
}

/// Generates the bytes of input or weight `t` from `seed`.
pub fn generated(graph: &Graph, t: TensorId, seed: u64, fill: Fill) -> Result<Vec<u8>, ExecError> {
    let tensor = graph.tensor(t);
    let mut v = zeroed(
        tensor.size,
        &format!("generated data of tensor {:?}", tensor.name),
    )?;
    let weight_shape =
        (tensor.kind == TensorKind::Weight).then(|| tensor.shape.as_deref().unwrap_or(&[]));
    data::generate(&mut v, fill, seed, &tensor.name, weight_shape);
    Ok(v)
}

/// The initial bytes of input or weight `t`: its supplied value, else generated.
pub fn initial(
    graph: &Graph,
    t: TensorId,
    src: &Source<'_>,
    fill: Fill,
) -> Result<Vec<u8>, ExecError> {
    match src.supplied(&graph.tensor(t).name) {
        Some(bytes) => {
            let what = format!("a copy of the data of tensor {:?}", graph.tensor(t).name);
            let mut v = zeroed(bytes.len() as u64, &what)?;
            v.copy_from_slice(bytes);
            Ok(v)
        }
        None => generated(graph, t, src.seed, fill),
    }
}

/// Runs the graph with one allocation per tensor, inputs and weights from `seed`.
pub fn run(graph: &Graph, kernels_of: &[Kernel], seed: u64) -> Result<Reference, ExecError> {
    run_with(graph, kernels_of, &Source::seeded(seed))
}

/// Runs the graph with one allocation per tensor, inputs and weights from `src`.
pub fn run_with(
    graph: &Graph,
    kernels_of: &[Kernel],
    src: &Source<'_>,
) -> Result<Reference, ExecError> {
    let started = Instant::now();
    let fill = fills(graph);
    let order = graph
        .order_problem()
        .listed_topological_order()
        .map_err(|e| ExecError::BadPlan {
            instruction: None,
            message: graph.order_error(e).to_string(),
        })?;
    // Last step reading each tensor (outputs live to the end).
    let mut last_read = vec![None; graph.tensors.len()];
    for (s, &k) in order.iter().enumerate() {
        for &t in &graph.ops[k].inputs {
            last_read[t.index()] = Some(s);
        }
    }
    let mut mem: Vec<Option<AlignedBuf>> = (0..graph.tensors.len()).map(|_| None).collect();
    let mut live = 0u64;
    let mut peak = 0u64;
    for (i, t) in graph.tensors.iter().enumerate() {
        if matches!(t.kind, TensorKind::Input | TensorKind::Weight) {
            let id = TensorId(i as u32);
            let mut b = AlignedBuf::new(t.size, &format!("reference tensor {:?}", t.name))?;
            b.bytes_mut()
                .copy_from_slice(&initial(graph, id, src, fill[i])?);
            live += b.allocated();
            mem[i] = Some(b);
        }
    }
    peak = peak.max(live);
    let mut scratch = Scratch::default();
    for (s, &k) in order.iter().enumerate() {
        let op = &graph.ops[k];
        let mut outs: Vec<AlignedBuf> = Vec::with_capacity(op.outputs.len());
        for &t in &op.outputs {
            let tensor = graph.tensor(t);
            outs.push(AlignedBuf::new(
                tensor.size,
                &format!("reference tensor {:?}", tensor.name),
            )?);
        }
        let mut ws = match op.workspace {
            0 => None,
            w => Some(AlignedBuf::new(
                w,
                &format!("reference workspace of {:?}", op.name),
            )?),
        };
        let extra: u64 = outs.iter().map(AlignedBuf::allocated).sum::<u64>()
            + ws.as_ref().map_or(0, AlignedBuf::allocated);
        peak = peak.max(live + extra);
        {
            let mut inputs: Vec<&[u8]> = Vec::with_capacity(op.inputs.len());
            for &t in &op.inputs {
                let b = mem[t.index()].as_ref().ok_or_else(|| ExecError::Kernel {
                    op: op.name.clone(),
                    message: format!("reference run: input {:?} is missing", graph.tensor(t).name),
                })?;
                inputs.push(b.bytes());
            }
            let mut outputs: Vec<&mut [u8]> = outs.iter_mut().map(AlignedBuf::bytes_mut).collect();
            let out_fills: Vec<Fill> = op.outputs.iter().map(|t| fill[t.index()]).collect();
            kernels::exec(
                &kernels_of[k],
                Operands {
                    name: &op.name,
                    inputs: &inputs,
                    outputs: &mut outputs,
                    fills: &out_fills,
                    workspace: ws.as_mut().map(AlignedBuf::bytes_mut),
                },
                &mut scratch,
            )
            .map_err(|message| ExecError::Kernel {
                op: op.name.clone(),
                message,
            })?;
        }
        for (&t, b) in op.outputs.iter().zip(outs) {
            live += b.allocated();
            mem[t.index()] = Some(b);
        }
        // Release what no later op reads (graph outputs and weights stay).
        for &t in op.inputs.iter().chain(&op.outputs) {
            let tensor = graph.tensor(t);
            if matches!(tensor.kind, TensorKind::Output | TensorKind::Weight) {
                continue;
            }
            if last_read[t.index()].is_none_or(|r| r <= s) {
                if let Some(b) = mem[t.index()].take() {
                    live -= b.allocated();
                }
            }
        }
    }
    let outputs = graph
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            (t.kind == TensorKind::Output)
                .then(|| mem[i].as_ref().map(|b| b.bytes().to_vec()))
                .flatten()
        })
        .collect();
    Ok(Reference {
        outputs,
        peak_bytes: peak,
        scratch_bytes: scratch.peak_bytes,
        ms: started.elapsed().as_secs_f64() * 1e3,
    })
}

/// The isolated plan: the listed topological order with every tensor and workspace in its
/// own never-reused range of one arena (no frees). Running it on a device gives that
/// device's reference outputs.
pub fn isolated_plan(graph: &Graph) -> Plan {
    let mut end = 0u64;
    let mut place = |size: u64, align: u64| {
        let off = end.div_ceil(align).saturating_mul(align);
        end = off.saturating_add(size);
        off
    };
    let mut ins = Vec::new();
    for t in graph.tensors.iter().filter(|t| t.kind == TensorKind::Input) {
        ins.push(Instruction::Alloc {
            tensor: t.name.clone(),
            offset: place(t.size, t.alignment),
            mem_id: None,
            inplace_of: None,
        });
    }
    let order = graph
        .order_problem()
        .listed_topological_order()
        .unwrap_or_else(|_| (0..graph.ops.len()).collect());
    for k in order {
        let op = &graph.ops[k];
        for &t in &op.outputs {
            let tensor = graph.tensor(t);
            ins.push(Instruction::Alloc {
                tensor: tensor.name.clone(),
                offset: place(tensor.size, tensor.alignment),
                mem_id: None,
                inplace_of: None,
            });
        }
        let workspace_offset = (op.workspace > 0).then(|| place(op.workspace, graph.alignment));
        ins.push(Instruction::Exec {
            stream: None,
            node: op.name.clone(),
            workspace_offset,
            algo: memplan::plan::algo_attr(op),
        });
    }
    let mut plan = Plan::new(graph, ins, end, 0);
    plan.stats.method = "isolated".into();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_larger_than_memory_is_an_out_of_memory_error_not_an_abort() {
        let mut g = Graph::parse(memplan::graph::SAMPLE_JSON).unwrap();
        let i = g
            .tensors
            .iter()
            .position(|t| t.kind == TensorKind::Input)
            .unwrap();
        g.tensors[i].size = 1 << 62;
        let fill = super::super::replay::fills(&g)[i];
        let e = generated(&g, TensorId(i as u32), 1, fill).unwrap_err();
        assert!(
            matches!(e, ExecError::OutOfMemory { bytes, .. } if bytes == 1 << 62),
            "{e}"
        );
        assert!(e.to_string().contains(&g.tensors[i].name), "{e}");
        let src = Source::seeded(1);
        assert!(matches!(
            initial(&g, TensorId(i as u32), &src, fill),
            Err(ExecError::OutOfMemory { .. })
        ));
    }
}
