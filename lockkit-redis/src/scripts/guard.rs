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

use std::time::Duration;

use lockkit_core::raw::{ClockStep, ServerClock};
use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation, Value};

use super::call::ClockReading;
use super::reply::{int, unexpected};
use crate::error::{Fault, Quarantined};
use crate::layout::Keys;

/// Reads a server's marker, or sets it with its quarantine.
///
/// KEYS: the marker. ARGV: 1. the quarantine (ms) of a server found
/// without a marker, which gets one (`''`: only read), 2. the lease (ms) of
/// an extension about to be made: the marker's lease bound covers it (`''`:
/// none), 3. a step forward (ms) seen of the server's clock: the server is
/// quarantined until the leases it granted before the step would have
/// ended (`''`: none). Returns `{1, quarantine left, lease bound left}` (ms, at least 0),
/// or `{0}`: no marker.
pub(super) static MARKER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/clock.lua"),
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

/// What a marker call changes (all `None`: it only reads).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MarkerChange {
    /// The quarantine (ms) of a server found without a marker.
    pub quarantine_ms: Option<u64>,
    /// Raise the lease bound for an extension this long (ms).
    pub extend_ms: Option<u64>,
    /// The server's clock stepped forward this far (ms).
    pub step_ms: Option<u64>,
}

/// The marker call making `change`.
pub(super) fn marker_call(keys: &Keys, change: MarkerChange) -> ScriptInvocation<'static> {
    let arg = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut inv = MARKER.key(keys.marker());
    inv.arg(arg(change.quarantine_ms))
        .arg(arg(change.extend_ms))
        .arg(arg(change.step_ms));
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
    let v: Value = marker_call(keys, MarkerChange::default()).invoke_async(conn).await?;
    parse_marker(&v)
}

/// Gives a server without a marker one, quarantined for `quarantine_ms`
/// from now (a server that got one meanwhile keeps its own), and with
/// `step_ms` a quarantine for a step of its clock: the quarantine left.
pub(crate) async fn set_quarantine<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    quarantine_ms: u64,
    step_ms: Option<u64>,
) -> Result<u64, Fault> {
    let change = MarkerChange {
        quarantine_ms: Some(quarantine_ms),
        extend_ms: None,
        step_ms,
    };
    let v: Value = marker_call(keys, change).invoke_async(conn).await?;
    match parse_marker(&v)? {
        Marker::Present { quarantine_ms, .. } => Ok(quarantine_ms),
        Marker::Missing => Err(unexpected("marker after setting it", &v).into()),
    }
}

/// Reads `reading` into `clock`, the server's clock as this client last
/// read it. After a step forward, the server ended its leases early by the
/// step while their holders still count on them: it is quarantined until
/// they would have ended (its lease bound plus the step; `quarantine_ms`
/// when it has no marker), and the fault for a grant that came with the
/// reading is returned (the caller takes the grant back). A step back only
/// lengthens leases: it is logged.
pub(crate) async fn check_clock<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    clock: &ServerClock,
    reading: ClockReading,
    quarantine_ms: u64,
    node: &str,
) -> Option<Fault> {
    match clock.observe(reading.sent, reading.received, reading.server_ms)? {
        ClockStep::Back(by) => {
            tracing::warn!(
                node,
                step_ms = by.as_millis(),
                "the server's clock stepped back: its leases last that much longer"
            );
            None
        }
        ClockStep::Forward(by) => {
            let step_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
            let left = match set_quarantine(conn, keys, quarantine_ms, Some(step_ms)).await {
                Ok(ms) => ms,
                Err(f) => return Some(f),
            };
            tracing::warn!(
                node,
                step_ms,
                quarantine_ms = left,
                "the server's clock stepped forward, ending leases early: no acquisitions there until its quarantine ends"
            );
            Some(Fault::Quarantined(Quarantined {
                node: node.to_owned(),
                left: Some(Duration::from_millis(left)),
            }))
        }
    }
}
