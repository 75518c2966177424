//! The restart guard's marker ([`MARKER`]): read on every server of a
//! Redlock set when one of them lost its data, written on that server
//! with its quarantine, and raised with every extension.
//!
//! A server that lost its data (restarted without persistence, flushed,
//! its keys evicted) also lost the holds it carried, while their holders
//! still count on them until their leases end: with a hold on a bare
//! Redlock quorum, or on a single server, a second owner could be granted
//! at once. With the guard on, every acquisition checks the server's
//! marker (`Pnode`, see `layout`) in the same script: a server without it
//! refuses, the client sets its quarantine ([`set_quarantine`]), and the
//! server refuses every acquisition until the quarantine is over. Releases,
//! undos and reads are not refused: they only take away.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation, Value};

use super::reply::{int, unexpected};
use crate::error::Fault;
use crate::layout::Keys;

/// Reads a server's marker, or sets it with its quarantine.
///
/// KEYS: the marker. ARGV: 1. the quarantine (ms) of a server found
/// without a marker, which gets one (`''`: only read), 2. the lease (ms) of
/// an extension about to be made: the marker's lease bound covers it (`''`:
/// none). Returns `{1, quarantine left, lease bound left}` (ms, at least 0),
/// or `{0}`: no marker.
pub(super) static MARKER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/guard.lua"),
        include_str!("../lua/marker.lua")
    ))
});

/// A server's restart-guard marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    /// None: the server lost its data, or never carried lockkit's holds.
    Missing,
    /// The server has its marker.
    Present {
        /// How long it stays quarantined (ms; 0: not).
        quarantine_ms: u64,
        /// How long a lease it granted may still run (ms).
        bound_ms: u64,
    },
}

/// The marker call: `quarantine_ms` for a server without one (`None`: read
/// only), raising the lease bound for an extension of `extend_ms`.
pub(super) fn marker_call(
    keys: &Keys,
    quarantine_ms: Option<u64>,
    extend_ms: Option<u64>,
) -> ScriptInvocation<'static> {
    let mut inv = MARKER.key(keys.marker());
    inv.arg(quarantine_ms.map(|q| q.to_string()).unwrap_or_default())
        .arg(extend_ms.map(|e| e.to_string()).unwrap_or_default());
    inv
}

fn parse_marker(v: &Value) -> Result<Marker, Fault> {
    let bad = || Fault::from(unexpected("marker", v));
    let Value::Array(items) = v else { return Err(bad()) };
    let ms = |i: usize| items.get(i).and_then(int).and_then(|n| u64::try_from(n).ok());
    match (ms(0), ms(1), ms(2)) {
        (Some(0), None, None) => Ok(Marker::Missing),
        (Some(1), Some(quarantine_ms), Some(bound_ms)) => Ok(Marker::Present {
            quarantine_ms,
            bound_ms,
        }),
        _ => Err(bad()),
    }
}

/// Reads a server's marker.
pub(crate) async fn read_marker<C: ConnectionLike + Send>(conn: &mut C, keys: &Keys) -> Result<Marker, Fault> {
    let v: Value = marker_call(keys, None, None).invoke_async(conn).await?;
    parse_marker(&v)
}

/// Gives a server without a marker one, quarantined for `quarantine_ms`
/// from now (a server that got one meanwhile keeps its own): the
/// quarantine left.
pub(crate) async fn set_quarantine<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    quarantine_ms: u64,
) -> Result<u64, Fault> {
    let v: Value = marker_call(keys, Some(quarantine_ms), None).invoke_async(conn).await?;
    match parse_marker(&v)? {
        Marker::Present { quarantine_ms, .. } => Ok(quarantine_ms),
        Marker::Missing => Err(unexpected("marker after setting it", &v).into()),
    }
}
