//! The CPU backend for parallel plans: each stream is a thread with a FIFO queue, events are
//! real synchronisation (a recorded set under a mutex and a condition variable), and the
//! host issues every instruction in the listed order without waiting.
//!
//! Memory protocol as [`crate::cpu`]: poison on a fresh reservation, on a release and
//! around a workspace. An exec copies its operands out of the arena under the memory lock,
//! runs its kernel on private buffers with no lock held (streams compute concurrently), then
//! writes its outputs back under the lock: a missing event lets another stream's poison or
//! write land between, and the outputs differ from the reference.
//!
//! A race detector watches the interleaving that actually happens: a task that starts while
//! an earlier-issued task touching the same bytes (one of them writing) has not finished
//! fails the run ([`ExecError::Race`]), naming both.
//!
//! Schedules can be perturbed ([`Perturb`]): before each task, and between an exec's read
//! and its write, a stream sleeps for a seeded random time, so that a race the plan allows
//! shows up on some seed. A graph input's data (and its poison) is written by the host at
//! once (`set_stream(None)`).

use super::arena::AlignedBuf;
use super::data;
use super::kernels::cpu::Scratch;
use super::kernels::{Fill, Kernel};
use super::replay::{Backend, Loc, Span, Step};
use super::ExecError;
use std::collections::HashSet;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Seeded random delays per task (see the module doc). Bit `s` of the seed makes stream `s`
/// slow (every task waits between half and all of `max_delay_us`); the others are fast (at
/// most a twentieth of it). Seeds `1..2^K` make each stream fall behind the others in turn:
/// a missing event then lets a fast stream overtake the work it should follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Perturb {
    /// Seed of every stream's delays.
    pub seed: u64,
    /// Longest delay (µs).
    pub max_delay_us: u64,
}

/// The longest a stream waits for an event before the run fails (a plan that waits for an
/// event whose stream is stuck).
const EVENT_TIMEOUT: Duration = Duration::from_secs(120);

struct Mem {
    arena: AlignedBuf,
    weights: AlignedBuf,
    host: AlignedBuf,
}

struct OwnedStep {
    name: String,
    kernel: Kernel,
    inputs: Vec<Loc>,
    outputs: Vec<Span>,
    fills: Vec<Fill>,
    workspace: Option<Span>,
}

enum Task {
    Poison(Span),
    Exec(Box<OwnedStep>),
    SpillOut(Span, u64),
    SpillIn(u64, Span),
    Record(u64),
    Wait(u64),
}

impl Task {
    /// The arena ranges the task reads and writes (`true`: writes).
    fn accesses(&self) -> Vec<(Span, bool)> {
        match self {
            Task::Poison(s) | Task::SpillIn(_, s) | Task::SpillOut(s, _) => vec![(*s, true)],
            Task::Exec(st) => {
                let mut v: Vec<(Span, bool)> = st
                    .inputs
                    .iter()
                    .filter_map(|l| match l {
                        Loc::Arena(s) => Some((*s, false)),
                        Loc::Weights(_) => None,
                    })
                    .collect();
                v.extend(st.outputs.iter().map(|s| (*s, true)));
                v.extend(st.workspace.map(|s| (s, true)));
                v
            }
            Task::Record(_) | Task::Wait(_) => Vec::new(),
        }
    }

    fn describe(&self, stream: Option<u32>) -> String {
        let on = stream.map_or("the host".to_string(), |s| format!("stream {s}"));
        match self {
            Task::Exec(st) => format!("op {:?} on {on}", st.name),
            Task::Poison(s) => format!("the poison of [{}, {}) on {on}", s.0, s.1),
            Task::SpillOut(s, _) => format!("the spill_out of [{}, {}) on {on}", s.0, s.1),
            Task::SpillIn(_, s) => format!("the spill_in of [{}, {}) on {on}", s.0, s.1),
            Task::Record(e) => format!("record_event {e} on {on}"),
            Task::Wait(e) => format!("wait_event {e} on {on}"),
        }
    }
}

/// An issued task's memory accesses, until it completes (the race detector).
struct InFlight {
    id: u64,
    accesses: Vec<(Span, bool)>,
    what: String,
}

