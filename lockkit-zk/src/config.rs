//! [`ZkConfig`]: what a `zk://` URL says.
//!
//! ```text
//! zk://h1:2181,h2:2181,h3:2181/lockkit?session_timeout=10s&connect_timeout=10s
//! zk://user:password@h1:2181,h2:2181/lockkit        digest authentication and ACLs
//! ```
//!
//! With `user:password` the session authenticates with ZooKeeper's `digest`
//! scheme (`addauth digest user:password`), and every node lockkit creates —
//! the chroot if missing, each name's parent, each contender — gets the ACL
//! *creator: all* plus *world: read*: sessions with the same credentials
//! share the locks (wait, acquire, release, `force_release`); any other
//! session can still list and inspect them, but cannot delete a lock node,
//! change its data or queue under a name. Nodes created earlier without
//! credentials keep their open ACL, so give secured clients a chroot of
//! their own. Both parts may be percent-encoded; the user must not contain
//! `:`.

use std::time::Duration;

use lockkit_core::LockError;
use lockkit_core::raw::{ConnectUrl, decode_component};

/// The port of a host given without one.
pub const DEFAULT_PORT: u16 = 2181;

/// The session timeout asked of the server unless the URL says otherwise:
/// 10 s. The server clamps it to its `minSessionTimeout..maxSessionTimeout`
/// (by default 2 to 20 ticks, i.e. 4 s to 40 s).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`connect`](crate::connect) waits for a session unless the URL
/// says otherwise: 10 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest session timeout or connect timeout accepted: 1 hour.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// How to reach a ZooKeeper ensemble, and where the locks live in it.
/// `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ZkConfig {
    /// The servers, as `host:port` (IPv6 in brackets). Sessions move between
    /// them on connection loss.
    pub hosts: Vec<String>,
    /// The node under which every lock lives, an absolute path (`/` for the
    /// root). Created (persistent) on connect if missing. Default `/`.
    pub chroot: String,
    /// The session timeout asked of the server (query parameter
    /// `session_timeout`, default [`DEFAULT_SESSION_TIMEOUT`]). A crashed
    /// holder's locks come free after this; a holder cut off from the
    /// servers loses them after this.
    pub session_timeout: Duration,
    /// How long connecting may take before it fails (query parameter
    /// `connect_timeout`, default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub connect_timeout: Duration,
    /// Digest credentials `(user, password)` from the URL's user info. When
    /// set, the session authenticates with them and lockkit's nodes are
    /// created with the ACL creator-all + world-read (see "Access
    /// control" in the [crate docs](crate)).
    pub digest: Option<(String, String)>,
}

impl std::fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkConfig")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("digest", &self.digest.as_ref().map(|(user, _)| (user, "***")))
            .finish()
    }
}

impl ZkConfig {
    /// A configuration for `hosts` with the defaults.
    pub fn new(hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        ZkConfig {
            hosts: hosts.into_iter().map(Into::into).collect(),
            chroot: "/".to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            digest: None,
        }
    }

    /// Reads a `zk://` (or `zookeeper://`) URL: its hosts, its path as the
    /// chroot, and the `session_timeout` and `connect_timeout` query
    /// parameters (taken from `url`; other parameters are left for the
    /// caller).
    pub fn from_url(url: &mut ConnectUrl) -> Result<Self, LockError> {
        let digest = match (url.url.username(), url.url.password()) {
            ("", None) => None,
            (user, Some(password)) if !user.is_empty() && !password.is_empty() => {
                let user = decode_component(user, "url credentials")?;
                let password = decode_component(password, "url credentials")?;
                if user.contains(':') {
                    return Err(LockError::config(
                        "url credentials",
                        "a digest user name must not contain `:`",
                    ));
                }
                Some((user, password))
            }
            _ => {
                return Err(LockError::config(
                    "url credentials",
                    "zk:// takes digest credentials as user:password@ (both non-empty), or none",
                ));
            }
        };
        if url.hosts.is_empty() {
            return Err(LockError::config(
                "url host",
                "zk:// needs at least one server, e.g. zk://127.0.0.1:2181/lockkit",
            ));
        }
        let hosts = url
            .hosts
            .iter()
            .map(|h| {
                let mut h = h.clone();
                h.port.get_or_insert(DEFAULT_PORT);
                h.to_string()
            })
            .collect();
        let chroot = parse_chroot(url.url.path())?;
        let session_timeout = timeout_param(url, "session_timeout", DEFAULT_SESSION_TIMEOUT)?;
        let connect_timeout = timeout_param(url, "connect_timeout", DEFAULT_CONNECT_TIMEOUT)?;
        Ok(ZkConfig {
            hosts,
            chroot,
            session_timeout,
            connect_timeout,
            digest,
        })
    }

    /// The connect string of the client library: `h1:p1,h2:p2` (no chroot;
    /// the backend applies it after making sure it exists).
    pub fn connect_string(&self) -> String {
        self.hosts.join(",")
    }
}

