//! Waking waiters: a registry of the names this backend's callers wait for,
//! signalled by local releases and — on Postgres — by one `LISTEN`
//! connection per backend that hears every client's releases.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;

/// The names somebody in this process waits for, one [`Notify`] per name.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    names: Mutex<HashMap<Vec<u8>, Weak<Notify>>>,
}

/// One waiter's interest in a name; dropping it (also when the waiting
/// future is cancelled) forgets the name once nobody waits for it.
#[derive(Debug)]
pub(crate) struct Subscription {
    waiters: Arc<Waiters>,
    name: Vec<u8>,
    notify: Arc<Notify>,
}

impl Subscription {
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut names = self.waiters.names();
        // The map holds a weak reference: ours is the last strong one.
        if Arc::strong_count(&self.notify) == 1 {
            names.remove(&self.name);
        }
    }
}

impl Waiters {
    fn names(&self) -> MutexGuard<'_, HashMap<Vec<u8>, Weak<Notify>>> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers interest in `name`.
    pub fn subscribe(self: &Arc<Self>, name: &[u8]) -> Subscription {
        let mut names = self.names();
        if names.len() >= 1024 {
            // Entries a racing `wake` kept alive past their last drop.
            names.retain(|_, n| n.strong_count() > 0);
        }
        let notify = match names.get(name).and_then(Weak::upgrade) {
            Some(n) => n,
            None => {
                let n = Arc::new(Notify::new());
                names.insert(name.to_vec(), Arc::downgrade(&n));
                n
            }
        };
        Subscription {
            waiters: self.clone(),
            name: name.to_vec(),
            notify,
        }
    }

    /// `name` was released: wake its waiters.
    pub fn wake(&self, name: &[u8]) {
        let notify = self.names().get(name).and_then(Weak::upgrade);
        if let Some(n) = notify {
            n.notify_waiters();
        }
    }

    /// Releases may have been missed (the listener reconnected): wake all.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub fn wake_all(&self) {
        let all: Vec<Arc<Notify>> = self.names().values().filter_map(Weak::upgrade).collect();
        for n in all {
            n.notify_waiters();
        }
    }

    /// How many names are waited for (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.names().len()
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

/// Postgres: one connection per backend `LISTEN`s on the table's channel
/// and wakes the waiters of each released name. Reconnects on its own; after
/// a reconnect it wakes every waiter, since releases may have been missed
/// meanwhile (waiters also retry on their backoff, so a missed notification
/// delays a waiter, it never strands it).
#[cfg(feature = "postgres")]
pub(crate) fn spawn_pg_listener(
    options: sqlx::postgres::PgConnectOptions,
    connect_timeout: std::time::Duration,
    channel: String,
    waiters: Arc<Waiters>,
    stop: tokio_util::sync::CancellationToken,
) {
    use lockkit_core::backoff::Backoff;
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
            waiters.wake_all();
            loop {
                let received = tokio::select! {
                    _ = stop.cancelled() => break 'connect,
                    r = listener.try_recv() => r,
                };
                match received {
                    Ok(Some(n)) => {
                        if let Some(name) = decode_hex(n.payload()) {
                            waiters.wake(&name);
                        }
                    }
                    // Connection lost; the next try_recv reconnects.
                    Ok(None) => waiters.wake_all(),
                    Err(e) => {
                        tracing::debug!(error = %e, "lockkit postgres listener failed; reconnecting");
                        waiters.wake_all();
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

    #[tokio::test]
    async fn subscriptions_come_and_go() {
        let waiters = Arc::new(Waiters::default());
        let a = waiters.subscribe(b"n");
        let b = waiters.subscribe(b"n");
        assert_eq!(waiters.len(), 1);
        {
            let notified = a.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            waiters.wake(b"n");
            tokio::time::timeout(std::time::Duration::from_secs(5), notified)
                .await
                .expect("woken");
        }
        drop(a);
        assert_eq!(waiters.len(), 1, "b still waits");
        drop(b);
        assert_eq!(waiters.len(), 0, "no entry left behind");
    }
}
