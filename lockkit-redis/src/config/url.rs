//! Reading a connection URL into a [`RedisConfig`]: one step per part of
//! the URL (TLS, path, prefix and timeouts, `wait_replicas`).

use std::path::PathBuf;
use std::time::Duration;

use lockkit_core::LockError;
use lockkit_core::raw::{ConnectUrl, HostPort, decode_component};

use super::{
    DEFAULT_REDLOCK_RESPONSE_TIMEOUT, Mode, Node, REDIS_PORT, RedisConfig, RestartGuard, SENTINEL_PORT, Tls,
    default_wait_replicas_timeout, validate_prefix,
};

impl RedisConfig {
    /// Reads a `redis://`, `rediss://`, `redis+sentinel://`,
    /// `redis+cluster://` or `redlock://` URL, taking this backend's query
    /// parameters (and leaving the others for [`ConnectUrl::finish`]).
    pub fn from_url(url: &mut ConnectUrl) -> Result<Self, LockError> {
        let scheme = url.scheme.clone();
        let mode = match scheme.as_str() {
            "redis" | "rediss" => Mode::Single,
            "redis+cluster" | "rediss+cluster" => Mode::Cluster,
            "redlock" => Mode::Redlock,
            "redis+sentinel" | "rediss+sentinel" => Mode::Sentinel { service: String::new() },
            _ => {
                return Err(LockError::config(
                    "url scheme",
                    format!("{scheme:?} is not a Redis scheme"),
                ));
            }
        };
        let default_port = if matches!(mode, Mode::Sentinel { .. }) {
            SENTINEL_PORT
        } else {
            REDIS_PORT
        };
        if url.hosts.is_empty() {
            return Err(LockError::config("url host", format!("a {scheme}:// URL needs a host")));
        }
        let nodes: Vec<Node> = url
            .hosts
            .iter()
            .map(|h: &HostPort| Node {
                host: h.host.clone(),
                port: h.port.unwrap_or(default_port),
            })
            .collect();
        if matches!(mode, Mode::Single) && nodes.len() > 1 {
            return Err(LockError::config(
                "url host",
                "redis:// takes one host; use redis+cluster://, redis+sentinel:// or redlock:// for several",
            ));
        }
        let mut cfg = RedisConfig::single("", REDIS_PORT);
        cfg.mode = mode;
        cfg.nodes = nodes;
        cfg.username = decode(url.url.username(), "url user name")?.filter(|u| !u.is_empty());
        cfg.password = url
            .url
            .password()
            .map(|p| decode(p, "url password"))
            .transpose()?
            .flatten();
        take_tls(&mut cfg, url, &scheme)?;
        take_path(&mut cfg, url)?;
        take_prefix_and_timeouts(&mut cfg, url)?;
        cfg.sentinel_username = url.take("sentinel_username");
        cfg.sentinel_password = url.take("sentinel_password");
        if (cfg.sentinel_username.is_some() || cfg.sentinel_password.is_some())
            && !matches!(cfg.mode, Mode::Sentinel { .. })
        {
            return Err(LockError::config(
                "query parameter sentinel_password",
                "only redis+sentinel:// URLs take sentinel credentials",
            ));
        }
        take_wait_replicas(&mut cfg, url)?;
        cfg.check_wait_replicas()?;
        take_restart_guard(&mut cfg, url)?;
        if matches!(cfg.mode, Mode::Redlock) && cfg.nodes.len() < 3 {
            tracing::warn!(
                nodes = cfg.nodes.len(),
                "redlock with fewer than 3 nodes tolerates no node failure"
            );
        }
        Ok(cfg)
    }
}

/// TLS: the scheme, `tls` (Redlock), `tls_insecure` or `#insecure`, and
/// the certificate files.
fn take_tls(cfg: &mut RedisConfig, url: &mut ConnectUrl, scheme: &str) -> Result<(), LockError> {
    let insecure_fragment = match url.url.fragment() {
        None | Some("") => false,
        Some("insecure") => true,
        Some(other) => {
            return Err(LockError::config(
                "url fragment",
                format!("only #insecure is understood, got #{other}"),
            ));
        }
    };
    let tls_scheme = scheme.starts_with("rediss");
    let tls_param = url.take_bool("tls")?;
    if tls_param.is_some() && !matches!(cfg.mode, Mode::Redlock) {
        return Err(LockError::config(
            "query parameter tls",
            format!("{scheme}:// chooses TLS by its scheme (rediss…); tls= is for redlock:// only"),
        ));
    }
    let insecure = url.take_bool("tls_insecure")?.unwrap_or(false) || insecure_fragment;
    cfg.tls = match (tls_scheme || tls_param == Some(true), insecure) {
        (false, false) => Tls::Off,
        (false, true) => {
            return Err(LockError::config(
                "query parameter tls_insecure",
                "only meaningful with TLS (rediss://, or tls=true for redlock://)",
            ));
        }
        (true, false) => Tls::On,
        (true, true) => Tls::Insecure,
    };

    cfg.tls_ca = url.take("tls_ca").map(PathBuf::from);
    cfg.tls_client = match (url.take("tls_cert"), url.take("tls_key")) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((cert.into(), key.into())),
        _ => {
            return Err(LockError::config(
                "query parameter tls_cert",
                "a client certificate needs both tls_cert and tls_key",
            ));
        }
    };
    if (cfg.tls_ca.is_some() || cfg.tls_client.is_some()) && cfg.tls == Tls::Off {
        return Err(LockError::config(
            "query parameter tls_ca",
            "certificates are only used with TLS (rediss://, or tls=true for redlock://)",
        ));
    }
    Ok(())
}

