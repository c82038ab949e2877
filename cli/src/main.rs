//! The `memplan` command line: plan, check, place, stats, instantiate and reserve (symbolic
//! plans), run
//! (execute a plan and compare with a reference run), and serve (the HTTP service of the `memplan-api` crate).
//!
//! This binary lives in its own crate because `memplan-api` depends on the `memplan` library:
//! a `serve` command in the library's own package would make the two packages depend on each
//! other, which Cargo does not allow.
//!
//! Layout: [`args`] holds the clap definitions (flags and help texts), [`commands`] one file
//! per command over the library's pipeline, [`common`] what they share (reading inputs, the
//! bad-input error) and [`output`] how they write files (never over an input, never half a
//! file). Exit codes: 0 success, 1 a negative verdict (invalid
//! plan, outputs differ, no fit), 2 bad input, 3 any other error.

mod args;
mod commands;
mod common;
mod output;

use args::{Cli, Command};
use clap::Parser;
use common::BadInput;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        end_quietly_on_a_closed_pipe();
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("memplan: {e:#}");
            if e.downcast_ref::<BadInput>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(3)
            }
        }
    }
}

/// Gives SIGPIPE back its default action, so that a command whose reader goes away
/// (`memplan run … | head -1`) ends as Unix tools do, killed by the signal without a word,
/// instead of panicking in `println!` (exit 101). Rust ignores the signal so that writes
/// return an error instead; `serve` keeps that, for its sockets.
#[cfg(unix)]
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: `signal` with a constant handler, called once at start-up before any thread
    // exists; it changes only the disposition of SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn end_quietly_on_a_closed_pipe() {}

/// Runs the command the command line names.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plan(a) => commands::plan::plan(a),
        Command::Check(a) => commands::check::check(a),
        Command::Place(a) => commands::place::place(a),
        Command::Import(a) => commands::import::import(a),
        Command::Stats(a) => commands::stats::stats(a),
        Command::Zoo(a) => commands::zoo::zoo(a),
        Command::Serve(a) => commands::serve::serve(a),
        Command::Run(a) => commands::run::run(a),
        Command::Instantiate(a) => commands::instantiate::instantiate(a),
        Command::Reserve(a) => commands::reserve::reserve(a),
    }
}
