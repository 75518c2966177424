//! Changing the shares a node carries: versioned writes, each idempotent
//! by attempt id, and what is known of a node between them.

use zookeeper_client::{Client, Error as ZkError, Stat};

use crate::conn::reconnect::Reconnect;
use crate::error::is_connection_loss;
use crate::layout::NodeData;
use crate::result::ZkResult;

/// A node's data as last known: skips the read before a versioned write.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) data: NodeData,
    pub(crate) version: i32,
    /// The node's own creation zxid.
    pub(crate) czxid: i64,
}

impl Known {
    /// A node as read: its data and stat.
    pub(crate) fn read(data: NodeData, stat: &Stat) -> Self {
        Known {
            data,
            version: stat.version,
            czxid: stat.czxid,
        }
    }

    /// The fencing token of the hold the node is part of.
    pub(crate) fn token(&self) -> i64 {
        self.data.hold_token(self.czxid)
    }
}

/// A node after a change of its shares.
#[derive(Debug, Clone)]
pub(crate) struct Changed {
    /// Its data and version now; `None` once it is deleted.
    pub(crate) node: Option<(NodeData, i32)>,
    /// Its creation zxid.
    pub(crate) czxid: i64,
    /// Somebody else wrote the node since the state the change started
    /// from (a version conflict, a stale known state, or an answer lost
    /// with the connection): a session joining the hold bumps its node's
    /// version.
    pub(crate) raced: bool,
}

impl Changed {
    /// How many shares the node carries now.
    pub(crate) fn count(&self) -> u32 {
        self.node.as_ref().map_or(0, |(d, _)| d.count())
    }

    /// What is known of the node now, unless it is deleted.
    pub(crate) fn known(&self) -> Option<Known> {
        self.node.as_ref().map(|(data, version)| Known {
            data: data.clone(),
            version: *version,
            czxid: self.czxid,
        })
    }
}

/// A change of the shares a node carries.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change<'a> {
    /// Adds this attempt's share (a re-entry), unless the node carries it.
    Add(&'a str),
    /// Takes this attempt's share back (a release), deleting the node when
    /// it was the last; nothing if the node does not carry it.
    Remove(&'a str),
}

/// Changes the shares the node at `path` carries — only if `owner` holds it
/// (and, with `token`, as part of the hold with that token). Every write is
/// versioned and retried on a version conflict. `None`: not held that way
/// (or the node is gone). With `list_after`, that parent is listed right
/// behind the write, in the same round trip: the listing (made after the
/// write) comes back too.
///
/// Idempotent by attempt id: an `Add` of an attempt the node carries and a
/// `Remove` of one it does not change nothing — after a fresh read, since a
/// `known` state may be stale. So a write whose answer was lost with the
/// connection is recognised on the next read by its attempt id alone (the
/// node gone after a delete), never by comparing data that an identical
/// concurrent write could have produced.
pub(crate) async fn change(
    client: &Client,
    path: &str,
    owner: &str,
    token: Option<i64>,
    mut known: Option<Known>,
    change: Change<'_>,
    list_after: Option<&str>,
) -> ZkResult<(Option<Changed>, Option<Vec<String>>)> {
    let mut deleted_lost = false;
    let mut fresh = false;
    let mut raced = false;
    let mut czxid = known.as_ref().map_or(0, |k| k.czxid);
    let started = known.as_ref().map(|k| k.version);
    let mut lost = Reconnect::new(client);
    loop {
        let current = match known.take() {
            Some(k) => k,
            None => match client.get_data(path).await {
                Ok((data, stat)) => {
                    fresh = true;
                    let data = NodeData::decode(&data)
                        .filter(|d| d.owner == owner && token.is_none_or(|t| t == d.hold_token(stat.czxid)));
                    let Some(data) = data else {
                        return Ok((None, None));
                    };
                    raced |= started.is_some_and(|v| v != stat.version);
                    Known {
                        data,
                        version: stat.version,
                        czxid: stat.czxid,
                    }
                }
                Err(ZkError::NoNode) => {
                    let deleted = deleted_lost.then_some(Changed {
                        node: None,
                        czxid,
                        raced: true,
                    });
                    return Ok((deleted, None));
                }
                Err(e) if is_connection_loss(&e) => {
                    lost.wait(e).await?;
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        czxid = current.czxid;
        let mut next = current.data.clone();
        match change {
            Change::Add(attempt) if !next.has(attempt) => next.attempts.push(attempt.to_owned()),
            Change::Add(_) => {}
            Change::Remove(attempt) => next.attempts.retain(|a| a != attempt),
        }
        if next == current.data {
            // Nothing to do, if the node really is this way.
            if !fresh {
                continue;
            }
            let changed = Changed {
                czxid: current.czxid,
                node: Some((current.data, current.version)),
                raced,
            };
            let listing = match list_after {
                Some(parent) => client.list_children(parent).await.ok(),
                None => None,
            };
            return Ok((Some(changed), listing));
        }
        let deleting = next.attempts.is_empty();
        // The listing is sent behind the write: answered after it, so it
        // includes it.
        let listing;
        let result = if deleting {
            let delete = client.delete(path, Some(current.version));
            listing = list_after.map(|parent| client.list_children(parent));
            delete.await.map(|()| Changed {
                node: None,
                czxid: current.czxid,
                raced,
            })
        } else {
            let set = client.set_data(path, &next.encode(), Some(current.version));
            listing = list_after.map(|parent| client.list_children(parent));
            set.await.map(|stat| Changed {
                node: Some((next, stat.version)),
                czxid: current.czxid,
                raced,
            })
        };
        let listing = match listing {
            Some(l) => l.await.ok(),
            None => None,
        };
        match result {
            Ok(changed) => return Ok((Some(changed), listing)),
            Err(ZkError::BadVersion) => raced = true,
            Err(ZkError::NoNode) => {
                let deleted = deleted_lost.then_some(Changed {
                    node: None,
                    czxid: current.czxid,
                    raced: true,
                });
                return Ok((deleted, None));
            }
            Err(e) if is_connection_loss(&e) => {
                deleted_lost |= deleting;
                raced = true;
                lost.wait(e).await?;
            }
            Err(e) => return Err(e),
        }
    }
}
