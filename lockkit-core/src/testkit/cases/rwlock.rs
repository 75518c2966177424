//! Read-write locks ([`LockKind::Read`], [`LockKind::Write`]): readers
//! share, a writer is alone, a waiting writer keeps new readers out, both
//! re-enter by owner, a write hold downgrades, a read hold does not
//! upgrade, tokens order the writers and readers carry the last one's, and
//! a crashed writer's hold ends with its lease.
//!
//! A backend that does not declare [`Capabilities::rw_locks`] must refuse
//! them with [`LockError::Unsupported`]; that is what these cases check
//! there.
//!
//! [`Capabilities::rw_locks`]: crate::backend::Capabilities::rw_locks

use std::time::Instant;

use tokio::time::timeout;

use super::steps::{must_unlock, ttl_leases, until_waiting};
use crate::backend::LockKind;
use crate::testkit::kit::{Kit, error_chain};
use crate::{LockClient, LockError, LockGuard, LockOptions, RwLock};

/// Whether the backend has read-write locks; where it does not, checks
/// that it says so.
pub(super) async fn supported(kit: &Kit, client: &LockClient, case: &str) -> bool {
    if client.capabilities().rw_locks {
        return true;
    }
    let rw = client.rw_lock(&kit.name(case)).expect("a read-write lock handle");
    match rw.try_read().await {
        Err(LockError::Unsupported { .. }) => {
            eprintln!("{}: {case}: no read-write locks (Capabilities::rw_locks)", kit.label());
            false
        }
        other => panic!("a backend without read-write locks must say Unsupported, got {other:?}"),
    }
}

async fn read(rw: &RwLock, opts: &LockOptions) -> LockGuard {
    rw.read_with(opts)
        .await
        .unwrap_or_else(|e| panic!("read {:?}: {}", rw.name(), error_chain(&e)))
}

async fn write(rw: &RwLock, opts: &LockOptions) -> LockGuard {
    rw.write_with(opts)
        .await
        .unwrap_or_else(|e| panic!("write {:?}: {}", rw.name(), error_chain(&e)))
}

async fn try_read(rw: &RwLock) -> Option<LockGuard> {
    rw.try_read()
        .await
        .unwrap_or_else(|e| panic!("try_read {:?}: {}", rw.name(), error_chain(&e)))
}

async fn try_write(rw: &RwLock) -> Option<LockGuard> {
    rw.try_write()
        .await
        .unwrap_or_else(|e| panic!("try_write {:?}: {}", rw.name(), error_chain(&e)))
}

/// Readers of two owners share the lock; no writer beside them; a writer
/// is alone, with a token above every earlier writer's; readers carry the
/// last writer's token.
pub async fn rw_exclusion_and_tokens(kit: &Kit) {
    let (a, b, c) = (kit.client().await, kit.client().await, kit.client().await);
    if !supported(kit, &a, "rw_exclusion_and_tokens").await {
        return;
    }
    let name = kit.name("rw_exclusion");
    let (ra, rb, rc) = (
        a.rw_lock(&name).unwrap(),
        b.rw_lock(&name).unwrap(),
        c.rw_lock(&name).unwrap(),
    );
    let w1 = write(&rc, &kit.long(&c)).await;
    assert_eq!(w1.kind(), LockKind::Write);
    let first_write = w1.fencing_token();
    assert!(try_read(&ra).await.is_none(), "a reader beside a writer");
    assert!(try_write(&rb).await.is_none(), "a second writer");
    assert_eq!(must_unlock(w1).await, 0);

    let r_a = read(&ra, &kit.long(&a)).await;
    let r_b = read(&rb, &kit.long(&b)).await;
    assert_eq!(
        (r_a.fencing_token(), r_b.fencing_token()),
        (first_write, first_write),
        "readers carry the last writer's token"
    );
    assert!(try_write(&rc).await.is_none(), "a writer beside readers");
    let readers: Vec<String> = ra.readers().await.unwrap().into_iter().map(|i| i.owner).collect();
    assert_eq!(readers, [a.owner().to_owned(), b.owner().to_owned()]);
    assert_eq!(ra.writer().await.unwrap(), None);
    must_unlock(r_a).await;
    assert!(
        try_write(&rc).await.is_none(),
        "one reader left is still in the writer's way"
    );
    must_unlock(r_b).await;

    let w2 = try_write(&rc).await.expect("free once the readers left");
    assert!(
        w2.fencing_token() > first_write,
        "a writer orders after every earlier writer"
    );
    let writer = ra.writer().await.unwrap().map(|i| (i.owner, i.token));
    assert_eq!(writer, Some((c.owner().to_owned(), w2.fencing_token())));
    must_unlock(w2).await;
    // Every hold of the read-write lock gone, the name is free for any kind.
    let mutex = a
        .try_lock(&name)
        .await
        .unwrap()
        .expect("a name no read-write hold holds is free for a mutex");
    must_unlock(mutex).await;
}

