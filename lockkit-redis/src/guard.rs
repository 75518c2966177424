//! The restart guard on one server (see [`RestartGuard`]): a refusal
//! because the server lost its data becomes a retryable [`Quarantined`]
//! error, after setting the quarantine of a server found without a marker;
//! a step forward of the server's clock, seen in the readings taken with
//! acquisitions and extensions, quarantines it too.
//!
//! [`RestartGuard`]: crate::RestartGuard

use std::time::Duration;

use crate::backend::Inner;
use crate::config::Mode;
use crate::error::{Fault, Quarantined};
use crate::scripts::{self, ClockReading};

impl Inner {
    /// The fault for an acquisition the guard refused, `left_ms` the
    /// quarantine the server reported (`None`: it has no marker). Such a
    /// server is quarantined for this client's ttl (`ttl_ms`), and at
    /// least the guard's floor: a single server keeps no record of the
    /// leases it granted once it lost its data.
    pub(crate) async fn quarantined(&self, left_ms: Option<u64>, ttl_ms: u64) -> Fault {
        let left_ms = match left_ms {
            Some(ms) => ms,
            None => {
                let floor = self.config.guard_floor().unwrap_or_default();
                let quarantine = ttl_ms.max(u64::try_from(floor.as_millis()).unwrap_or(u64::MAX));
                match scripts::set_quarantine(&mut self.conn.clone(), &self.keys, quarantine, None).await {
                    Ok(ms) => {
                        tracing::warn!(server = %self.server(), quarantine_ms = ms, "the server lost its data: no acquisitions until its quarantine ends");
                        ms
                    }
                    Err(f) => return f,
                }
            }
        };
        Fault::Quarantined(Quarantined {
            node: self.server(),
            left: Some(Duration::from_millis(left_ms)),
        })
    }

    /// Checks a reading of the server's clock (`None`: not read), see
    /// [`scripts::check_clock`]: the fault for a grant that came with a
    /// step forward.
    pub(crate) async fn clock_stepped(&self, reading: Option<ClockReading>, ttl_ms: u64) -> Option<Fault> {
        let floor = self.config.guard_floor().unwrap_or_default();
        let quarantine = ttl_ms.max(u64::try_from(floor.as_millis()).unwrap_or(u64::MAX));
        let (conn, node) = (&mut self.conn.clone(), &self.server());
        scripts::check_clock(conn, &self.keys, &self.clock, reading?, quarantine, node).await
    }

    /// Reads the server's clock into [`Inner::clock`]; a failure leaves it
    /// for the first acquisition or extension to read.
    pub(crate) async fn first_clock_reading(&self) {
        if let Ok(r) = scripts::read_clock(&mut self.conn.clone()).await {
            self.clock.observe(r.sent, r.received, r.server_ms);
        }
    }

    /// The server, for messages.
    fn server(&self) -> String {
        match &self.config.mode {
            Mode::Sentinel { service } => format!("the master of {service}"),
            _ => self.config.nodes.first().map(ToString::to_string).unwrap_or_default(),
        }
    }
}
