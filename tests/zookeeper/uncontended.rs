//! The uncontended path on ZooKeeper: an acquisition that holds from its
//! create on costs the create, the listing and (on a server that leaves the
//! stat out of a create in a `multi`) a read sent with them — no liveness
//! refresh, no read after the create's answer.
#![cfg(feature = "zookeeper")]

use lockkit::{LockClient, LockOptions};
use lockkit_zk::{ZkBackend, encode_name};

use crate::common::unique;
use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_name_is_taken_without_refresh_or_late_read() {
    let Some(url) = lockkit_core::testkit::server_url("LOCKKIT_ZK_URL") else {
        return;
    };
    let backend = ZkBackend::from_url(&url).await.expect("connect");
    let client = LockClient::new(backend.clone(), LockOptions::new()).unwrap();
    let name = unique("uncontended");
    // The server deletes an empty lock parent (a container node) on its
    // periodic check; a parent created again starts its sequence numbers
    // over, so the session's guess of the next one misses once, and that
    // miss costs a read. Which parents the loop saw, by creation zxid:
    let (hosts, chroot) = support::hosts_and_path(&url);
    let raw = zookeeper_client::Client::connector()
        .connect(&hosts)
        .await
        .expect("raw session");
    let parent = format!("{chroot}/{}", encode_name(&name));
    let mut parents = std::collections::BTreeSet::new();
    let see_parent = async |parents: &mut std::collections::BTreeSet<i64>| {
        let stat = raw
            .check_stat(&parent)
            .await
            .expect("stat")
            .expect("a held name has its parent");
        parents.insert(stat.czxid);
    };
    // The first create under a name has nothing to guess from.
    let g = client.lock(&name).await.expect("lock");
    see_parent(&mut parents).await;
    g.unlock().await.expect("unlock");
    let before = backend.stats();
    let mut last = 0;
    for _ in 0..50 {
        let g = client.lock(&name).await.expect("lock");
        assert!(g.fencing_token() > last, "tokens grow");
        last = g.fencing_token();
        let info = client.inspect(&name).await.expect("inspect").expect("held");
        assert_eq!(info.token, last, "the token handed out is the node's");
        see_parent(&mut parents).await;
        assert!(g.unlock().await.expect("unlock").is_free());
    }
    let after = backend.stats();
    assert_eq!(
        after.refreshes, before.refreshes,
        "no liveness refresh without a waiter"
    );
    // A parent created again costs the acquisition that finds it a read of
    // the node it created and a listing: the guess of its sequence number
    // missed.
    let recreated = parents.len() as u64 - 1;
    let late_reads = after.late_stat_reads - before.late_stat_reads;
    let listings = after.listings - before.listings;
    assert!(
        late_reads <= recreated,
        "no read after the creates but one per parent created again ({recreated}): {late_reads} reads"
    );
    assert!(
        (50..=50 + recreated).contains(&listings),
        "one listing per acquisition, and one per parent created again ({recreated}): {listings} listings"
    );
    assert_eq!(after.watches, before.watches, "nobody waited");
}
