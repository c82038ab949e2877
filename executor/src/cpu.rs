//! The CPU backend: the arena is **one** 256-byte-aligned allocation of `arena_bytes`, the
//! weights region one allocation of `weights_bytes`, the spill pool one allocation of
//! `host_bytes`; all start poisoned. An exec borrows its operands straight out of the arena
//! when their ranges are pairwise disjoint (always so in a valid plan without in-place
//! sharing); otherwise (in-place pairs, or a broken plan) it copies the inputs out, runs the
//! kernel into private buffers and copies the outputs back — defined behaviour either way,
//! with "read all inputs, then write all outputs" semantics.

use super::arena::{split_disjoint, AlignedBuf};
use super::data;
use super::kernels::cpu::{self as kernels, Operands, Scratch};
use super::replay::{Backend, Loc, Span, Step};
use super::ExecError;

/// Host memory of a plan run.
pub struct CpuBackend {
    /// The arena.
    pub arena: AlignedBuf,
    /// The weights region.
    pub weights: AlignedBuf,
    /// The spill pool.
    pub host: AlignedBuf,
    /// Kernel scratch (outside the plan's memory).
    pub scratch: Scratch,
    /// Bytes of private copies made for overlapping operands (largest at once).
    pub copy_peak: u64,
}

impl CpuBackend {
    /// Allocates the three regions.
    pub fn new(arena_bytes: u64, weights_bytes: u64, host_bytes: u64) -> Result<Self, ExecError> {
        Ok(CpuBackend {
            arena: AlignedBuf::new(arena_bytes, "arena")?,
            weights: AlignedBuf::new(weights_bytes, "weights region")?,
            host: AlignedBuf::new(host_bytes, "host spill pool")?,
            scratch: Scratch::default(),
            copy_peak: 0,
        })
    }
}

fn us(span: Span) -> (usize, usize) {
    // Spans were checked against the region sizes, which fit in usize (they were allocated).
    (span.0 as usize, span.1 as usize)
}

/// Runs `kernel` on private copies: the `inputs` already read, zeroed outputs of the
/// `outputs` spans' sizes and a poisoned workspace of `workspace`'s size. Returns the
/// outputs and the bytes the copies take (what an exec needs when its operands overlap, or
/// when another stream may touch the arena meanwhile: [`crate::threads`]).
pub(crate) fn run_on_copies(
    kernel: &super::kernels::Kernel,
    name: &str,
    fills: &[super::kernels::Fill],
    inputs: &[Vec<u8>],
    outputs: &[Span],
    workspace: Option<Span>,
    scratch: &mut Scratch,
) -> Result<(Vec<Vec<u8>>, u64), String> {
    let mut outs: Vec<Vec<u8>> = outputs
        .iter()
        .map(|s| vec![0u8; (s.1 - s.0) as usize])
        .collect();
    let mut ws: Option<Vec<u8>> = workspace.map(|s| {
        let mut v = vec![0u8; (s.1 - s.0) as usize];
        data::poison(&mut v);
        v
    });
    let copied = inputs
        .iter()
        .chain(&outs)
        .map(|v| v.len() as u64)
        .sum::<u64>()
        + ws.as_ref().map_or(0, |v| v.len() as u64);
    let in_refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    kernels::exec(
        kernel,
        Operands {
            name,
            inputs: &in_refs,
            outputs: &mut out_refs,
            fills,
            workspace: ws.as_deref_mut(),
        },
        scratch,
    )?;
    Ok((outs, copied))
}

fn kernel_err(step: &Step<'_>, message: String) -> ExecError {
    ExecError::Kernel {
        op: step.name.to_string(),
        message,
    }
}

impl Backend for CpuBackend {
    fn poison(&mut self, span: Span) -> Result<(), ExecError> {
        let (lo, hi) = us(span);
        data::poison(&mut self.arena.bytes_mut()[lo..hi]);
        Ok(())
    }

    fn load(&mut self, span: Span, bytes: &[u8]) -> Result<(), ExecError> {
        let (lo, hi) = us(span);
        self.arena.bytes_mut()[lo..hi].copy_from_slice(bytes);
        Ok(())
    }