/// A writer that waits keeps new readers out (no writer starvation): it
/// gets the lock when the readers before it leave, before any reader that
/// came after it.
pub async fn rw_writer_not_starved(kit: &Kit) {
    let (a, b, w) = (kit.client().await, kit.client().await, kit.client().await);
    if !supported(kit, &a, "rw_writer_not_starved").await {
        return;
    }
    let name = kit.name("rw_writer_not_starved");
    let (ra, rb, rw) = (
        a.rw_lock(&name).unwrap(),
        b.rw_lock(&name).unwrap(),
        w.rw_lock(&name).unwrap(),
    );
    let first = read(&ra, &kit.long(&a)).await;
    let writer = {
        let (rw, opts) = (rw.clone(), kit.long(&w));
        tokio::spawn(async move { write(&rw, &opts).await })
    };
    until_waiting(kit, &a, &name, LockKind::Write, 1).await;
    assert!(try_read(&rb).await.is_none(), "a new reader passed a waiting writer");
    let late_reader = {
        let (rb, opts) = (rb.clone(), kit.long(&b));
        tokio::spawn(async move { read(&rb, &opts).await })
    };
    until_waiting(kit, &a, &name, LockKind::Read, 2).await;
    let again = read(&ra, &kit.long(&a)).await;
    assert_eq!(
        again.hold_count(),
        2,
        "a reader re-enters its own read hold while a writer waits"
    );
    must_unlock(again).await;
    must_unlock(first).await;
    let w_guard = timeout(kit.bound, writer)
        .await
        .expect("the writer gets the lock once the readers before it left")
        .expect("writer task");
    assert!(!late_reader.is_finished(), "the reader after the writer waits for it");
    must_unlock(w_guard).await;
    let late = timeout(kit.bound, late_reader)
        .await
        .expect("the late reader follows the writer")
        .expect("reader task");
    must_unlock(late).await;
}

/// Re-entry by owner for both, reading under one's own write hold,
/// downgrading a write hold, and no upgrade of a read hold.
pub async fn rw_reentry_and_downgrade(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    if !supported(kit, &a, "rw_reentry_and_downgrade").await {
        return;
    }
    let name = kit.name("rw_reentry");
    let (ra, rb) = (a.rw_lock(&name).unwrap(), b.rw_lock(&name).unwrap());
    let w1 = write(&ra, &kit.long(&a)).await;
    let w2 = write(&ra, &kit.long(&a)).await;
    assert_eq!(
        (w2.hold_count(), w2.fencing_token()),
        (2, w1.fencing_token()),
        "a writer re-enters"
    );
    must_unlock(w2).await;
    let r_under = read(&ra, &kit.long(&a)).await;
    assert_eq!(
        r_under.fencing_token(),
        w1.fencing_token(),
        "the owner reads under its own write hold"
    );
    must_unlock(r_under).await;

    let readers_waiting = {
        let (rb, opts) = (rb.clone(), kit.long(&b));
        tokio::spawn(async move { read(&rb, &opts).await })
    };
    until_waiting(kit, &a, &name, LockKind::Read, 1).await;
    let token = w1.fencing_token();
    let down = w1
        .downgrade()
        .await
        .unwrap_or_else(|e| panic!("downgrade: {}", error_chain(&e)));
    assert_eq!((down.kind(), down.fencing_token()), (LockKind::Read, token));
    let b_read = timeout(kit.bound, readers_waiting)
        .await
        .expect("a waiting reader comes in beside the downgraded hold")
        .expect("reader task");
    assert_eq!(b_read.fencing_token(), token);

    match ra.try_write().await {
        Err(LockError::Conflict { .. }) => {}
        other => panic!("a read hold must not upgrade (Conflict), got {other:?}"),
    }
    match down.downgrade().await {
        Err(LockError::Conflict { .. }) => {}
        other => panic!("only a write hold downgrades, got {other:?}"),
    }
    must_unlock(b_read).await;
    let free = timeout(kit.bound, write(&rb, &kit.long(&b))).await.expect("free again");
    assert!(free.fencing_token() > token);
    must_unlock(free).await;
}

/// A writer that crashes keeps readers out until its lease ends, not
/// longer.
pub async fn rw_crash_release(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    if !supported(kit, &b, "rw_crash_release").await {
        return;
    }
    let name = kit.name("rw_crash_release");
    let rb = b.rw_lock(&name).unwrap();
    let crashed = write(&a.rw_lock(&name).unwrap(), &kit.short(&a)).await;
    let valid_until = crashed.valid_until().filter(|_| ttl_leases(&a));
    let token = crashed.fencing_token();
    crashed.abandon();
    drop(a);
    if let Some(valid_until) = valid_until
        && Instant::now() < valid_until
    {
        assert!(
            try_read(&rb).await.is_none(),
            "a crashed writer's hold runs to its lease's end"
        );
    }
    let r = timeout(kit.bound, read(&rb, &kit.long(&b)))
        .await
        .expect("a crashed writer's hold must end within its lease");
    if let Some(valid_until) = valid_until {
        assert!(
            Instant::now() >= valid_until,
            "read before the crashed writer's lease could end"
        );
    }
    assert_eq!(
        r.fencing_token(),
        token,
        "the reader sees the crashed writer's token, the last one"
    );
    must_unlock(r).await;
}
