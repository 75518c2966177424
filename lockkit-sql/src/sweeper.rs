//! The sweeper: a background task that
//! deletes expired rows in small batches, so a crashed holder's row does not
//! stay in the table forever.
//!
//! An expired row is already free — the next acquirer takes it over — so the
//! sweeper only keeps the table small. Several clients sweeping the same
//! table at once is safe: each statement deletes only rows that are expired
//! when it runs (re-checked under the row lock, so a row taken over meanwhile
//! stays), in batches of `sweep_batch` (Postgres skips rows another sweeper
//! has locked). The first sweep and every pause are jittered, so clients
//! started together do not sweep in lockstep. The task stops when the backend
//! is dropped.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::conn::Db;
use crate::value::Arg;

/// Sweeps in a row without a pause at most, when every batch comes back full.
const MAX_BATCHES_PER_SWEEP: u32 = 100;

/// Starts the sweeper: each round runs every statement of `sweeps` (expired
/// holds, expired waiter rows) in batches.
pub(crate) fn spawn(db: Db, sweeps: Vec<Arc<str>>, interval: Duration, batch: u64, stop: CancellationToken) {
    tokio::spawn(async move {
        loop {
            // Between 3/4 of the interval and the whole interval.
            let pause = interval.mul_f64(0.75 + rand::random::<f64>() / 4.0);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(pause) => {}
            }
            let mut deleted = 0u64;
            for sweep in &sweeps {
                for _ in 0..MAX_BATCHES_PER_SWEEP {
                    let args = [Arg::Int(batch as i64)];
                    let result = tokio::select! {
                        _ = stop.cancelled() => break,
                        r = db.exec(sweep, &args) => r,
                    };
                    match result {
                        Ok(done) => {
                            deleted += done.rows;
                            if done.rows < batch {
                                break;
                            }
                        }
                        Err(e) => {
                            // Another sweeper, a deadlock, a restart: try next time.
                            tracing::debug!(error = %e, "lockkit sweep failed; retrying at the next interval");
                            break;
                        }
                    }
                }
            }
            if deleted > 0 {
                tracing::debug!(deleted, "lockkit sweeper deleted expired rows");
            }
        }
        db.close().await;
    });
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use std::sync::Arc;

    use lockkit_core::testkit::server_url;

    use crate::SqlBackend;
    use crate::config::{Dialect, SqlConfig};
    use crate::value::{Arg, Col, text};

    /// A sweep costs PostgreSQL no JIT compilation. The sweeps scan the
    /// table (no index serves them), and with sequential scans disabled
    /// for every other statement their estimated cost passed the JIT
    /// thresholds: a sweep spent far more server CPU compiling than
    /// working, and clients that sweep every second starved the server.
    #[tokio::test]
    async fn sweeps_are_not_jit_compiled() {
        let Some(url) = server_url("LOCKKIT_POSTGRES_URL") else {
            return;
        };
        let backend = SqlBackend::connect(SqlConfig::new(Dialect::Postgres, url))
            .await
            .unwrap();
        let inner = &backend.inner;
        for sweep in [&inner.sql.sweep, &inner.ksql.sweep] {
            let explain: Arc<str> = format!("EXPLAIN {sweep}").into();
            let plan = inner.db.fetch(&explain, &[Arg::Int(1000)], &[Col::Text]).await.unwrap();
            let lines: Vec<String> = plan
                .into_iter()
                .filter_map(|r| r.into_iter().next())
                .map(text)
                .collect();
            assert!(!lines.is_empty(), "a plan");
            assert!(
                !lines.iter().any(|l| l.trim_start().starts_with("JIT")),
                "{sweep}\n{}",
                lines.join("\n")
            );
        }
    }
}
