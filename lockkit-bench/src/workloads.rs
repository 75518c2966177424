//! The workloads, the same for every backend.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use hdrhistogram::Histogram;
use lockkit::{LockClient, LockOptions};

use crate::cost::{Cost, Meter};
use crate::counting::Counting;
use crate::error::BenchError;
use crate::floor::{self, Floor};
use crate::peers::{Locker, Peer};
use crate::report::{Row, Series, histogram};

pub(crate) fn us(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

pub(crate) fn opts(client: &LockClient) -> LockOptions {
    client
        .options()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(60))
}

pub(crate) fn run_id() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// Slices w1 alternates between lockkit and the floor, so a noisy machine
/// slows both alike.
const SLICES: u32 = 20;

/// w1: one client acquires and releases one name in a loop; beside it, in
/// alternating slices, the floor's raw cycle (and its one-round-trip ping)
/// and each peer library's acquire + release on a name of its own. Each
/// implementation's cost is metered over its own slices only.
pub async fn w1(
    url: &str,
    floor: Option<&dyn Floor>,
    peers: &[Peer],
    meter: &Meter,
    seconds: Duration,
) -> Result<Vec<Row>, BenchError> {
    let client = lockkit::connect(url).await?;
    let name = format!("bench/w1/{}", run_id());
    let floor_name = format!("bench/floor/{}", run_id());
    let opts = opts(&client);
    let slice = seconds / SLICES;
    let (mut hist, mut floor_hist, mut ping_hist) = (histogram(), histogram(), histogram());
    let (mut cycles, mut floor_cycles) = (0u64, 0u64);
    let (mut spent, mut floor_spent) = (Duration::ZERO, Duration::ZERO);
    let (mut cost, mut floor_cost) = (Cost::default(), Cost::default());
    let mut others = Vec::with_capacity(peers.len());
    for &peer in peers {
        others.push(PeerRun {
            peer,
            locker: peer.connect(url).await?,
            name: format!("bench/w1p/{}", run_id()),
            hist: histogram(),
            cycles: 0,
            spent: Duration::ZERO,
            cost: Cost::default(),
        });
    }
    // Warm up all (connections, script loads, prepared statements).
    for _ in 0..20 {
        client.lock_with(&name, &opts).await?.unlock().await?;
        if let Some(f) = floor {
            f.cycle(&floor_name).await?;
        }
        for p in &others {
            p.locker.lock(&p.name).await?.release().await?;
        }
    }
    for _ in 0..SLICES {
        let span = meter.start().await?;
        let started = Instant::now();
        while started.elapsed() < slice {
            let t0 = Instant::now();
            let g = client.lock_with(&name, &opts).await?;
            g.unlock().await?;
            hist.record(us(t0.elapsed()))?;
            cycles += 1;
        }
        spent += started.elapsed();
        cost += span.stop().await?;
        for p in &mut others {
            let span = meter.start().await?;
            let started = Instant::now();
            while started.elapsed() < slice {
                let t0 = Instant::now();
                p.locker.lock(&p.name).await?.release().await?;
                p.hist.record(us(t0.elapsed()))?;
                p.cycles += 1;
            }
            p.spent += started.elapsed();
            p.cost += span.stop().await?;
        }
        let Some(f) = floor else { continue };
        let span = meter.start().await?;
        let started = Instant::now();
        while started.elapsed() < slice {
            let t0 = Instant::now();
            f.cycle(&floor_name).await?;
            floor_hist.record(us(t0.elapsed()))?;
            floor_cycles += 1;
        }
        floor_spent += started.elapsed();
        floor_cost += span.stop().await?;
        // The pings are outside every metered interval.
        for _ in 0..50 {
            let t0 = Instant::now();
            f.ping().await?;
            ping_hist.record(us(t0.elapsed()))?;
        }
    }
    let kind = &label(&client);
    let series = |imp| Series {
        imp,
        backend: kind,
        url,
        workload: "w1",
        clients: 1,
    };
    let mut rows = Vec::new();
    if floor.is_some() {
        let mut row = Row::new(series("floor"), floor_spent.as_secs_f64(), floor_cycles, &floor_hist);
        row.round_trip_us = Some(ping_hist.value_at_quantile(0.5) as f64);
        floor_cost.fill(&mut row, floor_cycles);
        rows.push(row);
    }
    let mut row = Row::new(series("lockkit"), spent.as_secs_f64(), cycles, &hist);
    cost.fill(&mut row, cycles);
    rows.push(row);
    for p in &others {
        let mut row = Row::new(series(p.peer.name()), p.spent.as_secs_f64(), p.cycles, &p.hist);
        row.note = p.peer.note();
        p.cost.fill(&mut row, p.cycles);
        rows.push(row);
    }
    Ok(rows)
}

