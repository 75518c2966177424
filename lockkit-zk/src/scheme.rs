//! The URL schemes this crate serves: [`SCHEME_NAMES`].

/// The schemes of the URLs this crate connects to (`zk://…`,
/// `zookeeper://…`).
pub(crate) const SCHEME_NAMES: &[&str] = &["zk", "zookeeper"];
