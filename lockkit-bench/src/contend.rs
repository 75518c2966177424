//! w2: clients contend for one name, lockkit's and then each peer
//! library's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockkit::{LockClient, LockOptions};
use tokio::sync::watch;

use crate::cost::Meter;
use crate::error::BenchError;
use crate::peers::{Held, Locker, Peer};
use crate::report::{Row, Series, histogram};
use crate::workloads::{label, opts, run_id, us};

/// A lockkit client as a [`Locker`], with the bench's options.
struct Lockkit {
    client: LockClient,
    opts: LockOptions,
}

#[async_trait::async_trait]
impl Locker for Lockkit {
    async fn lock(&self, name: &str) -> Result<Box<dyn Held>, BenchError> {
        Ok(Box::new(self.client.lock_with(name, &self.opts).await?))
    }
}

#[async_trait::async_trait]
impl Held for lockkit::LockGuard {
    async fn release(self: Box<Self>) -> Result<(), BenchError> {
        self.unlock().await?;
        Ok(())
    }
}

/// How long w2 waits for a client's last call after the measurement.
const STUCK: Duration = Duration::from_secs(60);

/// w2: `c` clients, each with its own connections, contend for one name:
/// acquire → increment a shared counter (read, yield, write) → release.
/// Besides the acquire wait it measures the hand-off: from a holder's
/// `unlock` call to the next holder's `lock` returning. Lockkit's row,
/// then one row per peer library (each measured alone, the same way).
///
/// A lockkit client whose call has not returned [`STUCK`] after the
/// measurement fails the workload (lockkit's wait is bounded well below
/// it). A peer's is given up and counted in its row's `stuck`: a peer
/// that cannot wait may never get the name again (distributed-lock-redis
/// on several nodes keeps the keys a failed attempt set until they
/// expire, and its retries take each node again as it frees), which is a
/// result about the peer, not a failed run.
pub async fn w2(url: &str, c: usize, peers: &[Peer], meter: &Meter, seconds: Duration) -> Result<Vec<Row>, BenchError> {
    let mut clients: Vec<Box<dyn Locker>> = Vec::with_capacity(c);
    let mut kind = String::new();
    for _ in 0..c {
        let client = lockkit::connect(url).await?;
        kind = label(&client);
        let opts = opts(&client);
        clients.push(Box::new(Lockkit { client, opts }));
    }
    let series = |imp| Series {
        imp,
        backend: &kind,
        url,
        workload: "w2",
        clients: c,
    };
    let ours = contend(series("lockkit"), clients, meter, seconds, STUCK).await?;
    if let Some(stuck) = ours.stuck {
        return Err(format!(
            "w2 lockkit: {stuck} of {c} clients' calls did not return within {STUCK:?} after the measurement ended"
        )
        .into());
    }
    let mut rows = vec![ours];
    for &peer in peers {
        let mut clients = Vec::with_capacity(c);
        for _ in 0..c {
            clients.push(peer.connect(url).await?);
        }
        let mut row = contend(series(peer.name()), clients, meter, seconds, STUCK).await?;
        row.note = peer.note();
        rows.push(row);
    }
    Ok(rows)
}

