//! Postgres: the `LISTEN` connection that hears every client's releases of
//! a table's names, and wakes the waiters of this process's registry
//! ([`Waiters`]) for each.

#[cfg(feature = "postgres")]
use std::sync::{Arc, Weak};

use super::listener::Waiters;

impl Waiters {
    /// A release notification (Postgres): `NAME_HEX` or `NAME_HEX TOKEN`.
    /// Wakes the name's waiters unless this process released that hold
    /// itself (and woke them then).
    #[cfg(feature = "postgres")]
    fn notified(&self, payload: &str) {
        let (hex, token) = match payload.split_once(' ') {
            Some((hex, token)) => (hex, token.parse::<i64>().ok()),
            None => (payload, None),
        };
        let Some(name) = decode_hex(hex) else { return };
        if let Some(token) = token {
            let recent = self.released.lock().unwrap_or_else(|e| e.into_inner());
            if recent.iter().any(|(n, t)| *t == token && *n == name) {
                return;
            }
        }
        self.wake(&name);
    }

    /// Postgres: hears releases on `channel` from now on, with one `LISTEN`
    /// connection for every backend that shares this registry (the first
    /// call starts it; it stops with the registry). One connection per
    /// backend would have the server signal and feed each of them on every
    /// release, and wake this process's first waiter once per backend.
    #[cfg(feature = "postgres")]
    pub fn listen_pg(
        self: &Arc<Self>,
        options: sqlx::postgres::PgConnectOptions,
        connect_timeout: std::time::Duration,
        channel: String,
    ) {
        let stop = tokio_util::sync::CancellationToken::new();
        if self.listener.set(stop.clone()).is_ok() {
            spawn_pg_listener(options, connect_timeout, channel, Arc::downgrade(self), stop);
        }
    }
}

/// The hex payload of a release notification, back to the name's bytes.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Postgres: one connection per registry `LISTEN`s on the table's channel
/// and wakes the waiters of each released name. Reconnects on its own; after
/// a reconnect it wakes every waiter, since releases may have been missed
/// meanwhile (waiters also retry on their backoff, so a missed notification
/// delays a waiter, it never strands it).
#[cfg(feature = "postgres")]
fn spawn_pg_listener(
    options: sqlx::postgres::PgConnectOptions,
    connect_timeout: std::time::Duration,
    channel: String,
    waiters: Weak<Waiters>,
    stop: tokio_util::sync::CancellationToken,
) {
    use lockkit_core::raw::Backoff;
    use sqlx::postgres::{PgListener, PgPoolOptions};
    use std::time::Duration;

    tokio::spawn(async move {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(connect_timeout)
            .connect_lazy_with(options);
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        'connect: loop {
            let listening = async {
                let mut l = PgListener::connect_with(&pool).await?;
                l.listen(&channel).await?;
                Ok::<_, sqlx::Error>(l)
            };
            let mut listener = tokio::select! {
                _ = stop.cancelled() => break 'connect,
                r = listening => match r {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::debug!(error = %e, "lockkit postgres listener cannot connect; retrying");
                        tokio::select! {
                            _ = stop.cancelled() => break 'connect,
                            _ = tokio::time::sleep(backoff.next_delay()) => continue 'connect,
                        }
                    }
                },
            };
            backoff.reset();
            // Anything released before LISTEN took effect went unheard.
            let wake_all = || {
                if let Some(w) = waiters.upgrade() {
                    w.wake_all();
                }
            };
            wake_all();
            loop {
                let received = tokio::select! {
                    _ = stop.cancelled() => break 'connect,
                    r = listener.try_recv() => r,
                };
                match received {
                    Ok(Some(n)) => {
                        if let Some(w) = waiters.upgrade() {
                            w.notified(n.payload());
                        }
                    }
                    // Connection lost; the next try_recv reconnects.
                    Ok(None) => wake_all(),
                    Err(e) => {
                        tracing::debug!(error = %e, "lockkit postgres listener failed; reconnecting");
                        wake_all();
                        tokio::select! {
                            _ = stop.cancelled() => break 'connect,
                            _ = tokio::time::sleep(backoff.next_delay()) => continue 'connect,
                        }
                    }
                }
            }
        }
        pool.close().await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_payloads() {
        assert_eq!(decode_hex("00ff41"), Some(vec![0, 255, b'A']));
        assert_eq!(decode_hex("0"), None);
        assert_eq!(decode_hex("zz"), None);
        assert_eq!(decode_hex("é1"), None);
    }
}
