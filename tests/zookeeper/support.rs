//! The shared ZooKeeper of `scripts/services` for the ZooKeeper fault
//! tests: its URL, address and chroot, and clients of it standing for
//! separate processes. Used by the modules of the `zookeeper` test binary
//! (`crate::support`).
#![cfg(feature = "zookeeper")]
#![allow(dead_code)]

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use lockkit::raw::ConnectUrl;
use lockkit::{LockClient, LockInfo, LockOptions};
use lockkit_core::testkit::server_url;
use lockkit_zk::ZkBackend;
use tokio::time::Instant;

/// Far above any healthy latency, far below a stuck lock.
pub const BOUND: Duration = Duration::from_secs(15);

/// The server under test.
pub struct Server {
    /// `LOCKKIT_ZK_URL` as given.
    pub url: String,
    /// Its first host, resolved (for a fault proxy in front of it).
    pub addr: SocketAddr,
    /// The URL's chroot path.
    pub chroot: String,
}

/// The shared ZooKeeper (`LOCKKIT_ZK_URL`), if configured (else skipped, or
/// a failure under `LOCKKIT_REQUIRE_SERVICES=1`).
pub fn server() -> Option<Server> {
    let url = server_url("LOCKKIT_ZK_URL")?;
    let parsed = ConnectUrl::parse(&url).expect("LOCKKIT_ZK_URL");
    let host = parsed.hosts.first().expect("a host");
    let addr = (host.host.as_str(), host.port.unwrap_or(2181))
        .to_socket_addrs()
        .expect("resolve")
        .next()
        .expect("an address");
    let chroot = parsed.url.path().to_owned();
    Some(Server { url, addr, chroot })
}

/// The server's `host:port` list and a chroot of its own for `case`; `None`
/// (the case skips) when no server is configured.
pub fn hosts_and_chroot(case: &str) -> Option<(String, String)> {
    let base = server_url("LOCKKIT_ZK_URL")?;
    let (hosts, _) = hosts_and_path(&base);
    let chroot = format!("/lockkit-{case}-{}", &lockkit_core::raw::random_owner()[..12]);
    Some((hosts, chroot))
}

/// The hosts of a `zk://` URL and its chroot (`""` without one).
pub fn hosts_and_path(url: &str) -> (String, String) {
    let rest = url.strip_prefix("zk://").expect("a zk:// URL");
    let rest = rest.split('?').next().unwrap_or_default();
    match rest.split_once('/') {
        Some((hosts, path)) => (hosts.to_owned(), format!("/{path}").trim_end_matches('/').to_owned()),
        None => (rest.to_owned(), String::new()),
    }
}

/// A client with its own session, as a separate process would have
/// (`owner`: shared with other such clients), waiting up to [`BOUND`].
pub async fn process(server: &Server, owner: Option<&str>) -> (ZkBackend, LockClient) {
    let backend = ZkBackend::from_url(&server.url).await.expect("connect");
    let mut options = LockOptions::new().wait(BOUND);
    if let Some(owner) = owner {
        options = options.owner(owner);
    }
    let client = LockClient::new(backend.clone(), options).expect("client");
    (backend, client)
}

/// Waits (up to [`BOUND`]) until `n` contenders are queued for `name`.
pub async fn until_queued(backend: &ZkBackend, name: &str, n: usize) {
    let deadline = Instant::now() + BOUND;
    while backend.contenders(name).await.expect("contenders") != n {
        assert!(Instant::now() < deadline, "{n} contenders not queued after {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Owner, hold count and token of an inspected hold.
pub fn holder_of(info: Option<LockInfo>) -> Option<(String, u32, u64)> {
    info.map(|i| (i.owner, i.hold_count, i.token))
}
