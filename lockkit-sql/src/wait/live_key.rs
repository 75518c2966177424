//! A backend's liveness key ([`Live`]): the key its places in line name,
//! whether a connection carries it now, and when it was last renewed
//! (SQLite). `live.rs` starts what carries it and says how.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64};

use tokio::sync::OnceCell;

/// A backend's liveness key and whether it is carried now.
#[derive(Debug)]
pub(crate) struct Live {
    pub(super) key: i64,
    pub(super) held: Arc<AtomicBool>,
    #[cfg_attr(not(any(feature = "mysql", feature = "sqlite")), allow(dead_code))]
    pub(super) started: OnceCell<()>,
    /// SQLite: when the liveness row was last renewed (ms on the
    /// backend's clock, see [`Live::since`]); 0: never.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(super) renewed_ms: AtomicI64,
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(super) since: tokio::time::Instant,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            // Positive and never 0, which the statements take for "none".
            key: (rand::random::<u64>() >> 2) as i64 + 1,
            held: Arc::default(),
            started: OnceCell::new(),
            renewed_ms: AtomicI64::new(0),
            since: tokio::time::Instant::now(),
        }
    }
}

impl Live {
    /// The key (Postgres: the wait list takes it on each connection).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub fn key(&self) -> i64 {
        self.key
    }

    /// Set while the key is carried (Postgres: by the wait list).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub fn held_flag(&self) -> Arc<AtomicBool> {
        self.held.clone()
    }
}
