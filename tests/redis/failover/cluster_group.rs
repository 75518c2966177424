//! A private cluster: three masters with a replica each, on ports of their
//! own, with a short node timeout so a failover takes seconds. The names
//! the load locks all live on one master, the one each round kills; the
//! killed node restarts with its node file (its identity) and no data,
//! and the cluster makes it a replica of the master that replaced it.

use super::probe::{cli, replication_has, within};
use super::sentinel_group::SYNC_AT_ONCE;
use crate::common::redis::{ClusterNode, Server, lock_key, parse_cluster_nodes};

/// A master is failed after this long unreachable; small, so that a
/// failover takes seconds, and still far above a loaded machine's pauses.
const NODE_TIMEOUT_MS: &str = "2000";

pub struct ClusterGroup {
    nodes: Vec<Server>,
    names: Vec<String>,
    /// The master of the names' slots.
    master: usize,
    crashed: Option<usize>,
}

fn nodes_seen_by(port: u16) -> Vec<ClusterNode> {
    parse_cluster_nodes(&cli(port, &["CLUSTER", "NODES"]))
}

fn slot_of(port: u16, name: &str) -> Option<u16> {
    cli(port, &["CLUSTER", "KEYSLOT", &lock_key(name)]).trim().parse().ok()
}

impl ClusterGroup {
    /// Starts the cluster and picks `names` names whose slots share a master.
    pub async fn start(names: usize) -> ClusterGroup {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            NODE_TIMEOUT_MS,
            // A replica whose link was down for long still takes over.
            "--cluster-replica-validity-factor",
            "0",
            SYNC_AT_ONCE[0],
            SYNC_AT_ONCE[1],
        ];
        let nodes: Vec<Server> = tokio::task::block_in_place(|| (0..6).map(|_| Server::start_with(&args)).collect());
        let addrs: Vec<String> = nodes.iter().map(Server::addr).collect();
        let mut create = vec!["--cluster", "create"];
        create.extend(addrs.iter().map(String::as_str));
        create.extend(["--cluster-replicas", "1", "--cluster-yes"]);
        cli(nodes[0].port, &create);
        let mut group = ClusterGroup {
            nodes,
            names: Vec::new(),
            master: 0,
            crashed: None,
        };
        let first = group.nodes[0].port;
        group.master = within("the cluster forms", || {
            let slot = slot_of(first, "fo-0")?;
            let port = Self::master_of(first, slot)?;
            group.nodes.iter().position(|n| n.port == port)
        })
        .await;
        group.healthy().await;
        group.names = group.names_on_master(names);
        group
    }

    /// The URL of the cluster, with `params` (`""` or `?…`).
    pub fn url(&self, params: &str) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(Server::addr).collect();
        format!("redis+cluster://{}{params}", addrs.join(","))
    }

    pub fn names(&self) -> Vec<String> {
        self.names.clone()
    }

    fn names_on_master(&self, n: usize) -> Vec<String> {
        let port = self.nodes[self.master].port;
        let slot = |name: &str| slot_of(port, name).expect("CLUSTER KEYSLOT");
        let mine = |name: &String| {
            let s = slot(name);
            Self::master_of(port, s) == Some(port)
        };
        let names: Vec<String> = (0..1000).map(|i| format!("fo-{i}")).filter(mine).take(n).collect();
        assert_eq!(names.len(), n, "{n} names on one master");
        names
    }

    /// The port of the master serving `slot`, as the node at `port` sees it.
    fn master_of(port: u16, slot: u16) -> Option<u16> {
        nodes_seen_by(port)
            .into_iter()
            .find(|n| {
                n.flags.contains("master")
                    && !n.flags.contains("fail")
                    && n.slots.iter().any(|(lo, hi)| (*lo..=*hi).contains(&slot))
            })
            .map(|n| n.port)
    }

    /// Kills the names' master (SIGKILL).
    pub fn crash_primary(&mut self) {
        let node = &mut self.nodes[self.master];
        tokio::task::block_in_place(|| node.stop());
        self.crashed = Some(self.master);
    }

    /// Waits until the dead master's replica serves its slots, as every
    /// live node sees it.
    pub async fn await_promotion(&mut self) {
        let dead = self.nodes[self.master].port;
        let live: Vec<u16> = self.nodes.iter().map(|n| n.port).filter(|p| *p != dead).collect();
        let slot = slot_of(live[0], &self.names[0]).expect("CLUSTER KEYSLOT");
        let port = within("a replica takes over the dead master's slots", || {
            let seen: Vec<Option<u16>> = live.iter().map(|p| Self::master_of(*p, slot)).collect();
            let agreed = seen[0].filter(|m| *m != dead && seen.iter().all(|s| *s == Some(*m)))?;
            let ok = live
                .iter()
                .all(|p| cli(*p, &["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            ok.then_some(agreed)
        })
        .await;
        self.master = self.nodes.iter().position(|n| n.port == port).expect("a node");
    }

    /// Restarts the crashed node (same node file, no data) and waits until
    /// it replicates the new master and every node sees a healthy cluster.
    pub async fn rejoin(&mut self) {
        if let Some(i) = self.crashed.take() {
            let node = &mut self.nodes[i];
            tokio::task::block_in_place(|| node.restart());
        }
        self.healthy().await;
    }

    /// Every node answers with a whole cluster, no node flagged failing,
    /// every replica synchronised.
    async fn healthy(&self) {
        within("the cluster is healthy", || {
            let all_ok = self.nodes.iter().all(|n| {
                let seen = nodes_seen_by(n.port);
                seen.len() == self.nodes.len()
                    && seen
                        .iter()
                        .all(|s| !s.flags.contains("fail") && !s.flags.contains("handshake"))
                    && cli(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
            });
            let view = nodes_seen_by(self.nodes[0].port);
            let masters = view
                .iter()
                .filter(|s| s.flags.contains("master") && !s.slots.is_empty());
            let replicas: Vec<&ClusterNode> = view.iter().filter(|s| s.flags.contains("slave")).collect();
            let synced = replicas.len() == 3
                && replicas
                    .iter()
                    .all(|s| replication_has(s.port, "master_link_status:up"));
            (all_ok && synced && masters.count() == 3).then_some(())
        })
        .await;
    }
}
