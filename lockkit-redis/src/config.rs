//! The backend's configuration, read from a connection URL.
//!
//! ```text
//! redis://[user:pass@]host[:6379][/db]             one server
//! rediss://…                                       the same over TLS
//! redis+sentinel://[user:pass@]s1[:26379],s2,…/SERVICE[/db]
//! redis+cluster://[user:pass@]h1[:6379],h2,…       a Redis Cluster (any reachable nodes)
//! redlock://[user:pass@]h1[:6379],h2,h3,…[/db]     Redlock over independent masters
//! ```
//!
//! Query parameters (besides lockkit's common `ttl`, `wait`, `auto_extend`,
//! `owner`):
//!
//! | parameter | default | meaning |
//! |---|---|---|
//! | `prefix` | `lockkit:` | start of every key and channel; no `{` or `}` |
//! | `connect_timeout` | `5s` | bound of one connection attempt |
//! | `response_timeout` | `5s`; Redlock `1s` | bound of one command; Redlock: of waiting for a quorum to answer |
//! | `node_timeout` | `100ms` | Redlock: how long a node may take once a quorum answered |
//! | `drift` | `0s` | Redlock: clock drift allowed beyond lockkit's 1 % + 2 ms |
//! | `retry_delay` | `50ms` | Redlock: most random delay after split votes (it starts at 1 ms and doubles) |
//! | `tls` | from scheme | Redlock: `true` to use TLS with every node |
//! | `tls_insecure` | `false` | TLS without certificate/host name checks (tests only) |
//! | `tls_ca` | system roots | PEM file of the CA(s) to trust instead of the system's |
//! | `tls_cert`, `tls_key` | none | PEM files of a client certificate and its key (mutual TLS) |
//! | `sentinel_username`, `sentinel_password` | none | credentials of the sentinels themselves |
//! | `wait_replicas` | `0` (off) | not Redlock: after each acquisition and extension, wait until this many replicas of the master have it (`WAIT`); fewer within the timeout fail it (see [`RedisConfig::wait_replicas`]) |
//! | `wait_replicas_timeout` | `1s`, at most half of `response_timeout` | how long the master waits for them; below `response_timeout` |

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lockkit_core::LockError;
use lockkit_core::url::{ConnectUrl, HostPort, Scheme};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "lockkit:";
/// The default bound of one connection attempt.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default bound of one command.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// The default time a Redlock node may take to answer once a quorum has.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// The default bound of waiting for a quorum of Redlock nodes to answer.
pub const DEFAULT_REDLOCK_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// The default upper bound of Redlock's random retry delay.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);
/// The default bound of waiting for replicas (`wait_replicas_timeout`),
/// lowered to half the response timeout when that is shorter than 2 s.
pub const DEFAULT_WAIT_REPLICAS_TIMEOUT: Duration = Duration::from_secs(1);

const REDIS_PORT: u16 = 6379;
const SENTINEL_PORT: u16 = 26379;

/// How the backend reaches Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// One server (`redis://`, `rediss://`).
    Single,
    /// The master of a sentinel-monitored group (`redis+sentinel://`); the
    /// hosts are the sentinels.
    Sentinel {
        /// The monitored group's name (the URL path's first segment).
        service: String,
    },
    /// A Redis Cluster (`redis+cluster://`); the hosts are seed nodes.
    Cluster,
    /// Redlock over independent masters (`redlock://`); every host is one.
    Redlock,
}

/// Whether and how to use TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tls {
    /// Plain TCP.
    Off,
    /// TLS with certificate and host name verification.
    On,
    /// TLS without verification (test setups with self-signed certificates).
    Insecure,
}

