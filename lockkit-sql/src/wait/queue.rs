//! The fair line's upkeep: the places this backend's callers hold in
//! `<table>_waiters`, and the task that renews their leases.
//!
//! Every waiter row has a lease by the database's clock
//! ([`SqlConfig::queue_lease`](crate::SqlConfig)); one task per backend
//! renews the leases of all of its waiters every third of the lease, in one
//! statement per 256 rows. A waiter whose process dies stops being renewed,
//! its row expires, and the head checks of the claims skip it from then on
//! (the sweeper deletes it later). After each renewal every waiter of the
//! backend is woken, to look again whether it became the head of the line:
//! the way it learns of a dead waiter ahead of it (also one of this
//! process, whose task vanished without leaving).
//!
//! A row can go while its waiter lives (its lease ran out during a long
//! pause, and it was swept): the renewal finds fewer rows than it renews,
//! and every waiter of the batch joins again (for those whose row is there
//! that only renews it; the others join at the back of the line).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::conn::{Arg, Db};
use crate::sql::Statements;

/// Waiter rows per renewal statement.
const RENEW_CHUNK: usize = 256;

/// One waiting acquisition's place, as the renewal task sees it.
#[derive(Debug)]
pub(crate) struct Place {
    /// Set when the renewal did not find every row it renewed: the waiter
    /// joins again.
    pub rejoin: AtomicBool,
    /// The waiter's wake-up (its entry in this process's line).
    pub notify: Arc<Notify>,
}

/// The places of this backend's waiters, by attempt id.
#[derive(Debug, Default)]
pub(crate) struct Places {
    places: Mutex<HashMap<String, Arc<Place>>>,
}

impl Places {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Place>>> {
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn insert(&self, attempt: &str, place: Arc<Place>) {
        self.lock().insert(attempt.to_owned(), place);
    }

    pub fn remove(&self, attempt: &str) {
        self.lock().remove(attempt);
    }

    fn snapshot(&self) -> Vec<(String, Arc<Place>)> {
        self.lock().iter().map(|(a, p)| (a.clone(), p.clone())).collect()
    }
}

/// Starts the renewal task; it stops with `stop`, closing `db` (the
/// line's pool).
pub(crate) fn spawn_renewer(db: Db, sql: Statements, places: Arc<Places>, lease: Duration, stop: CancellationToken) {
    tokio::spawn(async move {
        renew(&db, &sql, &places, lease, &stop).await;
        db.close().await;
    });
}

async fn renew(db: &Db, sql: &Statements, places: &Places, lease: Duration, stop: &CancellationToken) {
    let every = lease / 3;
    let lease_us = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
        let all = places.snapshot();
        if all.is_empty() {
            continue;
        }
        for chunk in all.chunks(RENEW_CHUNK) {
            let stmt: Arc<str> = sql.renew_many(chunk.len()).into();
            let mut args = vec![Arg::Int(lease_us)];
            args.extend(chunk.iter().map(|(a, _)| Arg::Text(Some(a))));
            let renewed = tokio::select! {
                _ = stop.cancelled() => return,
                r = db.exec(&stmt, &args) => r,
            };
            match renewed {
                Ok(done) if (done.rows as usize) < chunk.len() => {
                    for (_, place) in chunk {
                        place.rejoin.store(true, Ordering::Relaxed);
                        place.notify.notify_one();
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "lockkit could not renew its waiters' places; retrying");
                }
            }
        }
        // Every waiter looks again (one claim each per renewal): the
        // first in this process's line may be a waiter whose task is
        // gone without leaving (its runtime shut down), and a wake-up
        // sent to it would reach nobody.
        for (_, place) in &all {
            place.notify.notify_one();
        }
    }
}
