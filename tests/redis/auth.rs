//! Passwords and ACL users through the URL, on a private Redis server.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::time::{Duration, Instant};

use lockkit::{LockError, LockOptions};
use redis::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_and_acl_users() {
    if !redis::available("passwords_and_acl_users") {
        return;
    }
    let server = Server::start_with(&["--requirepass", "top secret"]);
    let p = server.port;
    // A user for the lock keys and their channels, and one without channels.
    server.cli(&[
        "ACL",
        "SETUSER",
        "app",
        "on",
        ">app pass",
        "~lockkit:*",
        "&lockkit:*",
        "+@all",
    ]);
    server.cli(&[
        "ACL",
        "SETUSER",
        "quiet",
        "on",
        ">quiet pass",
        "~lockkit:*",
        "resetchannels",
        "+@all",
    ]);

    let default_user = lockkit::connect(&format!("redis://:top%20secret@127.0.0.1:{p}"))
        .await
        .expect("password");
    default_user
        .lock("auth")
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    assert!(
        !format!("{default_user:?}").contains("top secret"),
        "the password must not be shown"
    );

    for url in [
        format!("redis://:wrong@127.0.0.1:{p}"),
        format!("redis://app:wrong@127.0.0.1:{p}"),
        format!("redis://127.0.0.1:{p}"),
    ] {
        let e = lockkit::connect(&url).await.expect_err("refused");
        assert!(
            matches!(e, LockError::Backend { retryable: false, .. }),
            "{url}: a wrong or missing password is not retryable, got {e:?}"
        );
    }

    // The ACL user: locks, and a waiter is woken by the release message.
    let url = format!("redis://app:app%20pass@127.0.0.1:{p}");
    let (a, b) = (
        lockkit::connect(&url).await.expect("acl user"),
        lockkit::connect(&url).await.expect("acl user"),
    );
    let held = LockOptions::new().ttl(Duration::from_secs(60));
    let g = a.lock_with("auth", &held).await.expect("lock");
    let waiter = tokio::spawn({
        let (b, held) = (b.clone(), held.clone());
        async move { b.lock_with("auth", &held).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    g.unlock().await.expect("unlock");
    let gb = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the release")
        .expect("task")
        .expect("lock");
    gb.unlock().await.expect("unlock");

    // A user without channel permissions still locks and releases; a
    // waiter in the releaser's process hears the release from it directly,
    // without a message from the server (it used to sleep out the lease).
    let url = format!("redis://quiet:quiet%20pass@127.0.0.1:{p}");
    let (a, b) = (
        lockkit::connect(&url).await.expect("user"),
        lockkit::connect(&url).await.expect("user"),
    );
    let g = a.lock_with("quiet", &held).await.expect("lock");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock_with("quiet", &LockOptions::new().wait(Duration::from_secs(30)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(g.unlock().await.expect("release without publish permission").is_free());
    let gb = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the release of its own process, well before the 60 s lease ends")
        .expect("task")
        .expect("lock");
    gb.unlock().await.expect("unlock");

    // With no release to hear (the holder's lease runs out), such a
    // waiter wakes when the lease ends.
    let short = LockOptions::new().ttl(Duration::from_secs(1)).auto_extend(false);
    let g = a.lock_with("quiet", &short).await.expect("lock");
    let started = Instant::now();
    let gb = tokio::time::timeout(
        Duration::from_secs(15),
        b.lock_with("quiet", &LockOptions::new().wait(Duration::from_secs(20))),
    )
    .await
    .expect("the waiter wakes at the old lease's end")
    .expect("lock");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(g.is_lost(), "the first hold ran out");
    gb.unlock().await.expect("unlock");
    drop(g);
}
