//! Semaphores and read-write locks
//! ([`LockKind::Permit`](lockkit_core::LockKind::Permit),
//! [`LockKind::Read`](lockkit_core::LockKind::Read),
//! [`LockKind::Write`](lockkit_core::LockKind::Write)): the rules
//! that grant a request (`rules.rs`), the claim (`claim.rs`, on what it
//! reads of the name, `name.rs`), release,
//! extension and inspection (`release.rs`), and the arguments and shares
//! that name a hold (`hold.rs`). The mutex keeps its own table and
//! statements; these kinds' holds live in `<table>_kinds` and
//! `<table>_holds` (see `sql/kinds.rs`), and their waiters in the mutex's
//! line (`wait/`).
//!
//! # How a hold is taken
//!
//! Each attempt is one transaction under a lock on the name's row in
//! `<table>_kinds` (`SELECT … FOR UPDATE`; SQLite: `BEGIN IMMEDIATE`, the
//! file's single writer): it reads the name's live holds (the rows of
//! `<table>_holds`, in `seq` order) and its line, decides by the rules of
//! `rules.rs` (those of the memory backend), and writes the new hold or the
//! joined share, taking a served waiter's place out. A new hold draws `seq` from the
//! name's counter (`last_token`, which only grows and stays with the
//! name's row); a permit's or a writer's token is that `seq`, so tokens
//! strictly grow per name and `seq` order is grant order. A read hold
//! carries the name's last write token (`last_write`). A release takes the
//! same lock first, so a share cannot join a hold that a release is
//! deleting (a claim that finds the hold it joins gone, swept after its
//! lease, looks again).
//!
//! # One name, one lock
//!
//! A name held as one kind refuses the others: a claim that would grant
//! (or join) a hold first takes the name's guard row in the lock table, in
//! the same transaction, and is busy while a mutex or the other family
//! holds that row (`guard.rs`). The mutex's statements see the guard as
//! another owner's hold. A waiter kept out by another kind is not told when
//! that kind's holds go by the server (its line is its kind's); the head of
//! its line looks again on its backoff (at most `max_backoff`), and a
//! release in the same process wakes it at once.
//!
//! Every attempt is idempotent by its attempt id (a repeat finds its share
//! in a hold's `attempts`), a release takes out exactly its share, so the
//! transactions are sent again after a lost connection, as the mutex's
//! statements are.
//!
//! # Waiting
//!
//! A `lock` that finds the name busy waits in the same line as a mutex's
//! waiter, with the same loop (`wait/`): a place in `<table>_waiters`
//! under the name's line key ([`line_key`](crate::wait::line_key); a
//! writer's place says so), renewed with every other place of the backend
//! and skipped once its process is gone. The claim reads the line's live
//! waiters: a permit or the write hold goes to the first in line, a read
//! hold to any reader with no writer waiting ahead of it. A release wakes
//! only the first waiter of the name in each process; a grant that leaves
//! room (a permit left, a reader in) wakes the next, and so on — so a
//! release of one permit wakes one waiter, a writer's release the readers
//! it lets in, one after the other.

mod claim;
mod guard;
mod hold;
mod name;
mod release;
mod rules;

#[cfg(all(test, feature = "sqlite"))]
pub(crate) mod tests {
    use std::time::Duration;

    use lockkit_core::LockKind;
    use lockkit_core::raw::{AcquireRequest, ExtendOutcome, Hold, LockBackend, ReleaseOutcome, TryAcquire};

    use crate::SqlBackend;
    use crate::config::{Dialect, SqlConfig};
    use crate::value::Arg;

    /// A fair request of `kind` for the name "n", ttl 30 s (also the
    /// line's tests').
    pub(crate) fn req<'a>(kind: LockKind, owner: &'a str, attempt: &'a str) -> AcquireRequest<'a> {
        AcquireRequest {
            name: "n",
            owner,
            ttl: Duration::from_secs(30),
            attempt,
            fair: true,
            kind,
        }
    }

    async fn take(backend: &SqlBackend, req: &AcquireRequest<'_>) -> Option<u64> {
        backend.try_acquire(req).await.unwrap().token()
    }

    /// The name "n" for a semaphore, "rw" for a read-write lock, "m" for a
    /// mutex: names of their own, so that holds of every kind stand at once.
    fn named<'a>(kind: LockKind, owner: &'a str, attempt: &'a str) -> AcquireRequest<'a> {
        let name = match kind {
            LockKind::Mutex => "m",
            LockKind::Permit { .. } => "n",
            _ => "rw",
        };
        AcquireRequest {
            name,
            ..req(kind, owner, attempt)
        }
    }

