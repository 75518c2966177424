//! Taking an attempt's share out of contender nodes found by the attempt
//! id in their names ([`take_out_of`]): what a leftover finds, and the
//! nodes an earlier session of the backend queued for an acquisition
//! carried on in this one ([`take_back_earlier`]).

use zookeeper_client::Client;

use crate::change::{Change, Edit, Known, change};
use crate::conn::session::Session;
use crate::layout::child_stem;
use crate::queue::{Queued, read};
use crate::result::ZkResult;

/// One attempt's shares, and where its nodes are: `attempt` of `owner`
/// under the lock's `parent`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptOf<'a> {
    pub(crate) parent: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) attempt: &'a str,
}

/// Takes `of`'s share out of the contender nodes `names` under its parent
/// (deleting a node left without shares), except those of the session
/// `except`.
pub(crate) async fn take_out_of<'a>(
    client: &Client,
    of: AttemptOf<'_>,
    names: impl Iterator<Item = &'a String>,
    except: Option<i64>,
) -> ZkResult<()> {
    let AttemptOf { parent, owner, attempt } = of;
    for child in names {
        let path = format!("{parent}/{child}");
        let Some((Some(data), stat)) = read(client, &path).await? else {
            continue;
        };
        if except == Some(stat.ephemeral_owner) {
            continue;
        }
        let edit = Edit {
            path: &path,
            owner,
            token: None,
            known: Some(Known::read(data, &stat)),
            change: Change::Remove(attempt),
            list_after: None,
        };
        change(client, edit).await?;
    }
    Ok(())
}

/// Takes back the contender nodes that earlier sessions of the backend
/// queued for `q`'s attempt before it started over in this session, as
/// `q`'s listing shows them; true if there were any. For a line whose
/// nodes each stand for an acquisition of their own (a semaphore's, a
/// read-write lock's): such a node would take a permit (or a place) of its
/// own that nobody holds, and stand after the call returned until the
/// server ended the old session. A late create of the old session cannot
/// add one after the listing: this session fenced it before it queued (see
/// `conn::session::SESSIONS`). The attempt's nodes of this session are
/// left alone (a repeated attempt joins them).
pub(crate) async fn take_back_earlier(session: &Session, q: &Queued, owner: &str, attempt: &str) -> ZkResult<bool> {
    let stem = child_stem(q.me.owner_tag, attempt);
    let earlier: Vec<&String> = q
        .queue
        .iter()
        .filter(|c| c.name != q.me.name && c.name.starts_with(&stem))
        .map(|c| &c.name)
        .collect();
    if earlier.is_empty() {
        return Ok(false);
    }
    let of = AttemptOf {
        parent: &q.parent,
        owner,
        attempt,
    };
    take_out_of(&session.client, of, earlier.into_iter(), Some(session.id)).await?;
    Ok(true)
}