/// One `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Everything the backend needs to connect; see the [module docs](self) for
/// the URL form. `Debug` shows passwords as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// Single, sentinel, cluster or Redlock.
    pub mode: Mode,
    /// The servers (sentinels in sentinel mode, seeds in cluster mode).
    pub nodes: Vec<Node>,
    /// TLS to the servers.
    pub tls: Tls,
    /// ACL user name (Redis 6+); `None` uses `default`.
    pub username: Option<String>,
    /// Password (`AUTH`).
    pub password: Option<String>,
    /// Database number (not in cluster mode).
    pub db: i64,
    /// Start of every key and channel name (default `lockkit:`).
    pub prefix: String,
    /// Bound of one connection attempt (default 5 s).
    pub connect_timeout: Duration,
    /// Bound of one command (default 5 s). Redlock: bound of waiting for a
    /// quorum of nodes to answer (default 1 s).
    pub response_timeout: Duration,
    /// Redlock: how long the other nodes may take once a quorum has answered
    /// (default 100 ms): a slow or hung node only costs its vote. Keep it
    /// far below the ttl.
    pub node_timeout: Duration,
    /// Redlock: clock drift allowed on top of lockkit's 1 % + 2 ms (default 0).
    pub drift: Duration,
    /// Redlock: upper bound of the random delay before retrying after a split
    /// vote (default 50 ms).
    pub retry_delay: Duration,
    /// PEM file of the certificate authorities to trust (default: the
    /// system's roots).
    pub tls_ca: Option<PathBuf>,
    /// PEM files of a client certificate and its private key, for servers
    /// that authenticate clients by certificate.
    pub tls_client: Option<(PathBuf, PathBuf)>,
    /// Sentinel mode: user name for the sentinels themselves.
    pub sentinel_username: Option<String>,
    /// Sentinel mode: password for the sentinels themselves.
    pub sentinel_password: Option<String>,
    /// Single, sentinel and cluster modes: how many replicas of the master
    /// must have each acquisition (new hold or re-entry) and each extension
    /// before it counts (default 0: do not wait). The script call is
    /// followed by `WAIT wait_replicas timeout` in the same pipeline, so on
    /// the same connection and node, in the same round trip. When fewer
    /// replicas acknowledge within [`wait_replicas_timeout`](Self::wait_replicas_timeout),
    /// an acquisition is taken back and fails with a retryable
    /// [`LockError::Backend`] (a waiting `lock` tries again until its wait
    /// runs out), and an extension counts as failed (the watchdog retries;
    /// the lost signal fires at the validity deadline). Releases do not
    /// wait. This narrows the window in which a failover loses a hold; it
    /// does not close it (see the crate docs). Not for Redlock, whose masters
    /// are independent.
    pub wait_replicas: u32,
    /// How long the master waits for [`wait_replicas`](Self::wait_replicas)
    /// acknowledgements (default 1 s, or half the response timeout when that
    /// is less); must be above zero and below the response timeout, which
    /// bounds the script call and the `WAIT` together.
    pub wait_replicas_timeout: Duration,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hide = |p: &Option<String>| p.as_ref().map(|_| "***");
        f.debug_struct("RedisConfig")
            .field("mode", &self.mode)
            .field("nodes", &self.nodes.iter().map(Node::to_string).collect::<Vec<_>>())
            .field("tls", &self.tls)
            .field("tls_ca", &self.tls_ca)
            .field("tls_client", &self.tls_client)
            .field("username", &self.username)
            .field("password", &hide(&self.password))
            .field("db", &self.db)
            .field("prefix", &self.prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("node_timeout", &self.node_timeout)
            .field("drift", &self.drift)
            .field("retry_delay", &self.retry_delay)
            .field("sentinel_username", &self.sentinel_username)
            .field("sentinel_password", &hide(&self.sentinel_password))
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_replicas_timeout", &self.wait_replicas_timeout)
            .finish()
    }
}

