//! `lockkit demo`: the red-packet budget split made runnable.
//!
//! Several worker processes split a fixed budget, taking random amounts from
//! a shared balance in a file (read, think, write) under one lock. The file
//! accepts a write only with a fencing token above the last it saw. With
//! `--no-lock` the same split runs unguarded and overspends.

use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use lockkit::LockClient;
use tokio::io::AsyncReadExt;

use crate::args::parse_duration;
use crate::error::CliError;
use crate::fenced_store::{FencedStore, WriteOutcome};
use crate::target;

const RESULT_PREFIX: &str = "lockkit-demo-result";

/// Arguments of `lockkit demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// How many worker processes split the budget.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    /// The budget, in cents.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    budget: u64,
    /// The most one take may be (default: budget / 100, at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_take: Option<u64>,
    /// Run the same split without the lock, to show what goes wrong.
    #[arg(long)]
    no_lock: bool,
    /// Lease of the lock.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    ttl: Duration,
}

/// Arguments of the hidden `lockkit demo-worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[arg(long)]
    store: PathBuf,
    #[arg(long)]
    lock_name: String,
    #[arg(long)]
    max_take: u64,
    #[arg(long)]
    no_lock: bool,
    #[arg(long, value_parser = parse_duration)]
    ttl: Duration,
}

#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    taken: u64,
    acquisitions: u64,
    refused: u64,
}

/// One worker: take from the balance until it is empty.
async fn work(
    client: Option<&LockClient>,
    store: &FencedStore,
    lock_name: &str,
    max_take: u64,
    ttl: Duration,
) -> Result<Stats, CliError> {
    let mut stats = Stats::default();
    loop {
        let guard = match client {
            Some(c) => Some(c.lock_with(lock_name, &c.options().ttl(ttl).wait_forever()).await?),
            None => None,
        };
        let token = guard.as_ref().map(|g| g.fencing_token());
        let snapshot = store.read()?;
        if snapshot.balance == 0 {
            if let Some(g) = guard {
                g.unlock().await?;
            }
            return Ok(stats);
        }
        let take = rand::random_range(1..=max_take.min(snapshot.balance));
        // The work between reading and writing: where unguarded workers interleave.
        tokio::time::sleep(Duration::from_micros(rand::random_range(0..1500))).await;
        match store.write(snapshot.balance - take, token)? {
            WriteOutcome::Accepted => stats.taken += take,
            WriteOutcome::Refused => stats.refused += 1,
        }
        if let Some(g) = guard {
            g.unlock().await?;
        }
        stats.acquisitions += 1;
    }
}

/// The hidden worker subcommand: work, then print one result line.
pub async fn worker_process(url: String, args: WorkerArgs) -> Result<ExitCode, CliError> {
    let client = if args.no_lock {
        None
    } else {
        Some(target::connect(&url).await?)
    };
    let store = FencedStore::open(&args.store);
    let s = work(client.as_ref(), &store, &args.lock_name, args.max_take, args.ttl).await?;
    println!(
        "{RESULT_PREFIX} taken={} acquisitions={} refused={}",
        s.taken, s.acquisitions, s.refused
    );
    Ok(ExitCode::SUCCESS)
}

fn parse_result(stdout: &str) -> Option<Stats> {
    let line = stdout.lines().find(|l| l.starts_with(RESULT_PREFIX))?;
    let mut stats = Stats::default();
    for field in line.split_whitespace().skip(1) {
        let (k, v) = field.split_once('=')?;
        let v: u64 = v.parse().ok()?;
        match k {
            "taken" => stats.taken = v,
            "acquisitions" => stats.acquisitions = v,
            "refused" => stats.refused = v,
            _ => return None,
        }
    }
    Some(stats)
}

