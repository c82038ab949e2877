//! Fuzzes the minimalloc buffer CSV reader, `memplan_solver::csv::parse`, then places what it
//! reads with one of the cheap constructive placers (greedy by size, greedy by conflicts,
//! first fit; picked by the input's length, so mutations reach all three). The first input
//! byte picks the default alignment (a power of two, or for bytes ≥ 192 an arbitrary value
//! that the reader must refuse when it is used); the rest is the CSV text.
//!
//! Invariants checked: nothing panics (bad input is a typed `CsvError`); a parsed file is a
//! valid placement problem and survives `csv::write` then `csv::parse`; offsets the file
//! carries are checked without panicking; for at most 128 buffers, the placer's placement
//! passes `PlacementProblem::check` (no two buffers alive together share bytes, alignment
//! kept) with a peak of at least LOAD, or the placer reports a typed overflow.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memplan_solver::csv;
use memplan_solver::placement::{
    first_fit::FirstFit, greedy_by_conflicts::GreedyByConflicts, greedy_by_size::GreedyBySize,
    Placer,
};
use memplan_solver::{Limits, Placement, PlacementError};

/// Largest problem handed to the placers (keeps every execution fast).
const MAX_BUFFERS: usize = 128;

fuzz_target!(|data: &[u8]| {
    let Some((&a, rest)) = data.split_first() else {
        return;
    };
    let default_alignment = match a {
        255 => 0,
        192.. => u64::from(a),
        _ => 1u64 << (a % 64),
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(parsed) = csv::parse(text, default_alignment) else {
        return;
    };
    let problem = &parsed.problem;
    problem.validate().expect("a parsed CSV is a valid problem");
    assert_eq!(parsed.ids.len(), problem.buffers.len());

    // Round trip through the writer (with the file's offsets, or zeros).
    let zeros = Placement {
        offsets: vec![0; problem.buffers.len()],
    };
    let offsets = parsed.offsets.as_ref().unwrap_or(&zeros);
    let written = csv::write(&parsed.ids, problem, offsets);
    let back = csv::parse(&written, 1).expect("the writer's CSV parses");
    assert_eq!(back.ids, parsed.ids);
    assert_eq!(&back.problem, problem);
    assert_eq!(back.offsets.as_ref(), Some(offsets));
    if let Some(given) = &parsed.offsets {
        let _ = problem.check(given);
    }

    if problem.buffers.len() > MAX_BUFFERS {
        return;
    }
    let load = problem.load();
    let placers: [&dyn Placer; 3] = [&GreedyBySize, &GreedyByConflicts, &FirstFit];
    let placer = placers[data.len() % placers.len()];
    match placer.place(problem, &Limits::UNLIMITED) {
        Ok(placement) => {
            let peak = problem
                .check(&placement)
                .unwrap_or_else(|e| panic!("{} placed badly: {e}", placer.name()));
            assert!(peak >= load, "{} peak {peak} < LOAD {load}", placer.name());
        }
        Err(PlacementError::Overflow { .. }) => {}
        Err(e) => panic!("{} failed with {e}", placer.name()),
    }
});
