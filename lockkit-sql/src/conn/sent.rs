//! When a lease's statement went out: the instant its lease counts from.
//!
//! A lease is good until the server's expiry, which the server sets when it
//! runs the statement, so the client counts it from the statement's send
//! time. That is when the statement had a connection, not when the call
//! began: a call can first wait for a pooled connection (the pool busy, or
//! opening connections) for longer than the lease, and counted from the
//! call's start it was granted already lost.
//!
//! [`timed`] runs a claim or an extension and says when its last statement
//! got its connection; [`Db`](crate::conn::Db) notes that with [`mark`]
//! right after taking a connection from the pool. Only the last statement
//! counts: in every claim and extension the statement that reports the
//! remaining lease (the expiry less the server's clock as it ran) is the
//! last one run.

use std::cell::Cell;
use std::future::Future;
use std::time::Instant;

tokio::task_local! {
    static SENT: Cell<Option<Instant>>;
}

/// Runs `work`; its output, and when its last statement got a connection
/// (`None`: it sent none).
pub(crate) async fn timed<F: Future>(work: F) -> (F::Output, Option<Instant>) {
    SENT.scope(Cell::new(None), async {
        let out = work.await;
        (out, SENT.with(Cell::get))
    })
    .await
}

/// Notes that a statement got its connection now (outside [`timed`]:
/// nothing).
pub(crate) fn mark() {
    let _ = SENT.try_with(|sent| sent.set(Some(Instant::now())));
}
