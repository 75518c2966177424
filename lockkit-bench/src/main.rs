//! `lockkit-bench`: the same workloads against every configured backend, and
//! in the same run against each backend's raw floor.
//!
//! ```sh
//! lockkit-bench --backend memory:// --backend redis://127.0.0.1:6379 --workload w1,w2 --seconds 10s --json out.jsonl --out charts/
//! ```

mod charts;
mod contend;
mod cost;
mod counting;
mod crowd;
mod error;
mod floor;
mod kinds;
mod peers;
#[cfg(feature = "redis")]
mod redis_info;
mod report;
mod workloads;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::crowd::CrowdPlan;
use crate::crowd::wire::CrowdKind;
use crate::error::BenchError;
use crate::report::Row;

#[derive(Parser, Debug)]
#[command(
    name = "lockkit-bench",
    version,
    about = "Compare lockkit backends, each beside its raw floor.",
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// A backend URL; repeat for several (default: memory://).
    #[arg(long = "backend", value_name = "URL")]
    backends: Vec<String>,
    /// Workloads: w1 uncontended, w2 contended, w3 many names, w4 many held,
    /// w5 a semaphore (--clients, --permits), w6 a read-write lock with 90 %
    /// readers (--clients). w5 and w6 are skipped on a backend without the
    /// kind. Not in the default: `crowd` (--crowd-* options: waiters on one
    /// name per kind, spread over processes) and `crowd-once` (the issue's
    /// crowd table: 200 waiters each served once).
    #[arg(long, value_delimiter = ',', default_value = "w1,w2,w3,w4,w5,w6")]
    workload: Vec<String>,
    /// Seconds per measurement.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    seconds: Duration,
    /// Clients in w2, w5 and w6.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Permits of w5's semaphore.
    #[arg(long, default_value_t = 4)]
    permits: u32,
    /// Also write one JSON object per result row here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also write SVG charts into this directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// A short smoke run: 1 s measurements, small w3/w4.
    #[arg(long)]
    quick: bool,
    /// w2 also with each backend's fair queue off (`fair=false`), for the
    /// wait chart's fair and unfair lines.
    #[arg(long)]
    w2_unfair: bool,
    /// `crowd`: the crowd sizes (waiters on one name).
    #[arg(long, value_delimiter = ',', default_value = "16,64,256")]
    crowd_sizes: Vec<usize>,
    /// `crowd`, `crowd-once`: the kinds, `mutex`, `semaphore:N`, `rw` (one
    /// writer in ten waiters).
    #[arg(long, value_delimiter = ',', default_value = "mutex,semaphore:3,rw")]
    crowd_kinds: Vec<CrowdKind>,
    /// `crowd`: worker processes the waiters are spread over (`memory://`: 1).
    #[arg(long, default_value_t = 4)]
    crowd_procs: usize,
    /// `crowd`: clients (`lockkit::connect`) per worker process.
    #[arg(long, default_value_t = 2)]
    crowd_clients: usize,
    /// `crowd`: how long a holder holds (long enough that a semaphore's
    /// permits overlap, short beside a hand-off).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2ms")]
    crowd_section: Duration,
    /// `crowd`, `crowd-once`: the wait bound of each `lock` call.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "120s")]
    crowd_wait: Duration,
    /// `crowd-once`: worker processes.
    #[arg(long, default_value_t = 1)]
    once_procs: usize,
    /// `crowd-once`: clients in all.
    #[arg(long, default_value_t = 8)]
    once_clients: usize,
    /// `crowd-once`: owners (waiters) per client.
    #[arg(long, default_value_t = 25)]
    once_owners: usize,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// One worker process of a crowd (started by `crowd`, `crowd-once`).
    #[command(hide = true)]
    CrowdWorker(crowd::worker::WorkerArgs),
}

struct Plan {
    seconds: Duration,
    w3_clients: Vec<usize>,
    w4_held: usize,
    w4_ttl: Duration,
    crowd: CrowdPlan,
}

