//! `lockkit status NAME`.

use std::process::ExitCode;

use clap::Args;

use crate::{CliError, target};

/// Arguments of `lockkit status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The lock name.
    name: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Prints the holder of a lock; exit 0 either way.
pub async fn run(url: Option<String>, args: StatusArgs) -> Result<ExitCode, CliError> {
    let url = target::resolve(url)?;
    let client = target::connect(&url).await?;
    let info = client.inspect(&args.name).await?;
    if args.json {
        let value = match &info {
            Some(i) => serde_json::json!({
                "name": i.name,
                "held": true,
                "owner": i.owner,
                "hold_count": i.hold_count,
                "token": i.token,
                "remaining_ms": i.remaining.map(|d| d.as_millis() as u64),
            }),
            None => serde_json::json!({ "name": args.name, "held": false }),
        };
        println!("{value}");
    } else {
        match info {
            Some(i) => println!(
                "{}: held by {} (hold count {}, fencing token {}, lease {})",
                i.name,
                i.owner,
                i.hold_count,
                i.token,
                i.remaining.map_or("until the session ends".to_owned(), |d| format!(
                    "{} left",
                    humantime::format_duration(std::time::Duration::from_millis(d.as_millis() as u64))
                ))
            ),
            None => println!("{}: free", args.name),
        }
    }
    Ok(ExitCode::SUCCESS)
}
