//! A holder whose process stalls keeps its hold while its session lives.
//!
//! The waiter behind a node may take it out of the line when its session
//! stops refreshing its liveness record (a dead waiter, see
//! `lockkit_zk`'s `dead` module). A node that holds must never look like
//! that: a holder granted after a wait whose process then stalls for a
//! second (its runtime blocked: no heartbeat, no background task runs),
//! with a waiter behind it looking, still holds afterwards — its lease is
//! 60 s and its session outlives the stall.
#![cfg(feature = "zookeeper")]

use std::time::Duration;

use lockkit::{LockClient, LockGuard, LockKind};

use crate::common::unique;
use crate::support::{BOUND, process, server};

/// How long the holder's process stalls: far above the liveness record's
/// staleness bound, far below the session timeout.
const STALL: Duration = Duration::from_secs(1);

/// What each case asks for: the kind, and how one takes it.
#[derive(Clone, Copy, Debug)]
enum Want {
    Lock,
    Permit,
    Read,
    Write,
}

impl Want {
    async fn take(self, client: &LockClient, name: &str) -> LockGuard {
        let opts = client.options().ttl(Duration::from_secs(60)).wait(BOUND);
        match self {
            Want::Lock => client.lock_with(name, &opts).await,
            Want::Permit => client.semaphore(name, 1).unwrap().acquire_with(&opts).await,
            Want::Read => client.rw_lock(name).unwrap().read_with(&opts).await,
            Want::Write => client.rw_lock(name).unwrap().write_with(&opts).await,
        }
        .unwrap_or_else(|e| panic!("{self:?}: {e}"))
    }

    /// The kind whose line the holder queues in.
    fn kind(self) -> LockKind {
        match self {
            Want::Lock => LockKind::Mutex,
            Want::Permit => LockKind::Permit { permits: 1 },
            Want::Read => LockKind::Read,
            Want::Write => LockKind::Write,
        }
    }

    /// What the first holder and the waiter behind take, so that the stalled
    /// one waits first and is waited for after.
    fn around(self) -> Want {
        match self {
            Want::Read => Want::Write,
            other => other,
        }
    }
}

/// Waits (up to [`BOUND`]) until `n` wait for `name` as `kind`.
async fn until_waiting(client: &LockClient, name: &str, kind: LockKind, n: usize) {
    let deadline = tokio::time::Instant::now() + BOUND;
    while client.backend().waiting_for(name, kind).await.expect("waiting") < n {
        assert!(tokio::time::Instant::now() < deadline, "{n} not waiting for {name}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One case: A holds, H (a process of its own) waits, then C behind it; A
/// lets go, H is granted and its process stalls for [`STALL`] at once.
async fn stalled_holder(want: Want) {
    let Some(server) = server() else { return };
    let name = unique(&format!("stalled_holder_{want:?}"));
    let (_, a) = process(&server, None).await;
    let (_, c) = process(&server, None).await;
    let first = want.around().take(&a, &name).await;
    // H lives on a runtime of one thread, which the stall blocks: nothing
    // of H's process runs meanwhile (as when its machine is starved).
    let stalled = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime for the stalled holder");
    let (url, n) = (server.url.clone(), name.clone());
    let h = stalled.spawn(async move {
        let backend = lockkit::connect(&url).await.expect("H connects");
        let g = want.take(&backend, &n).await;
        std::thread::sleep(STALL);
        let lost = g.is_lost();
        (lost, g.unlock().await)
    });
    until_waiting(&a, &name, want.kind(), 1).await;
    let behind = {
        let (c, name) = (c.clone(), name.clone());
        tokio::spawn(async move { want.around().take(&c, &name).await })
    };
    until_waiting(
        &a,
        &name,
        want.around().kind(),
        if want.kind() == want.around().kind() { 2 } else { 1 },
    )
    .await;
    first.unlock().await.expect("A lets go");
    let (lost, unlocked) = tokio::time::timeout(BOUND, h)
        .await
        .expect("H is granted and lets go")
        .expect("H's task");
    assert!(!lost, "{want:?}: a stall of {STALL:?} lost a hold whose session lived");
    unlocked.unwrap_or_else(|e| panic!("{want:?}: H's unlock after the stall: {e}"));
    let g = tokio::time::timeout(BOUND, behind)
        .await
        .expect("C is served after H")
        .expect("C's task");
    g.unlock().await.expect("C lets go");
    stalled.shutdown_background();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_mutex_holder_keeps_its_hold() {
    stalled_holder(Want::Lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_permit_holder_keeps_its_permit() {
    stalled_holder(Want::Permit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_keeps_its_hold() {
    stalled_holder(Want::Read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_writer_keeps_its_hold() {
    stalled_holder(Want::Write).await;
}
