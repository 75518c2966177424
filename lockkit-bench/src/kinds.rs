//! The workloads of the other lock kinds: w5, a semaphore, and w6, a
//! read-mostly read-write lock. A backend without the kind is skipped with
//! a note (not a failure): see [`supports`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockkit::{LockClient, LockKind};

use crate::report::{Row, Series, histogram};
use crate::workloads::{BenchError, label, opts, run_id, us};

/// Whether the backend at `client` has `kind`; says so on stderr if not.
pub fn supports(client: &LockClient, kind: LockKind, workload: &str) -> bool {
    let yes = client.capabilities().supports(kind);
    if !yes {
        eprintln!(
            "lockkit-bench: {workload} skipped on {}: no {}s",
            client.backend().kind(),
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

/// w5: `c` clients take a permit of a semaphore of `permits`, hold it for
/// a moment (one yield), and give it back, for `seconds`. Measures permits
/// granted per second, the acquire wait, how evenly the clients were
/// served, and the most permits held at once (never above `permits`).
/// `None` when the backend has no semaphores.
pub async fn w5(url: &str, c: usize, permits: u32, seconds: Duration) -> Result<Option<Row>, BenchError> {
    let clients = clients(url, c).await?;
    if !supports(&clients[0], LockKind::Permit { permits }, "w5") {
        return Ok(None);
    }
    let kind = &label(&clients[0]);
    let name = Arc::new(format!("bench/w5/{}", run_id()));
    let stop = Arc::new(AtomicBool::new(false));
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let (name, stop, inside, most) = (name.clone(), stop.clone(), inside.clone(), most.clone());
            tokio::spawn(async move {
                let sem = client.semaphore(&name, permits)?;
                let opts = opts(&client);
                let (mut hist, mut n) = (histogram(), 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    let g = sem.acquire_with(&opts).await?;
                    hist.record(us(t0.elapsed()))?;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await?;
                    n += 1;
                }
                Ok::<_, BenchError>((hist, n, client))
            })
        })
        .collect();
    tokio::time::sleep(seconds).await;
    stop.store(true, Ordering::Relaxed);
    let (mut hist, mut per_client, mut finished) = (histogram(), Vec::new(), Vec::new());
    for t in tasks {
        let (h, n, client) = t.await??;
        hist.add(&h)?;
        per_client.push(n);
        finished.push(client);
    }
    drop(finished);
    let elapsed = started.elapsed().as_secs_f64();
    let series = Series {
        imp: "lockkit",
        backend: kind,
        url,
        workload: "w5",
        clients: c,
    };
    let mut row = Row::new(series, elapsed, per_client.iter().sum(), &hist);
    row.fairness_min = per_client.iter().min().copied();
    row.fairness_max = per_client.iter().max().copied();
    row.permits = Some(permits);
    row.most_held = Some(most.load(Ordering::SeqCst));
    row.counter_exact = Some(most.load(Ordering::SeqCst) <= permits as usize);
    Ok(Some(row))
}

/// The share of w6's operations that write, per mille.
const W6_WRITES_PER_MILLE: u64 = 100;

/// w6: `c` clients on one read-write lock, 90 % reads and 10 % writes, for
/// `seconds`. A write increments a shared counter (read, yield, write)
/// that a reader checks does not move while it reads. Measures operations
/// per second, the wait of all operations and of the writes, and whether
/// the lock excluded (the counter equals the writes, no reader saw it move).
pub async fn w6(url: &str, c: usize, seconds: Duration) -> Result<Option<Row>, BenchError> {
    let clients = clients(url, c).await?;
    if !supports(&clients[0], LockKind::Write, "w6") {
        return Ok(None);
    }
    let kind = &label(&clients[0]);
    let name = Arc::new(format!("bench/w6/{}", run_id()));
    let stop = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let torn = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let (name, stop, counter, torn) = (name.clone(), stop.clone(), counter.clone(), torn.clone());
            tokio::spawn(async move {
                let rw = client.rw_lock(&name)?;
                let opts = opts(&client);
                let (mut hist, mut writes_hist) = (histogram(), histogram());
                let (mut n, mut writes) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let write = rand::random_range(0..1000) < W6_WRITES_PER_MILLE;
                    let t0 = Instant::now();
                    if write {
                        let g = rw.write_with(&opts).await?;
                        let waited = us(t0.elapsed());
                        writes_hist.record(waited)?;
                        hist.record(waited)?;
                        let seen = counter.load(Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        counter.store(seen + 1, Ordering::SeqCst);
                        g.unlock().await?;
                        writes += 1;
                    } else {
                        let g = rw.read_with(&opts).await?;
                        hist.record(us(t0.elapsed()))?;
                        let seen = counter.load(Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        if counter.load(Ordering::SeqCst) != seen {
                            torn.store(true, Ordering::SeqCst);
                        }
                        g.unlock().await?;
                    }
                    n += 1;
                }
                Ok::<_, BenchError>((hist, writes_hist, n, writes, client))
            })
        })
        .collect();
    tokio::time::sleep(seconds).await;
    stop.store(true, Ordering::Relaxed);
    let (mut hist, mut writes_hist, mut ops, mut writes, mut finished) = (histogram(), histogram(), 0, 0, Vec::new());
    for t in tasks {
        let (h, w, n, wn, client) = t.await??;
        hist.add(&h)?;
        writes_hist.add(&w)?;
        ops += n;
        writes += wn;
        finished.push(client);
    }
    drop(finished);
    let elapsed = started.elapsed().as_secs_f64();
    let series = Series {
        imp: "lockkit",
        backend: kind,
        url,
        workload: "w6",
        clients: c,
    };
    let mut row = Row::new(series, elapsed, ops, &hist);
    row.write_p50_us = Some(writes_hist.value_at_quantile(0.5) as f64);
    row.write_p99_us = Some(writes_hist.value_at_quantile(0.99) as f64);
    row.counter_exact = Some(counter.load(Ordering::SeqCst) == writes && !torn.load(Ordering::SeqCst));
    Ok(Some(row))
}