fn timeout_param(url: &mut ConnectUrl, key: &str, default: Duration) -> Result<Duration, LockError> {
    let value = url.take_duration(key)?.unwrap_or(default);
    if value.is_zero() || value > MAX_TIMEOUT {
        return Err(LockError::config(
            format!("query parameter {key}"),
            "must be more than 0 and at most 1h",
        ));
    }
    Ok(value)
}

/// Checks the URL path as a ZooKeeper chroot: `""` and `/` are the root;
/// anything else an absolute path of non-empty segments, none `.` or `..`,
/// none with characters ZooKeeper refuses in paths.
fn parse_chroot(raw: &str) -> Result<String, LockError> {
    let bad = |why: &str| LockError::config("url path", format!("{raw:?} is not a ZooKeeper chroot: {why}"));
    let path = decode_component(raw, "url path").map_err(|_| bad("it is not valid percent-encoded UTF-8"))?;
    if path.is_empty() || path == "/" {
        return Ok("/".to_owned());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(bad("it must start with /"));
    };
    for (i, segment) in rest.split('/').enumerate() {
        if segment.is_empty() {
            return Err(bad("it has an empty segment (// or a trailing /)"));
        }
        if segment == "." || segment == ".." {
            return Err(bad("it has a relative segment (. or ..)"));
        }
        if i == 0 && segment == "zookeeper" {
            return Err(bad("/zookeeper is reserved by the server"));
        }
        if segment.chars().any(refused_in_paths) {
            return Err(bad("it has characters ZooKeeper refuses in paths"));
        }
    }
    Ok(path)
}

/// Characters ZooKeeper refuses in paths (`PathUtils.validatePath`).
fn refused_in_paths(c: char) -> bool {
    matches!(u32::from(c), 0x0000..=0x001f | 0x007f..=0x009f | 0xd800..=0xf8ff | 0xfff0..=0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<ZkConfig, LockError> {
        let mut u = ConnectUrl::parse(url)?;
        let config = ZkConfig::from_url(&mut u)?;
        u.finish()?;
        Ok(config)
    }

    fn part(url: &str) -> String {
        match parse(url) {
            Err(LockError::InvalidConfig { part, .. }) => part,
            other => panic!("{url}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn hosts_chroot_and_timeouts() {
        let c = parse("zk://h1:1,h2,[::1]:3/lockkit/app?session_timeout=4s&connect_timeout=2s").unwrap();
        assert_eq!(c.hosts, ["h1:1", "h2:2181", "[::1]:3"]);
        assert_eq!(c.connect_string(), "h1:1,h2:2181,[::1]:3");
        assert_eq!(c.chroot, "/lockkit/app");
        assert_eq!(c.session_timeout, Duration::from_secs(4));
        assert_eq!(c.connect_timeout, Duration::from_secs(2));

        let c = parse("zookeeper://127.0.0.1:2181").unwrap();
        assert_eq!(c.chroot, "/");
        assert_eq!(c.session_timeout, DEFAULT_SESSION_TIMEOUT);
        assert_eq!(parse("zk://h/").unwrap().chroot, "/");
        assert_eq!(parse("zk://h/caf%C3%A9/a..b").unwrap().chroot, "/café/a..b");
        assert_eq!(c.digest, None);
    }

    #[test]
    fn digest_credentials() {
        let c = parse("zk://app:s%40cret@h1:1,h2:2/locks").unwrap();
        assert_eq!(c.digest, Some(("app".to_owned(), "s@cret".to_owned())));
        assert_eq!(c.hosts, ["h1:1", "h2:2"]);
        let shown = format!("{c:?}");
        assert!(shown.contains("app") && !shown.contains("cret"), "{shown}");
    }

    #[test]
    fn bad_urls_name_the_part() {
        assert_eq!(part("zk://h/not a..path//"), "url path");
        assert_eq!(part("zk://h/a//b"), "url path");
        assert_eq!(part("zk://h/lockkit/"), "url path");
        // The URL parser resolves `.`/`..` segments itself; decoded ones are refused.
        assert!(parse_chroot("/a/%2E%2E").is_err());
        assert!(parse_chroot("/a/.").is_err());
        assert_eq!(part("zk://h/a%00b"), "url path");
        assert_eq!(part("zk://h/a%FFb"), "url path");
        assert_eq!(part("zk://h/zookeeper"), "url path");
        assert_eq!(part("zk://h?session_timeout=0s"), "query parameter session_timeout");
        assert_eq!(part("zk://h?session_timeout=soon"), "query parameter session_timeout");
        assert_eq!(part("zk://h?connect_timeout=2h"), "query parameter connect_timeout");
        assert_eq!(part("zk://u@h/x"), "url credentials");
        assert_eq!(part("zk://:p@h/x"), "url credentials");
        assert_eq!(part("zk://a%3Ab:p@h/x"), "url credentials");
        assert_eq!(part("zk:///x"), "url host");
        assert_eq!(part("zk://h/x?sesion_timeout=4s"), "query parameter sesion_timeout");
    }
}
