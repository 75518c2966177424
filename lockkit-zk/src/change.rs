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

/// A change of the shares one node carries, and what it rests on (see
/// [`change`]).
#[derive(Debug, Clone)]
pub(crate) struct Edit<'a> {
    /// The node's path.
    pub(crate) path: &'a str,
    /// The change is made only if this owner holds the node…
    pub(crate) owner: &'a str,
    /// …and, if given, as part of the hold with this token.
    pub(crate) token: Option<i64>,
    /// The node as last known: the first write goes out without a read
    /// (a stale state only costs a version conflict).
    pub(crate) known: Option<Known>,
    /// What to add or take back.
    pub(crate) change: Change<'a>,
    /// A parent to list right behind the write, in the same round trip.
    pub(crate) list_after: Option<&'a str>,
}

/// What a change came to: the node after it (`None`: not held that way,
/// or gone), and the listing of [`Edit::list_after`] if one was made.
pub(crate) type Outcome = (Option<Changed>, Option<Vec<String>>);

/// Changes the shares the node `edit.path` carries — only if `edit.owner`
/// holds it (and, with `edit.token`, as part of the hold with that token).
/// Every write is versioned and retried on a version conflict. `None`: not
/// held that way (or the node is gone). With `edit.list_after`, that parent
/// is listed right behind the write, in the same round trip: the listing
/// (made after the write) comes back too.
///
/// Idempotent by attempt id: an `Add` of an attempt the node carries and a
/// `Remove` of one it does not change nothing — after a fresh read, since a
/// `known` state may be stale. So a write whose answer was lost with the
/// connection is recognised on the next read by its attempt id alone (the
/// node gone after a delete), never by comparing data that an identical
/// concurrent write could have produced.
pub(crate) async fn change(client: &Client, mut edit: Edit<'_>) -> ZkResult<Outcome> {
    let mut known = edit.known.take();
    let mut changing = Changing::new(client, edit, known.as_ref());
    loop {
        let current = match known.take() {
            Some(k) => k,
            None => match changing.read().await? {
                Ok(k) => k,
                Err(over) => return Ok(over),
            },
        };
        changing.czxid = current.czxid;
        let next = changing.next(&current.data);
        if next == current.data {
            // Nothing to do, if the node really is this way.
            if !changing.fresh {
                continue;
            }
            return Ok(changing.unchanged(current).await);
        }
        if let Some(done) = changing.write(&current, next).await? {
            return Ok(done);
        }
    }
}

/// One [`change`] under way: the request, and what it learnt of the node
/// between its tries.
struct Changing<'a> {
    client: &'a Client,
    /// The request, its known state taken out.
    edit: Edit<'a>,
    /// A delete of this change's lost its answer with the connection: the
    /// node found gone afterwards is taken for deleted by it.
    deleted_lost: bool,
    /// The node was read by this change (not only known from before): an
    /// unchanged state is the node's real one.
    fresh: bool,
    /// See [`Changed::raced`].
    raced: bool,
    /// The node's creation zxid, as last known.
    czxid: i64,
    /// The version of the known state the change started from.
    started: Option<i32>,
    lost: Reconnect<'a>,
}

impl<'a> Changing<'a> {
    fn new(client: &'a Client, edit: Edit<'a>, known: Option<&Known>) -> Self {
        Changing {
            client,
            edit,
            deleted_lost: false,
            fresh: false,
            raced: false,
            czxid: known.map_or(0, |k| k.czxid),
            started: known.map(|k| k.version),
            lost: Reconnect::new(client),
        }
    }

    /// The node as it is now, read (again over connection losses). `Err`:
    /// the change is over — the node is not held that way, or it is gone.
    async fn read(&mut self) -> ZkResult<Result<Known, Outcome>> {
        let Edit { path, owner, token, .. } = self.edit;
        loop {
            match self.client.get_data(path).await {
                Ok((data, stat)) => {
                    self.fresh = true;
                    let data = NodeData::decode(&data)
                        .filter(|d| d.owner == owner && token.is_none_or(|t| t == d.hold_token(stat.czxid)));
                    let Some(data) = data else {
                        return Ok(Err((None, None)));
                    };
                    self.raced |= self.started.is_some_and(|v| v != stat.version);
                    return Ok(Ok(Known {
                        data,
                        version: stat.version,
                        czxid: stat.czxid,
                    }));
                }
                Err(ZkError::NoNode) => return Ok(Err(self.gone(self.czxid))),
                Err(e) if is_connection_loss(&e) => self.lost.wait(e).await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// The node found gone: deleted by this change if a delete of its lost
    /// its answer, else not held (any more).
    fn gone(&self, czxid: i64) -> Outcome {
        let deleted = self.deleted_lost.then_some(Changed {
            node: None,
            czxid,
            raced: true,
        });
        (deleted, None)
    }

    /// The node's data with the change made.
    fn next(&self, data: &NodeData) -> NodeData {
        let mut next = data.clone();
        match self.edit.change {
            Change::Add(attempt) if !next.has(attempt) => next.attempts.push(attempt.to_owned()),
            Change::Add(_) => {}
            Change::Remove(attempt) => next.attempts.retain(|a| a != attempt),
        }
        next
    }

    /// The change was made already (or had nothing to do): the node as
    /// read, and the listing asked for.
    async fn unchanged(&self, current: Known) -> Outcome {
        let changed = Changed {
            czxid: current.czxid,
            node: Some((current.data, current.version)),
            raced: self.raced,
        };
        let listing = match self.edit.list_after {
            Some(parent) => self.client.list_children(parent).await.ok(),
            None => None,
        };
        (Some(changed), listing)
    }

    /// Writes `next` over `current`, versioned (a delete when no share is
    /// left), with the listing asked for sent right behind it. `None`: try
    /// again (a version conflict, or the answer lost with the connection).
    async fn write(&mut self, current: &Known, next: NodeData) -> ZkResult<Option<Outcome>> {
        let (client, path, raced) = (self.client, self.edit.path, self.raced);
        let deleting = next.attempts.is_empty();
        // The listing is sent behind the write: answered after it, so it
        // includes it.
        let listing;
        let result = if deleting {
            let delete = client.delete(path, Some(current.version));
            listing = self.edit.list_after.map(|parent| client.list_children(parent));
            delete.await.map(|()| Changed {
                node: None,
                czxid: current.czxid,
                raced,
            })
        } else {
            let set = client.set_data(path, &next.encode(), Some(current.version));
            listing = self.edit.list_after.map(|parent| client.list_children(parent));
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
            Ok(changed) => Ok(Some((Some(changed), listing))),
            Err(ZkError::BadVersion) => {
                self.raced = true;
                Ok(None)
            }
            Err(ZkError::NoNode) => Ok(Some(self.gone(current.czxid))),
            Err(e) if is_connection_loss(&e) => {
                self.deleted_lost |= deleting;
                self.raced = true;
                self.lost.wait(e).await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}
