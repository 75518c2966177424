//! Connection URLs: parsing, the query parameters every backend shares
//! (`ttl`, `wait`, `auto_extend`, `owner`, `fair`), and what a backend crate
//! declares to serve its schemes ([`BackendSchemes`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::backend::LockBackend;
use crate::{LockError, LockOptions};

/// How a backend connects from a URL: it takes its own query parameters
/// (see [`ConnectUrl::take`]) and returns the backend.
pub type Connector = for<'a> fn(&'a mut ConnectUrl) -> Connecting<'a>;

/// A backend's connect in progress.
pub type Connecting<'a> = Pin<Box<dyn Future<Output = Result<Arc<dyn LockBackend>, LockError>> + Send + 'a>>;

/// The URL schemes one backend crate serves, and how it connects. Each
/// backend crate declares its own (`lockkit_redis::SCHEMES`,
/// [`memory::SCHEMES`](crate::memory::SCHEMES), …); the `lockkit` facade's
/// scheme table is made of those of the crates compiled in, and a backend of
/// another crate joins it with `lockkit::register_scheme`.
#[derive(Clone, Copy)]
pub struct BackendSchemes {
    /// The schemes, lowercase (`"redis"`, `"rediss"`, …).
    pub names: &'static [&'static str],
    /// Connects to a URL of one of them.
    pub connect: Connector,
}

impl std::fmt::Debug for BackendSchemes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendSchemes").field("names", &self.names).finish()
    }
}

/// Whether `scheme` is a valid URL scheme (a letter, then letters, digits,
/// `+`, `-`, `.`).
pub fn is_scheme(scheme: &str) -> bool {
    scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// A parsed connection URL: its scheme, the URL, and the options every
/// backend shares, with backend-specific query parameters left to take.
#[derive(Debug, Clone)]
pub struct ConnectUrl {
    /// The scheme, lowercase: which backend the URL names (the facade's
    /// scheme table says which backend crate serves it).
    pub scheme: String,
    /// The URL. For a multi-host URL (`redlock://h1:1,h2:2/…`) its host is
    /// the first of [`hosts`](Self::hosts); everything else is as written.
    pub url: Url,
    /// Every host of the authority, in order: one for most URLs, several for
    /// `redlock://h1,h2,h3`, `redis+cluster://…` and `zk://…`. Empty when the
    /// URL has no host (`memory://`, `sqlite:…`).
    pub hosts: Vec<HostPort>,
    /// Default lock options from `ttl`, `wait`, `auto_extend`, `owner`,
    /// `fair`.
    pub options: LockOptions,
    params: Vec<(String, String)>,
}

impl ConnectUrl {
    /// Parses `url`, its scheme and the common query parameters.
    pub fn parse(url: &str) -> Result<Self, LockError> {
        let url = url.trim();
        let scheme = match url.split_once(':') {
            Some((scheme, _)) if is_scheme(scheme) => scheme.to_ascii_lowercase(),
            Some((scheme, _)) => {
                return Err(LockError::config(
                    "url scheme",
                    format!("unknown scheme {scheme:?} in {url:?}: expected SCHEME://…"),
                ));
            }
            None => {
                return Err(LockError::config(
                    "url",
                    format!("{url:?} is not a URL: expected SCHEME://…"),
                ));
            }
        };
        // A SQLite URL's path is a file path, relative ones included.
        if scheme != "sqlite" {
            refuse_dot_segments(url)?;
        }
        let (single, hosts) = split_hosts(url)?;
        let parsed = Url::parse(&single).map_err(|e| LockError::config("url", format!("{url:?}: {e}")))?;
        let hosts = match hosts {
            Some(hosts) => hosts,
            None => parsed
                .host_str()
                .filter(|h| !h.is_empty())
                .map(|h| HostPort {
                    host: h.trim_start_matches('[').trim_end_matches(']').to_owned(),
                    port: parsed.port(),
                })
                .into_iter()
                .collect(),
        };
        let mut this = ConnectUrl {
            scheme,
            hosts,
            params: parsed
                .query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
            url: parsed,
            options: LockOptions::new(),
        };
        let mut options = LockOptions::new();
        if let Some(ttl) = this.take_duration("ttl")? {
            options = options.ttl(ttl);
        }
        if let Some(wait) = this.take("wait") {
            options = match wait.as_str() {
                "forever" | "none" => options.wait_forever(),
                _ => options.wait(parse_duration("wait", &wait)?),
            };
        }
        if let Some(on) = this.take_bool("auto_extend")? {
            options = options.auto_extend(on);
        }
        if let Some(owner) = this.take("owner") {
            options = options.owner(owner);
        }
        if let Some(fair) = this.take_bool("fair")? {
            options = options.fair(fair);
        }
        options.validate().map_err(|e| match e {
            LockError::InvalidConfig { part, reason } => LockError::config(format!("query parameter {part}"), reason),
            other => other,
        })?;
        this.options = options;
        Ok(this)
    }

    /// Takes a query parameter (the last one, if repeated).
    pub fn take(&mut self, key: &str) -> Option<String> {
        let mut found = None;
        self.params.retain(|(k, v)| {
            if k == key {
                found = Some(v.clone());
                false
            } else {
                true
            }
        });
        found
    }

    /// Takes a humantime duration parameter such as `30s` or `1m 30s`.
    pub fn take_duration(&mut self, key: &str) -> Result<Option<Duration>, LockError> {
        self.take(key).map(|v| parse_duration(key, &v)).transpose()
    }

    /// Takes a boolean parameter: `true/false`, `1/0`, `yes/no`, `on/off`.
    pub fn take_bool(&mut self, key: &str) -> Result<Option<bool>, LockError> {
        self.take(key)
            .map(|v| match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(LockError::config(
                    format!("query parameter {key}"),
                    format!("expected true or false, got {v:?}"),
                )),
            })
            .transpose()
    }

    /// Takes an unsigned integer parameter.
    pub fn take_u64(&mut self, key: &str) -> Result<Option<u64>, LockError> {
        self.take(key)
            .map(|v| {
                v.parse().map_err(|_| {
                    LockError::config(
                        format!("query parameter {key}"),
                        format!("expected a whole number, got {v:?}"),
                    )
                })
            })
            .transpose()
    }

    /// Fails on any query parameter nobody took: a typo must not be ignored.
    pub fn finish(&self) -> Result<(), LockError> {
        match self.params.first() {
            None => Ok(()),
            Some((k, _)) => Err(LockError::config(
                format!("query parameter {k}"),
                format!("not a parameter of {:?} URLs", self.url.scheme()),
            )),
        }
    }
}