impl RedisConfig {
    /// A configuration for one server at `host:port` with every default.
    pub fn single(host: impl Into<String>, port: u16) -> Self {
        RedisConfig {
            mode: Mode::Single,
            nodes: vec![Node {
                host: host.into(),
                port,
            }],
            tls: Tls::Off,
            username: None,
            password: None,
            db: 0,
            prefix: DEFAULT_PREFIX.to_owned(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            drift: Duration::ZERO,
            retry_delay: DEFAULT_RETRY_DELAY,
            tls_ca: None,
            tls_client: None,
            sentinel_username: None,
            sentinel_password: None,
            wait_replicas: 0,
            wait_replicas_timeout: default_wait_replicas_timeout(DEFAULT_RESPONSE_TIMEOUT),
        }
    }

    /// Reads a `redis://`, `rediss://`, `redis+sentinel://`,
    /// `redis+cluster://` or `redlock://` URL, taking this backend's query
    /// parameters (and leaving the others for [`ConnectUrl::finish`]).
    pub fn from_url(url: &mut ConnectUrl) -> Result<Self, LockError> {
        let scheme = url.url.scheme().to_ascii_lowercase();
        let mode = match url.scheme {
            Scheme::Redis => Mode::Single,
            Scheme::RedisCluster => Mode::Cluster,
            Scheme::Redlock => Mode::Redlock,
            Scheme::RedisSentinel => Mode::Sentinel { service: String::new() },
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
        cfg.check_wait_replicas()?;
        if matches!(cfg.mode, Mode::Redlock) && cfg.nodes.len() < 3 {
            tracing::warn!(
                nodes = cfg.nodes.len(),
                "redlock with fewer than 3 nodes tolerates no node failure"
            );
        }
        Ok(cfg)
    }

    /// The Redlock quorum: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Checks [`wait_replicas`](Self::wait_replicas) and its timeout against
    /// the mode and the response timeout (also for a configuration built in
    /// code; `connect` calls it).
    pub fn check_wait_replicas(&self) -> Result<(), LockError> {
        if self.wait_replicas == 0 {
            return Ok(());
        }
        if matches!(self.mode, Mode::Redlock) {
            return Err(LockError::config(
                "query parameter wait_replicas",
                "redlock:// nodes are independent masters without replicas to wait for; \
                 wait_replicas is for redis://, redis+sentinel:// and redis+cluster://",
            ));
        }
        let timeout = self.wait_replicas_timeout;
        if timeout.is_zero() {
            return Err(LockError::config(
                "query parameter wait_replicas_timeout",
                "must be above zero (WAIT with 0 waits forever)",
            ));
        }
        if timeout >= self.response_timeout {
            return Err(LockError::config(
                "query parameter wait_replicas_timeout",
                format!(
                    "{} ms must be below response_timeout ({} ms), which bounds the acquisition and its WAIT together",
                    timeout.as_millis(),
                    self.response_timeout.as_millis()
                ),
            ));
        }
        Ok(())
    }
}

/// [`DEFAULT_WAIT_REPLICAS_TIMEOUT`], or half the response timeout when that
/// is less.
fn default_wait_replicas_timeout(response_timeout: Duration) -> Duration {
    DEFAULT_WAIT_REPLICAS_TIMEOUT.min(response_timeout / 2)
}

/// Checks a key prefix: any bytes but `{` and `}`, which would change the
/// cluster hash tag of every key.
pub fn validate_prefix(prefix: &str) -> Result<(), LockError> {
    if prefix.contains(['{', '}']) {
        return Err(LockError::config(
            "query parameter prefix",
            format!("{prefix:?} must not contain {{ or }}: lockkit puts its own hash tag after the prefix"),
        ));
    }
    if prefix.len() > 512 {
        return Err(LockError::config("query parameter prefix", "at most 512 bytes"));
    }
    Ok(())
}

fn decode(s: &str, part: &str) -> Result<Option<String>, LockError> {
    if s.is_empty() {
        return Ok(None);
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|s| Some(s.into_owned()))
        .map_err(|_| LockError::config(part.to_owned(), "not valid UTF-8 after percent-decoding"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<RedisConfig, LockError> {
        let mut u = ConnectUrl::parse(url)?;
        let cfg = RedisConfig::from_url(&mut u)?;
        u.finish()?;
        Ok(cfg)
    }

    fn part(e: LockError) -> String {
        match e {
            LockError::InvalidConfig { part, .. } => part,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn single() {
        let c = parse("redis://127.0.0.1:16379").unwrap();
        assert_eq!(c.mode, Mode::Single);
        assert_eq!(
            c.nodes,
            [Node {
                host: "127.0.0.1".into(),
                port: 16379
            }]
        );
        assert_eq!((c.tls, c.db, c.prefix.as_str()), (Tls::Off, 0, "lockkit:"));
        let c = parse("rediss://app:s%40cret+x@redis.example/3?prefix=app:&response_timeout=2s#insecure").unwrap();
        assert_eq!(c.tls, Tls::Insecure);
        assert_eq!(c.nodes[0].port, 6379);
        assert_eq!(c.username.as_deref(), Some("app"));
        assert_eq!(c.password.as_deref(), Some("s@cret+x"));
        assert_eq!((c.db, c.prefix.as_str()), (3, "app:"));
        assert_eq!(c.response_timeout, Duration::from_secs(2));
        let shown = format!("{c:?}");
        assert!(!shown.contains("cret") && shown.contains("***"), "{shown}");
        let c = parse("redis://:only-password@h").unwrap();
        assert_eq!((c.username, c.password.as_deref()), (None, Some("only-password")));
    }

    #[test]
    fn multi_host_modes() {
        let c = parse("redlock://127.0.0.1:16380,127.0.0.1:16381,[::1]:16382/2?node_timeout=50ms&drift=5ms").unwrap();
        assert_eq!(c.mode, Mode::Redlock);
        assert_eq!(c.nodes.len(), 3);
        assert_eq!(c.nodes[2].to_string(), "[::1]:16382");
        assert_eq!((c.db, c.quorum()), (2, 2));
        assert_eq!(c.node_timeout, Duration::from_millis(50));
        assert_eq!(c.drift, Duration::from_millis(5));
        let c = parse("redis+cluster://h1,h2:7001,h3").unwrap();
        assert_eq!(c.mode, Mode::Cluster);
        assert_eq!(c.nodes[1].port, 7001);
        assert_eq!(c.nodes[0].port, 6379);
        let c = parse("redis+sentinel://:pw@s1,s2:26380/mymaster/4?sentinel_password=spw").unwrap();
        assert_eq!(
            c.mode,
            Mode::Sentinel {
                service: "mymaster".into()
            }
        );
        assert_eq!(c.nodes[0].port, 26379);
        assert_eq!(c.db, 4);
        assert!(!format!("{c:?}").contains("spw"));
        let c = parse("redlock://a,b,c?tls=true&tls_ca=/etc/ca.pem&tls_cert=c.pem&tls_key=k.pem").unwrap();
        assert_eq!(c.tls, Tls::On);
        assert_eq!(c.tls_ca, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(c.tls_client, Some(("c.pem".into(), "k.pem".into())));
    }

    #[test]
    fn bad_urls() {
        assert_eq!(
            part(parse("redis://h?prefix=a{b").unwrap_err()),
            "query parameter prefix"
        );
        assert_eq!(part(parse("redis://h/x").unwrap_err()), "url path");
        assert_eq!(part(parse("redis+cluster://a,b/1").unwrap_err()), "url path");
        assert_eq!(part(parse("redis+sentinel://a,b").unwrap_err()), "url path");
        assert_eq!(
            part(parse("redis://h?node_timeout=1s").unwrap_err()),
            "query parameter node_timeout"
        );
        assert_eq!(part(parse("redis://h?tls=true").unwrap_err()), "query parameter tls");
        assert_eq!(
            part(parse("redis://h?tls_insecure=true").unwrap_err()),
            "query parameter tls_insecure"
        );
        assert_eq!(part(parse("redis://h?bogus=1").unwrap_err()), "query parameter bogus");
        assert_eq!(part(parse("redis://h#what").unwrap_err()), "url fragment");
        assert_eq!(
            part(parse("redis://h?tls_ca=x.pem").unwrap_err()),
            "query parameter tls_ca"
        );
        assert_eq!(
            part(parse("rediss://h?tls_cert=x.pem").unwrap_err()),
            "query parameter tls_cert"
        );
        assert_eq!(
            part(parse("redlock://a,b,c?node_timeout=0s").unwrap_err()),
            "query parameter node_timeout"
        );
    }

    #[test]
    fn wait_replicas() {
        let c = parse("redis://h").unwrap();
        assert_eq!((c.wait_replicas, c.wait_replicas_timeout), (0, Duration::from_secs(1)));
        assert_eq!(
            c,
            RedisConfig {
                nodes: c.nodes.clone(),
                ..RedisConfig::single("h", 6379)
            }
        );
        let c = parse("redis://h?wait_replicas=2&wait_replicas_timeout=250ms").unwrap();
        assert_eq!(
            (c.wait_replicas, c.wait_replicas_timeout),
            (2, Duration::from_millis(250))
        );
        let c = parse("redis+sentinel://s/m?wait_replicas=1").unwrap();
        assert_eq!((c.wait_replicas, c.wait_replicas_timeout), (1, Duration::from_secs(1)));
        // The default stays below a short response timeout.
        let c = parse("redis+cluster://a,b?wait_replicas=1&response_timeout=300ms").unwrap();
        assert_eq!(
            (c.wait_replicas, c.wait_replicas_timeout),
            (1, Duration::from_millis(150))
        );
        assert!(format!("{c:?}").contains("wait_replicas: 1"));
        // Off, explicitly, is fine anywhere.
        assert_eq!(parse("redlock://a,b,c?wait_replicas=0").unwrap().wait_replicas, 0);

        let bad = |url: &str| {
            let e = parse(url).unwrap_err();
            let shown = e.to_string();
            (part(e), shown)
        };
        for url in [
            "redis://h?wait_replicas=-1",
            "redis://h?wait_replicas=one",
            "redis://h?wait_replicas=1.5",
            "redis://h?wait_replicas=",
            "redis://h?wait_replicas=4294967296",
        ] {
            assert_eq!(bad(url).0, "query parameter wait_replicas", "{url}");
        }
        let (p, why) = bad("redlock://a,b,c?wait_replicas=1");
        assert_eq!(p, "query parameter wait_replicas");
        assert!(why.contains("redlock"), "{why}");
        for url in [
            "redis://h?wait_replicas=1&wait_replicas_timeout=0s",
            "redis://h?wait_replicas=1&wait_replicas_timeout=soon",
            "redis://h?wait_replicas=1&wait_replicas_timeout=5s",
            "redis://h?wait_replicas=1&wait_replicas_timeout=1s&response_timeout=500ms",
            "redis://h?wait_replicas_timeout=1s",
            "redis://h?wait_replicas=0&wait_replicas_timeout=1s",
        ] {
            assert_eq!(bad(url).0, "query parameter wait_replicas_timeout", "{url}");
        }
        // A configuration built in code is checked the same way.
        let mut c = RedisConfig::single("h", 6379);
        c.wait_replicas = 1;
        assert!(c.check_wait_replicas().is_ok());
        c.wait_replicas_timeout = c.response_timeout;
        assert_eq!(
            part(c.check_wait_replicas().unwrap_err()),
            "query parameter wait_replicas_timeout"
        );
        c.wait_replicas_timeout = Duration::from_millis(10);
        c.mode = Mode::Redlock;
        assert_eq!(
            part(c.check_wait_replicas().unwrap_err()),
            "query parameter wait_replicas"
        );
    }
}
