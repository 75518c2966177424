//! Watches on held nodes: each lease's loss token, and the one task per
//! session that arms a get-data watch on a node held past [`ARM_AFTER`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client::EventType;

use super::arming::Arming;
use super::mutex::lock;
use super::session::Session;
use crate::error::BACKEND;

impl Session {
    /// A loss token for a lease on the node at `path` (created at `czxid`),
    /// proven in `epoch`: cancelled when the epoch ends or the node goes.
    /// One watch per node, however many leases share it.
    pub fn lease_token(self: &Arc<Self>, path: &str, czxid: i64, epoch: &CancellationToken) -> CancellationToken {
        let mut nodes = lock(&self.nodes);
        if let Some((_, token)) = nodes.get(path)
            && !token.is_cancelled()
        {
            return token.child_token();
        }
        let token = epoch.child_token();
        let id = self.next_watch.fetch_add(1, Ordering::Relaxed);
        nodes.insert(path.to_owned(), (id, token.clone()));
        drop(nodes);
        let first = {
            let mut arming = lock(&self.arming);
            arming.push_back(Arming {
                due: Instant::now() + ARM_AFTER,
                path: path.to_owned(),
                czxid,
                id,
                token: token.clone(),
            });
            arming.len() == 1
        };
        if first {
            self.arm_wake.notify_one();
        }
        token.child_token()
    }

    /// The holder released `path` (deleted its node): a watch not armed yet
    /// is not needed any more.
    pub fn released(&self, path: &str) {
        lock(&self.nodes).remove(path);
    }
}

impl Drop for Session {
    /// Ends the armer task (it holds no strong reference while it waits).
    fn drop(&mut self) {
        self.arm_wake.notify_one();
    }
}

/// How long a hold lives before its node's watch is armed. Most holds are
/// shorter: they cost no watch request and no task. A node deleted under
/// its holder (an operator's force release) is noticed at most this much
/// later; the session's end is signalled at once, watch or not.
pub(super) const ARM_AFTER: Duration = Duration::from_millis(100);

/// Arms the watch of every held node that is still held when due.
pub(super) async fn arm_watches(session: Weak<Session>) {
    loop {
        let Some(s) = session.upgrade() else { return };
        let next = {
            let mut arming = lock(&s.arming);
            let now = Instant::now();
            while arming.front().is_some_and(|a| a.due <= now) {
                let Some(a) = arming.pop_front() else { break };
                let still_held = lock(&s.nodes).get(&a.path).is_some_and(|(id, _)| *id == a.id);
                if still_held && !a.token.is_cancelled() {
                    tokio::spawn(watch_node(Arc::downgrade(&s), a.path, a.czxid, a.id, a.token));
                }
            }
            arming.front().map(|a| a.due)
        };
        // No strong reference while waiting: the session goes when its
        // backend does (and its drop wakes this task to end it).
        let (dead, arm_wake) = (s.dead.clone(), s.arm_wake.clone());
        drop(s);
        let wake = async {
            match next {
                Some(due) => tokio::time::sleep_until(due).await,
                None => arm_wake.notified().await,
            }
        };
        tokio::select! {
            _ = wake => {}
            _ = dead.cancelled() => return,
        }
    }
}

/// Watches one held node until it goes (or the session does), then cancels
/// its loss token.
async fn watch_node(session: Weak<Session>, path: String, czxid: i64, id: u64, token: CancellationToken) {
    let why = loop {
        let Some(s) = session.upgrade() else {
            break "the backend was dropped".to_owned();
        };
        let armed = tokio::select! {
            r = s.client.get_and_watch_data(&path) => r,
            _ = token.cancelled() => break String::new(),
        };
        drop(s);
        match armed {
            Ok((_, stat, watcher)) if stat.czxid == czxid => {
                let event = tokio::select! {
                    e = watcher.changed() => e,
                    _ = token.cancelled() => break String::new(),
                };
                match event.event_type {
                    // Re-entry or release by the owner: still held.
                    EventType::NodeDataChanged => continue,
                    EventType::NodeDeleted => break "the lock node was deleted".to_owned(),
                    EventType::Session => break format!("the session is {}", event.session_state),
                    other => break format!("unexpected watch event {other}"),
                }
            }
            Ok(_) => break "the lock node was replaced".to_owned(),
            Err(zookeeper_client::Error::NoNode) => break "the lock node was deleted".to_owned(),
            Err(e) => break format!("watching the lock node failed: {e}"),
        }
    };
    if !why.is_empty() && !token.is_cancelled() {
        tracing::debug!(backend = BACKEND, node = %path, %why, "lease signal");
        token.cancel();
    }
    if let Some(s) = session.upgrade() {
        let mut nodes = lock(&s.nodes);
        if nodes.get(&path).is_some_and(|(i, _)| *i == id) {
            nodes.remove(&path);
        }
    }
}
