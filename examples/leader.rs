//! Leader election: a singleton worker that fails over when its leader
//! dies. Candidates campaign for the role; the leader works while its
//! leadership stands and stops the moment it is lost; when it dies (here:
//! stops renewing, as a killed process does) the next candidate is elected
//! once its lease runs out, with a greater epoch.
//!
//! ```sh
//! cargo run --example leader                  # three candidates in one process; each leader dies after 3 ticks
//! # one candidate per process: start several, `kill -9` the leader, watch another take over
//! LOCKKIT_URL="sqlite:///tmp/leader.db?ttl=3s" cargo run --example leader -- --one
//! ```

use std::time::Duration;

use futures_util::StreamExt;
use lockkit::{LockClient, LockError};

const ROLE: &str = "role:billing-singleton";

/// Leads while it can; `ticks` of work, then dies (`None`: works until
/// its leadership is lost, then campaigns again).
async fn candidate(locks: LockClient, ticks: Option<u32>) -> Result<(), LockError> {
    let election = locks.election(ROLE)?;
    loop {
        let leadership = election.campaign().await?;
        println!("{}: leading, epoch {}", locks.owner(), leadership.epoch());
        let mut done = 0;
        loop {
            tokio::select! {
                _ = leadership.lost() => {
                    println!("{}: leadership lost; stopping the work", locks.owner());
                    break;
                }
                _ = tokio::time::sleep(Duration::from_millis(300)) => {
                    // Hand the epoch to what the work writes to (a fenced store).
                    println!("{}: working under epoch {}", locks.owner(), leadership.epoch());
                    done += 1;
                }
            }
            if ticks.is_some_and(|t| done >= t) {
                println!("{}: dies (stops renewing)", locks.owner());
                leadership.abandon();
                return Ok(());
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let one = std::env::args().any(|a| a == "--one");
    let url = std::env::var("LOCKKIT_URL").unwrap_or_else(|_| "memory://?ttl=1s".to_owned());
    let locks = lockkit::connect(&url).await?;
    if one {
        candidate(locks, None).await?;
        return Ok(());
    }
    let watcher = locks.election(ROLE)?;
    let mut changes = Box::pin(watcher.observe().await);
    let candidates: Vec<_> = (0..3)
        .map(|_| tokio::spawn(candidate(locks.with_new_owner(), Some(3))))
        .collect();
    // Every leader in turn, then nobody once the last has died.
    let mut epochs = Vec::new();
    while let Some(change) = changes.next().await {
        match change? {
            Some(leader) => {
                println!("observer: leader {} (epoch {})", leader.owner, leader.epoch);
                epochs.push(leader.epoch);
            }
            None if epochs.len() == 3 => break,
            None => {}
        }
    }
    for c in candidates {
        c.await??;
    }
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "epochs grow: {epochs:?}");
    println!("three leaders in turn, epochs {epochs:?}");
    Ok(())
}
