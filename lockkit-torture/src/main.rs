//! `lockkit-torture`: P worker processes × T tasks hold a few lock names
//! while a seeded chaos schedule SIGKILLs holders, SIGSTOPs them past their
//! lease (then SIGCONTs them), restarts the server, restarts killed
//! workers, and (with `--proxy`, `--node-faults`) slows servers past their
//! response timeout, loses replies after the command ran, resets
//! connections, and pauses, kills-and-empties or wipes one Redlock node at
//! a time. `--shared-owners` gives pairs of processes the same owner ids.
//! Every worker logs each grant (with its hold count), renewal, release and
//! unlock outcome with its fencing token, `CLOCK_MONOTONIC` time and
//! validity deadline; after the run every name is inspected through the
//! backend. The checker merges the logs and proves per name that no two
//! holds of different owners overlap while both are valid, that tokens
//! strictly increase over distinct holds (a re-entry keeps its hold's
//! token), that hold counts balance, that a killed holder's name came free
//! within its bound, and that every name is free after the run. Any
//! violation: exit code 1.
//!
//! ```sh
//! # short: SQLite (no server, no restarts), shared owners
//! cargo run -p lockkit-torture -- run --backend "sqlite:///tmp/t.db?sweep_interval=1s" \
//!     --procs 4 --tasks 2 --names 3 --seconds 20s --ttl 2s --shared-owners --log-dir /tmp/torture
//! # long: Redis through fault proxies, until 100,000 grants
//! cargo run --release -p lockkit-torture --features full -- run --backend redis://127.0.0.1:6379 \
//!     --procs 4 --tasks 4 --names 8 --ttl 1s --short-hold 2ms --long-holds 0.001 --gap 2ms \
//!     --chaos-every 4s --proxy --grants 100000 --seconds 1800s --log-dir /tmp/torture-redis
//! # the test file's runs, each until 100,000 grants
//! LOCKKIT_TORTURE_LONG=1 cargo test --release -p lockkit-torture --features full --test torture
//! # check an existing run's logs again
//! cargo run -p lockkit-torture -- check --log-dir /tmp/torture-redis
//! ```
//!
//! The summary line: `torture: … grants=… holds=… kills=… pauses=…
//! server_restarts=… worker_restarts=… latency=… lose_replies=… reset=…
//! pause=… kill=… wipe=… shared_reentries=… unlocks=… inspected=…
//! violations=0`.

mod chaos;
mod check;
mod faults;
mod kind;
mod log;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "lockkit-torture",
    version,
    about = "Cross-process lock torture with a seeded chaos schedule."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run workers under chaos, then check their logs.
    Run(chaos::RunArgs),
    /// Check the logs of an earlier run.
    Check {
        /// The run's log directory.
        #[arg(long)]
        log_dir: PathBuf,
    },
    /// One worker process (started by `run`).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

fn report(result: Result<check::Report, String>, what: &str) -> ExitCode {
    match result {
        Ok(r) => {
            for v in &r.violations {
                println!("VIOLATION {v}");
            }
            println!("torture: {what} {}", r.summary());
            if r.violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("torture: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::Run(args) => report(chaos::run(&args), &format!("backend={}", args.backend)),
        Cmd::Check { log_dir } => report(chaos::check_dir(&log_dir), &format!("logs={}", log_dir.display())),
        Cmd::Worker(args) => ExitCode::from(worker::run(args) as u8),
    }
}
