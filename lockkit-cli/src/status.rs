//! `lockkit status NAME`: who holds the lock NAME, the permits of the
//! semaphore NAME and the readers and writer of the read-write lock NAME.

use std::process::ExitCode;

use clap::Args;
use lockkit::{LockClient, LockError, LockInfo, LockKind};

use crate::admin::{info_json, info_text};
use crate::error::CliError;
use crate::target;

/// Arguments of `lockkit status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The lock name.
    name: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// The holds of `kind` on `name`; none where the backend has no such kind.
async fn holders(client: &LockClient, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
    match client.backend().holders(name, kind).await {
        Err(LockError::Unsupported { .. }) => Ok(Vec::new()),
        other => other,
    }
}

/// Prints what holds a name; exit 0 either way.
pub async fn run(url: String, args: StatusArgs) -> Result<ExitCode, CliError> {
    let client = target::connect(&url).await?;
    let name = args.name.as_str();
    let info = client.inspect(name).await?;
    let permits = holders(&client, name, LockKind::Permit { permits: 1 }).await?;
    let readers = holders(&client, name, LockKind::Read).await?;
    let writer = holders(&client, name, LockKind::Write).await?;
    if args.json {
        let mut out = match &info {
            Some(i) => info_json(i),
            None => serde_json::json!({ "name": name, "held": false }),
        };
        for (key, holds) in [("permits", &permits), ("readers", &readers), ("writers", &writer)] {
            if !holds.is_empty() {
                out[key] = holds.iter().map(info_json).collect();
            }
        }
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    match &info {
        Some(i) => println!("{}", info_text(i)),
        None => println!("{name}: free"),
    }
    for (what, holds) in [
        ("semaphore permit", &permits),
        ("read hold", &readers),
        ("write hold", &writer),
    ] {
        for i in holds {
            println!("  {what}: {}", info_text(i));
        }
    }
    Ok(ExitCode::SUCCESS)
}
