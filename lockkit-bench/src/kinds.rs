//! The workloads of the other lock kinds: w5, a semaphore, and w6, a
//! read-mostly read-write lock. A backend without the kind is skipped with
//! a note (not a failure): see [`supports`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lockkit::{LockClient, LockKind};

use crate::cost::{Cost, Meter};
use crate::error::BenchError;
use crate::report::{Row, Series, histogram};
use crate::workloads::{label, opts, run_id, us};

/// Whether the backend at `client` has `kind`; says so on stderr if not.
pub fn supports(client: &LockClient, kind: LockKind, workload: &str) -> bool {
    let yes = client.capabilities().supports(kind);
    if !yes {
        eprintln!(
            "lockkit-bench: {workload} skipped on {}: no {}s",
            client.backend().name(),
            kind.family()
        );
    }
    yes
}

/// The clients of a run, each with its own connections.
async fn clients(url: &str, c: usize) -> Result<Vec<LockClient>, BenchError> {
    let mut clients = Vec::with_capacity(c);
    for _ in 0..c {
        clients.push(lockkit::connect(url).await?);
    }
    Ok(clients)
}

/// What one client's task of w5 or w6 measured.
struct Tally {
    /// Every acquisition's wait.
    waits: Histogram<u64>,
    /// w6: the writes' wait.
    write_waits: Histogram<u64>,
    ops: u64,
    writes: u64,
}

impl Tally {
    fn new() -> Self {
        Tally {
            waits: histogram(),
            write_waits: histogram(),
            ops: 0,
            writes: 0,
        }
    }
}

/// Runs `work` on every client in a task of its own until `seconds`
/// passed (it loops until `stop`); the tallies, the seconds measured and
/// their cost (metered from the tasks' start until every one is done).
/// Every client lives until every task is done (one closing its
/// connections would slow the others' last acquisitions).
async fn run_tasks<F, Fut>(
    clients: Vec<LockClient>,
    meter: &Meter,
    seconds: Duration,
    work: F,
) -> Result<(Vec<Tally>, f64, Cost), BenchError>
where
    F: Fn(LockClient, Arc<AtomicBool>) -> Fut,
    Fut: std::future::Future<Output = Result<(Tally, LockClient), BenchError>> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let span = meter.start().await?;
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|c| tokio::spawn(work(c, stop.clone())))
        .collect();
    tokio::time::sleep(seconds).await;
    stop.store(true, Ordering::Relaxed);
    let (mut tallies, mut finished) = (Vec::new(), Vec::new());
    for t in tasks {
        let (tally, client) = t.await??;
        tallies.push(tally);
        finished.push(client);
    }
    let cost = span.stop().await?;
    drop(finished);
    Ok((tallies, started.elapsed().as_secs_f64(), cost))
}

/// The row of `workload` from the tallies and their cost.
fn row(
    kind: &str,
    url: &str,
    workload: &'static str,
    tallies: &[Tally],
    seconds: f64,
    cost: Cost,
) -> Result<Row, BenchError> {
    let mut waits = histogram();
    for t in tallies {
        waits.add(&t.waits)?;
    }
    let series = Series {
        imp: "lockkit",
        backend: kind,
        url,
        workload,
        clients: tallies.len(),
    };
    let ops = tallies.iter().map(|t| t.ops).sum();
    let mut row = Row::new(series, seconds, ops, &waits);
    cost.fill(&mut row, ops);
    Ok(row)
}

