//! `memplan run`: executes a plan on real memory (`memplan_executor`) and compares every
//! graph output with a reference run in which every tensor has its own allocation; with a
//! rewritten graph, also proves that it computes the original's outputs. Exit 0 if equal, 1
//! if not (or if the plan is invalid or cannot be executed).
//!
//! `--data` supplies inputs and weights from tensor files (`memplan::data_file`) instead of
//! the seeded generator; `--outputs-out` writes the outputs the plan's run computed.
//!
//! The only file of the command line that uses the executor.

use crate::args::MAX_PERTURB_US;
use crate::args::{DeviceArg, KernelsArg, RunArgs};
use crate::common::{bad, graph_for_plan, load_graph, load_plan};
use crate::output::{check_outputs, write_files, write_out};
use anyhow::Result;
use memplan::data_file::{self, Dtype, TensorData, TensorFile};
use memplan::graph::Graph;
use memplan_executor::{
    self as executor, Device, ExecError, ExecOptions, ExecReport, KernelMode, TensorValues,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// The executor options the flags give (without data).
fn exec_options(a: &RunArgs) -> ExecOptions {
    ExecOptions {
        device: match a.device {
            DeviceArg::Cpu => Device::Cpu,
            DeviceArg::Cuda => Device::Cuda,
        },
        seed: a.seed,
        kernels: match a.kernels {
            KernelsArg::Real => KernelMode::Real,
            KernelsArg::Mix => KernelMode::Mix,
        },
        data: None,
        require_real_kernels: a.require_real_kernels,
        perturb: a.perturb_seed.map(|seed| executor::threads::Perturb {
            seed,
            max_delay_us: a.perturb_us.unwrap_or(DEFAULT_PERTURB_US),
        }),
    }
}

/// The values of the `--data` files for graph `g`: every tensor must be an input or weight
/// of `g` with the graph's dtype (where it has one) and size, named in one file only.
fn load_data(paths: &[PathBuf], g: &Graph) -> Result<TensorValues> {
    let mut values = TensorValues::new();
    // Said once the data is known to fit the graph (a wrong size is an error, not this).
    let mut warnings = Vec::new();
    let ids = g.tensor_ids();
    for path in paths {
        let bytes = std::fs::read(path)
            .map_err(|e| bad(format!("--data {}: cannot read it: {e}", path.display())))?;
        let file = data_file::read(&bytes).map_err(|e| bad(format!("{}: {e}", path.display())))?;
        for (name, t) in file.tensors {
            let in_file = |msg: String| bad(format!("{}: tensor {name:?}: {msg}", path.display()));
            let Some(&id) = ids.get(name.as_str()) else {
                return Err(in_file(format!(
                    "the graph {:?} has no such tensor",
                    g.name
                )));
            };
            let gt = g.tensor(id);
            if let Some(want) = gt.dtype.as_deref().and_then(Dtype::from_graph) {
                if want != t.dtype {
                    return Err(in_file(format!(
                        "dtype {} in the file, {} in the graph",
                        t.dtype.name(),
                        want.name()
                    )));
                }
            }
            if let Some(shape) = &gt.shape {
                if *shape != t.shape {
                    warnings.push(format!(
                        "warning: {}: tensor {name:?} has shape {:?}, the graph {shape:?}; its bytes are used as they are",
                        path.display(),
                        t.shape
                    ));
                }
            }
            if values.insert(name.clone(), t.bytes).is_some() {
                return Err(in_file("given by two --data files".into()));
            }
        }
    }
    executor::check_data(g, &values).map_err(|e| bad(e.to_string()))?;
    for w in warnings {
        eprintln!("{w}");
    }
    Ok(values)
}

/// Writes the plan run's graph outputs to `path` as a tensor file (dtype and shape from the
/// graph; raw bytes as U8 where the graph gives no dtype the format has).
fn write_outputs(path: &Path, r: &ExecReport, g: &Graph) -> Result<()> {
    let mut file = TensorFile::default();
    file.metadata.insert("graph".into(), g.name.clone());
    for (name, bytes) in &r.output_values {
        let t = g
            .tensor_by_name(name)
            .map(|id| g.tensor(id))
            .ok_or_else(|| anyhow::anyhow!("output {name:?} is not in graph {:?}", g.name))?;
        let typed = t
            .dtype
            .as_deref()
            .and_then(Dtype::from_graph)
            .zip(t.shape.clone())
            .and_then(|(d, shape)| TensorData::new(name, d, shape, bytes.clone()).ok());
        let data = match typed {
            Some(d) => d,
            None => TensorData::new(name, Dtype::U8, vec![bytes.len() as u64], bytes.clone())?,
        };
        file.tensors.insert(name.clone(), data);
    }
    write_files(&[(path, &data_file::write(&file))])
}

/// Whether `g` runs conv algorithms chosen by memplan (which round differently from the
/// original graph's kernels).
fn runs_chosen_algos(g: &Graph) -> bool {
    memplan::conv_algo::algo_mix(g)
        .keys()
        .any(|a| a != "none" && a != "given")
}

/// Relative tolerance of the equivalence check when the rewritten graph runs chosen conv
/// algorithms (which round differently from the original's kernels).
const CONV_ALGO_TOLERANCE: f64 = 1e-3;

/// `--perturb-us` when not given (µs).
const DEFAULT_PERTURB_US: u64 = 2000;

/// The original graph of `run`: given as the plan's graph, or by `--original`.
enum OriginalGraph<'a> {
    /// The graph given, when the plan carries its rewrite.
    Given(Graph),
    /// The file `--original` names.
    Path(&'a str),
}

/// Runs `memplan run`.
pub fn run(a: RunArgs) -> Result<ExitCode> {
    match (a.perturb_us, a.perturb_seed) {
        (Some(us), _) if us > MAX_PERTURB_US => {
            return Err(bad(format!(
                "--perturb-us {us} is over the maximum of {MAX_PERTURB_US} (1 s per task)"
            )));
        }
        (Some(_), None) => {
            return Err(bad(
                "--perturb-us applies only with --perturb-seed (which turns the delays on)",
            ));
        }
        _ => {}
    }
    if let Some(path) = &a.outputs_out {
        let mut inputs: Vec<(&str, &Path)> = vec![("the plan", &a.plan)];
        if a.graph != "sample" {
            inputs.push(("the graph", Path::new(&a.graph)));
        }
        if let Some(o) = &a.original {
            inputs.push(("the --original graph", Path::new(o)));
        }
        inputs.extend(a.data.iter().map(|d| ("a --data file", d.as_path())));
        check_outputs(&inputs, &[("--outputs-out", path)])?;
    }
    let mut opts = exec_options(&a);
    let given = load_graph(&a.graph)?;
    let p = load_plan(&a.plan)?;
    let Some(g) = graph_for_plan(given.clone(), &p, &a.plan)? else {
        return Ok(ExitCode::from(1));
    };
    if !a.data.is_empty() {
        opts.data = Some(Arc::new(load_data(&a.data, &g)?));
    }
    // A plan that carries its rewritten graph is run on that graph, and the graph given is
    // the original it must compute the outputs of; `--original` names that original for a
    // rewritten graph given as GRAPH. Bitwise unless conv algorithms were chosen, which round
    // differently: then 1e-3 relative, unless a tolerance is given (0: bitwise).
    let tol = a.original_tolerance.unwrap_or(if runs_chosen_algos(&g) {
        CONV_ALGO_TOLERANCE
    } else {
        0.0
    });
    let original = match a.original.as_deref() {
        None if p.rewritten_graph.is_some() && g != given => {
            Some((OriginalGraph::Given(given), tol))
        }
        None => None,
        Some(path) => Some((OriginalGraph::Path(path), tol)),
    };
    if original.is_none() && a.original_tolerance.is_some() {
        return Err(bad(
            "--original-tolerance applies only to a comparison with the original graph: a plan \
             that carries its rewritten graph, or --original",
        ));
    }
    if let Err(v) = memplan::validate(&g, &p, None) {
        if !a.skip_validation {
            eprintln!("invalid: {v} (--skip-validation runs it anyway)");
            return Ok(ExitCode::from(1));
        }
        eprintln!("warning: the validator rejects this plan ({v}); running it anyway");
    }
    let original = match original {
        Some((o, tol)) => {
            if !(tol >= 0.0 && tol.is_finite()) {
                return Err(bad(format!(
                    "--original-tolerance {tol} must be a finite number >= 0"
                )));
            }
            let o = match o {
                OriginalGraph::Given(g) => g,
                OriginalGraph::Path(path) => {
                    let o = load_graph(path)?;
                    // The outputs are compared by name: a graph that is no rewrite of the
                    // original (other inputs, weights or outputs) proves nothing either way.
                    if let Err(why) = memplan::pipeline::derived_from(&o, &g) {
                        eprintln!(
                            "invalid: the graph {:?} was not derived from the --original graph \
                             {:?}: {why}",
                            g.name, o.name
                        );
                        return Ok(ExitCode::from(1));
                    }
                    o
                }
            };
            Some((o, tol))
        }
        None => None,
    };
    let mut r = match executor::execute(&g, &p, &opts).and_then(|mut r| {
        if let Some((o, tol)) = &original {
            r.original = Some(executor::equivalence(o, &g, &opts, *tol)?);
        }
        Ok(r)
    }) {
        Ok(r) => r,
        Err(e) => {
            return match failure(&e) {
                Failure::Negative(why) => {
                    eprintln!("{why}: {e}");
                    Ok(ExitCode::from(1))
                }
                Failure::BadInput => Err(bad(e.to_string())),
                Failure::Internal => Err(e.into()),
            }
        }
    };
    if r.original
        .as_ref()
        .is_some_and(|o| !o.outputs_equal && o.tolerance == 0.0)
        && runs_chosen_algos(&g)
    {
        r.notes.push(
            "the graph runs chosen conv algorithms, which round differently from the original's \
             kernels: compare with --original-tolerance 1e-3, or plan with --conv-algos off for \
             bitwise equality"
                .to_string(),
        );
    }
    if opts.data.is_some() && !r.mixed_ops.is_empty() {
        eprintln!(
            "WARNING: {} ops ran the mixing kernel, not real math, so the outputs they reach are hashes, not values computed from --data (--require-real-kernels makes this an error): {}",
            r.mixed_ops.len(),
            r.mixed_ops.join(", ")
        );
    }
    if let Some(path) = &a.outputs_out {
        write_outputs(path, &r, &g)?;
    }
    if a.json {
        let mut text = serde_json::to_string_pretty(&r)?;
        text.push('\n');
        write_out(&None, &text)?;
    } else {
        print_report(&r);
    }
    let original_equal = r.original.as_ref().is_none_or(|o| o.outputs_equal);
    Ok(if r.outputs_equal && original_equal {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What a failed run means for the exit code.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// A negative answer about the plan (exit 1), said after the given words.
    Negative(&'static str),
    /// Bad input: the device asked for, or the data given (exit 2).
    BadInput,
    /// Anything else (exit 3).
    Internal,
}

/// How the error of a run ends the command.
fn failure(e: &ExecError) -> Failure {
    match e {
        ExecError::Device(_) | ExecError::Data { .. } => Failure::BadInput,
        // A plan whose ranges break the graph, or (parallel plans, run with
        // --skip-validation) two streams touching the same bytes at once: the plan is wrong.
        ExecError::BadPlan { .. } | ExecError::Race(_) => Failure::Negative("execution failed"),
        // A plan whose regions cannot be allocated here cannot be executed.
        ExecError::OutOfMemory { .. } => Failure::Negative("the plan cannot be executed"),
        ExecError::MixedKernels { .. } => Failure::Negative("refused (--require-real-kernels)"),
        // Operand sizes that contradict a graph and plan the validator accepted: a fault of
        // memplan's.
        ExecError::Kernel { .. } => Failure::Internal,
    }
}

/// Prints the report of a run on stdout, one figure a line.
fn print_report(r: &ExecReport) {
    let verdict = match &r.first_mismatch {
        None => "yes".to_string(),
        Some(m) => format!(
            "NO: first differing output {:?} at byte {} ({} bytes differ{})",
            m.tensor,
            m.first_byte,
            m.differing_bytes,
            m.first_f32
                .map(|(i, a, b)| format!("; element {i}: plan {a:e}, reference {b:e}"))
                .unwrap_or_default()
        ),
    };
    println!("graph             {} on {}", r.graph, r.device);
    println!(
        "outputs equal     {verdict} ({} outputs{})",
        r.outputs_compared,
        if r.tolerance > 0.0 {
            format!(", relative tolerance {:e}", r.tolerance)
        } else {
            ", bitwise".to_string()
        }
    );
    println!(
        "arena             {} B allocated (one allocation) for arena_bytes {} B; replayed peak {} B, stats.peak_bytes {} B",
        r.arena_allocated, r.plan_arena_bytes, r.replay_peak_bytes, r.plan_peak_bytes
    );
    println!(
        "weights           {} B allocated for weights_bytes {} B",
        r.weights_allocated, r.plan_weights_bytes
    );
    println!(
        "host pool         {} B allocated for host_bytes {} B; peak used {} B",
        r.host_allocated, r.plan_host_bytes, r.host_peak_bytes
    );
    println!("kernel scratch    {} B (outside the plan)", r.scratch_bytes);
    println!(
        "spills            {} out ({} B), {} in ({} B)",
        r.spill_outs, r.spill_out_bytes, r.spill_ins, r.spill_in_bytes
    );
    println!(
        "executed ops      {} ({} ops, {} recomputes); kernels: {}",
        r.execs,
        r.ops,
        r.recomputes,
        r.kernels
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if r.supplied_tensors > 0 {
        println!(
            "data              {} inputs/weights from --data, the others generated",
            r.supplied_tensors
        );
    }
    if !r.mixed_ops.is_empty() {
        println!(
            "mixing kernel     {} ops: {}",
            r.mixed_ops.len(),
            r.mixed_ops.join(", ")
        );
    }
    if let Some(d) = &r.device_memory {
        println!(
            "device memory     {} B taken by the plan's buffers (arena + weights = {} B, extra {} B); context {} B",
            d.taken_by_buffers,
            r.plan_arena_bytes + r.plan_weights_bytes,
            d.extra_bytes,
            d.taken_by_context
        );
    }
    println!(
        "time              step {:.1} ms, reference {:.1} ms (peak {} B), total {:.1} ms",
        r.step_ms, r.reference_ms, r.reference_peak_bytes, r.total_ms
    );
    if r.reference_nonfinite > 0 {
        println!(
            "note              {} reference output values are not finite",
            r.reference_nonfinite
        );
    }
    for n in &r.notes {
        println!("note              {n}");
    }
    if let Some(o) = &r.original {
        println!(
            "original graph    {}: {} ({} outputs{})",
            o.graph,
            match &o.first_mismatch {
                None => "computes the same outputs".to_string(),
                Some(m) => format!(
                    "DIFFERS at output {:?} byte {} ({} bytes differ)",
                    m.tensor, m.first_byte, m.differing_bytes
                ),
            },
            o.outputs_compared,
            if o.tolerance > 0.0 {
                format!(", relative tolerance {:e}", o.tolerance)
            } else {
                ", bitwise".to_string()
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_race_in_a_parallel_plan_is_a_negative_answer_like_a_bad_plan() {
        assert_eq!(
            failure(&ExecError::Race("exec \"a\" started while ...".into())),
            Failure::Negative("execution failed")
        );
        assert_eq!(
            failure(&ExecError::BadPlan {
                instruction: Some(3),
                message: "x".into()
            }),
            Failure::Negative("execution failed")
        );
        assert_eq!(
            failure(&ExecError::Device("none".into())),
            Failure::BadInput
        );
        assert_eq!(
            failure(&ExecError::Kernel {
                op: "conv".into(),
                message: "sizes".into()
            }),
            Failure::Internal
        );
    }
}