/// Runs the demo and prints the summary. Exit 0 when the locked split adds
/// up (and always for `--no-lock`, which is expected to go wrong).
pub async fn run(url: String, args: DemoArgs) -> Result<ExitCode, CliError> {
    let client = target::connect(&url).await?; // fail fast on a bad URL
    let backend = client.backend().name();
    let in_process = backend == "memory";
    let max_take = args.max_take.unwrap_or((args.budget / 100).max(1));
    let dir = std::env::temp_dir().join(format!(
        "lockkit-demo-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir)?;
    let store_path = dir.join("balance");
    let store = FencedStore::create(&store_path, args.budget)?;
    let lock_name = format!("lockkit-demo/{:016x}", rand::random::<u64>());
    let guard_text = if args.no_lock {
        "WITHOUT a lock"
    } else {
        "under one lock"
    };
    let who = if in_process {
        "tasks (memory:// is in-process only)"
    } else {
        "processes"
    };
    println!(
        "Splitting a budget of {} among {} worker {who} {guard_text}, backend: {backend}",
        cents(args.budget),
        args.workers
    );

    let started = Instant::now();
    let progress = ProgressBar::new(args.budget).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} cents taken, {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let watcher = {
        let (store, progress, budget) = (store.clone(), progress.clone(), args.budget);
        tokio::spawn(async move {
            loop {
                if let Ok(s) = store.read() {
                    progress.set_position(budget.saturating_sub(s.balance));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let results: Vec<Result<Stats, CliError>> = if in_process {
        let tasks = (0..args.workers).map(|_| {
            let client = (!args.no_lock).then(|| client.with_new_owner());
            let (store, lock_name, ttl) = (store.clone(), lock_name.clone(), args.ttl);
            tokio::spawn(async move { work(client.as_ref(), &store, &lock_name, max_take, ttl).await })
        });
        let mut out = Vec::new();
        for t in tasks.collect::<Vec<_>>() {
            out.push(t.await.map_err(|e| -> CliError { e.into() }).and_then(|r| r));
        }
        out
    } else {
        spawn_processes(&url, &args, &store_path, &lock_name, max_take).await?
    };
    watcher.abort();
    progress.finish_and_clear();
    let elapsed = started.elapsed();

    let mut total = Stats::default();
    let mut stats = Vec::with_capacity(results.len());
    for (i, r) in results.into_iter().enumerate() {
        let s = r.map_err(|e| format!("worker {i}: {e}"))?;
        total.taken += s.taken;
        total.acquisitions += s.acquisitions;
        total.refused += s.refused;
        stats.push(s);
    }
    let share = |n: u64| 100.0 * n as f64 / total.acquisitions.max(1) as f64;
    for (i, s) in stats.iter().enumerate() {
        println!(
            "  worker {i}: took {:>10} in {:>6} acquisitions ({:>5.1} % of them)",
            cents(s.taken),
            s.acquisitions,
            share(s.acquisitions)
        );
    }
    if !args.no_lock && stats.len() > 1 {
        let (min, max) = stats
            .iter()
            .map(|s| s.acquisitions)
            .fold((u64::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
        println!(
            "  shares of the acquisitions: {:.1} % to {:.1} % (an even split is {:.1} %)",
            share(min),
            share(max),
            100.0 / stats.len() as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "  {} acquisitions in {:.2}s = {:.0}/s; stale writes refused by the fencing check: {}",
        total.acquisitions,
        elapsed.as_secs_f64(),
        total.acquisitions as f64 / elapsed.as_secs_f64().max(1e-9),
        total.refused
    );
    let ok = total.taken == args.budget;
    if ok {
        println!(
            "  sum of takes = {} == budget {}: no money lost or invented",
            cents(total.taken),
            cents(args.budget)
        );
    } else if total.taken > args.budget {
        println!(
            "  sum of takes = {} > budget {}: OVERSPENT by {}",
            cents(total.taken),
            cents(args.budget),
            cents(total.taken - args.budget)
        );
    } else {
        println!(
            "  sum of takes = {} < budget {}",
            cents(total.taken),
            cents(args.budget)
        );
    }
    if args.no_lock {
        println!("  (without the lock, workers read the same balance and overwrite each other's writes)");
        return Ok(ExitCode::SUCCESS);
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::error::EXIT_ERROR)
    })
}

async fn spawn_processes(
    url: &str,
    args: &DemoArgs,
    store: &std::path::Path,
    lock_name: &str,
    max_take: u64,
) -> Result<Vec<Result<Stats, CliError>>, CliError> {
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for _ in 0..args.workers {
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg("--url")
            .arg(url)
            .arg("demo-worker")
            .arg("--store")
            .arg(store)
            .arg("--lock-name")
            .arg(lock_name)
            .arg("--max-take")
            .arg(max_take.to_string())
            .arg("--ttl")
            .arg(humantime::format_duration(args.ttl).to_string())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if args.no_lock {
            cmd.arg("--no-lock");
        }
        children.push(cmd.spawn()?);
    }
    let mut out = Vec::new();
    for mut child in children {
        let mut stdout = String::new();
        if let Some(mut pipe) = child.stdout.take() {
            pipe.read_to_string(&mut stdout).await?;
        }
        let status = child.wait().await?;
        out.push(match parse_result(&stdout) {
            Some(s) if status.success() => Ok(s),
            _ => Err(format!("worker process failed ({status})").into()),
        });
    }
    Ok(out)
}

fn cents(c: u64) -> String {
    format!("{}.{:02}", c / 100, c % 100)
}