/// w5: `c` clients take a permit of a semaphore of `permits`, hold it for
/// a moment (one yield), and give it back, for `seconds`. Measures permits
/// granted per second, the acquire wait, how evenly the clients were
/// served, and the most permits held at once (never above `permits`).
/// `None` when the backend has no semaphores.
pub async fn w5(
    url: &str,
    c: usize,
    permits: u32,
    meter: &Meter,
    seconds: Duration,
) -> Result<Option<Row>, BenchError> {
    let clients = clients(url, c).await?;
    if !supports(&clients[0], LockKind::Permit { permits }, "w5") {
        return Ok(None);
    }
    let kind = label(&clients[0]);
    let name = Arc::new(format!("bench/w5/{}", run_id()));
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (tallies, elapsed, cost) = run_tasks(clients, meter, seconds, |client, stop| {
        let (name, inside, most) = (name.clone(), inside.clone(), most.clone());
        async move {
            let sem = client.semaphore(&name, permits)?;
            let opts = opts(&client);
            let mut tally = Tally::new();
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let g = sem.acquire_with(&opts).await?;
                tally.waits.record(us(t0.elapsed()))?;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                g.unlock().await?;
                tally.ops += 1;
            }
            Ok((tally, client))
        }
    })
    .await?;
    let mut row = row(&kind, url, "w5", &tallies, elapsed, cost)?;
    row.fairness_min = tallies.iter().map(|t| t.ops).min();
    row.fairness_max = tallies.iter().map(|t| t.ops).max();
    let most = most.load(Ordering::SeqCst);
    row.permits = Some(permits);
    row.most_held = Some(most);
    row.counter_exact = Some(most <= permits as usize);
    Ok(Some(row))
}

/// The share of w6's operations that write, per mille.
const W6_WRITES_PER_MILLE: u64 = 100;

/// w6: `c` clients on one read-write lock, 90 % reads and 10 % writes, for
/// `seconds`. A write increments a shared counter (read, yield, write)
/// that a reader checks does not move while it reads. Measures operations
/// per second, the wait of all operations and of the writes, and whether
/// the lock excluded (the counter equals the writes, no reader saw it move).
pub async fn w6(url: &str, c: usize, meter: &Meter, seconds: Duration) -> Result<Option<Row>, BenchError> {
    let clients = clients(url, c).await?;
    if !supports(&clients[0], LockKind::Write, "w6") {
        return Ok(None);
    }
    let kind = label(&clients[0]);
    let name = Arc::new(format!("bench/w6/{}", run_id()));
    let counter = Arc::new(AtomicU64::new(0));
    let torn = Arc::new(AtomicBool::new(false));
    let (tallies, elapsed, cost) = run_tasks(clients, meter, seconds, |client, stop| {
        let (name, counter, torn) = (name.clone(), counter.clone(), torn.clone());
        async move {
            let rw = client.rw_lock(&name)?;
            let opts = opts(&client);
            let mut tally = Tally::new();
            while !stop.load(Ordering::Relaxed) {
                let write = rand::random_range(0..1000) < W6_WRITES_PER_MILLE;
                let t0 = Instant::now();
                let g = if write {
                    rw.write_with(&opts).await?
                } else {
                    rw.read_with(&opts).await?
                };
                let waited = us(t0.elapsed());
                tally.waits.record(waited)?;
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                if write {
                    tally.write_waits.record(waited)?;
                    counter.store(seen + 1, Ordering::SeqCst);
                    tally.writes += 1;
                } else if counter.load(Ordering::SeqCst) != seen {
                    torn.store(true, Ordering::SeqCst);
                }
                g.unlock().await?;
                tally.ops += 1;
            }
            Ok((tally, client))
        }
    })
    .await?;
    let mut row = row(&kind, url, "w6", &tallies, elapsed, cost)?;
    let mut write_waits = histogram();
    for t in &tallies {
        write_waits.add(&t.write_waits)?;
    }
    let writes: u64 = tallies.iter().map(|t| t.writes).sum();
    row.write_p50_us = Some(write_waits.value_at_quantile(0.5) as f64);
    row.write_p99_us = Some(write_waits.value_at_quantile(0.99) as f64);
    row.counter_exact = Some(counter.load(Ordering::SeqCst) == writes && !torn.load(Ordering::SeqCst));
    Ok(Some(row))
}
