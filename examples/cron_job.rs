//! Cron-job exclusivity: every replica runs this on schedule; only one does
//! the work, the others skip at once.
//!
//! ```sh
//! cargo run --example cron_job                                  # in-process memory backend
//! LOCKKIT_URL=redis://127.0.0.1:6379 cargo run --features redis --example cron_job
//! ```

use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("LOCKKIT_URL").unwrap_or_else(|_| "memory://".to_owned());
    let locks = lockkit::connect(&url).await?;
    let opts = locks.options().ttl(Duration::from_secs(60));

    // try_lock never waits: if another replica is running the job, skip.
    let Some(guard) = locks.try_lock_with("cron:nightly-report", &opts).await? else {
        println!("another replica is running the nightly report; skipping");
        return Ok(());
    };
    println!("running the nightly report (fencing token {})", guard.fencing_token());
    tokio::select! {
        _ = guard.lost() => {
            // The lease could not be kept: another replica may start now.
            eprintln!("lost the lock; stopping before writing anything more");
            return Ok(());
        }
        _ = tokio::time::sleep(Duration::from_millis(200)) => println!("report done"),
    }
    guard.unlock().await?;
    Ok(())
}
