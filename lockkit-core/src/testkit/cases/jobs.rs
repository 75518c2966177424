//! Scheduled-job locks
//! ([`LockClient::run_exclusive`](crate::LockClient::run_exclusive)): one
//! run among many callers, the name blocked for `at_least` after a job
//! that ended early, and `at_most` ending a job that runs on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::{Instant, timeout};

use crate::recipes::JobLimits;
use crate::testkit::kit::{Kit, error_chain};
use crate::{LockClient, LockError};

async fn run_quick(client: &LockClient, name: &str, limits: JobLimits, ran: &AtomicUsize) -> Option<u64> {
    client
        .run_exclusive(name, limits, |ctx| async move {
            ran.fetch_add(1, Ordering::SeqCst);
            ctx.token()
        })
        .await
        .unwrap_or_else(|e| panic!("run_exclusive {name:?}: {}", error_chain(&e)))
}

/// Fired on five clients at once, a job runs once; ending at once, it
/// keeps the name blocked for `at_least` (callers meanwhile do not run
/// it), and not much past it.
pub async fn job_runs_once_and_at_least_holds(kit: &Kit) {
    let clients = join_all((0..7).map(|_| kit.client())).await;
    let name = kit.name("job");
    let ran = Arc::new(AtomicUsize::new(0));
    // Blocked for a third of the kit's bound: the callers after the first
    // run come well within it, however slow the machine. (With session
    // leases the run that took it returns only then.)
    let limits = JobLimits::new(kit.bound / 3, kit.bound);
    let runs: Vec<_> = clients[..5]
        .iter()
        .map(|c| {
            let (c, name, ran) = (c.clone(), name.clone(), ran.clone());
            tokio::spawn(async move { run_quick(&c, &name, limits, &ran).await })
        })
        .collect();
    let deadline = Instant::now() + kit.bound;
    while ran.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no caller ran the job");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for c in &clients[5..] {
        assert_eq!(
            run_quick(c, &name, limits, &ran).await,
            None,
            "run again within at_least"
        );
    }
    let outputs: Vec<Option<u64>> = join_all(runs).await.into_iter().map(|r| r.expect("task")).collect();
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the job ran more than once: {outputs:?}");
    assert_eq!(outputs.iter().flatten().count(), 1);

    // A short at_least: blocked until it passes, then free.
    let name = kit.name("job_short");
    let at_least = kit.ttl;
    let started = Instant::now();
    let first = run_quick(&clients[0], &name, JobLimits::new(at_least, kit.bound), &ran).await;
    assert!(first.is_some());
    let deadline = started + kit.bound;
    let again = loop {
        if let Some(token) = run_quick(&clients[1], &name, JobLimits::new(Duration::ZERO, kit.bound), &ran).await {
            break (Instant::now(), token);
        }
        assert!(
            Instant::now() < deadline,
            "the name stayed blocked past at_least and the kit's bound"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(again.0 >= started + at_least, "free before at_least passed");
    assert!(again.1 > first.unwrap(), "the next run's token is greater");
}

/// A job still running at `at_most` is told to stop (its context's
/// `lost()` fires), and the name is free for the next run.
pub async fn job_at_most_stops(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    let name = kit.name("job_long");
    let at_most = kit.ttl;
    let started = Instant::now();
    let bound = kit.bound;
    let stopped = a
        .run_exclusive(&name, JobLimits::new(Duration::ZERO, at_most), |ctx| async move {
            timeout(bound, ctx.lost()).await.is_ok().then(Instant::now)
        })
        .await
        .unwrap_or_else(|e| panic!("run_exclusive: {}", error_chain(&e)))
        .expect("the job ran");
    let stopped = stopped.expect("the job was told to stop at at_most");
    // (At the lease's end: at_most less the allowance for clock drift.)
    assert!(stopped >= started + at_most / 2, "told to stop long before at_most");
    let next = timeout(kit.bound, async {
        loop {
            match b.try_lock(&name).await {
                Ok(Some(g)) => break g,
                Ok(None) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => panic!("try_lock: {}", error_chain(&e)),
            }
        }
    })
    .await
    .expect("the name free after at_most");
    next.unlock().await.expect("unlock");

    // Limits that make no sense are refused before anything is taken.
    match a
        .run_exclusive(
            &name,
            JobLimits::new(Duration::from_secs(2), Duration::from_secs(1)),
            |_| async {},
        )
        .await
    {
        Err(LockError::InvalidConfig { .. }) => {}
        other => panic!("at_least above at_most must be InvalidConfig, got {other:?}"),
    }
}
