//! Retrying a statement: at once while it failed in a way that certainly
//! did not take effect, and for idempotent statements also after a lost
//! connection.

use std::future::Future;
use std::time::{Duration, Instant};

use lockkit_core::LockError;
use lockkit_core::raw::Backoff;

use crate::error::{Class, backend_error, classify};
use crate::handle::Inner;

/// How many times a statement that certainly did not take effect (deadlock,
/// lock wait timeout, busy database) is tried before the error is returned
/// (as retryable), and for how long at most: a SQLite writer already waits
/// out its busy timeout inside each try.
const TRANSIENT_TRIES: u32 = 30;
const TRANSIENT_BUDGET: Duration = Duration::from_secs(2);

impl Inner {
    /// Runs `op`, retrying it while it fails in a way that certainly did not
    /// take effect (deadlock, lock wait timeout, busy database).
    pub(crate) async fn retry<T, F, Fut>(
        &self,
        operation: &'static str,
        name: Option<&str>,
        op: F,
    ) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        Ok(self.retry_if(operation, name, false, op).await?.0)
    }

    /// [`retry`](Self::retry); with `idempotent`, also after a failure that
    /// may have taken effect (a connection lost mid-statement, e.g. a pooled
    /// connection the server closed when it restarted) — for statements that
    /// record or check the attempt id, so that a second run changes nothing
    /// the first did. Says whether such a failure happened.
    pub(crate) async fn retry_if<T, F, Fut>(
        &self,
        operation: &'static str,
        name: Option<&str>,
        idempotent: bool,
        mut op: F,
    ) -> Result<(T, bool), LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(50));
        let started = Instant::now();
        let mut tries = 0;
        let mut unsure = false;
        loop {
            let e = match op().await {
                Ok(v) => return Ok((v, unsure)),
                Err(e) => e,
            };
            let class = classify(&e);
            let again = class == Class::Transient || idempotent && class == Class::Retryable;
            if !again || tries + 1 >= TRANSIENT_TRIES || started.elapsed() >= TRANSIENT_BUDGET {
                return Err(backend_error(self.kind, operation, name, e));
            }
            tries += 1;
            unsure |= class == Class::Retryable;
            tracing::debug!(backend = self.kind, operation, error = %e, "transient failure; retrying");
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }
}
