//! The seed of a run's choices (names, hold lengths, the moment of each
//! kill): a run prints its seed, and `LOCKKIT_FAILOVER_SEED` replays the
//! same choices (not the same timing).

use rand::SeedableRng;

/// The seeded generator of the load's choices.
pub type Rng = rand::rngs::StdRng;

/// A generator seeded with `seed`.
pub fn seeded(seed: u64) -> Rng {
    Rng::seed_from_u64(seed)
}

/// The run's seed: `LOCKKIT_FAILOVER_SEED`, or the clock.
pub fn seed() -> u64 {
    std::env::var("LOCKKIT_FAILOVER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}
