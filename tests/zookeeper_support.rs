//! The shared ZooKeeper of `scripts/services` for the ZooKeeper fault
//! tests: its URL, address and chroot. Included by the `zookeeper_*` test
//! files with `#[path = "zookeeper_support.rs"] mod support;` (as a test
//! target of its own it has no tests).
#![allow(dead_code)]

use std::net::{SocketAddr, ToSocketAddrs};

use lockkit::url::ConnectUrl;
use lockkit_core::testkit::server_url;

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

/// A lock name no other test or run uses.
pub fn unique(case: &str) -> String {
    format!("lockkit-test/{case}/{}", lockkit_core::name::random_owner())
}