/// State shared by the host and the stream threads.
struct Shared {
    mem: Mutex<Mem>,
    events: Mutex<HashSet<u64>>,
    event_cv: Condvar,
    /// Tasks issued and not finished.
    pending: Mutex<usize>,
    pending_cv: Condvar,
    /// The first failure of any stream.
    error: Mutex<Option<ExecError>>,
    /// Largest kernel scratch plus operand copies of one exec (bytes).
    scratch_peak: Mutex<u64>,
    /// Issued tasks that touch the arena and have not completed, by issue order.
    inflight: Mutex<Vec<InFlight>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking stream thread cannot leave the data half-written in a way that matters
    // here: the run reports its error; take the guard either way.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The multi-threaded CPU backend (module doc).
pub struct ThreadedCpu {
    shared: Arc<Shared>,
    queues: Vec<Option<Sender<(u64, Task)>>>,
    next_id: u64,
    threads: Vec<JoinHandle<()>>,
    current: Option<u32>,
    perturb: Option<Perturb>,
    allocated: [u64; 3],
}

fn us(span: Span) -> (usize, usize) {
    (span.0 as usize, span.1 as usize)
}

impl ThreadedCpu {
    /// Allocates the three regions; `weights` fills the weights region.
    pub fn new(
        arena_bytes: u64,
        weights_bytes: u64,
        host_bytes: u64,
        weights: impl FnOnce(&mut [u8]) -> Result<(), ExecError>,
        perturb: Option<Perturb>,
    ) -> Result<Self, ExecError> {
        let mut mem = Mem {
            arena: AlignedBuf::new(arena_bytes, "arena")?,
            weights: AlignedBuf::new(weights_bytes, "weights region")?,
            host: AlignedBuf::new(host_bytes, "host spill pool")?,
        };
        weights(mem.weights.bytes_mut())?;
        let allocated = [
            mem.arena.allocated(),
            mem.weights.allocated(),
            mem.host.allocated(),
        ];
        Ok(ThreadedCpu {
            shared: Arc::new(Shared {
                mem: Mutex::new(mem),
                events: Mutex::new(HashSet::new()),
                event_cv: Condvar::new(),
                pending: Mutex::new(0),
                pending_cv: Condvar::new(),
                error: Mutex::new(None),
                scratch_peak: Mutex::new(0),
                inflight: Mutex::new(Vec::new()),
            }),
            queues: Vec::new(),
            threads: Vec::new(),
            current: Some(0),
            next_id: 0,
            perturb,
            allocated,
        })
    }

    /// Bytes allocated for the arena, the weights region and the host pool.
    pub fn allocated(&self) -> [u64; 3] {
        self.allocated
    }

    /// Largest kernel scratch plus operand copies of one exec (bytes).
    pub fn scratch_bytes(&self) -> u64 {
        *lock(&self.shared.scratch_peak)
    }

    /// Streams started.
    pub fn streams(&self) -> usize {
        self.queues.iter().filter(|q| q.is_some()).count()
    }

    /// Queues `task` on the current stream, or runs it at once on the host.
    fn issue(&mut self, task: Task) -> Result<(), ExecError> {
        let id = self.next_id;
        self.next_id += 1;
        let accesses = task.accesses();
        if !accesses.is_empty() {
            lock(&self.shared.inflight).push(InFlight {
                id,
                accesses,
                what: task.describe(self.current),
            });
        }
        let Some(s) = self.current else {
            run(&self.shared, id, task, &mut Scratch::default(), &mut None);
            return self.failed();
        };
        let s = s as usize;
        if self.queues.len() <= s {
            self.queues.resize_with(s + 1, || None);
        }
        if self.queues[s].is_none() {
            let (tx, rx) = channel::<(u64, Task)>();
            let shared = Arc::clone(&self.shared);
            let mut rng = self.perturb.map(|p| {
                let slow = (p.seed >> (s % 64)) & 1 == 1;
                let (lo, hi) = if slow {
                    (p.max_delay_us / 2, p.max_delay_us)
                } else {
                    (0, p.max_delay_us / 20)
                };
                (data::mix64(p.seed ^ data::mix64(s as u64 + 1)) | 1, lo, hi)
            });
            let handle = std::thread::Builder::new()
                .name(format!("memplan-stream-{s}"))
                .spawn(move || {
                    let mut scratch = Scratch::default();
                    for (id, task) in rx {
                        delay(&mut rng);
                        run(&shared, id, task, &mut scratch, &mut rng);
                        let mut p = lock(&shared.pending);
                        *p -= 1;
                        shared.pending_cv.notify_all();
                    }
                })
                .map_err(|e| ExecError::Device(format!("cannot start stream {s}: {e}")))?;
            self.queues[s] = Some(tx);
            self.threads.push(handle);
        }
        *lock(&self.shared.pending) += 1;
        let sent = self.queues[s].as_ref().map(|q| q.send((id, task)));
        if !matches!(sent, Some(Ok(()))) {
            *lock(&self.shared.pending) -= 1;
            return Err(ExecError::Device(format!("stream {s} stopped")));
        }
        Ok(())
    }

