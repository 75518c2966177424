//! The private `redis-server` processes the scenarios start
//! (`crate::common::redis`): they must come up on a busy machine, and a
//! failure to start must be reported, not turned into an abort.

use std::net::TcpListener;

use crate::common::redis::{self, Server, free_port};

/// A cluster node listens on a second port, the cluster bus (by default its
/// own port + 10,000). Free ports come from the ephemeral range, where the
/// bus port of one may be the local port of any outgoing connection; the
/// node must start anyway.
#[test]
fn a_cluster_node_starts_when_its_default_bus_port_is_taken() {
    if !redis::available("a_cluster_node_starts_when_its_default_bus_port_is_taken") {
        return;
    }
    let (port, _taken) = std::iter::repeat_with(free_port)
        .take(1000)
        .filter(|p| *p <= u16::MAX - 10_000)
        .find_map(|p| TcpListener::bind(("127.0.0.1", p + 10_000)).ok().map(|l| (p, l)))
        .expect("a free port whose port + 10000 is free too");
    let server = Server::start_on(port, &["--cluster-enabled", "yes"]);
    assert!(
        server.cli(&["INFO", "cluster"]).contains("cluster_enabled:1"),
        "the node on {port} runs in cluster mode"
    );
}
