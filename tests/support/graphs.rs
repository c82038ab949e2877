//! The random-DAG generator of the root crate's property tests (`tests/random_dags.rs`,
//! `tests/executor.rs`, `tests/budget.rs` include this file with `#[path]`).
//!
//! [`arb_graph`] generates memplan-graph/1 documents (JSON [`Value`]s) named `random`,
//! alignment 64: `n_inputs` graph inputs `in0..`, one weight `w0`, then `n_ops` ops `op0..`
//! in index order, op `k` writing 1–2 activations `t{k}_{j}` and reading only tensors made
//! before it. Some produced tensors become graph outputs (always the last one produced). All randomness comes from one xorshift64* stream seeded by the strategy's
//! `u64`, so a case is a pure function of `(n_ops, n_inputs, seed)`.
//!
//! A [`DagShape`] says what a test's DAGs look like (sizes, how ops pick their inputs, op
//! types, alignments, workspaces, in-place hints, outputs, shuffling); the three presets
//! ([`ANY_READS`], [`MIXING`], [`CHAIN_WITH_SKIPS`]) are the distributions the tests had
//! before they shared this file, draw for draw, so the proptest regression files stay
//! meaningful (the strategy shape is `(ops range, 1..3, any::<u64>())` for all).
#![allow(dead_code)]

use proptest::prelude::*;
use serde_json::{json, Value};
use std::ops::Range;

/// How each op picks its inputs.
#[derive(Debug, Clone, Copy)]
pub enum Reads {
    /// `min + below(spread)` inputs, each any tensor made so far (inputs, weight, outputs of
    /// earlier ops).
    Any {
        /// Fewest inputs.
        min: u64,
        /// Number of possible extra inputs (the draw is `below(spread)`).
        spread: u64,
    },
    /// The previous op's first output (`in0` for the first op), then `below(skips)` random
    /// tensors made so far (long-lived skips, as a backward pass reads forward activations).
    Chain {
        /// Number of possible skip inputs (the draw is `below(skips)`).
        skips: u64,
    },
}

/// Optional per-activation alignment.
#[derive(Debug, Clone, Copy)]
pub enum Align {
    /// No `alignment` field.
    None,
    /// The choice is drawn before the size; set with probability 1/3 (drawn after the size).
    DrawnFirst(&'static [u64]),
    /// Set with probability 1/3 (drawn after the size), the choice drawn only then.
    DrawnIfSet(&'static [u64]),
}

/// Op types and timings.
#[derive(Debug, Clone, Copy)]
pub enum OpTypes {
    /// Every op is `mix`, without `time_us`.
    Mix,
    /// A type drawn from the list, and `time_us` = `1 + below(max_us)`.
    Drawn {
        /// The types.
        types: &'static [&'static str],
        /// Exclusive bound of the extra microseconds.
        max_us: u64,
    },
}

/// What a test's random DAGs look like (see the module doc).
#[derive(Debug, Clone)]
pub struct DagShape {
    /// Range of the op count.
    pub ops: Range<usize>,
    /// Graph input sizes: `1 + below(input_size)`.
    pub input_size: u64,
    /// How ops pick their inputs.
    pub reads: Reads,
    /// Activation sizes: `1 + below(activation_size)`.
    pub activation_size: u64,
    /// Activation alignments.
    pub align: Align,
    /// Op types and timings.
    pub types: OpTypes,
    /// Workspace, with probability 1/3: `1 + below(workspace)` bytes.
    pub workspace: u64,
    /// An in-place hint `[[below(fan_out), below(fan_in)]]` with probability 1/2, on ops
    /// that read something.
    pub inplace: bool,
    /// Each produced tensor other than the last is a graph output with probability
    /// `1 / output_one_in`.
    pub output_one_in: u64,
    /// Swap `below(3)` random adjacent ops, so the listed order is not always topological.
    pub shuffle: bool,
}

/// tests/random_dags.rs: op `i` reads 0–3 tensors among the graph inputs, the weight and the
/// outputs of ops before it, and writes 1–2 tensors; random alignments, workspaces and
/// in-place hints; the listed order shuffled a little.
pub const ANY_READS: DagShape = DagShape {
    ops: 2..14,
    input_size: 5000,
    reads: Reads::Any { min: 0, spread: 4 },
    activation_size: 8000,
    align: Align::DrawnFirst(&[1, 4, 64, 256, 512]),
    types: OpTypes::Mix,
    workspace: 3000,
    inplace: true,
    output_one_in: 4,
    shuffle: true,
};

/// tests/executor.rs: mixing ops reading 1–3 earlier tensors, with workspaces, alignments and
/// in-place hints, in topological listed order.
pub const MIXING: DagShape = DagShape {
    ops: 2..12,
    input_size: 3000,
    reads: Reads::Any { min: 1, spread: 3 },
    activation_size: 4000,
    align: Align::DrawnIfSet(&[1, 4, 64, 512]),
    types: OpTypes::Mix,
    workspace: 2000,
    inplace: true,
    output_one_in: 4,
    shuffle: false,
};

/// tests/budget.rs: a chain with up to two random skips per op (memory can be saved), typed
/// and timed ops with workspaces, few graph outputs (the last, and each other with
/// probability 1/8).
pub const CHAIN_WITH_SKIPS: DagShape = DagShape {
    ops: 2..14,
    input_size: 3000,
    reads: Reads::Chain { skips: 3 },
    activation_size: 4000,
    align: Align::None,
    types: OpTypes::Drawn {
        types: &["mix", "relu", "add", "conv2d"],
        max_us: 50,
    },
    workspace: 2000,
    inplace: false,
    output_one_in: 8,
    shuffle: false,
};

/// xorshift64*, seeded per case.
struct XorShift(u64);

impl XorShift {
    /// A number in `0..m` (`0` when `m` is 0).
    fn below(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545F4914F6CDD1D) >> 11) % m.max(1)
    }
}