    /// One watchdog batch extends holds of every kind; a repeated release
    /// changes nothing.
    #[tokio::test]
    async fn kinds_beside_the_mutex() {
        let backend = SqlBackend::connect(SqlConfig::new(Dialect::Sqlite, ":memory:"))
            .await
            .unwrap();
        let permit = LockKind::Permit { permits: 1 };
        let m = take(&backend, &named(LockKind::Mutex, "a", "0000000000000001"))
            .await
            .unwrap();
        let p = take(&backend, &req(permit, "a", "0000000000000002")).await.unwrap();
        let w = take(&backend, &named(LockKind::Write, "a", "0000000000000003"))
            .await
            .unwrap();
        let r = take(&backend, &named(LockKind::Read, "a", "0000000000000004"))
            .await
            .unwrap();
        assert_eq!(r, w, "read under the own write carries its token");
        assert!(matches!(
            backend
                .try_acquire(&req(permit, "b", "0000000000000005"))
                .await
                .unwrap(),
            TryAcquire::Busy { .. }
        ));
        let hold = |kind, token| Hold {
            name: named(kind, "", "").name.to_owned(),
            owner: "a".to_owned(),
            token,
            kind,
        };
        let ttl = Duration::from_secs(60);
        let batch = [
            (hold(LockKind::Mutex, m), ttl),
            (hold(permit, p), ttl),
            (hold(LockKind::Write, w), ttl),
            (hold(LockKind::Read, r), ttl),
            (hold(permit, p + 100), ttl),
        ];
        let out = backend.extend_many(&batch).await;
        let extended: Vec<bool> = out
            .iter()
            .map(|o| matches!(o, Ok(ExtendOutcome::Extended { .. })))
            .collect();
        assert_eq!(extended, [true, true, true, true, false]);
        let released = backend.release(&hold(permit, p), "0000000000000002").await.unwrap();
        assert_eq!(released, ReleaseOutcome::Released { remaining: 0 });
        let again = backend.release(&hold(permit, p), "0000000000000002").await.unwrap();
        assert_eq!(again, ReleaseOutcome::NotHeld);
        let next = take(&backend, &req(permit, "b", "0000000000000005")).await.unwrap();
        assert!(next > p, "tokens grow per name");
        assert_eq!(backend.waiting_for("n", permit).await.unwrap(), 0);
        assert_eq!(backend.holders("rw", LockKind::Read).await.unwrap().len(), 1);

        // An abandoned permit: free at its lease end, and swept.
        let brief = AcquireRequest {
            ttl: Duration::from_millis(1),
            ..req(permit, "c", "0000000000000006")
        };
        let inner = &backend.inner;
        let of_b = Hold {
            owner: "b".to_owned(),
            ..hold(permit, next)
        };
        let released = backend.release(&of_b, "0000000000000005").await.unwrap();
        assert_eq!(released, ReleaseOutcome::Released { remaining: 0 });
        assert!(take(&backend, &brief).await.is_some());
        tokio::time::sleep(Duration::from_millis(20)).await;
        let swept = inner.db.exec(&inner.ksql.sweep, &[Arg::Int(100)]).await.unwrap();
        assert!(swept.rows >= 1, "the expired permit is swept");
        assert!(backend.holders("n", permit).await.unwrap().is_empty());
    }

    /// One name, one lock: a mutex keeps a permit off its name and a
    /// permit the mutex, whoever asks; inspect names the kind that holds
    /// it; the last permit's release frees the name at once.
    #[tokio::test]
    async fn one_name_one_lock() {
        let backend = SqlBackend::connect(SqlConfig::new(Dialect::Sqlite, ":memory:"))
            .await
            .unwrap();
        let permit = LockKind::Permit { permits: 2 };
        let m = take(&backend, &req(LockKind::Mutex, "a", "0000000000000001"))
            .await
            .unwrap();
        assert_eq!(take(&backend, &req(permit, "b", "0000000000000002")).await, None);
        assert_eq!(
            take(&backend, &req(LockKind::Read, "a", "0000000000000003")).await,
            None
        );
        let held = backend.inspect("n").await.unwrap().unwrap();
        assert_eq!((held.kind, held.owner.as_str()), (LockKind::Mutex, "a"));
        let mutex = |token| Hold {
            name: "n".to_owned(),
            owner: "a".to_owned(),
            token,
            kind: LockKind::Mutex,
        };
        backend.release(&mutex(m), "0000000000000001").await.unwrap();
        let p = take(&backend, &req(permit, "b", "0000000000000002")).await.unwrap();
        assert_eq!(
            take(&backend, &req(LockKind::Mutex, "a", "0000000000000004")).await,
            None
        );
        assert_eq!(
            take(&backend, &req(LockKind::Write, "a", "0000000000000005")).await,
            None
        );
        let held = backend.inspect("n").await.unwrap().unwrap();
        assert_eq!((held.kind, held.owner.as_str(), held.token), (permit, "b", p));
        let listed = backend.list("", 10).await.unwrap();
        assert_eq!(
            listed.iter().map(|i| i.kind).collect::<Vec<_>>(),
            [permit],
            "{listed:?}"
        );
        assert_eq!(
            backend.force_release("n").await.unwrap(),
            None,
            "the mutex's override spares the permit"
        );
        let of_b = Hold {
            owner: "b".to_owned(),
            kind: permit,
            ..mutex(p)
        };
        backend.release(&of_b, "0000000000000002").await.unwrap();
        assert!(
            backend.inspect("n").await.unwrap().is_none(),
            "the guard went with the last permit"
        );
        assert!(
            take(&backend, &req(LockKind::Mutex, "a", "0000000000000004"))
                .await
                .is_some()
        );
    }
}