/// One backend's rows, and the workloads that failed (reported after the
/// others have run, so one failure does not discard a long run's results).
async fn bench_backend(
    url: &str,
    args: &Args,
    plan: &Plan,
    bar: &ProgressBar,
) -> Result<(Vec<Row>, Vec<String>), BenchError> {
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    let shown = lockkit::raw::redact(url);
    let floor = floor::floor_for(url).await?;
    let peers = peers::peers_for(url);
    let meter = cost::Meter::connect(url).await?;
    for w in &args.workload {
        bar.set_message(format!("{shown} {w}"));
        let outcome: Result<(), BenchError> = async {
            match w.as_str() {
                "w1" => rows.extend(workloads::w1(url, floor.as_deref(), &peers, &meter, plan.seconds).await?),
                "w2" => {
                    rows.extend(contend::w2(url, args.clients, &peers, &meter, plan.seconds).await?);
                    if args.w2_unfair {
                        let unfair = unfair_url(url);
                        rows.extend(contend::w2(&unfair, args.clients, &[], &meter, plan.seconds).await?);
                    }
                }
                "w3" => {
                    for &c in &plan.w3_clients {
                        rows.extend(workloads::w3(url, c, &meter, plan.seconds).await?);
                    }
                }
                "w4" => rows.push(workloads::w4(url, floor.as_deref(), &meter, plan.w4_held, plan.w4_ttl, 3).await?),
                "w5" => rows.extend(kinds::w5(url, args.clients, args.permits, &meter, plan.seconds).await?),
                "w6" => rows.extend(kinds::w6(url, args.clients, &meter, plan.seconds).await?),
                "crowd" => rows.extend(crowd::crowd(url, &plan.crowd).await?),
                "crowd-once" => rows.extend(crowd::crowd_once(url, &plan.crowd).await?),
                other => return Err(format!("unknown workload {other:?} (w1 … w6, crowd, crowd-once)").into()),
            }
            Ok(())
        }
        .await;
        if let Err(e) = outcome {
            failed.push(format!("{shown} {w}: {e}"));
        }
        bar.inc(1);
    }
    Ok((rows, failed))
}

/// `url` with lockkit's fair queue turned off.
fn unfair_url(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}fair=false")
}

async fn run(args: Args) -> Result<(), BenchError> {
    let backends = if args.backends.is_empty() {
        vec!["memory://".to_owned()]
    } else {
        args.backends.clone()
    };
    let mut crowd = CrowdPlan {
        sizes: args.crowd_sizes.clone(),
        kinds: args.crowd_kinds.clone(),
        procs: args.crowd_procs,
        clients: args.crowd_clients,
        section: args.crowd_section,
        seconds: args.seconds,
        wait: args.crowd_wait,
        once_procs: args.once_procs,
        once_clients: args.once_clients,
        once_owners: args.once_owners,
    };
    if args.quick {
        // The smoke run: the smallest crowd, and a served-once crowd of 20.
        crowd.seconds = crowd.seconds.min(Duration::from_secs(1));
        crowd.sizes.truncate(1);
        crowd.once_clients = crowd.once_clients.min(4);
        crowd.once_owners = crowd.once_owners.min(5);
    }
    let plan = if args.quick {
        Plan {
            seconds: args.seconds.min(Duration::from_secs(1)),
            w3_clients: vec![1, 4],
            w4_held: 1_000,
            // The full run's ttl: the smoke run shares two cores with six
            // other backends' runs and their servers, and a 900 ms lease
            // (renewed at 300 ms) left too thin a margin there.
            w4_ttl: Duration::from_secs(3),
            crowd,
        }
    } else {
        Plan {
            seconds: args.seconds,
            w3_clients: vec![1, 4, 16, 64],
            w4_held: 10_000,
            w4_ttl: Duration::from_secs(3),
            crowd,
        }
    };
    let bar = ProgressBar::new((backends.len() * args.workload.len()) as u64).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for url in &backends {
        let (mut r, mut f) = bench_backend(url, &args, &plan, &bar)
            .await
            .map_err(|e| format!("{}: {e}", lockkit::raw::redact(url)))?;
        rows.append(&mut r);
        failed.append(&mut f);
    }
    bar.finish_and_clear();
    report::print_table(&rows, &mut std::io::stdout())?;
    crowd::print_crowd_table(&rows, &mut std::io::stdout())?;
    crowd::print_once_table(&rows, &mut std::io::stdout())?;
    if let Some(path) = &args.json {
        let mut f = std::fs::File::create(path)?;
        report::write_json(&rows, &mut f)?;
    }
    if let Some(dir) = &args.out {
        charts::write(&rows, dir)?;
    }
    if !failed.is_empty() {
        return Err(failed.join("; ").into());
    }
    if let Some(bad) = rows.iter().find(|r| r.counter_exact == Some(false)) {
        return Err(format!(
            "{}: {}: the lock did not exclude (the shared counter is wrong, more permits were held than there are, or a crowd's holds overlapped)",
            bad.backend, bad.workload
        )
        .into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Cmd::CrowdWorker(worker)) = args.cmd {
        return ExitCode::from(crowd::worker::run(worker) as u8);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockkit-bench: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // On a worker thread, as an application's tasks run: a future driven
    // by `block_on` gets every reply from another thread, which slowed the
    // floor's w1 by a quarter and lockkit's by less, flattering the ratio.
    let ran = rt.block_on(async { tokio::spawn(run(args)).await });
    match ran.unwrap_or_else(|e| Err(format!("the run panicked: {e}").into())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockkit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
