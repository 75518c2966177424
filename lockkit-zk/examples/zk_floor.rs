//! The ZooKeeper backend beside its floor: the fewest round trips one
//! acquire + release needs, sent with the same client crate.
//!
//! ```text
//! cargo run --release -p lockkit-zk --example zk_floor -- zk://127.0.0.1:12181/lockkit [SECONDS]
//! ```
//!
//! Prints, for SECONDS each (default 5; the uncontended measurements run in
//! five interleaved rounds, so a noisy neighbour hurts all of them alike):
//! - floor: a bare create-ephemeral + delete pair (two writes), and a bare
//!   read (one round trip, for scale);
//! - lockkit, uncontended: `lock` + `unlock` of one name by one client, and
//!   `try_lock` + `unlock`;
//! - lockkit, 16 waiters: 16 clients (own sessions) lock and unlock one name
//!   in a loop; hand-off latency is from one holder's `unlock` call to the
//!   next holder's `lock` returning.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit_core::url::ConnectUrl;
use lockkit_core::{LockClient, LockError, LockOptions};
use lockkit_zk::{ZkBackend, ZkConfig};
use zookeeper_client::{Acls, Client, CreateMode};

const WAITERS: usize = 16;
const ROUNDS: u32 = 5;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: floor zk://HOST:PORT[,HOST:PORT...]/CHROOT [SECONDS]")?;
    let secs: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(5);
    let run = Duration::from_secs(secs);
    let config = ZkConfig::from_url(&mut ConnectUrl::parse(&url)?)?;
    println!("{url}: {secs} s per measurement\n");

    // Make sure the chroot exists (the backend creates it).
    drop(ZkBackend::connect(config.clone()).await?);
    let chroot = if config.chroot == "/" { "" } else { &config.chroot };
    let raw = Client::connect(&format!("{}{chroot}", config.connect_string())).await?;
    let path = format!("/floor-{:016x}", rand::random::<u64>());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let client = LockClient::new(ZkBackend::connect(config.clone()).await?, LockOptions::new())?;
    let name = format!("floor/{:016x}", rand::random::<u64>());
    let (mut pair, mut read, mut lock, mut try_lock) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let slice = run / ROUNDS;
    for _ in 0..ROUNDS {
        pair.extend(
            measure(slice, || async {
                raw.create(&path, b"", &ephemeral).await?;
                raw.delete(&path, None).await?;
                Ok::<_, zookeeper_client::Error>(())
            })
            .await?,
        );
        read.extend(measure(slice, || async { raw.check_stat("/").await.map(drop) }).await?);
        lock.extend(
            measure(slice, || async {
                client.lock(&name).await?.unlock().await?;
                Ok::<_, LockError>(())
            })
            .await?,
        );
        try_lock.extend(
            measure(slice, || async {
                let g = client.try_lock(&name).await?.expect("uncontended");
                g.unlock().await?;
                Ok::<_, LockError>(())
            })
            .await?,
        );
    }
    report("floor: create ephemeral + delete", pair);
    report("floor: one read (exists)", read);
    report("lockkit: lock + unlock, uncontended", lock);
    report("lockkit: try_lock + unlock, uncontended", try_lock);

    handoffs(&config, run).await?;
    Ok(())
}

/// Runs `op` back to back for `run`; its latencies.
async fn measure<F, Fut, E>(run: Duration, mut op: F) -> Result<Vec<Duration>, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
{
    let started = Instant::now();
    let mut latencies = Vec::new();
    while started.elapsed() < run {
        let t = Instant::now();
        op().await?;
        latencies.push(t.elapsed());
    }
    Ok(latencies)
}

fn report(what: &str, mut latencies: Vec<Duration>) {
    let total: Duration = latencies.iter().sum();
    latencies.sort();
    let pct = |p: usize| latencies[(latencies.len() - 1) * p / 100];
    println!(
        "{what:<42} {:>8.0}/s   p50 {:>9.3?}   p99 {:>9.3?}",
        latencies.len() as f64 / total.as_secs_f64(),
        pct(50),
        pct(99)
    );
}

/// 16 clients hand one lock round; hand-off latency, switches per second,
/// and the worst wait.
async fn handoffs(config: &ZkConfig, run: Duration) -> Result<(), Box<dyn std::error::Error>> {
    let name = format!("floor-handoff/{:016x}", rand::random::<u64>());
    // (acquired, released, worker) of every hold
    let holds = Arc::new(Mutex::new(Vec::new()));
    let mut waits = Vec::new();
    let started = Instant::now() + Duration::from_millis(200);
    let mut tasks = Vec::new();
    for worker in 0..WAITERS {
        let client = LockClient::new(
            ZkBackend::connect(config.clone()).await?,
            LockOptions::new().wait(Duration::from_secs(60)),
        )?;
        let (name, holds) = (name.clone(), holds.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(started.into()).await;
            let mut waited = Vec::new();
            while started.elapsed() < run {
                let asked = Instant::now();
                let g = client.lock(&name).await?;
                let acquired = Instant::now();
                waited.push(acquired - asked);
                let released = Instant::now();
                g.unlock().await?;
                holds.lock().unwrap().push((acquired, released, worker));
            }
            Ok::<_, LockError>(waited)
        }));
    }
    for t in tasks {
        waits.extend(t.await??);
    }
    let mut holds = std::mem::take(&mut *holds.lock().unwrap());
    holds.sort_by_key(|h| h.0);
    let handoff: Vec<Duration> = holds
        .windows(2)
        .map(|w| w[1].0.saturating_duration_since(w[0].1))
        .collect();
    let switches = holds.windows(2).filter(|w| w[0].2 != w[1].2).count();
    let span = holds.last().map_or(run, |h| h.1 - holds[0].0);
    println!();
    report(&format!("lockkit: hand-off, {WAITERS} waiters"), handoff);
    println!(
        "{:<42} {:>8.0}/s   switches {:.0}/s   worst wait {:.3?}",
        "lockkit: acquisitions, 16 waiters",
        holds.len() as f64 / span.as_secs_f64(),
        switches as f64 / span.as_secs_f64(),
        waits.iter().max().copied().unwrap_or_default()
    );
    Ok(())
}
