//! [`LockConfig`]: lock settings as an application keeps them in its own
//! configuration (feature `serde`).

use std::fmt;
use std::time::Duration;

use lockkit_core::{LockClient, LockError};
use serde::Deserialize;

/// Where the locks live and how they are held by default.
///
/// Deserializes from a URL string or from a table, so either of these works
/// in an application's TOML (or YAML, JSON, …):
///
/// ```toml
/// lock = "redis://127.0.0.1:6379?ttl=10s"
///
/// [lock]
/// url = "mysql://app:secret@db:3306/app"
/// ttl = "30s"        # humantime durations
/// wait = "forever"   # or "5s"
/// auto_extend = true
/// owner = "trade-center-1"
/// ```
///
/// Fields of the table override the same query parameters of the URL.
/// `Debug` hides the URL's password.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Repr")]
pub struct LockConfig {
    url: String,
    ttl: Option<Duration>,
    wait: Option<Wait>,
    auto_extend: Option<bool>,
    owner: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Wait {
    Bounded(Duration),
    Forever,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Repr {
    Url(String),
    Table(Table),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    url: String,
    ttl: Option<String>,
    wait: Option<String>,
    auto_extend: Option<bool>,
    owner: Option<String>,
}

fn duration(field: &str, text: &str) -> Result<Duration, LockError> {
    humantime::parse_duration(text)
        .map_err(|e| LockError::config(field, format!("{text:?} is not a duration like 30s or 1m: {e}")))
}

impl TryFrom<Repr> for LockConfig {
    type Error = LockError;

    fn try_from(repr: Repr) -> Result<Self, LockError> {
        match repr {
            Repr::Url(url) => Ok(LockConfig::new(url)),
            Repr::Table(t) => Ok(LockConfig {
                url: t.url,
                ttl: t.ttl.map(|v| duration("ttl", &v)).transpose()?,
                wait: t
                    .wait
                    .map(|v| match v.as_str() {
                        "forever" | "none" => Ok(Wait::Forever),
                        _ => duration("wait", &v).map(Wait::Bounded),
                    })
                    .transpose()?,
                auto_extend: t.auto_extend,
                owner: t.owner,
            }),
        }
    }
}

impl fmt::Debug for LockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockConfig")
            .field("url", &lockkit_core::raw::redact(&self.url))
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("auto_extend", &self.auto_extend)
            .field("owner", &self.owner)
            .finish()
    }
}

impl LockConfig {
    /// A config of just a URL.
    pub fn new(url: impl Into<String>) -> Self {
        LockConfig {
            url: url.into(),
            ttl: None,
            wait: None,
            auto_extend: None,
            owner: None,
        }
    }

    /// From the environment: `LOCKKIT_URL` (required), and optionally
    /// `LOCKKIT_TTL`, `LOCKKIT_WAIT`, `LOCKKIT_AUTO_EXTEND`, `LOCKKIT_OWNER`.
    pub fn from_env() -> Result<Self, LockError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let url = var(crate::URL_VAR)
            .ok_or_else(|| LockError::config(crate::URL_VAR, "the environment variable is not set"))?;
        let table = Table {
            url,
            ttl: var("LOCKKIT_TTL"),
            wait: var("LOCKKIT_WAIT"),
            auto_extend: var("LOCKKIT_AUTO_EXTEND")
                .map(|v| match v.to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" | "on" => Ok(true),
                    "0" | "false" | "no" | "off" => Ok(false),
                    _ => Err(LockError::config(
                        "LOCKKIT_AUTO_EXTEND",
                        format!("expected true or false, got {v:?}"),
                    )),
                })
                .transpose()?,
            owner: var("LOCKKIT_OWNER"),
        };
        LockConfig::try_from(Repr::Table(table))
    }

    /// The URL, with the structured fields as query parameters (they win
    /// over the same parameters written in the URL).
    pub fn url(&self) -> String {
        let mut params = url::form_urlencoded::Serializer::new(String::new());
        if let Some(ttl) = self.ttl {
            params.append_pair("ttl", &humantime::format_duration(ttl).to_string());
        }
        match self.wait {
            Some(Wait::Bounded(w)) => {
                params.append_pair("wait", &humantime::format_duration(w).to_string());
            }
            Some(Wait::Forever) => {
                params.append_pair("wait", "forever");
            }
            None => {}
        }
        if let Some(on) = self.auto_extend {
            params.append_pair("auto_extend", if on { "true" } else { "false" });
        }
        if let Some(owner) = &self.owner {
            params.append_pair("owner", owner);
        }
        let params = params.finish();
        if params.is_empty() {
            return self.url.clone();
        }
        let (base, fragment) = self
            .url
            .split_once('#')
            .map_or((self.url.as_str(), None), |(b, f)| (b, Some(f)));
        let sep = if base.contains('?') { '&' } else { '?' };
        let mut out = format!("{base}{sep}{params}");
        if let Some(f) = fragment {
            out.push('#');
            out.push_str(f);
        }
        out
    }

    /// Connects (see [`connect`](crate::connect)).
    pub async fn connect(&self) -> Result<LockClient, LockError> {
        crate::connect(&self.url()).await
    }
}
