//! lockkit's Redis backend beside the raw floor, on this machine.
//!
//! ```text
//! cargo run --release -p lockkit-redis --example redis_floor -- redis://127.0.0.1:16379 [SECONDS]
//! cargo run --release -p lockkit-redis --example redis_floor -- redlock://h1,h2,h3,h4,h5 [SECONDS]
//! ```
//!
//! * **floor**: the fewest round trips one acquire + release needs, with the
//!   same client crate — `SET key value NX PX 30000`, then a Lua
//!   compare-and-delete (`EVALSHA`); for Redlock both go to every node at
//!   once. Sequential, one connection.
//! * **lockkit**: `lock` + `unlock` through a `LockClient`, uncontended.
//! * **hand-off**: 16 waiters on one name, released in a chain; the time
//!   from a release call to the next holder's `lock` returning, with the 16
//!   waiters in one client (16 owners) and in 16 clients. With one server,
//!   the Redis commands per hand-off are read from `INFO commandstats`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lockkit_core::url::{ConnectUrl, Scheme};
use lockkit_core::{LockClient, LockOptions};
use redis::Script;
use redis::aio::MultiplexedConnection;

const CAD: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

async fn client(url: &str) -> LockClient {
    let mut parsed = ConnectUrl::parse(url).expect("url");
    let backend = lockkit_redis::connect(&mut parsed).await.expect("connect");
    parsed.finish().expect("url parameters");
    LockClient::from_arc(backend, parsed.options).expect("client")
}

async fn raw_connections(url: &str) -> Vec<MultiplexedConnection> {
    let parsed = ConnectUrl::parse(url).expect("url");
    let hosts: Vec<String> = parsed.hosts.iter().map(|h| format!("redis://{h}")).collect();
    let mut conns = Vec::new();
    for h in hosts {
        let c = redis::Client::open(h.as_str()).expect("client");
        conns.push(c.get_multiplexed_async_connection().await.expect("connect"));
    }
    conns
}

fn per_second(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

/// Raw `SET NX PX` + compare-and-delete pairs for `secs`; pairs per second
/// and mean pair latency.
async fn floor(conns: &mut [MultiplexedConnection], secs: Duration) -> (f64, Duration) {
    let script = Script::new(CAD);
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < secs {
        let value = format!("{:032x}", rand::random::<u128>());
        let sets = join_all(conns.iter_mut().map(|c| {
            let value = value.clone();
            async move {
                let r: Option<String> = redis::cmd("SET")
                    .arg("floor:lock")
                    .arg(&value)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(c)
                    .await
                    .expect("SET");
                r.is_some()
            }
        }))
        .await;
        assert!(sets.iter().all(|ok| *ok), "the floor key was held");
        join_all(conns.iter_mut().map(|c| {
            let value = value.clone();
            let script = &script;
            async move {
                let _: i64 = script.key("floor:lock").arg(&value).invoke_async(c).await.expect("CAD");
            }
        }))
        .await;
        n += 1;
    }
    let elapsed = started.elapsed();
    (per_second(n, elapsed), elapsed / n.max(1) as u32)
}

/// lockkit `lock` + `unlock`, uncontended, for `secs`.
async fn lockkit_pairs(locks: &LockClient, secs: Duration) -> (f64, Duration) {
    let opts = LockOptions::new().ttl(Duration::from_secs(30)).auto_extend(false);
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < secs {
        let g = locks.lock_with("floor:lockkit", &opts).await.expect("lock");
        g.unlock().await.expect("unlock");
        n += 1;
    }
    let elapsed = started.elapsed();
    (per_second(n, elapsed), elapsed / n.max(1) as u32)
}

async fn command_count(conn: Option<&mut MultiplexedConnection>) -> Option<u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn?).await.ok()?;
    Some(commands(&info))
}