/// Random DAGs of `shape` (see the module doc).
pub fn arb_graph(shape: DagShape) -> impl Strategy<Value = Value> {
    (shape.ops.clone(), 1usize..3, any::<u64>())
        .prop_map(move |(n_ops, n_inputs, seed)| shape.build(n_ops, n_inputs, seed))
}

impl DagShape {
    /// The DAG of one case.
    pub fn build(&self, n_ops: usize, n_inputs: usize, seed: u64) -> Value {
        let mut rng = XorShift(seed | 1);
        let mut next = move |m: u64| rng.below(m);
        let mut tensors = Vec::new();
        let mut readable: Vec<String> = Vec::new();
        for i in 0..n_inputs {
            tensors.push(json!({"name": format!("in{i}"), "size": 1 + next(self.input_size), "kind": "input"}));
            readable.push(format!("in{i}"));
        }
        tensors.push(json!({"name": "w0", "size": 1 + next(300), "kind": "weight"}));
        readable.push("w0".into());
        let mut ops = Vec::new();
        let mut produced = Vec::new();
        for k in 0..n_ops {
            let mut inputs = Vec::new();
            let n_reads = match self.reads {
                Reads::Any { min, spread } => (min + next(spread)) as usize,
                Reads::Chain { skips } => {
                    let n = next(skips) as usize;
                    inputs.push(match k {
                        0 => "in0".to_string(),
                        _ => format!("t{}_0", k - 1),
                    });
                    n
                }
            };
            for _ in 0..n_reads {
                inputs.push(readable[next(readable.len() as u64) as usize].clone());
            }
            let fan_in = inputs.len();
            let fan_out = 1 + next(2) as usize;
            let mut outputs = Vec::new();
            for j in 0..fan_out {
                let name = format!("t{k}_{j}");
                let first = match self.align {
                    Align::DrawnFirst(choices) => {
                        Some(choices[next(choices.len() as u64) as usize])
                    }
                    _ => None,
                };
                let mut t = json!({"name": name, "size": 1 + next(self.activation_size), "kind": "activation"});
                match self.align {
                    Align::None => {}
                    Align::DrawnFirst(_) => {
                        if let (true, Some(a)) = (next(3) == 0, first) {
                            t["alignment"] = json!(a);
                        }
                    }
                    Align::DrawnIfSet(choices) => {
                        if next(3) == 0 {
                            t["alignment"] = json!(choices[next(choices.len() as u64) as usize]);
                        }
                    }
                }
                tensors.push(t);
                outputs.push(name.clone());
                produced.push(tensors.len() - 1);
                readable.push(name);
            }
            let mut op = match self.types {
                OpTypes::Mix => {
                    json!({"name": format!("op{k}"), "type": "mix", "inputs": inputs, "outputs": outputs})
                }
                OpTypes::Drawn { types, max_us } => {
                    let ty = types[next(types.len() as u64) as usize];
                    json!({"name": format!("op{k}"), "type": ty, "inputs": inputs,
                           "outputs": outputs, "time_us": 1 + next(max_us)})
                }
            };
            if next(3) == 0 {
                op["workspace"] = json!(1 + next(self.workspace));
            }
            if self.inplace && fan_in > 0 && next(2) == 0 {
                op["inplace"] = json!([[next(fan_out as u64), next(fan_in as u64)]]);
            }
            ops.push(op);
        }
        let last = produced.len() - 1;
        for (i, &idx) in produced.iter().enumerate() {
            if i == last || next(self.output_one_in) == 0 {
                tensors[idx]["kind"] = json!("output");
            }
        }
        if self.shuffle {
            // Adjacent swaps: may break topological order.
            for _ in 0..next(3) {
                let i = next(ops.len() as u64 - 1) as usize;
                ops.swap(i, i + 1);
            }
        }
        json!({"format": "memplan-graph/1", "name": "random", "alignment": 64, "tensors": tensors, "ops": ops})
    }
}
