//! Which backend the command talks to: `--url`, else `$LOCKKIT_URL`, else the
//! embedded default (an SQLite file in the user's state directory).

use std::path::PathBuf;

use lockkit::{LockClient, URL_VAR};

use crate::CliError;

/// The embedded default's database file.
pub fn default_db_path() -> PathBuf {
    dirs::state_dir()
        .or_else(dirs::data_local_dir)
        .unwrap_or_else(std::env::temp_dir)
        .join("lockkit")
        .join("lockkit.db")
}

/// The URL the command uses.
pub fn resolve(url: Option<String>) -> Result<String, CliError> {
    if let Some(url) = url {
        return Ok(url);
    }
    if let Ok(url) = std::env::var(URL_VAR)
        && !url.trim().is_empty()
    {
        return Ok(url);
    }
    let path = default_db_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    Ok(format!("sqlite://{}", path.display()))
}

/// Connects to the resolved URL.
pub async fn connect(url: &str) -> Result<LockClient, CliError> {
    Ok(lockkit::connect(url).await?)
}
