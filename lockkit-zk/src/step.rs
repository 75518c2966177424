//! The steps of an acquisition in one session ([`Steps`]): each ZooKeeper
//! step bounded by the call's deadline, where a session that ended means
//! "start over", and a deadline that passed or an error takes the
//! acquisition's node back first; how a step stops the acquisition short
//! ([`Exit`]), and how its wait in one session ended ([`Waited`]).

use std::future::Future;
use std::sync::Arc;

use lockkit_core::LockError;
use lockkit_core::raw::{Lease, TryAcquire};
use tokio::time::Instant;

use crate::cleanup::Cleanup;
use crate::conn::session::Session;
use crate::error::{is_session_end, zk};
use crate::result::ZkResult;

/// How a wait in one session ended.
pub(crate) enum Waited {
    /// The lock is held: the lease.
    Acquired(Lease),
    /// The call's deadline passed first (a try: the lock is busy).
    TimedOut,
    /// The session ended (or the node vanished): start over in a new one.
    Restart,
}

/// How a step stopped an acquisition in one session short of the lock.
/// The step has dealt with the acquisition's clean-up already.
pub(crate) enum Exit {
    /// The session ended (or the node vanished): start over in a new one.
    Restart,
    /// The call's deadline passed (a try: it would wait): the acquisition
    /// gave up.
    GaveUp,
    /// An error, for the caller.
    Failed(LockError),
}

impl From<LockError> for Exit {
    fn from(e: LockError) -> Self {
        Exit::Failed(e)
    }
}

impl Exit {
    /// The wait's outcome in this session.
    pub(crate) fn waited(self) -> Result<Waited, LockError> {
        match self {
            Exit::Restart => Ok(Waited::Restart),
            Exit::GaveUp => Ok(Waited::TimedOut),
            Exit::Failed(e) => Err(e),
        }
    }

    /// A try's outcome in this session (`None`: start over in a new one).
    pub(crate) fn tried(self) -> Result<Option<TryAcquire>, LockError> {
        match self {
            Exit::Restart => Ok(None),
            Exit::GaveUp => Ok(Some(TryAcquire::Busy { retry_in: None })),
            Exit::Failed(e) => Err(e),
        }
    }
}

/// The ZooKeeper steps of one acquisition in one session, from its queued
/// node on: each step is bounded by the call's deadline and its errors
/// decide between starting over, giving up and failing, with the
/// acquisition's clean-up done accordingly.
pub(crate) struct Steps<'a> {
    pub(crate) session: &'a Arc<Session>,
    /// The lock's name, for errors.
    pub(crate) name: &'a str,
    /// The call's deadline (`None`: the steps are not bounded; a try has
    /// none, it never waits).
    pub(crate) deadline: Option<Instant>,
    /// What the acquisition takes back unless it takes the lock.
    pub(crate) cleanup: Cleanup,
}

impl Steps<'_> {
    /// A network step, bounded by the deadline: its value, or how the
    /// acquisition stops (see [`Steps::checked`]; a deadline that passes
    /// first gives up, see [`Steps::give_up`]). A suspended connection,
    /// whose requests wait for the reconnection, cannot stretch the wait.
    pub(crate) async fn bounded<T>(&mut self, step: impl Future<Output = ZkResult<T>>) -> Result<T, Exit> {
        match until(self.deadline, step).await {
            Some(r) => self.checked(r).await,
            None => Err(self.give_up().await),
        }
    }

    /// A step's value, unless it failed: a session that ended means start
    /// over in a new one ([`Exit::Restart`]); another error takes the
    /// acquisition's node (and any share it may have made) back before it
    /// is returned.
    ///
    /// A session that ended disarms the clean-up rather than run it: the
    /// call carries on with the same attempt in a new session, where the
    /// old session's node (which the server may keep a while) is taken
    /// back as one of the attempt's earlier nodes — a clean-up handed to
    /// the new session now could take the carried-on attempt's new node
    /// for a leftover.
    pub(crate) async fn checked<T>(&mut self, r: ZkResult<T>) -> Result<T, Exit> {
        match r {
            Ok(v) => Ok(v),
            Err(e) if is_session_end(&e) => {
                self.session.end(&e);
                Err(self.restart())
            }
            Err(e) => {
                self.cleanup.run().await;
                Err(Exit::Failed(zk("acquire", Some(self.name), e)))
            }
        }
    }

    /// Starts over in a new session: the session ended (or the node is
    /// gone). The clean-up is disarmed, for the reason [`Steps::checked`]
    /// gives.
    pub(crate) fn restart(&mut self) -> Exit {
        self.cleanup.disarm();
        Exit::Restart
    }

    /// Leaves the queue after the wait ran out: at once while connected (so
    /// no node is left when `lock` returns; a connection that stopped
    /// answering gets a quarter second, then the rest goes on in the
    /// background), in the background while the connection is suspended
    /// (its requests would wait for the reconnection), and in the
    /// backend's next session if this one ended: at once if one can be had
    /// within a quarter second (see `Leftover::in_next_session`), else when
    /// the next one is made.
    pub(crate) async fn give_up(&mut self) -> Exit {
        self.cleanup.run().await;
        Exit::GaveUp
    }
}

/// `fut`'s output, unless `deadline` passes first.
pub(crate) async fn until<F: Future>(deadline: Option<Instant>, fut: F) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, fut).await.ok(),
        None => Some(fut.await),
    }
}
