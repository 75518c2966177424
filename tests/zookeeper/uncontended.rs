//! The uncontended path on ZooKeeper: an acquisition that holds from its
//! create on costs the create, the listing and (on a server that leaves the
//! stat out of a create in a `multi`) a read sent with them — no liveness
//! refresh, no read after the create's answer.
#![cfg(feature = "zookeeper")]

use lockkit::{LockClient, LockOptions};
use lockkit_zk::ZkBackend;

use crate::common::unique;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_name_is_taken_without_refresh_or_late_read() {
    let Some(url) = lockkit_core::testkit::server_url("LOCKKIT_ZK_URL") else {
        return;
    };
    let backend = ZkBackend::from_url(&url).await.expect("connect");
    let client = LockClient::new(backend.clone(), LockOptions::new()).unwrap();
    let name = unique("uncontended");
    // The first create under a name has nothing to guess from.
    client.lock(&name).await.expect("lock").unlock().await.expect("unlock");
    let before = backend.stats();
    let mut last = 0;
    for _ in 0..50 {
        let g = client.lock(&name).await.expect("lock");
        assert!(g.fencing_token() > last, "tokens grow");
        last = g.fencing_token();
        let info = client.inspect(&name).await.expect("inspect").expect("held");
        assert_eq!(info.token, last, "the token handed out is the node's");
        assert!(g.unlock().await.expect("unlock").is_free());
    }
    let after = backend.stats();
    assert_eq!(
        after.refreshes, before.refreshes,
        "no liveness refresh without a waiter"
    );
    assert_eq!(
        after.late_stat_reads, before.late_stat_reads,
        "no read after the creates"
    );
    assert_eq!(after.listings - before.listings, 50, "one listing per acquisition");
    assert_eq!(after.watches, before.watches, "nobody waited");
}
