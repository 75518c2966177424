//! The writes that hand out a grant of a read-write lock: a writer's token
//! recorded in the lock's parent ([`record_write`]), and a reader granted
//! beside its owner's write hold ([`go_beside`]).
//!
//! A writer records its token in the read-write lock's write record (a
//! persistent node beside the name's parent, see
//! `layout::write_record_path`: the last write token outlives the holds,
//! readers carry it) before its lease is handed out, in one `multi` with a
//! check that its node stands; the record only grows.

use zookeeper_client::{Client, Error as ZkError, MultiWriteError, MultiWriteResult};

use crate::conn::session::Session;
use crate::error::is_connection_loss;
use crate::layout::{Mark, beside_name, node_name, parse_last_write, write_record_path};
use crate::queue::{get, sync};
use crate::result::ZkResult;

/// Sets the data of `path` (under `version`) only while the node `check`
/// stands, in one `multi`. `None`: `check` is gone or `path` changed.
async fn set_while(client: &Client, check: &str, path: &str, data: &[u8], version: i32) -> ZkResult<Option<i32>> {
    let mut multi = client.new_multi_writer();
    multi.add_check_version(check, -1)?;
    multi.add_set_data(path, data, Some(version))?;
    match multi.commit().await {
        Ok(results) => match results.last() {
            Some(MultiWriteResult::SetData { stat }) if !stat.is_invalid() => Ok(Some(stat.version)),
            _ => Ok(Some(version + 1)),
        },
        Err(MultiWriteError::OperationFailed {
            source: ZkError::NoNode | ZkError::BadVersion,
            ..
        }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Records `token` as the last write token of the read-write lock whose
/// parent is `parent` while the writer's node `node` stands, making the
/// record if it is missing. False: that node is gone.
pub(super) async fn record_write(session: &Session, parent: &str, node: &str, token: i64) -> ZkResult<bool> {
    let client = &session.client;
    let record = write_record_path(parent);
    loop {
        let Some((data, stat)) = get(client, &record).await? else {
            match client.create(&record, b"0", &session.parent_options(Mark::Write)).await {
                Ok(_) | Err(ZkError::NodeExists) => {}
                Err(e) if is_connection_loss(&e) => sync(client, parent).await?,
                Err(e) => return Err(e),
            }
            continue;
        };
        if parse_last_write(&data) >= token {
            return Ok(true);
        }
        match set_while(client, node, &record, token.to_string().as_bytes(), stat.version).await {
            Ok(Some(_)) => return Ok(true),
            // The node is gone, or the record changed: the next read says.
            Ok(None) if get(client, node).await?.is_none() => return Ok(false),
            Ok(None) => {}
            Err(e) if is_connection_loss(&e) => sync(client, parent).await?,
            Err(e) => return Err(e),
        }
    }
}

/// Goes beside the owner's write hold at `writer`: the write token in the
/// reader's node at `path` (under `version`) and its beside marker, in
/// one `multi` that checks the writer's node stands. `None`: it is gone,
/// or the reader's node changed.
pub(super) async fn go_beside(
    session: &Session,
    writer: &str,
    path: &str,
    data: &[u8],
    version: i32,
) -> ZkResult<Option<i32>> {
    let marker = format!("{}/{}", parent_of(path), beside_name(node_name(path)));
    let mut multi = session.client.new_multi_writer();
    multi.add_check_version(writer, -1)?;
    multi.add_set_data(path, data, Some(version))?;
    multi.add_create(&marker, &[], &session.share_options())?;
    match multi.commit().await {
        Ok(results) => match results.get(1) {
            Some(MultiWriteResult::SetData { stat }) if !stat.is_invalid() => Ok(Some(stat.version)),
            _ => Ok(Some(version + 1)),
        },
        Err(MultiWriteError::OperationFailed {
            source: ZkError::NoNode | ZkError::BadVersion | ZkError::NodeExists,
            ..
        }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The parent of a node's path.
pub(super) fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}
