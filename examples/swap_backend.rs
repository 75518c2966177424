//! Swapping backends by cargo feature: the locking code below is the same
//! whichever backend the build enables; only the default URL changes.
//!
//! ```sh
//! cargo run --example swap_backend                          # memory
//! cargo run --features sqlite --example swap_backend        # SQLite file
//! cargo run --features redis --example swap_backend         # Redis on 127.0.0.1:6379
//! ```

fn default_url() -> &'static str {
    if cfg!(feature = "redis") {
        "redis://127.0.0.1:6379"
    } else if cfg!(feature = "sqlite") {
        "sqlite://./lockkit-example.db"
    } else {
        "memory://"
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("LOCKKIT_URL").unwrap_or_else(|_| default_url().to_owned());
    let locks = lockkit::connect(&url).await?;
    let guard = locks.lock("inventory:sku-123").await?;
    println!(
        "{} backend: holding {:?} as {} with fencing token {}",
        locks.backend().name(),
        guard.name(),
        guard.owner(),
        guard.fencing_token()
    );
    guard.unlock().await?;
    Ok(())
}
