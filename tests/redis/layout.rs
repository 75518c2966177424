//! The mutex's key layout (2): a free name is taken with one write and
//! released with one delete, and a key of another layout is refused, not
//! overwritten — two lockkit versions sharing a prefix never both grant a
//! name.

use crate::common::redis;

use std::collections::BTreeMap;
use std::time::Duration;

use lockkit::{LockError, LockOptions};
use lockkit_core::testkit::error_chain;
use redis::Server;

/// The commands the server ran between two `INFO commandstats` readings,
/// but the readings themselves.
fn ran(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(k, _)| k.as_str() != "info")
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// An uncontended cycle: the acquire script reads the clock, draws the
/// token and writes the hold (`SET NX PX`); the release script reads it
/// and deletes it. Nothing about the line, no publish, no second write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_is_one_write_and_one_delete() {
    if !redis::available("an_uncontended_cycle_is_one_write_and_one_delete") {
        return;
    }
    let server = Server::start();
    let client = lockkit::connect(&server.url()).await.expect("connect");
    // Warm: scripts loaded, the bucket counter exists.
    client
        .lock("cycle")
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    let before = server.command_calls();
    let g = client.lock("cycle").await.expect("lock");
    let token = g.fencing_token();
    assert!(g.unlock().await.expect("unlock").is_free());
    let calls = ran(&before, &server.command_calls());
    // In the acquisition script, one name, one lock: the lease ends of the
    // name's semaphore and read-write lock holds, read at the server's time.
    let expected: BTreeMap<String, u64> = [
        ("evalsha", 2),
        ("time", 2),
        ("zrevrangebyscore", 2),
        ("getset", 1),
        ("set", 1),
        ("get", 1),
        ("del", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(calls, expected, "the commands of one uncontended cycle");
    // And the hold it made carried the token the caller got.
    let g = client.lock("cycle").await.expect("lock");
    let stored = server.cli(&["GET", &redis::lock_key("cycle")]);
    assert_eq!(redis::stored_hold(&stored), Some((g.fencing_token().to_string(), 1)));
    assert!(g.fencing_token() > token);
    g.unlock().await.expect("unlock");
    assert_eq!(server.cli(&["EXISTS", &redis::lock_key("cycle")]).trim(), "0");
}

/// A hold as lockkit wrote it before layout 2 (a hash), and a value of a
/// later layout: this version refuses both with a clear, non-retryable
/// error and leaves them as they are; an older version's first command
/// (`HMGET`) on this version's hold fails with `WRONGTYPE`, so it cannot
/// grant the name either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_layout_is_refused_not_overwritten() {
    if !redis::available("a_key_of_another_layout_is_refused_not_overwritten") {
        return;
    }
    let server = Server::start();
    let client = lockkit::connect(&server.url()).await.expect("connect");
    let old = redis::lock_key("old");
    server.cli(&[
        "HSET",
        &old,
        "o",
        "someone",
        "c",
        "1",
        "t",
        "5",
        "a:0123456789abcdef",
        "1",
    ]);
    server.cli(&["PEXPIRE", &old, "60000"]);
    let newer = redis::lock_key("newer");
    server.cli(&["SET", &newer, "3|whatever", "PX", "60000"]);
    for (name, key) in [("old", &old), ("newer", &newer)] {
        let before = server.cli(&["DUMP", key]);
        for wait in [Duration::ZERO, Duration::from_secs(1)] {
            let e = client
                .lock_with(name, &LockOptions::new().wait(wait))
                .await
                .expect_err("refused");
            assert!(
                matches!(e, LockError::Backend { retryable: false, .. }),
                "{name}, wait {wait:?}: {e:?}"
            );
            let chain = error_chain(&e);
            assert!(chain.contains("another key layout"), "{name}: {chain}");
        }
        assert!(client.inspect(name).await.is_err(), "{name}: inspect refuses too");
        assert_eq!(server.cli(&["DUMP", key]), before, "{name}: left as it was");
    }
    // Layout 1's acquire began with `HMGET lock o t w`.
    let g = client.lock("current").await.expect("lock");
    let reply = server.cli(&["HMGET", &redis::lock_key("current"), "o", "t", "w"]);
    assert!(reply.starts_with("WRONGTYPE"), "{reply}");
    g.unlock().await.expect("unlock");
}
