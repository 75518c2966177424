//! A crowd's worker process (`lockkit-bench crowd-worker`, started by the
//! coordinator): its share of the waiters over a few clients of its own,
//! each waiter an owner of its own. It says `Ready` on stdout once
//! connected, reads the coordinator's `Go` from stdin, runs its waiters
//! and prints their tallies as one JSON line.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use lockkit::{LockClient, LockError, LockGuard, LockKind, LockOptions};

use super::wire::{CrowdKind, Go, Grant, Ready, Waiter, error_chain, is_writer, mono_ns};
use crate::error::BenchError;

/// What the coordinator tells a worker (see [`super::CrowdPlan`]).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The backend URL.
    #[arg(long)]
    pub backend: String,
    /// The one lock name of the crowd.
    #[arg(long)]
    pub name: String,
    /// `mutex`, `semaphore:N` or `rw`.
    #[arg(long)]
    pub kind: CrowdKind,
    /// This worker's waiters are `worker`, `worker + procs`, … below `waiters`.
    #[arg(long)]
    pub worker: usize,
    /// Worker processes of the crowd.
    #[arg(long)]
    pub procs: usize,
    /// Waiters of the whole crowd.
    #[arg(long)]
    pub waiters: usize,
    /// Clients (`lockkit::connect`) of this worker; its waiters take turns.
    #[arg(long)]
    pub clients: usize,
    /// How long a holder keeps its hold (0: a yield).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub section: Duration,
    /// The wait bound of each `lock` call.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub wait: Duration,
    /// Each waiter asks once (else in a loop until the end).
    #[arg(long)]
    pub once: bool,
}

/// Runs the worker; its exit code.
pub fn run(args: WorkerArgs) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("crowd worker: no runtime: {e}");
            return 3;
        }
    };
    match rt.block_on(work(args)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("crowd worker: {e}");
            3
        }
    }
}

fn say(line: &impl serde::Serialize) -> Result<(), BenchError> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, line)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

async fn work(args: WorkerArgs) -> Result<(), BenchError> {
    let mut clients = Vec::with_capacity(args.clients);
    for _ in 0..args.clients.max(1) {
        match lockkit::connect(&args.backend).await {
            Ok(c) => clients.push(c),
            Err(e) => {
                return say(&Ready {
                    error: Some(error_chain(&e)),
                });
            }
        }
    }
    // Each client takes the kind once on a side name first: connections,
    // statements and subscriptions are made on first use, not measured.
    let warm = format!("{}/warm", args.name);
    for c in &clients {
        let opts = c.options().wait(args.wait);
        if let Err(e) = take_once(c, &warm, args.kind.want(0), &opts).await {
            return say(&Ready {
                error: Some(format!("warm-up: {}", error_chain(&*e))),
            });
        }
    }
    let ids: Vec<usize> = (args.worker..args.waiters).step_by(args.procs.max(1)).collect();
    say(&Ready { error: None })?;
    let go: Go = tokio::task::spawn_blocking(|| -> Result<Go, BenchError> {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        Ok(serde_json::from_str(&line)?)
    })
    .await??;
    let args = Arc::new(args);
    let start = tokio::time::Instant::now() + Duration::from_nanos(go.start.saturating_sub(mono_ns()));
    tokio::time::sleep_until(start).await;
    let tasks: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(j, &id)| {
            let client = clients[j % clients.len()].with_new_owner();
            tokio::spawn(waiter(client, id, args.clone(), go))
        })
        .collect();
    let mut waiters = Vec::with_capacity(tasks.len());
    for t in tasks {
        waiters.push(t.await?);
    }
    // The clients live until every waiter is done (one closing its
    // connections would slow the others' last hand-offs).
    drop(clients);
    say(&waiters)
}

/// Takes `kind` of `name` and gives it back.
async fn take_once(client: &LockClient, name: &str, kind: LockKind, opts: &LockOptions) -> Result<(), BenchError> {
    ask(client, name, kind, opts).await?.unlock().await?;
    Ok(())
}

/// Asks `kind` of `name` once.
async fn ask(client: &LockClient, name: &str, kind: LockKind, opts: &LockOptions) -> Result<LockGuard, LockError> {
    match kind {
        LockKind::Mutex => client.lock_with(name, opts).await,
        LockKind::Permit { permits } => client.semaphore(name, permits)?.acquire_with(opts).await,
        LockKind::Read => client.rw_lock(name)?.read_with(opts).await,
        LockKind::Write => client.rw_lock(name)?.write_with(opts).await,
        // `LockKind` may grow; a crowd asks only for the kinds above.
        _ => Err(LockError::Unsupported {
            backend: client.backend().name(),
            operation: "a crowd of this lock kind",
        }),
    }
}

/// One waiter: asks (once, or again and again until `go.end`), holds for
/// the section, gives back; counts what went wrong.
async fn waiter(client: LockClient, id: usize, args: Arc<WorkerArgs>, go: Go) -> Waiter {
    let kind = args.kind.want(id);
    let opts = client.options().ttl(Duration::from_secs(30)).wait(args.wait);
    let mut w = Waiter {
        id,
        write: args.kind == CrowdKind::Rw && is_writer(id),
        ..Waiter::default()
    };
    let end = tokio::time::Instant::now() + Duration::from_nanos(go.end.saturating_sub(mono_ns()));
    loop {
        let asked = mono_ns();
        // A continuous crowd's calls end with the measurement; a served-once
        // crowd's only at their wait bound.
        let outcome = if args.once {
            Some(ask(&client, &args.name, kind, &opts).await)
        } else {
            tokio::select! {
                r = ask(&client, &args.name, kind, &opts) => Some(r),
                _ = tokio::time::sleep_until(end) => None,
            }
        };
        let now = mono_ns();
        match outcome {
            Some(Ok(guard)) => {
                let granted = now;
                if args.section.is_zero() {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(args.section).await;
                }
                let released = mono_ns();
                w.grants.push(Grant {
                    granted,
                    released,
                    wait_us: ((granted - asked) / 1_000).max(1),
                    token: guard.fencing_token(),
                });
                if let Err(e) = guard.unlock().await {
                    w.unlock_errors += 1;
                    w.first_error
                        .get_or_insert_with(|| format!("unlock: {}", error_chain(&e)));
                }
            }
            Some(Err(e)) => {
                if matches!(e, LockError::WaitTimeout { .. }) {
                    w.timeouts += 1;
                } else {
                    w.errors += 1;
                    w.first_error.get_or_insert_with(|| error_chain(&e));
                }
                if !args.once {
                    // Not a spin on a backend that fails at once.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            None => {
                w.unfinished_us = Some(((now - asked) / 1_000).max(1));
            }
        }
        w.ended = mono_ns();
        if args.once || tokio::time::Instant::now() >= end {
            return w;
        }
    }
}
