//! What this crate's server tests share: the ZooKeeper server of
//! `LOCKKIT_ZK_URL` and a fresh chroot per case.

use lockkit_core::testkit::server_url;

/// The server's `host:port` list and a chroot of its own for `case`; `None`
/// (the case skips) when no server is configured.
pub fn hosts_and_chroot(case: &str) -> Option<(String, String)> {
    let base = server_url("LOCKKIT_ZK_URL")?;
    let hosts = base
        .strip_prefix("zk://")
        .and_then(|r| r.split(['/', '?']).next())
        .expect("a zk:// URL")
        .to_owned();
    let chroot = format!("/lockkit-{case}-{}", &lockkit_core::name::random_owner()[..12]);
    Some((hosts, chroot))
}
