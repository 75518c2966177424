//! `lockkit status NAME`.

use std::process::ExitCode;

use clap::Args;

use crate::admin::{info_json, info_text};
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
pub async fn run(url: String, args: StatusArgs) -> Result<ExitCode, CliError> {
    let client = target::connect(&url).await?;
    let info = client.inspect(&args.name).await?;
    match (&info, args.json) {
        (Some(i), true) => println!("{}", info_json(i)),
        (Some(i), false) => println!("{}", info_text(i)),
        (None, true) => println!("{}", serde_json::json!({ "name": args.name, "held": false })),
        (None, false) => println!("{}: free", args.name),
    }
    Ok(ExitCode::SUCCESS)
}