/// One peer's client and tallies in w1.
struct PeerRun {
    peer: Peer,
    locker: Box<dyn Locker>,
    name: String,
    hist: Histogram<u64>,
    cycles: u64,
    spent: Duration,
    cost: Cost,
}

/// The backend's name in the result rows, marked when its URL turned the
/// fair queue off.
pub(crate) fn label(client: &LockClient) -> String {
    let kind = client.backend().name();
    if client.options().fair_value() {
        kind.to_owned()
    } else {
        format!("{kind} fair=false")
    }
}

/// One operation of task `i`, timed by [`spread`].
type Op = Arc<dyn Fn(usize) -> BoxFuture<'static, Result<(), BenchError>> + Send + Sync>;

/// Runs `c` tasks, each timing `op(i)` in a loop until `seconds` pass; the
/// merged latencies, the operations and the seconds measured.
async fn spread(c: usize, seconds: Duration, op: Op) -> Result<(Histogram<u64>, u64, f64), BenchError> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..c)
        .map(|i| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut hist = histogram();
                let mut n = 0u64;
                while started.elapsed() < seconds {
                    let t0 = Instant::now();
                    op(i).await?;
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
    Ok((hist, total, started.elapsed().as_secs_f64()))
}

/// w3: `c` tasks acquire and release names drawn from 10,000. Tasks share
/// up to 8 connected clients, each task a contender of its own. Beside it,
/// in alternating slices, the floor's raw cycle with as many tasks, each
/// metered over its own slices.
pub async fn w3(url: &str, c: usize, meter: &Meter, seconds: Duration) -> Result<Vec<Row>, BenchError> {
    let mut connected = Vec::new();
    for _ in 0..c.min(8) {
        connected.push(lockkit::connect(url).await?);
    }
    let kind = &label(&connected[0]);
    let prefix = format!("bench/w3/{}", run_id());
    let clients: Arc<Vec<LockClient>> = Arc::new(
        (0..c)
            .map(|i| connected[i % connected.len()].with_new_owner())
            .collect(),
    );
    let op: Op = Arc::new(move |i| {
        let client = clients[i].clone();
        let name = format!("{prefix}/{}", rand::random_range(0..10_000u32));
        Box::pin(async move {
            client.lock_with(&name, &opts(&client)).await?.unlock().await?;
            Ok(())
        })
    });
    let mut series = vec![("lockkit", op)];
    if let Some(floor_op) = w3_floor_op(url, c).await? {
        series.push(("floor", floor_op));
    }
    // Measured in alternating slices, like w1, so drift slows both alike.
    let mut totals: Vec<(Histogram<u64>, u64, f64, Cost)> =
        series.iter().map(|_| (histogram(), 0, 0.0, Cost::default())).collect();
    for _ in 0..SLICES / 2 {
        for ((_, op), total) in series.iter().zip(&mut totals) {
            let span = meter.start().await?;
            let (hist, n, secs) = spread(c, seconds / (SLICES / 2), op.clone()).await?;
            total.3 += span.stop().await?;
            total.0.add(&hist)?;
            total.1 += n;
            total.2 += secs;
        }
    }
    Ok(series
        .iter()
        .zip(&totals)
        .map(|((imp, _), (hist, n, secs, cost))| {
            let series = Series {
                imp,
                backend: kind,
                url,
                workload: "w3",
                clients: c,
            };
            let mut row = Row::new(series, *secs, *n, hist);
            cost.fill(&mut row, *n);
            row
        })
        .collect())
}

/// w4: one client holds `held` locks with auto-extend and a short `ttl` for
/// `periods` renewal periods; reports round trips per period and memory,
/// and the cost of the renewals per round trip.
pub async fn w4(
    url: &str,
    floor: Option<&dyn Floor>,
    meter: &Meter,
    held: usize,
    ttl: Duration,
    periods: u32,
) -> Result<Row, BenchError> {
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
    let commands_before = server_commands(floor).await?;
    let span = meter.start().await?;
    let before = counting.round_trips();
    let started = Instant::now();
    tokio::time::sleep(ttl / 3 * periods).await;
    let elapsed = started.elapsed();
    let trips = counting.round_trips() - before;
    let cost = span.stop().await?;
    let commands = server_commands(floor).await?.zip(commands_before).map(|(a, b)| a - b);
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    if lost > 0 {
        // Why, by reason: a lease that ran out (the renewals came late) and
        // a hold the server no longer had are different failures.
        let mut why: Vec<(String, usize)> = Vec::new();
        for reason in guards.iter().filter_map(|g| g.lost_reason()) {
            match why.iter_mut().find(|(r, _)| *r == reason.to_string()) {
                Some((_, n)) => *n += 1,
                None => why.push((reason.to_string(), 1)),
            }
        }
        let why: Vec<String> = why.iter().map(|(r, n)| format!("{n}: {r}")).collect();
        return Err(format!(
            "{lost} of {held} held locks were lost while auto-extended ({})",
            why.join("; ")
        )
        .into());
    }
    let rss = rss_bytes();
    for g in guards {
        g.unlock().await?;
    }
    let per_period = trips as f64 / (elapsed.as_secs_f64() / (ttl / 3).as_secs_f64());
    let mut row = Row::new(
        Series {
            imp: "lockkit",
            backend: &label(&client),
            url,
            workload: "w4",
            clients: 1,
        },
        elapsed.as_secs_f64(),
        trips,
        &hist,
    );
    row.round_trips_per_period = Some(per_period);
    row.server_commands_per_period = commands.map(|c| c as f64 * per_period / trips.max(1) as f64);
    row.rss_bytes = rss;
    row.held = Some(held);
    cost.fill(&mut row, trips);
    Ok(row)
}

async fn server_commands(floor: Option<&dyn Floor>) -> Result<Option<u64>, BenchError> {
    match floor {
        Some(f) => f.server_commands().await,
        None => Ok(None),
    }
}

/// w3 on the floor: `c` tasks cycle names of their own share of 10,000
/// (a floor cannot wait, so tasks never collide), over up to 8 floors of
/// their own connections. `None`: the backend has no floor.
async fn w3_floor_op(url: &str, c: usize) -> Result<Option<Op>, BenchError> {
    let mut floors = Vec::new();
    for _ in 0..c.min(8) {
        match floor::floor_for(url).await? {
            Some(f) => floors.push(Arc::<dyn Floor>::from(f)),
            None => return Ok(None),
        }
    }
    let prefix = format!("bench/w3f/{}", run_id());
    let share = (10_000 / c as u32).max(1);
    Ok(Some(Arc::new(move |i| {
        let f = floors[i % floors.len()].clone();
        let name = format!("{prefix}/{}", i as u32 + c as u32 * rand::random_range(0..share));
        Box::pin(async move { f.cycle(&name).await })
    })))
}

/// Resident set size of this process (Linux).
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
