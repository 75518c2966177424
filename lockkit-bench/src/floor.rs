//! Floors: the fewest round trips each backend needs for one acquire +
//! release, sent with the same client crate and no lock logic. Results read
//! as ratios to these, measured in the same run.

use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::report::{Row, histogram};
use crate::workloads::BenchError;

/// One raw acquire + release cycle of a backend.
#[async_trait]
pub trait Floor: Send + Sync {
    /// The backend kind this floor belongs to.
    fn kind(&self) -> &'static str;
    /// One cycle on `name`: take it (it is free) and give it back.
    async fn cycle(&self, name: &str) -> Result<(), BenchError>;
}

/// The floor for a URL's backend, if it has one (the in-process memory
/// backend has no network floor).
pub async fn floor_for(url: &str) -> Result<Option<Box<dyn Floor>>, BenchError> {
    let scheme = url.split(':').next().unwrap_or_default();
    match scheme {
        "memory" => Ok(None),
        other => {
            eprintln!("lockkit-bench: no floor for {other}:// in this build");
            Ok(None)
        }
    }
}

/// w1 against the floor.
pub async fn w1(floor: &dyn Floor, seconds: Duration) -> Result<Row, BenchError> {
    let name = format!("bench/floor/{:08x}", rand::random::<u32>());
    let mut hist = histogram();
    let mut cycles = 0u64;
    let started = Instant::now();
    while started.elapsed() < seconds {
        let t0 = Instant::now();
        floor.cycle(&name).await?;
        hist.record((t0.elapsed().as_micros() as u64).max(1))?;
        cycles += 1;
    }
    Ok(Row::new(
        "floor",
        floor.kind(),
        "w1",
        1,
        started.elapsed().as_secs_f64(),
        cycles,
        &hist,
    ))
}
