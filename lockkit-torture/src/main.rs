//! `lockkit-torture`: P worker processes × T tasks hold a few lock names
//! while a seeded chaos schedule SIGKILLs holders, SIGSTOPs them past their
//! lease (then SIGCONTs them), restarts the server and restarts killed
//! workers. Every worker logs each grant, renewal and release with its
//! fencing token, `CLOCK_MONOTONIC` time and validity deadline; the checker
//! merges the logs and proves per name that no two holds overlap while both
//! are valid, that tokens strictly increase, and that a killed holder's name
//! came free within its bound. Any violation: exit code 1.
//!
//! ```sh
//! # short: SQLite (no server, no restarts)
//! cargo run -p lockkit-torture -- run --backend "sqlite:///tmp/t.db?sweep_interval=1s" \
//!     --procs 3 --tasks 2 --names 3 --seconds 20s --ttl 2s --log-dir /tmp/torture
//! # long, every backend built in, restarting a private MariaDB (never the shared one)
//! export LOCKKIT_SERVICES_DIR=$PWD/target/services-torture LOCKKIT_MYSQL_PORT=13318
//! scripts/services up mysql
//! cargo run --release -p lockkit-torture --features full -- run \
//!     --backend "mysql://lockkit:lockkit@127.0.0.1:13318/lockkit?sweep_interval=1s" \
//!     --procs 3 --tasks 2 --names 3 --seconds 120s --seed 7 --ttl 2s --log-dir /tmp/torture-mysql \
//!     --restart-cmd "scripts/services down mysql && scripts/services up mysql"
//! # the test file's runs, each 120 s
//! LOCKKIT_TORTURE_LONG=1 cargo test --release -p lockkit-torture --features full --test torture
//! # check an existing run's logs again
//! cargo run -p lockkit-torture -- check --log-dir /tmp/torture-mysql
//! ```
//!
//! The summary line: `torture: … grants=… holds=… kills=… pauses=…
//! server_restarts=… worker_restarts=… violations=0`.

mod chaos;
mod check;
mod faults;
mod log;
mod rules;
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
