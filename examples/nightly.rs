//! A nightly job, ShedLock-style: every replica fires it on schedule, a
//! little apart; it runs once. The name stays blocked for `at_least` after
//! the run, so a replica whose clock fires late does not run it again,
//! and for `at_most` at the longest, so a hung run does not block the next
//! night.
//!
//! ```sh
//! cargo run --example nightly                                  # ten replicas in one process, memory backend
//! LOCKKIT_URL=redis://127.0.0.1:6379 cargo run --features redis --example nightly
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockkit::JobLimits;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("LOCKKIT_URL").unwrap_or_else(|_| "memory://".to_owned());
    let locks = lockkit::connect(&url).await?;
    let limits = JobLimits::new(Duration::from_secs(30), Duration::from_secs(600));
    let runs = Arc::new(AtomicUsize::new(0));

    // Ten replicas (each its own owner, as separate machines are), fired
    // up to half a second apart.
    let replicas = (0..10).map(|i| {
        let (replica, runs) = (locks.with_new_owner(), runs.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50 * i)).await;
            let ran = replica
                .run_exclusive("job:nightly-report", limits, |job| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    println!(
                        "replica {i}: running the nightly report (fencing token {})",
                        job.token()
                    );
                    tokio::select! {
                        _ = job.lost() => eprintln!("replica {i}: past at_most or lost the lock; stopping"),
                        _ = tokio::time::sleep(Duration::from_millis(100)) => println!("replica {i}: report done"),
                    }
                })
                .await?;
            if ran.is_none() {
                println!("replica {i}: another replica ran it; skipping");
            }
            Ok::<_, lockkit::LockError>(())
        })
    });
    for replica in futures_util::future::join_all(replicas).await {
        replica??;
    }
    println!("the report ran {} time(s)", runs.load(Ordering::SeqCst));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    Ok(())
}
