//! `lockkit`: distributed locks from the shell.

mod admin;
mod args;
mod demo;
mod error;
mod exec;
mod fenced_store;
mod status;
mod target;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::EXIT_ERROR;

#[derive(Parser, Debug)]
#[command(name = "lockkit", version, about = "Distributed locks from the shell: Redis, SQL, memory.", long_about = None)]
struct Cli {
    /// Backend URL (else $LOCKKIT_URL, else an SQLite file in the user's state directory).
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,

    /// Config file with `lock = "URL"` or a `[lock]` table (default:
    /// $XDG_CONFIG_HOME/lockkit/config.toml when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<std::path::PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command while holding a lock, like flock(1) across machines.
    ///
    /// Example: lockkit exec nightly-report --wait 10s -- ./report.sh --full
    ///
    /// With --permits N, at most N such commands run at once (a semaphore);
    /// with --shared they share a read-write lock with each other but not
    /// with a --write one: lockkit exec encoder --permits 4 -- ./encode.sh
    ///
    /// A name is one lock whatever the kind: `exec db -- migrate` and
    /// `exec db --shared -- backup` never run at the same time; the one
    /// that comes second waits (--no-wait: exit 75). `status db` says which
    /// kind holds it.
    ///
    /// The command gets LOCKKIT_FENCING_TOKEN and LOCKKIT_LOCK_NAME in its
    /// environment. Its exit code is passed through; 75 means the lock could
    /// not be had in time; 76 means the lock was lost mid-run and the command
    /// was sent SIGTERM (then SIGKILL after --grace).
    Exec(exec::ExecArgs),
    /// Show who holds a name: the lock, the semaphore's permits, the
    /// read-write lock's readers and writer (what the backend has).
    ///
    /// Example: lockkit status order:42 --json
    Status(status::StatusArgs),
    /// List held locks (where the backend can enumerate them).
    ///
    /// Example: lockkit list --prefix order: --json
    List(admin::ListArgs),
    /// Remove a lock's hold whoever holds it: the operator's override.
    ///
    /// Example: lockkit release order:42 --force
    Release(admin::ReleaseArgs),
    /// Split a budget among worker processes under a lock (the red-packet demo).
    ///
    /// Example: lockkit demo --workers 4 --budget 10000
    ///
    /// Workers take random amounts from a shared balance kept in a file,
    /// read-modify-write, under the lock; the file store accepts a write only
    /// with a fencing token higher than the last it saw. --no-lock runs the
    /// same split without the lock to show the overspend.
    Demo(demo::DemoArgs),
    /// One demo worker process (started by `lockkit demo`).
    #[command(hide = true)]
    DemoWorker(demo::WorkerArgs),
}

/// Prints an error and its causes on one line (a cause its predecessor
/// already quotes is not repeated).
fn report(e: &(dyn std::error::Error + 'static)) {
    eprintln!("lockkit: {}", lockkit::one_line(e));
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let url = match target::resolve(cli.url, cli.config.as_deref()) {
        Ok(url) => url,
        Err(e) => {
            report(e.as_ref());
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let result = match cli.command {
        Command::Exec(args) => exec::run(url, args).await,
        Command::Status(args) => status::run(url, args).await,
        Command::List(args) => admin::list(url, args).await,
        Command::Release(args) => admin::release(url, args).await,
        Command::Demo(args) => demo::run(url, args).await,
        Command::DemoWorker(args) => demo::worker_process(url, args).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            report(e.as_ref());
            ExitCode::from(EXIT_ERROR)
        }
    }
}
