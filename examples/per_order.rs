//! Per-order processing: workers take order ids from a shared feed that
//! contains duplicates; a lock per order makes sure one worker at a time
//! handles an order, and the fencing token makes the store refuse a stale
//! writer.
//!
//! ```sh
//! cargo run --example per_order
//! LOCKKIT_URL=mysql://lockkit:lockkit@127.0.0.1:13306/lockkit cargo run --features mysql --example per_order
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A store that remembers, per order, the highest fencing token that wrote.
#[derive(Default)]
struct FencedStore {
    orders: Mutex<HashMap<u32, (u64, u32)>>, // order -> (highest token, times processed)
}

impl FencedStore {
    fn write(&self, order: u32, token: u64) -> bool {
        let mut orders = self.orders.lock().unwrap();
        let entry = orders.entry(order).or_insert((0, 0));
        if token <= entry.0 {
            return false; // a writer whose lock was taken over: refused
        }
        *entry = (token, entry.1 + 1);
        true
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("LOCKKIT_URL").unwrap_or_else(|_| "memory://".to_owned());
    let locks = lockkit::connect(&url).await?;
    let store = Arc::new(FencedStore::default());
    // Twelve deliveries of six orders, as an at-least-once queue would hand them out.
    let feed: Vec<u32> = (0..12).map(|i| 4200 + i % 6).collect();
    let feed = Arc::new(Mutex::new(feed));

    let workers = (0..4).map(|w| {
        // Each worker is its own contender: a new owner id on shared connections.
        let locks = locks.with_new_owner();
        let (store, feed) = (store.clone(), feed.clone());
        tokio::spawn(async move {
            loop {
                let Some(order) = feed.lock().unwrap().pop() else {
                    return Ok::<_, lockkit::LockError>(());
                };
                let opts = locks
                    .options()
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(10));
                let guard = locks.lock_with(&format!("order:{order}"), &opts).await?;
                tokio::time::sleep(Duration::from_millis(20)).await; // the work
                let accepted = store.write(order, guard.fencing_token());
                println!(
                    "worker {w}: order {order} token {} {}",
                    guard.fencing_token(),
                    if accepted { "written" } else { "REFUSED" }
                );
                guard.unlock().await?;
            }
        })
    });
    for w in workers.collect::<Vec<_>>() {
        w.await??;
    }
    for (order, (token, times)) in store.orders.lock().unwrap().iter() {
        println!("order {order}: processed {times}x, last token {token}");
    }
    Ok(())
}
