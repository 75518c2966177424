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
//! | `restart_guard` | Redlock `on`, else `off` | `on`, `off`, or the shortest quarantine (`30s`): a server that lost its data grants nothing until every lease it may have carried has ended (see [`RestartGuard`]); not for `redis+cluster://` |
//! | `wait_replicas_timeout` | `1s`, at most half of `response_timeout` | how long the master waits for them; below `response_timeout` |

mod url;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lockkit_core::LockError;

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
    /// Whether a server that lost its data is quarantined (default: on for
    /// Redlock, off otherwise; see [`RestartGuard`]).
    pub restart_guard: RestartGuard,
}

/// The restart guard: a server that lost its data (restarted without
/// persistence, flushed, its keys evicted) lost the holds it carried
/// while their holders still count on them. With the guard on, every
/// acquisition checks a marker key the server carries (`PREFIXnode`, in the
/// same script); a server without it grants nothing for a quarantine:
///
/// - Redlock: until every lease the other nodes granted may have ended (each
///   node keeps a bound of its leases in its marker; a hold on a quorum
///   stands on at least one node that kept its data when at most a
///   minority lost theirs), and at least `floor`. When no node has a
///   marker (a new deployment, or every node lost its data at once), the
///   quarantine is `floor`: that case needs it to be the longest lease.
/// - A single server (or Sentinel's master): this client's ttl, and at
///   least `floor` — give the longest ttl of the server's clients. The
///   cost: after an empty restart (and on first use), no acquisition for
///   the quarantine; a waiting `lock` waits it out.
///
/// A server whose clock steps forward ends its leases early the same way.
/// With the guard on, every acquisition and extension also reads the
/// server's clock (`TIME`, in the same round trip) and compares it with
/// this process's monotonic clock
/// ([`ServerClock`](lockkit_core::raw::ServerClock)): after a step forward
/// the server is quarantined until the leases it granted before the step
/// would have ended (its marker's lease bound plus the step), and the grant
/// that came with the reading is taken back. `docs/clocks.md` in the
/// repository says what each backend does on a clock step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RestartGuard {
    /// On for Redlock, off otherwise.
    #[default]
    Default,
    /// Off: a server that lost its data grants at once. Redlock then needs
    /// its operators to keep such a node away for longer than a lease.
    Off,
    /// On, with a quarantine of at least `floor`.
    On {
        /// The shortest quarantine.
        floor: Duration,
    },
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
            .field("restart_guard", &self.restart_guard)
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
            restart_guard: RestartGuard::Default,
        }
    }

    /// The restart guard's shortest quarantine, when the guard is on.
    pub(crate) fn guard_floor(&self) -> Option<Duration> {
        match (self.restart_guard, &self.mode) {
            (RestartGuard::On { floor }, _) => Some(floor),
            (RestartGuard::Default, Mode::Redlock) => Some(Duration::ZERO),
            _ => None,
        }
    }

    /// Checks [`restart_guard`](Self::restart_guard) against the mode: a
    /// cluster's masters each carry a share of the slots, and a marker per
    /// master is not one per slot.
    pub fn check_restart_guard(&self) -> Result<(), LockError> {
        if matches!(self.restart_guard, RestartGuard::On { .. }) && matches!(self.mode, Mode::Cluster) {
            return Err(LockError::config(
                "query parameter restart_guard",
                "not for redis+cluster:// (a marker per master is not one per slot); \
                 run the cluster's masters with persistence and replicas",
            ));
        }
        Ok(())
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

#[cfg(test)]
mod tests;