    fn exec(&mut self, step: &Step<'_>) -> Result<(), ExecError> {
        if let Some(ws) = step.workspace {
            self.poison(ws)?;
        }
        // Distinct arena ranges: each input range once, each output, the workspace.
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        enum Role {
            In,
            Out(usize),
            Ws,
        }
        let mut ranges: Vec<((usize, usize), Role)> = Vec::new();
        for l in &step.inputs {
            if let Loc::Arena(s) = l {
                let r = (us(*s), Role::In);
                if !ranges.contains(&r) {
                    ranges.push(r);
                }
            }
        }
        for (k, s) in step.outputs.iter().enumerate() {
            ranges.push((us(*s), Role::Out(k)));
        }
        if let Some(ws) = step.workspace {
            ranges.push((us(ws), Role::Ws));
        }
        ranges.sort_unstable();
        let spans: Vec<(usize, usize)> = ranges.iter().map(|r| r.0).collect();
        let CpuBackend {
            arena,
            weights,
            scratch,
            ..
        } = self;
        let wbytes = weights.bytes();
        if let Some(parts) = split_disjoint(arena.bytes_mut(), &spans) {
            let mut ins_by_range: Vec<((usize, usize), &[u8])> = Vec::new();
            let mut outs: Vec<Option<&mut [u8]>> = (0..step.outputs.len()).map(|_| None).collect();
            let mut ws: Option<&mut [u8]> = None;
            for (part, (span, role)) in parts.into_iter().zip(&ranges) {
                match role {
                    Role::In => ins_by_range.push((*span, part)),
                    Role::Out(k) => outs[*k] = Some(part),
                    Role::Ws => ws = Some(part),
                }
            }
            let inputs: Vec<&[u8]> = step
                .inputs
                .iter()
                .map(|l| match l {
                    Loc::Weights(s) => {
                        let (lo, hi) = us(*s);
                        &wbytes[lo..hi]
                    }
                    Loc::Arena(s) => {
                        let key = us(*s);
                        ins_by_range
                            .iter()
                            .find(|(r, _)| *r == key)
                            .map(|(_, b)| *b)
                            .unwrap_or(&[])
                    }
                })
                .collect();
            let mut outputs: Vec<&mut [u8]> = outs.into_iter().flatten().collect();
            if outputs.len() != step.outputs.len() {
                return Err(kernel_err(step, "an output range was lost".into()));
            }
            kernels::exec(
                step.kernel,
                Operands {
                    name: step.name,
                    inputs: &inputs,
                    outputs: &mut outputs,
                    fills: &step.fills,
                    workspace: ws,
                },
                scratch,
            )
            .map_err(|m| kernel_err(step, m))?;
        } else {
            // Overlapping operands: read everything first, then write.
            let abytes = arena.bytes();
            let inputs: Vec<Vec<u8>> = step
                .inputs
                .iter()
                .map(|l| match l {
                    Loc::Weights(s) => {
                        let (lo, hi) = us(*s);
                        wbytes[lo..hi].to_vec()
                    }
                    Loc::Arena(s) => {
                        let (lo, hi) = us(*s);
                        abytes[lo..hi].to_vec()
                    }
                })
                .collect();
            let (outputs, copied) = run_on_copies(
                step.kernel,
                step.name,
                &step.fills,
                &inputs,
                &step.outputs,
                step.workspace,
                &mut self.scratch,
            )
            .map_err(|m| kernel_err(step, m))?;
            self.copy_peak = self.copy_peak.max(copied);
            let abytes = self.arena.bytes_mut();
            for (s, v) in step.outputs.iter().zip(&outputs) {
                let (lo, hi) = us(*s);
                abytes[lo..hi].copy_from_slice(v);
            }
        }
        if let Some(ws) = step.workspace {
            self.poison(ws)?;
        }
        Ok(())
    }

    fn spill_out(&mut self, span: Span, host: u64) -> Result<(), ExecError> {
        let (lo, hi) = us(span);
        let h = host as usize;
        self.host.bytes_mut()[h..h + (hi - lo)].copy_from_slice(&self.arena.bytes()[lo..hi]);
        self.poison(span)
    }

    fn spill_in(&mut self, host: u64, span: Span) -> Result<(), ExecError> {
        let (lo, hi) = us(span);
        let h = host as usize;
        let src = &mut self.host.bytes_mut()[h..h + (hi - lo)];
        self.arena.bytes_mut()[lo..hi].copy_from_slice(src);
        data::poison(src);
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ExecError> {
        Ok(())
    }

    fn read(&mut self, span: Span) -> Result<Vec<u8>, ExecError> {
        let (lo, hi) = us(span);
        Ok(self.arena.bytes()[lo..hi].to_vec())
    }
}