/// `url` with the password of its authority replaced by `***`, for logs and
/// `Debug` output. Works for multi-host URLs too.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_owned()
            };
            format!("{scheme}://{masked}@{hosts}{tail}")
        }
        None => url.to_owned(),
    }
}

/// A URL component (user name, password, path segment) percent-decoded;
/// `part` names it in the error when the decoded bytes are not UTF-8.
pub fn decode_component(s: &str, part: &str) -> Result<String, LockError> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| LockError::config(part.to_owned(), "not valid UTF-8 after percent-decoding"))
}

/// The `url` crate resolves `.` and `..` in paths, which would silently
/// change a database name or a ZooKeeper chroot; refuse them instead.
fn refuse_dot_segments(url: &str) -> Result<(), LockError> {
    let Some((_, rest)) = url.split_once("://") else {
        return Ok(());
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    if path
        .split('/')
        .any(|seg| seg == "." || seg == ".." || seg.eq_ignore_ascii_case("%2e%2e"))
    {
        return Err(LockError::config(
            "url path",
            format!("{path:?}: `.` and `..` segments are not allowed (they would be resolved away)"),
        ));
    }
    Ok(())
}

/// One `host[:port]` of a URL's authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// The host name or address (IPv6 without brackets).
    pub host: String,
    /// The port, if given.
    pub port: Option<u16>,
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            Some(p) => write!(f, "{host}:{p}"),
            None => f.write_str(&host),
        }
    }
}

/// For an authority listing several hosts (`user@h1:1,h2:2`), the URL with
/// only the first host (so the `url` crate can parse the rest) and the list.
fn split_hosts(url: &str) -> Result<(String, Option<Vec<HostPort>>), LockError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok((url.to_owned(), None));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, host_list) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if !host_list.contains(',') {
        return Ok((url.to_owned(), None));
    }
    let hosts = host_list
        .split(',')
        .map(parse_host_port)
        .collect::<Result<Vec<_>, _>>()?;
    let first = hosts[0].to_string();
    let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    Ok((format!("{scheme}://{userinfo}{first}{tail}"), Some(hosts)))
}

fn parse_host_port(item: &str) -> Result<HostPort, LockError> {
    let bad = |why: &str| LockError::config("url host list", format!("{item:?}: {why}"));
    let (host, port) = if let Some(v6) = item.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return Err(bad("expected :PORT after ]")),
        }
    } else {
        match item.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (item, None),
        }
    };
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    let port = port
        .map(|p| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("invalid port number"))
        })
        .transpose()?;
    Ok(HostPort {
        host: host.to_owned(),
        port,
    })
}

