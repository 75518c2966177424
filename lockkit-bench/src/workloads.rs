//! The workloads, the same for every backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockkit::{LockClient, LockOptions};

use crate::counting::Counting;
use crate::report::{Row, histogram};

/// Errors of a benchmark run.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

fn us(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

fn opts(client: &LockClient) -> LockOptions {
    client
        .options()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(60))
}

fn run_id() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// w1: one client acquires and releases one name in a loop.
pub async fn w1(url: &str, seconds: Duration) -> Result<Row, BenchError> {
    let client = lockkit::connect(url).await?;
    let name = format!("bench/w1/{}", run_id());
    let opts = opts(&client);
    let mut hist = histogram();
    let mut cycles = 0u64;
    let started = Instant::now();
    while started.elapsed() < seconds {
        let t0 = Instant::now();
        let g = client.lock_with(&name, &opts).await?;
        g.unlock().await?;
        hist.record(us(t0.elapsed()))?;
        cycles += 1;
    }
    Ok(Row::new(
        "lockkit",
        client.backend().kind(),
        "w1",
        1,
        started.elapsed().as_secs_f64(),
        cycles,
        &hist,
    ))
}

/// w2: `c` clients, each with its own connections, contend for one name:
/// acquire → increment a shared counter (read, yield, write) → release.
pub async fn w2(url: &str, c: usize, seconds: Duration) -> Result<Row, BenchError> {
    let mut clients = Vec::with_capacity(c);
    for _ in 0..c {
        clients.push(lockkit::connect(url).await?);
    }
    let kind = clients[0].backend().kind();
    let name = Arc::new(format!("bench/w2/{}", run_id()));
    let stop = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let switches = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            let (name, stop, counter, last, switches) = (
                name.clone(),
                stop.clone(),
                counter.clone(),
                last.clone(),
                switches.clone(),
            );
            tokio::spawn(async move {
                let opts = opts(&client);
                let mut hist = histogram();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    let g = client.lock_with(&name, &opts).await?;
                    hist.record(us(t0.elapsed()))?;
                    if last.swap(i, Ordering::SeqCst) != i {
                        switches.fetch_add(1, Ordering::Relaxed);
                    }
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    g.unlock().await?;
                    n += 1;
                }
                Ok::<_, BenchError>((hist, n))
            })
        })
        .collect();
    tokio::time::sleep(seconds).await;
    stop.store(true, Ordering::Relaxed);
    let mut hist = histogram();
    let mut per_client = Vec::new();
    for t in tasks {
        let (h, n) = t.await??;
        hist.add(&h)?;
        per_client.push(n);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total: u64 = per_client.iter().sum();
    let mut row = Row::new("lockkit", kind, "w2", c, elapsed, total, &hist);
    row.switches_per_s = Some(switches.load(Ordering::Relaxed) as f64 / elapsed);
    row.fairness_min = per_client.iter().min().copied();
    row.fairness_max = per_client.iter().max().copied();
    row.counter_exact = Some(counter.load(Ordering::SeqCst) == total);
    Ok(row)
}

/// w3: `c` tasks acquire and release names drawn from 10,000. Tasks share
/// up to 8 connected clients, each task a contender of its own.
pub async fn w3(url: &str, c: usize, seconds: Duration) -> Result<Row, BenchError> {
    let mut connected = Vec::new();
    for _ in 0..c.min(8) {
        connected.push(lockkit::connect(url).await?);
    }
    let kind = connected[0].backend().kind();
    let prefix = Arc::new(format!("bench/w3/{}", run_id()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..c)
        .map(|i| {
            let client = connected[i % connected.len()].with_new_owner();
            let prefix = prefix.clone();
            tokio::spawn(async move {
                let opts = opts(&client);
                let mut hist = histogram();
                let mut n = 0u64;
                while started.elapsed() < seconds {
                    let name = format!("{prefix}/{}", rand::random_range(0..10_000u32));
                    let t0 = Instant::now();
                    let g = client.lock_with(&name, &opts).await?;
                    g.unlock().await?;
                    hist.record(us(t0.elapsed()))?;
                    n += 1;
                }
                Ok::<_, BenchError>((hist, n))
            })
        })
        .collect();
    let mut hist = histogram();
    let mut total = 0;
    for t in tasks {
        let (h, n) = t.await??;
        hist.add(&h)?;
        total += n;
    }
    Ok(Row::new(
        "lockkit",
        kind,
        "w3",
        c,
        started.elapsed().as_secs_f64(),
        total,
        &hist,
    ))
}

/// w4: one client holds `held` locks with auto-extend and a short `ttl` for
/// `periods` renewal periods; reports round trips per period and memory.
pub async fn w4(url: &str, held: usize, ttl: Duration, periods: u32) -> Result<Row, BenchError> {
    let connected = lockkit::connect(url).await?;
    let counting = Arc::new(Counting::new(connected.backend().clone()));
    let client = LockClient::from_arc(counting.clone(), connected.options().ttl(ttl))?;
    let prefix = format!("bench/w4/{}", run_id());
    let mut guards = Vec::with_capacity(held);
    let mut hist = histogram();
    for chunk in (0..held).collect::<Vec<_>>().chunks(64) {
        let batch = chunk.iter().map(|i| {
            let (client, name) = (client.clone(), format!("{prefix}/{i}"));
            async move {
                let t0 = Instant::now();
                let g = client.lock(&name).await;
                (g, t0.elapsed())
            }
        });
        for (g, took) in futures_util::future::join_all(batch).await {
            guards.push(g?);
            hist.record(us(took))?;
        }
    }
    let before = counting.round_trips();
    let started = Instant::now();
    tokio::time::sleep(ttl / 3 * periods).await;
    let elapsed = started.elapsed();
    let trips = counting.round_trips() - before;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    if lost > 0 {
        return Err(format!("{lost} of {held} held locks were lost while auto-extended").into());
    }
    let rss = rss_bytes();
    for g in guards {
        g.unlock().await?;
    }
    let per_period = trips as f64 / (elapsed.as_secs_f64() / (ttl / 3).as_secs_f64());
    let mut row = Row::new(
        "lockkit",
        client.backend().kind(),
        "w4",
        1,
        elapsed.as_secs_f64(),
        trips,
        &hist,
    );
    row.round_trips_per_period = Some(per_period);
    row.rss_bytes = rss;
    row.held = Some(held);
    Ok(row)
}

/// Resident set size of this process (Linux).
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