/// The measurement of w2 with `clients`, one task each. Its cost is metered
/// from the end of the warm-up to the end of the measurement. A client
/// still waiting in `lock` `stuck` after the measurement ended gives up
/// (the call dropped) and is counted in the row's `stuck`.
async fn contend(
    series: Series<'_>,
    clients: Vec<Box<dyn Locker>>,
    meter: &Meter,
    seconds: Duration,
    stuck: Duration,
) -> Result<Row, BenchError> {
    let c = clients.len();
    let name = Arc::new(format!("bench/w2/{}", run_id()));
    let stop = Arc::new(AtomicBool::new(false));
    // When a client still in `lock` gives up: set as the measurement ends.
    let (give_up, give_up_at) = watch::channel(None::<Instant>);
    let counter = Arc::new(AtomicU64::new(0));
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let switches = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    // The clients first warm up (connections, prepared statements, wait
    // lists and subscriptions are made on first use): acquisitions that
    // began before `warm` passed are not measured.
    let warm = (seconds / 4).min(Duration::from_secs(1));
    let warm_ns = warm.as_nanos() as u64;
    // Nanoseconds after `started` of the latest `unlock` call (0: none yet).
    let released_at = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            let (name, stop, counter, last, switches, released_at) = (
                name.clone(),
                stop.clone(),
                counter.clone(),
                last.clone(),
                switches.clone(),
                released_at.clone(),
            );
            let mut give_up_at = give_up_at.clone();
            tokio::spawn(async move {
                let (mut hist, mut handoffs) = (histogram(), histogram());
                let (mut n, mut all) = (0u64, 0u64);
                let mut gave_up = false;
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    let measured = t0.duration_since(started) >= warm;
                    let g = tokio::select! {
                        biased;
                        g = client.lock(&name) => g?,
                        _ = deadline(&mut give_up_at) => {
                            gave_up = true;
                            break;
                        }
                    };
                    let now = started.elapsed().as_nanos() as u64;
                    let released = released_at.load(Ordering::SeqCst);
                    let switched = last.swap(i, Ordering::SeqCst) != i;
                    if measured {
                        hist.record(us(t0.elapsed()))?;
                        if released > warm_ns {
                            handoffs.record((now.saturating_sub(released) / 1_000).max(1))?;
                        }
                        if switched {
                            switches.fetch_add(1, Ordering::Relaxed);
                        }
                        n += 1;
                    }
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    released_at.store(started.elapsed().as_nanos() as u64, Ordering::SeqCst);
                    g.release().await?;
                    all += 1;
                }
                let ended = started.elapsed();
                // The client lives until every task is done: dropping it
                // (its connections closing) would slow down the hand-offs
                // still measured in the others.
                Ok::<_, BenchError>((hist, handoffs, n, all, (!gave_up).then_some(ended), client))
            })
        })
        .collect();
    tokio::time::sleep(warm).await;
    let span = meter.start().await?;
    tokio::time::sleep_until((started + warm + seconds).into()).await;
    let cost = span.stop().await?;
    stop.store(true, Ordering::Relaxed);
    // The calls in flight at the end still count, and so does the time
    // until the last one returned (not a given-up client's wait).
    let mut ended = started.elapsed();
    give_up.send_replace(Some(Instant::now() + stuck));
    let (mut hist, mut handoffs) = (histogram(), histogram());
    let mut per_client = Vec::new();
    let mut acquisitions = 0;
    let mut gave_up = 0;
    let mut finished = Vec::with_capacity(c);
    for t in tasks {
        // A client whose release never returns (a hung connection) fails
        // the row instead of hanging the run.
        let Ok(joined) = tokio::time::timeout(stuck * 2, t).await else {
            return Err(format!(
                "w2 {}: a client's release did not return within {:?} after the measurement ended",
                series.imp,
                stuck * 2
            )
            .into());
        };
        let (h, hand, n, all, finished_at, client) = joined??;
        hist.add(&h)?;
        handoffs.add(&hand)?;
        per_client.push(n);
        acquisitions += all;
        match finished_at {
            Some(at) => ended = ended.max(at),
            None => gave_up += 1,
        }
        finished.push(client);
    }
    drop(finished);
    let elapsed = (ended - warm).as_secs_f64();
    let total: u64 = per_client.iter().sum();
    let mut row = Row::new(series, elapsed, total, &hist);
    row.handoff_p50_us = Some(handoffs.value_at_quantile(0.5) as f64);
    row.handoff_p99_us = Some(handoffs.value_at_quantile(0.99) as f64);
    row.switches_per_s = Some(switches.load(Ordering::Relaxed) as f64 / elapsed);
    row.fairness_min = per_client.iter().min().copied();
    row.fairness_max = per_client.iter().max().copied();
    row.counter_exact = Some(counter.load(Ordering::SeqCst) == acquisitions);
    row.stuck = (gave_up > 0).then_some(gave_up);
    cost.fill(&mut row, total);
    Ok(row)
}

/// Returns once the instant in `at` has passed (never while it is unset).
async fn deadline(at: &mut watch::Receiver<Option<Instant>>) {
    let Ok(when) = at.wait_for(Option::is_some).await.map(|w| *w) else {
        return std::future::pending().await;
    };
    if let Some(when) = when {
        tokio::time::sleep_until(when.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hold of an in-process mutex.
    struct Guard(tokio::sync::OwnedMutexGuard<()>);

    #[async_trait::async_trait]
    impl Held for Guard {
        async fn release(self: Box<Self>) -> Result<(), BenchError> {
            drop(self.0);
            Ok(())
        }
    }

    /// Grants when the in-process mutex it shares is free.
    struct Local(Arc<tokio::sync::Mutex<()>>);

    #[async_trait::async_trait]
    impl Locker for Local {
        async fn lock(&self, _name: &str) -> Result<Box<dyn Held>, BenchError> {
            Ok(Box::new(Guard(self.0.clone().lock_owned().await)))
        }
    }

    /// Never grants (a peer that livelocks).
    struct Never;

    #[async_trait::async_trait]
    impl Locker for Never {
        async fn lock(&self, _name: &str) -> Result<Box<dyn Held>, BenchError> {
            std::future::pending().await
        }
    }

    /// w2's measurement of `clients` for 200 ms, a client still in `lock`
    /// `stuck` after it given up.
    async fn measure(clients: Vec<Box<dyn Locker>>, stuck: Duration) -> Row {
        let meter = Meter::connect("memory://").await.unwrap();
        let series = Series {
            imp: "peer",
            backend: "memory",
            url: "memory://",
            workload: "w2",
            clients: clients.len(),
        };
        contend(series, clients, &meter, Duration::from_millis(200), stuck)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_client_stuck_in_lock_is_given_up_and_the_others_counted() {
        let clients: Vec<Box<dyn Locker>> = vec![Box::new(Local(Arc::default())), Box::new(Never)];
        let row = measure(clients, Duration::from_secs(2)).await;
        assert_eq!(row.stuck, Some(1));
        assert!(row.ops_per_s > 0.0);
        assert_eq!(row.counter_exact, Some(true));
        assert_eq!(row.fairness_min, Some(0));
        // Measured up to the free client's end, not the stuck one's wait
        // (that would make it 2.2 s).
        assert!(row.seconds < 2.0, "{}", row.seconds);
    }

    #[tokio::test]
    async fn clients_that_all_return_leave_stuck_unset() {
        let mutex = Arc::new(tokio::sync::Mutex::new(()));
        let clients: Vec<Box<dyn Locker>> = vec![Box::new(Local(mutex.clone())), Box::new(Local(mutex))];
        let row = measure(clients, Duration::from_millis(100)).await;
        assert_eq!(row.stuck, None);
        assert!(row.fairness_min > Some(0));
        assert_eq!(row.counter_exact, Some(true));
    }
}
