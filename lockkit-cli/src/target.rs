//! Which backend the command talks to: `--url`, else `$LOCKKIT_URL`, else the
//! config file (`--config`, else `$XDG_CONFIG_HOME/lockkit/config.toml`),
//! else the embedded default (an SQLite file in the user's state directory).

use std::path::{Path, PathBuf};

use lockkit::{LockClient, LockConfig, URL_VAR};
use serde::Deserialize;

use crate::error::CliError;

/// The config file: `lock = "URL"`, or a `[lock]` table (see `LockConfig`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    lock: LockConfig,
}

/// Where the config file is looked for when `--config` is not given.
pub fn default_config_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("lockkit").join("config.toml"))
}

/// The embedded default's database file.
pub fn default_db_path() -> PathBuf {
    dirs::state_dir()
        .or_else(dirs::data_local_dir)
        .unwrap_or_else(std::env::temp_dir)
        .join("lockkit")
        .join("lockkit.db")
}

fn read_config(path: &Path) -> Result<LockConfig, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
    let file: ConfigFile = toml::from_str(&text).map_err(|e| format!("config {}: {}", path.display(), e.message()))?;
    Ok(file.lock)
}

/// The URL the command uses.
pub fn resolve(url: Option<String>, config: Option<&Path>) -> Result<String, CliError> {
    if let Some(url) = url {
        return Ok(url);
    }
    if let Ok(url) = std::env::var(URL_VAR)
        && !url.trim().is_empty()
    {
        return Ok(url);
    }
    if let Some(path) = config {
        return Ok(read_config(path)?.url());
    }
    if let Some(path) = default_config_path().filter(|p| p.exists()) {
        return Ok(read_config(&path)?.url());
    }
    let path = default_db_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    Ok(format!("sqlite://{}", path.display()))
}

/// Connects to a resolved URL.
pub async fn connect(url: &str) -> Result<LockClient, CliError> {
    Ok(lockkit::connect(url).await?)
}