/// The URL path: the database, and the sentinel group's name.
fn take_path(cfg: &mut RedisConfig, url: &mut ConnectUrl) -> Result<(), LockError> {
    let segments: Vec<String> = url
        .url
        .path_segments()
        .map(|s| s.filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    let segments = segments
        .iter()
        .map(|s| decode(s, "url path").map(Option::unwrap_or_default))
        .collect::<Result<Vec<_>, _>>()?;
    let parse_db = |s: &str| {
        s.parse::<i64>()
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| LockError::config("url path", format!("expected a database number, got {s:?}")))
    };
    match &mut cfg.mode {
        Mode::Cluster => {
            if !segments.is_empty() {
                return Err(LockError::config(
                    "url path",
                    "a Redis Cluster has only database 0; redis+cluster:// takes no path",
                ));
            }
        }
        Mode::Sentinel { service } => match segments.as_slice() {
            [name] => *service = name.clone(),
            [name, db] => {
                *service = name.clone();
                cfg.db = parse_db(db)?;
            }
            _ => {
                return Err(LockError::config(
                    "url path",
                    "redis+sentinel:// needs the monitored group's name as its path: redis+sentinel://s1,s2/NAME[/db]",
                ));
            }
        },
        Mode::Single | Mode::Redlock => match segments.as_slice() {
            [] => {}
            [db] => cfg.db = parse_db(db)?,
            _ => return Err(LockError::config("url path", "expected at most a database number")),
        },
    }
    Ok(())
}

/// `prefix`, the timeouts, and Redlock's `node_timeout`, `drift` and
/// `retry_delay`.
fn take_prefix_and_timeouts(cfg: &mut RedisConfig, url: &mut ConnectUrl) -> Result<(), LockError> {
    if let Some(prefix) = url.take("prefix") {
        cfg.prefix = prefix;
    }
    validate_prefix(&cfg.prefix)?;
    let positive = |key: &str, d: Option<Duration>| -> Result<Option<Duration>, LockError> {
        match d {
            Some(d) if d.is_zero() => Err(LockError::config(
                format!("query parameter {key}"),
                "must be above zero",
            )),
            other => Ok(other),
        }
    };
    if let Some(d) = positive("connect_timeout", url.take_duration("connect_timeout")?)? {
        cfg.connect_timeout = d;
    }
    if matches!(cfg.mode, Mode::Redlock) {
        cfg.response_timeout = DEFAULT_REDLOCK_RESPONSE_TIMEOUT;
    }
    if let Some(d) = positive("response_timeout", url.take_duration("response_timeout")?)? {
        cfg.response_timeout = d;
    }
    let redlock_only = |key: &str, present: bool| -> Result<(), LockError> {
        if present && !matches!(cfg.mode, Mode::Redlock) {
            return Err(LockError::config(
                format!("query parameter {key}"),
                "only redlock:// URLs take it",
            ));
        }
        Ok(())
    };
    let node_timeout = positive("node_timeout", url.take_duration("node_timeout")?)?;
    redlock_only("node_timeout", node_timeout.is_some())?;
    let drift = url.take_duration("drift")?;
    redlock_only("drift", drift.is_some())?;
    let retry_delay = positive("retry_delay", url.take_duration("retry_delay")?)?;
    redlock_only("retry_delay", retry_delay.is_some())?;
    cfg.node_timeout = node_timeout.unwrap_or(cfg.node_timeout);
    cfg.drift = drift.unwrap_or(cfg.drift);
    cfg.retry_delay = retry_delay.unwrap_or(cfg.retry_delay);
    Ok(())
}

/// `restart_guard`: `on`, `off`, or the shortest quarantine.
fn take_restart_guard(cfg: &mut RedisConfig, url: &mut ConnectUrl) -> Result<(), LockError> {
    let Some(value) = url.take("restart_guard") else {
        return Ok(());
    };
    cfg.restart_guard = match value.as_str() {
        "on" | "true" => RestartGuard::On { floor: Duration::ZERO },
        "off" | "false" => RestartGuard::Off,
        other => RestartGuard::On {
            floor: humantime::parse_duration(other).map_err(|e| {
                LockError::config(
                    "query parameter restart_guard",
                    format!("{other:?} is neither on, off nor a duration: {e}"),
                )
            })?,
        },
    };
    cfg.check_restart_guard()
}

/// `wait_replicas` and its timeout.
fn take_wait_replicas(cfg: &mut RedisConfig, url: &mut ConnectUrl) -> Result<(), LockError> {
    let wait_replicas = url.take_u64("wait_replicas")?;
    let wait_replicas_timeout = url.take_duration("wait_replicas_timeout")?;
    if let Some(n) = wait_replicas {
        cfg.wait_replicas = u32::try_from(n).map_err(|_| {
            LockError::config(
                "query parameter wait_replicas",
                format!("{n} is more replicas than a master can have"),
            )
        })?;
    }
    if let Some(d) = wait_replicas_timeout {
        if cfg.wait_replicas == 0 {
            return Err(LockError::config(
                "query parameter wait_replicas_timeout",
                "only meaningful with wait_replicas=N above 0",
            ));
        }
        cfg.wait_replicas_timeout = d;
    } else {
        cfg.wait_replicas_timeout = default_wait_replicas_timeout(cfg.response_timeout);
    }
    Ok(())
}

fn decode(s: &str, part: &str) -> Result<Option<String>, LockError> {
    if s.is_empty() {
        return Ok(None);
    }
    decode_component(s, part).map(Some)
}