    fn failed(&self) -> Result<(), ExecError> {
        match lock(&self.shared.error).clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Sleeps a seeded random time in `[lo, hi]` µs (xorshift), when perturbed.
fn delay(rng: &mut Option<(u64, u64, u64)>) {
    if let Some((state, lo, hi)) = rng {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        if *hi > 0 {
            let d = *lo + *state % (*hi - *lo + 1);
            std::thread::sleep(Duration::from_micros(d));
        }
    }
}

/// The race detector: task `id` starts while a task issued before it (listed earlier) that
/// touches the same bytes, one of the two writing, has not completed. In a valid parallel
/// plan such a pair is ordered by stream order or events and cannot overlap in time.
fn check_race(shared: &Shared, id: u64) -> Result<(), ExecError> {
    let inflight = lock(&shared.inflight);
    let Some(me) = inflight.iter().find(|f| f.id == id) else {
        return Ok(());
    };
    for f in inflight.iter().take_while(|f| f.id < id) {
        for &(a, wa) in &f.accesses {
            for &(b, wb) in &me.accesses {
                if (wa || wb) && a.0 < b.1 && b.0 < a.1 {
                    return Err(ExecError::Race(format!(
                        "{} started while {}, issued before it, had not finished, and both \
                         touch bytes [{}, {}) (one writes): the plan lacks an event between them",
                        me.what,
                        f.what,
                        a.0.max(b.0),
                        a.1.min(b.1)
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Runs one task; a failure is kept in `shared.error` (later execs are skipped, events are
/// still recorded so that no stream waits forever).
fn run(
    shared: &Shared,
    id: u64,
    task: Task,
    scratch: &mut Scratch,
    rng: &mut Option<(u64, u64, u64)>,
) {
    if let Err(e) = check_race(shared, id) {
        lock(&shared.error).get_or_insert(e);
    }
    let failed = lock(&shared.error).is_some();
    let r = match task {
        Task::Record(e) => {
            lock(&shared.events).insert(e);
            shared.event_cv.notify_all();
            Ok(())
        }
        Task::Wait(e) => {
            let mut set = lock(&shared.events);
            let mut r = Ok(());
            while !set.contains(&e) {
                let (g, t) = shared
                    .event_cv
                    .wait_timeout(set, EVENT_TIMEOUT)
                    .unwrap_or_else(|e| e.into_inner());
                set = g;
                if t.timed_out() && !set.contains(&e) {
                    r = Err(ExecError::Device(format!(
                        "event {e} was not recorded within {} s",
                        EVENT_TIMEOUT.as_secs()
                    )));
                    break;
                }
            }
            r
        }
        _ if failed => Ok(()),
        Task::Poison(span) => {
            let (lo, hi) = us(span);
            data::poison(&mut lock(&shared.mem).arena.bytes_mut()[lo..hi]);
            Ok(())
        }
        Task::SpillOut(span, host) => {
            let (lo, hi) = us(span);
            let h = host as usize;
            let mut m = lock(&shared.mem);
            let Mem { arena, host, .. } = &mut *m;
            host.bytes_mut()[h..h + (hi - lo)].copy_from_slice(&arena.bytes()[lo..hi]);
            data::poison(&mut arena.bytes_mut()[lo..hi]);
            Ok(())
        }
        Task::SpillIn(host, span) => {
            let (lo, hi) = us(span);
            let h = host as usize;
            let mut m = lock(&shared.mem);
            let Mem { arena, host, .. } = &mut *m;
            let src = &mut host.bytes_mut()[h..h + (hi - lo)];
            arena.bytes_mut()[lo..hi].copy_from_slice(src);
            data::poison(src);
            Ok(())
        }
        Task::Exec(step) => exec(shared, &step, scratch, rng),
    };
    if let Err(e) = r {
        lock(&shared.error).get_or_insert(e);
    }
    lock(&shared.inflight).retain(|f| f.id != id);
}

/// Read the operands (locked), compute (unlocked), write the outputs (locked).
fn exec(
    shared: &Shared,
    step: &OwnedStep,
    scratch: &mut Scratch,
    rng: &mut Option<(u64, u64, u64)>,
) -> Result<(), ExecError> {
    let inputs: Vec<Vec<u8>> = {
        let mut m = lock(&shared.mem);
        if let Some(ws) = step.workspace {
            let (lo, hi) = us(ws);
            data::poison(&mut m.arena.bytes_mut()[lo..hi]);
        }
        step.inputs
            .iter()
            .map(|l| match l {
                Loc::Weights(s) => {
                    let (lo, hi) = us(*s);
                    m.weights.bytes()[lo..hi].to_vec()
                }
                Loc::Arena(s) => {
                    let (lo, hi) = us(*s);
                    m.arena.bytes()[lo..hi].to_vec()
                }
            })
            .collect()
    };
    delay(rng);
    let (outputs, copied) = super::cpu::run_on_copies(
        &step.kernel,
        &step.name,
        &step.fills,
        &inputs,
        &step.outputs,
        step.workspace,
        scratch,
    )
    .map_err(|message| ExecError::Kernel {
        op: step.name.clone(),
        message,
    })?;
    {
        let mut peak = lock(&shared.scratch_peak);
        *peak = (*peak).max(copied + scratch.peak_bytes);
    }
    let mut m = lock(&shared.mem);
    for (s, v) in step.outputs.iter().zip(&outputs) {
        let (lo, hi) = us(*s);
        m.arena.bytes_mut()[lo..hi].copy_from_slice(v);
    }
    if let Some(w) = step.workspace {
        let (lo, hi) = us(w);
        data::poison(&mut m.arena.bytes_mut()[lo..hi]);
    }
    Ok(())
}

impl Backend for ThreadedCpu {
    fn poison(&mut self, span: Span) -> Result<(), ExecError> {
        self.issue(Task::Poison(span))
    }

    fn load(&mut self, span: Span, bytes: &[u8]) -> Result<(), ExecError> {
        // Graph inputs: written by the host at once (the replay issues them on the host).
        let (lo, hi) = us(span);
        lock(&self.shared.mem).arena.bytes_mut()[lo..hi].copy_from_slice(bytes);
        Ok(())
    }

    fn exec(&mut self, step: &Step<'_>) -> Result<(), ExecError> {
        self.issue(Task::Exec(Box::new(OwnedStep {
            name: step.name.to_string(),
            kernel: step.kernel.clone(),
            inputs: step.inputs.clone(),
            outputs: step.outputs.clone(),
            fills: step.fills.clone(),
            workspace: step.workspace,
        })))
    }

    fn spill_out(&mut self, span: Span, host: u64) -> Result<(), ExecError> {
        self.issue(Task::SpillOut(span, host))
    }

    fn spill_in(&mut self, host: u64, span: Span) -> Result<(), ExecError> {
        self.issue(Task::SpillIn(host, span))
    }

    fn finish(&mut self) -> Result<(), ExecError> {
        let mut p = lock(&self.shared.pending);
        while *p > 0 {
            p = self
                .shared
                .pending_cv
                .wait(p)
                .unwrap_or_else(|e| e.into_inner());
        }
        drop(p);
        self.failed()
    }

    fn read(&mut self, span: Span) -> Result<Vec<u8>, ExecError> {
        let (lo, hi) = us(span);
        Ok(lock(&self.shared.mem).arena.bytes()[lo..hi].to_vec())
    }

    fn set_stream(&mut self, stream: Option<u32>) -> Result<(), ExecError> {
        self.current = stream;
        Ok(())
    }

    fn record_event(&mut self, event: u64) -> Result<(), ExecError> {
        self.issue(Task::Record(event))
    }

    fn wait_event(&mut self, event: u64) -> Result<(), ExecError> {
        self.issue(Task::Wait(event))
    }
}

impl Drop for ThreadedCpu {
    fn drop(&mut self) {
        self.queues.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