fn parse_duration(key: &str, value: &str) -> Result<Duration, LockError> {
    humantime::parse_duration(value).map_err(|e| {
        LockError::config(
            format!("query parameter {key}"),
            format!("{value:?} is not a duration like 30s or 1m: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(e: LockError) -> String {
        match e {
            LockError::InvalidConfig { part, .. } => part,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn common_options() {
        let mut u = ConnectUrl::parse("memory://?ttl=5s&wait=forever&auto_extend=off&owner=me&x=1").unwrap();
        assert_eq!(u.scheme, "memory");
        assert_eq!(u.options.ttl_value(), Duration::from_secs(5));
        assert_eq!(u.options.wait_value(), None);
        assert!(!u.options.auto_extend_value());
        assert_eq!(u.options.owner_value(), Some("me"));
        assert_eq!(part(u.finish().unwrap_err()), "query parameter x");
        assert_eq!(u.take_u64("x").unwrap(), Some(1));
        assert!(u.finish().is_ok());
    }

    #[test]
    fn component_decoding() {
        assert_eq!(decode_component("a%2Fb%20c", "path").unwrap(), "a/b c");
        assert_eq!(decode_component("plain", "path").unwrap(), "plain");
        let e = decode_component("%ff", "password").unwrap_err();
        assert!(e.to_string().contains("password"), "{e}");
    }

    #[test]
    fn redaction() {
        assert_eq!(redact("mysql://u:secret@h:3306/db?x=1"), "mysql://u:***@h:3306/db?x=1");
        assert_eq!(redact("redis://:pw@h1,h2/0"), "redis://:***@h1,h2/0");
        assert_eq!(redact("redis://user@h"), "redis://user@h");
        assert_eq!(redact("memory://"), "memory://");
        assert_eq!(redact("sqlite::memory:"), "sqlite::memory:");
    }

    #[test]
    fn host_lists() {
        let u = ConnectUrl::parse("redlock://user:pw@h1:1,[::1]:2,h3/0?ttl=5s").unwrap();
        let hosts: Vec<String> = u.hosts.iter().map(|h| h.to_string()).collect();
        assert_eq!(hosts, ["h1:1", "[::1]:2", "h3"]);
        assert_eq!(u.url.host_str(), Some("h1"));
        assert_eq!((u.url.username(), u.url.password()), ("user", Some("pw")));
        assert_eq!(u.url.path(), "/0");
        let single = ConnectUrl::parse("redis://127.0.0.1:6379").unwrap();
        assert_eq!(
            single.hosts,
            [HostPort {
                host: "127.0.0.1".into(),
                port: Some(6379)
            }]
        );
        assert!(ConnectUrl::parse("memory://").unwrap().hosts.is_empty());
        assert_eq!(
            part(ConnectUrl::parse("redlock://h1:1,h2:99999").unwrap_err()),
            "url host list"
        );
        assert_eq!(
            part(ConnectUrl::parse("redlock://h1:1,,h3").unwrap_err()),
            "url host list"
        );
    }

    #[test]
    fn bad_urls() {
        assert_eq!(part(ConnectUrl::parse("nonsense").unwrap_err()), "url");
        assert_eq!(part(ConnectUrl::parse("not a scheme://x").unwrap_err()), "url scheme");
        assert_eq!(ConnectUrl::parse("FTP://x").unwrap().scheme, "ftp");
        assert_eq!(part(ConnectUrl::parse("redis://[::1").unwrap_err()), "url");
        assert_eq!(
            part(ConnectUrl::parse("memory://?ttl=abc").unwrap_err()),
            "query parameter ttl"
        );
        assert_eq!(
            part(ConnectUrl::parse("memory://?ttl=0s").unwrap_err()),
            "query parameter ttl"
        );
        assert_eq!(
            part(ConnectUrl::parse("memory://?auto_extend=maybe").unwrap_err()),
            "query parameter auto_extend"
        );
        assert_eq!(part(ConnectUrl::parse("zk://h:2181/a/..").unwrap_err()), "url path");
        assert_eq!(part(ConnectUrl::parse("zk://h1:1,h2:2/./x").unwrap_err()), "url path");
        assert!(ConnectUrl::parse("zk://h:2181/a.b/..c").is_ok());
        assert!(ConnectUrl::parse("sqlite://./lockkit.db").is_ok());
    }
}
