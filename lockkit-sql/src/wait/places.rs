//! The fair line's upkeep: the places this backend's callers hold in
//! `<table>_waiters`, and the task that renews their leases.
//!
//! Every waiter row has a lease by the database's clock
//! ([`SqlConfig::queue_lease`](crate::SqlConfig)); one task per backend
//! renews the leases of all of its waiters every third of the lease, in one
//! statement per 256 rows. A waiter whose process dies stops being renewed,
//! its row expires, and the head checks of the claims skip it from then on
//! (the sweeper deletes it later) — unless they skipped it already, by its
//! liveness key (`live.rs`). After each renewal the first waiter of each
//! name in this process looks again whether it became the head of the
//! line: the fallback for a wake-up nobody sent (a waiter ahead that died
//! after it was woken, a notification lost); the others wait their turn
//! behind it.
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

use super::listener::Waiters;
use crate::conn::Db;
use crate::sql::Statements;
use crate::value::Arg;

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

    /// Whether nobody of this backend waits in line.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn snapshot(&self) -> Vec<(String, Arc<Place>)> {
        self.lock().iter().map(|(a, p)| (a.clone(), p.clone())).collect()
    }
}

/// What the renewal task works on: the line's pool, the statements, the
/// backend's places and the process's registry of waiters.
pub(crate) struct Renewal {
    pub db: Db,
    pub sql: Statements,
    pub places: Arc<Places>,
    pub waiters: Arc<Waiters>,
}

/// Starts the renewal task; it stops with `stop`, closing the line's pool.
pub(crate) fn spawn_renewer(renewal: Renewal, lease: Duration, stop: CancellationToken) {
    tokio::spawn(async move {
        renew(&renewal, lease, &stop).await;
        renewal.db.close().await;
    });
}

/// Renews the places every third of `lease`, until `stop`.
async fn renew(renewal: &Renewal, lease: Duration, stop: &CancellationToken) {
    let Renewal {
        db,
        sql,
        places,
        waiters,
    } = renewal;
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
        // The first waiter of each name looks again (see the module docs).
        waiters.wake_all();
    }
}
