//! A waiting client leaving a name's line.

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::Publish;
use super::kinds::{KINDS_LEAVE, nonce};
use crate::error::Fault;
use crate::layout::Keys;

/// A waiting client leaving a line: see [`leave_line`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leaving<'a> {
    /// The name's key (and channel): a lock key, or a semaphore's or
    /// read-write lock's holds key.
    pub channel: &'a [u8],
    /// The client's waiter id.
    pub id: &'a str,
    /// Only this entry of a read-write lock's line, and only if it was told
    /// its turn and nobody came since (`None`: all of the client's).
    pub entry: Option<&'a str>,
    /// How turns are told (semaphores and read-write locks).
    pub publish: Publish,
}

/// Takes a waiting client out of a line, in one round trip: a mutex's
/// queue, or a semaphore's or read-write lock's line (telling the entries
/// that lets in: see [`leave_kind`]). Errors are ignored: a client left in
/// line is dropped by the next one once its turn passes.
pub(crate) async fn leave_line<C: ConnectionLike + Send>(conn: &mut C, keys: &Keys, leave: &Leaving<'_>) {
    if keys.is_family(leave.channel) {
        let _ = leave_kind(conn, keys, leave).await;
        return;
    }
    let _: redis::RedisResult<()> = redis::cmd("ZREM")
        .arg(keys.queue_of_lock(leave.channel))
        .arg(leave.id)
        .query_async(conn)
        .await;
}

/// Takes a waiting client out of the line of a semaphore or read-write
/// lock, telling the entries that lets in (see [`KINDS_LEAVE`](super::kinds::KINDS_LEAVE)).
async fn leave_kind<C: ConnectionLike + Send>(conn: &mut C, keys: &Keys, leave: &Leaving<'_>) -> Result<(), Fault> {
    let holds = leave.channel;
    let _: Value = KINDS_LEAVE
        .key(holds)
        .key(keys.expiries(holds))
        .key(keys.queue_of_lock(holds))
        .key(keys.told(holds))
        .arg(leave.id)
        .arg(if keys.is_rw(holds) { "r" } else { "p" })
        .arg(leave.publish.command())
        .arg(keys.waiter_mark())
        .arg(nonce())
        .arg(leave.entry.unwrap_or(""))
        .invoke_async(conn)
        .await?;
    Ok(())
}
