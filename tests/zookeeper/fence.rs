//! Creates of a session this backend gave up are fenced (issue 13): every
//! contender create checks the session's marker node, which a backend
//! deletes for a session it moved on from. A request of the old session
//! that the server runs late then fails instead of making a node that
//! nobody waits for (which stood as an extra share of its owner's next
//! hold until the old session ended: the ZooKeeper torture run with seed
//! 75586693816923). Here the marker is deleted from outside, as the next
//! session would: the backend's next `lock` finds its session fenced,
//! moves on to a new one, and takes the lock there with one node.
//!
//! (It drives a raw `zookeeper_client` session.)

#![cfg(feature = "zookeeper")]

use lockkit_core::{LockClient, LockOptions};
use lockkit_zk::ZkBackend;
use zookeeper_client::Client;

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_session_makes_no_node_and_the_lock_moves_on() {
    let Some((hosts, chroot)) = support::hosts_and_chroot("fence") else {
        return;
    };
    let backend = ZkBackend::from_url(&format!("zk://{hosts}{chroot}?session_timeout=4s"))
        .await
        .expect("connect");
    let client = LockClient::new(backend.clone(), LockOptions::new()).expect("client");
    let first = backend.session_id().expect("a session");

    let raw = Client::connector().connect(&hosts).await.expect("raw session");
    let marker = format!("{chroot}/lockkit-sessions/{first:016x}");
    assert!(
        raw.check_stat(&marker).await.expect("stat").is_some(),
        "the session has its marker"
    );
    raw.delete(&marker, None).await.expect("delete the marker");

    let guard = client.lock("fenced").await.expect("lock in a new session");
    let second = backend.session_id().expect("a session");
    assert_ne!(second, first, "the fenced session was given up");
    assert_eq!(backend.stats().sessions, 2);
    assert_eq!(
        backend.contenders("fenced").await.expect("contenders"),
        1,
        "no node of the fenced session"
    );
    assert_eq!(guard.unlock().await.expect("unlock").remaining_holds, 0);
    assert_eq!(backend.contenders("fenced").await.expect("contenders"), 0);
}
