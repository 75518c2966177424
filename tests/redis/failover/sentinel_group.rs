//! A private sentinel group: two redis-servers (a master and its replica)
//! and one sentinel (quorum 1), on ports of their own. The replica reaches
//! its master through a [`FaultProxy`] that delays the stream by the lag
//! asked for; a crash takes the proxy down with the master, so what was
//! still on the way never arrives — the master's host failed, not just its
//! process (a killed process's socket buffers still reach the replica).

use std::time::Duration;

use lockkit_core::testkit::{Fault, FaultProxy};

use super::probe::{cli, replication_has, within};
use crate::common::redis::{Sentinel, Server};

/// A master sends a new replica its data at once, not after the default
/// 5 s wait for more replicas to share one transfer.
pub const SYNC_AT_ONCE: [&str; 2] = ["--repl-diskless-sync-delay", "0"];

pub struct SentinelGroup {
    /// Two slots: the master and its replica; the crashed one is `None`
    /// until it rejoins.
    nodes: [Option<Server>; 2],
    ports: [u16; 2],
    master: usize,
    link: Option<FaultProxy>,
    lag: Duration,
    sentinel: PrivateSentinel,
}

impl SentinelGroup {
    pub async fn start(lag: Duration) -> SentinelGroup {
        let master = tokio::task::block_in_place(|| Server::start_with(&SYNC_AT_ONCE));
        let link = Self::link_to(master.port, lag).await;
        let replica = Self::replica(None, link.addr().port());
        let sentinel = PrivateSentinel::start(master.port, replica.port);
        let group = SentinelGroup {
            ports: [master.port, replica.port],
            nodes: [Some(master), Some(replica)],
            master: 0,
            link: Some(link),
            lag,
            sentinel,
        };
        group.healthy().await;
        group
    }

    /// The URL of the group, with `params` (`""` or `?…`).
    pub fn url(&self, params: &str) -> String {
        format!("redis+sentinel://127.0.0.1:{}/m{params}", self.sentinel.port())
    }

    async fn link_to(port: u16, lag: Duration) -> FaultProxy {
        let proxy = FaultProxy::start(([127, 0, 0, 1], port).into())
            .await
            .expect("replication proxy");
        if !lag.is_zero() {
            proxy.set(Fault::Latency(lag));
        }
        proxy
    }

    /// A replica replicating through `link_port`, on `port` if given.
    fn replica(port: Option<u16>, link_port: u16) -> Server {
        let link = link_port.to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &link];
        args.extend(SYNC_AT_ONCE);
        tokio::task::block_in_place(|| match port {
            Some(port) => Server::start_on(port, &args),
            None => Server::start_with(&args),
        })
    }

    /// The master's host fails: its link drops what is in flight, and its
    /// process is killed (SIGKILL).
    pub fn crash_primary(&mut self) {
        if let Some(link) = &self.link {
            link.set(Fault::Down);
        }
        if let Some(mut node) = self.nodes[self.master].take() {
            tokio::task::block_in_place(|| node.stop());
        }
    }

    /// Waits until the sentinel has promoted the replica and finished the
    /// failover.
    pub async fn await_promotion(&mut self) {
        let replica = 1 - self.master;
        let port = self.ports[replica];
        within("the sentinel promotes the replica", || {
            let master = fields(&cli(self.sentinel.port(), &["SENTINEL", "MASTER", "m"]));
            let done = field(&master, "port") == Some(&port.to_string()) && field(&master, "flags") == Some("master");
            (done && cli(port, &["ROLE"]).starts_with("master")).then_some(())
        })
        .await;
        self.master = replica;
        self.link = None;
    }

    /// Starts the crashed node again on its port, empty, as a replica of
    /// the new master (through a new lagging link), and waits until the
    /// group could fail over again.
    pub async fn rejoin(&mut self) {
        let old = 1 - self.master;
        let link = Self::link_to(self.ports[self.master], self.lag).await;
        self.nodes[old] = Some(Self::replica(Some(self.ports[old]), link.addr().port()));
        self.link = Some(link);
        self.healthy().await;
    }

    /// The replica is synchronised through the lag proxy, and the sentinel
    /// names the master and sees the replica up.
    async fn healthy(&self) {
        let (master, replica) = (self.ports[self.master], self.ports[1 - self.master]);
        let link = self.link.as_ref().expect("a link to the master").addr().port();
        let through_link = format!("master_port:{link}");
        within("the group is healthy", || {
            if !replication_has(replica, &through_link) {
                cli(replica, &["REPLICAOF", "127.0.0.1", &link.to_string()]);
                return None;
            }
            let named = self.sentinel.master_port() == Some(master);
            let synced = replication_has(replica, "master_link_status:up")
                && cli(master, &["INFO", "replication"]).contains("state=online");
            (named && synced && self.sentinel.sees_replica(replica)).then_some(())
        })
        .await;
    }
}

/// `key value` lines (redis-cli's map output) into pairs.
fn fields(out: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = out.lines().collect();
    lines
        .chunks(2)
        .filter_map(|kv| Some((kv.first()?.to_string(), kv.get(1)?.to_string())))
        .collect()
}

fn field<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// The group's sentinel. `down-after-milliseconds` is short so that a
/// failover takes seconds, but not so short that a master busy with a
/// resynchronisation right after a failover looks down (at 1 s that
/// happened, and the failover it started had no replica to promote).
/// `failover-timeout` bounds the pause before a sentinel tries again after
/// such an aborted failover (twice the timeout); it is also how long a
/// sentinel waits before "fixing" a replica that replicates from another
/// address than the master's, as ours do through the lag proxy — so
/// [`SentinelGroup::rejoin`] puts a fixed replica back on the proxy.
struct PrivateSentinel(Sentinel);

impl PrivateSentinel {
    /// Starts it monitoring `master`, told of `replica` (otherwise it
    /// would learn of it only at its next look at the master, in up to
    /// 10 s).
    fn start(master: u16, replica: u16) -> PrivateSentinel {
        let dir = std::env::temp_dir().join(format!("lockkit-failover-sentinel-{}-{master}", std::process::id()));
        let settings = format!(
            "sentinel known-replica m 127.0.0.1 {replica}\n\
             sentinel down-after-milliseconds m 2000\nsentinel failover-timeout m 20000\n"
        );
        PrivateSentinel(Sentinel::spawn(dir, master, &settings))
    }

    fn port(&self) -> u16 {
        self.0.port
    }

    fn master_port(&self) -> Option<u16> {
        self.0.master_port()
    }

    /// Whether the sentinel lists `port` as a replica it can reach.
    fn sees_replica(&self, port: u16) -> bool {
        let out = cli(self.port(), &["SENTINEL", "REPLICAS", "m"]);
        let lines: Vec<&str> = out.lines().collect();
        lines
            .split(|l| *l == "name")
            .map(|block| fields(&block[1.min(block.len())..].join("\n")))
            .any(|f| field(&f, "port") == Some(&port.to_string()) && field(&f, "flags") == Some("slave"))
    }
}
