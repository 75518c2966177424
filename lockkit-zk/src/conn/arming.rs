//! [`Arming`]: a held node waiting for its watch to be armed (see
//! [`super::watch`]).

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A held node waiting for its watch.
pub(super) struct Arming {
    pub(super) due: Instant,
    pub(super) path: String,
    pub(super) czxid: i64,
    pub(super) id: u64,
    pub(super) token: CancellationToken,
}