/// One chain of hand-offs among `clients.len()` waiters: the latencies, and
/// the Redis commands from the first release to the last acquisition (with
/// one server).
async fn handoff_round(
    holder: &LockClient,
    clients: &[LockClient],
    name: &str,
    mut conn: Option<&mut MultiplexedConnection>,
) -> (Vec<Duration>, Option<u64>) {
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(60))
        .wait(Duration::from_secs(60))
        .auto_extend(false);
    let g = holder.lock_with(name, &opts).await.expect("holder");
    let released = Arc::new(Mutex::new(Vec::new()));
    let acquired = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = clients
        .iter()
        .map(|c| {
            let (c, name, opts) = (c.clone(), name.to_owned(), opts.clone());
            let (released, acquired) = (released.clone(), acquired.clone());
            tokio::spawn(async move {
                let g = c.lock_with(&name, &opts).await.expect("waiter");
                let now = Instant::now();
                acquired.lock().unwrap().push(now);
                released.lock().unwrap().push(Instant::now());
                g.unlock().await.expect("unlock");
            })
        })
        .collect();
    // Let every waiter reach its sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = command_count(conn.as_deref_mut()).await;
    released.lock().unwrap().push(Instant::now());
    g.unlock().await.expect("unlock");
    for t in tasks {
        t.await.expect("task");
    }
    let after = command_count(conn).await;
    let mut r = released.lock().unwrap().clone();
    let mut a = acquired.lock().unwrap().clone();
    r.sort();
    a.sort();
    // Both counts include one INFO.
    let spent = before.zip(after).map(|(b, a)| a - b);
    (a.iter().zip(&r).map(|(a, r)| *a - *r).collect(), spent)
}

fn commands(info: &str) -> u64 {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            if name == "info" {
                return None;
            }
            rest.split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn handoffs(url: &str, conns: &mut [MultiplexedConnection], shared: bool, rounds: usize) {
    let waiters = 16;
    let holder = client(url).await;
    let clients: Vec<LockClient> = if shared {
        (0..waiters).map(|_| holder.with_new_owner()).collect()
    } else {
        join_all((0..waiters).map(|_| client(url))).await
    };
    // Warm-up round (script loading, subscriptions).
    handoff_round(&holder, &clients, "floor:handoff", None).await;
    let mut all = Vec::new();
    let mut spent = Some(0);
    for _ in 0..rounds {
        let conn = (conns.len() == 1).then(|| &mut conns[0]);
        let (latencies, commands) = handoff_round(&holder, &clients, "floor:handoff", conn).await;
        all.extend(latencies);
        spent = spent.zip(commands).map(|(s, c)| s + c);
    }
    all.sort();
    let median = all[all.len() / 2];
    let p99 = all[all.len() * 99 / 100];
    let max = *all.last().unwrap();
    let per_handoff = spent
        .map(|s| format!(", {:.1} Redis commands per hand-off", s as f64 / all.len() as f64))
        .unwrap_or_default();
    println!(
        "hand-off, 16 waiters in {}: median {median:?}, p99 {p99:?}, max {max:?} over {} hand-offs{per_handoff}",
        if shared { "one client (16 owners)" } else { "16 clients" },
        all.len()
    );
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| std::env::var("LOCKKIT_REDIS_URL").unwrap_or("redis://127.0.0.1:6379".into()));
    let secs = Duration::from_secs(args.next().and_then(|s| s.parse().ok()).unwrap_or(5));
    let scheme = ConnectUrl::parse(&url).expect("url").scheme;
    assert!(
        matches!(scheme, Scheme::Redis | Scheme::Redlock),
        "floor takes redis:// or redlock:// URLs"
    );
    let mut conns = raw_connections(&url).await;
    let locks = client(&url).await;
    println!("{url}: {} node(s), {secs:?} per measurement", conns.len());
    // Warm up both (connections, script loading).
    floor(&mut conns, Duration::from_millis(300)).await;
    lockkit_pairs(&locks, Duration::from_millis(300)).await;
    let (fps, flat) = floor(&mut conns, secs).await;
    println!("floor   SET NX PX + compare-and-delete: {fps:>8.0} pairs/s ({flat:?} per pair)");
    let (lps, llat) = lockkit_pairs(&locks, secs).await;
    println!(
        "lockkit lock + unlock (uncontended):    {lps:>8.0} pairs/s ({llat:?} per pair), {:.0} % of the floor",
        100.0 * lps / fps
    );
    handoffs(&url, &mut conns, true, 10).await;
    handoffs(&url, &mut conns, false, 10).await;
}
