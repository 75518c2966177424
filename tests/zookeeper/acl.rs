//! ZooKeeper digest ACLs (issue 8): a client with `zk://user:pass@…`
//! creates its nodes creator-all + world-read, so another session — without
//! credentials, with a wrong password, or as another user — can list and read
//! the queue but cannot delete a lock node, change its data or queue under
//! the name; clients with the same credentials share the locks as before
//! (wait, acquire, force_release), and loss and release-on-close still work.
//!
//! (It drives raw `zookeeper_client` sessions.)

#![cfg(feature = "zookeeper")]

use std::time::Duration;

use lockkit_core::{LockClient, LockError, LockOptions};
use lockkit_zk::{ZkBackend, encode_name};
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use crate::support;

async fn client(url: &str) -> LockClient {
    let backend = ZkBackend::from_url(url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    LockClient::new(backend, LockOptions::new()).unwrap()
}

async fn raw(hosts: &str, digest: Option<&str>) -> Client {
    let mut connector = Client::connector();
    if let Some(auth) = digest {
        connector = connector.with_auth("digest", auth.as_bytes());
    }
    connector.connect(hosts).await.expect("raw session")
}

/// The path of the only contender node of `name` under `chroot`.
async fn holder_node(session: &Client, chroot: &str, name: &str) -> String {
    let parent = format!("{chroot}/{}", encode_name(name));
    let children = session.list_children(&parent).await.expect("others may list the queue");
    assert_eq!(children.len(), 1, "{children:?}");
    format!("{parent}/{}", children[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_acls_protect_lock_nodes() {
    let Some((hosts, chroot)) = support::hosts_and_chroot("acl") else {
        return;
    };
    let secured = format!("zk://app:app%20pw@{hosts}{chroot}?session_timeout=4s");

    let holder = client(&secured).await;
    assert!(
        !format!("{:?}", holder.backend()).contains("app pw"),
        "Debug hides the password"
    );
    let g = holder.lock("job").await.unwrap();
    let token = g.fencing_token();

    let anonymous = raw(&hosts, None).await;
    let wrong_password = raw(&hosts, Some("app:wrong")).await;
    let other_user = raw(&hosts, Some("mallory:app pw")).await;
    let node = holder_node(&anonymous, &chroot, "job").await;
    let parent = node.rsplit_once('/').unwrap().0.to_owned();
    let intruder = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    for (who, s) in [
        ("no credentials", &anonymous),
        ("a wrong password", &wrong_password),
        ("another user", &other_user),
    ] {
        // Reading works for everyone (waiters and operators list and watch).
        s.get_data(&node).await.unwrap_or_else(|e| panic!("{who}: read: {e}"));
        assert_eq!(s.delete(&node, None).await, Err(ZkError::NoAuth), "{who}: delete");
        assert_eq!(
            s.set_data(&node, b"mine", None).await.err(),
            Some(ZkError::NoAuth),
            "{who}: set_data"
        );
        assert_eq!(
            s.create(&format!("{parent}/intruder-"), b"", &intruder).await.err(),
            Some(ZkError::NoAuth),
            "{who}: queue under the name"
        );
        assert_eq!(
            s.create(&format!("{chroot}/lock-other"), b"", &intruder).await.err(),
            Some(ZkError::NoAuth),
            "{who}: create a name under the chroot"
        );
    }
    assert!(!g.is_lost(), "the refused attempts changed nothing");
    let info = holder.inspect("job").await.unwrap().expect("still held");
    assert_eq!(info.token, token);

    // A lockkit client without credentials on the secured chroot: typed,
    // permanent error; it holds nothing.
    let open = client(&format!("zk://{hosts}{chroot}")).await;
    match open.try_lock("job").await {
        Err(e @ LockError::Backend { retryable: false, .. }) => {
            assert!(
                lockkit_core::one_line(&e).contains("authenticat") || format!("{e:?}").contains("NoAuth"),
                "{e:?}"
            );
        }
        other => panic!("expected a permanent backend error, got {other:?}"),
    }

    // Same credentials: waits, and acquires after the release, with a
    // greater token.
    let second = client(&secured).await;
    assert!(second.try_lock("job").await.unwrap().is_none());
    let waiter = tokio::spawn({
        let second = second.clone();
        async move {
            second
                .lock_with("job", &second.options().wait(Duration::from_secs(15)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(g.unlock().await.unwrap().is_free());
    let g2 = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken")
        .unwrap()
        .expect("acquired after the release");
    assert!(g2.fencing_token() > token);
    g2.unlock().await.unwrap();

    // The operator override works for a client with the credentials, and the
    // holder's lost signal fires.
    let g3 = holder.lock("stuck").await.unwrap();
    let removed = second.force_release("stuck").await.unwrap().expect("was held");
    assert_eq!(removed.token, g3.fencing_token());
    tokio::time::timeout(Duration::from_secs(10), g3.lost())
        .await
        .expect("the holder hears its node was deleted");

    // Release on close: a holder whose client goes away frees the name for
    // the other client with the credentials (ACLs do not keep nodes alive).
    let closing = client(&secured).await;
    closing.lock("closing").await.unwrap().abandon();
    drop(closing);
    let g4 = second
        .lock_with("closing", &second.options().wait(Duration::from_secs(15)))
        .await
        .expect("free after the holder's session ended");
    g4.unlock().await.unwrap();

    // Clean up the chroot (its parents are containers; delete what is left).
    drop((holder, second, open));
    let admin = raw(&hosts, Some("app:app pw")).await;
    if let Ok(children) = admin.list_children(&chroot).await {
        for c in children {
            let _ = admin.delete(&format!("{chroot}/{c}"), None).await;
        }
    }
    let _ = admin.delete(&chroot, None).await;
}
