//! Operator commands: `lockkit list` and `lockkit release NAME --force`.

use std::process::ExitCode;

use clap::Args;
use lockkit::LockInfo;

use crate::error::CliError;
use crate::target;

/// Arguments of `lockkit list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only names starting with this.
    #[arg(long, default_value = "")]
    prefix: String,
    /// At most this many.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `lockkit release`.
#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// The lock name.
    name: String,
    /// Really remove another owner's hold (required: this breaks the lock's
    /// protection for whoever holds it).
    #[arg(long)]
    force: bool,
}

/// One lock as JSON.
pub fn info_json(i: &LockInfo) -> serde_json::Value {
    serde_json::json!({
        "name": i.name,
        "held": true,
        "kind": i.kind.as_str(),
        "owner": i.owner,
        "hold_count": i.hold_count,
        "token": i.token,
        "remaining_ms": i.remaining.map(|d| d.as_millis() as u64),
    })
}

/// One lock as a line of text.
pub fn info_text(i: &LockInfo) -> String {
    let lease = i.remaining.map_or("until the session ends".to_owned(), |d| {
        format!(
            "{} left",
            humantime::format_duration(std::time::Duration::from_millis(d.as_millis() as u64))
        )
    });
    let kind = match i.kind {
        lockkit::LockKind::Permit { permits } => format!("a permit of {permits}"),
        lockkit::LockKind::Read => "a read hold".to_owned(),
        lockkit::LockKind::Write => "the write hold".to_owned(),
        _ => "the lock".to_owned(),
    };
    format!(
        "{}: {kind} held by {} (hold count {}, fencing token {}, lease {lease})",
        i.name, i.owner, i.hold_count, i.token
    )
}

/// Lists held locks.
pub async fn list(url: String, args: ListArgs) -> Result<ExitCode, CliError> {
    let client = target::connect(&url).await?;
    let held = client.list(&args.prefix, args.limit).await?;
    for i in &held {
        if args.json {
            println!("{}", info_json(i));
        } else {
            println!("{}", info_text(i));
        }
    }
    if !args.json {
        eprintln!("{} held", held.len());
    }
    Ok(ExitCode::SUCCESS)
}

/// Removes a hold, whoever holds it; refused without `--force`.
pub async fn release(url: String, args: ReleaseArgs) -> Result<ExitCode, CliError> {
    if !args.force {
        return Err(format!(
            "refusing to release {:?} without --force: it removes another owner's hold, and that owner's work is no longer protected",
            args.name
        )
        .into());
    }
    let client = target::connect(&url).await?;
    match client.force_release(&args.name).await? {
        Some(i) => println!("released {}", info_text(&i)),
        None => println!("{}: was not held", args.name),
    }
    Ok(ExitCode::SUCCESS)
}
