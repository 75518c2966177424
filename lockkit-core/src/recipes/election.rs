//! Leader election on a lock: [`Election`], [`Leadership`], [`Leader`].

use std::time::{Duration, Instant};

use futures_util::Stream;

use crate::backend::HolderWatch;
use crate::error::LostReason;
use crate::name::validate_name;
use crate::{LockClient, LockError, LockGuard, LockInfo, LockOptions, LostSignal};

/// How often [`Election::observe`] looks at the leader by default, where
/// the backend cannot push changes.
pub const DEFAULT_OBSERVE_INTERVAL: Duration = Duration::from_millis(200);

/// Where the backend pushes changes, [`Election::observe`] looks at the
/// leader anyway every this many observe intervals (every 10 s by default).
pub const PUSHED_RECHECK: u32 = 50;

/// A leader as others see it: its owner id and its epoch (the fencing token
/// of its leadership, which grows with every new leadership).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's owner id.
    pub owner: String,
    /// Its leadership's epoch.
    pub epoch: u64,
}

impl From<LockInfo> for Leader {
    fn from(info: LockInfo) -> Self {
        Leader {
            owner: info.owner,
            epoch: info.token,
        }
    }
}

/// An election among candidates for one role, on the lock `name`: the
/// leader is the lock's holder, its epoch the hold's fencing token, and its
/// leadership ends when the hold does. So there are never two leaders whose
/// leaderships are both valid, and a leader whose lease runs out learns it
/// ([`Leadership::lost`]) no later than another can be elected.
///
/// A candidate is an owner id: campaign from clients with their own owners
/// ([`LockClient::with_new_owner`]) — two campaigns of one owner are one
/// candidate (the second re-enters the first's leadership).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockkit_core::LockError> {
/// use lockkit_core::memory::MemoryBackend;
/// use lockkit_core::{LockClient, LockOptions};
///
/// let locks = LockClient::new(MemoryBackend::new(), LockOptions::new())?;
/// let election = locks.election("billing-singleton")?;
/// let leadership = election.campaign().await?;   // waits to become leader
/// assert_eq!(election.leader().await?.map(|l| l.epoch), Some(leadership.epoch()));
/// tokio::select! {
///     _ = leadership.lost() => { /* demoted: stop leading now */ }
///     _ = async { /* lead */ } => {}
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    client: LockClient,
    name: String,
    options: LockOptions,
    interval: Duration,
}

impl LockClient {
    /// The election for the role `name` (a lock name: `inspect`, `status`
    /// and `force_release` of it show and end the leadership). Campaigns
    /// wait without a bound and keep their lease with the watchdog; change
    /// that with [`Election::with_options`].
    pub fn election(&self, name: &str) -> Result<Election, LockError> {
        validate_name(name)?;
        Ok(Election {
            client: self.clone(),
            name: name.to_owned(),
            options: self.options().wait_forever(),
            interval: DEFAULT_OBSERVE_INTERVAL,
        })
    }
}

impl Election {
    /// The role's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same election, campaigning with `options` (their wait bounds
    /// [`campaign`](Self::campaign); ttl and auto-extend keep the
    /// leadership).
    pub fn with_options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// The same election, with [`observe`](Self::observe) looking every
    /// `interval` (at least 1 ms).
    pub fn with_observe_interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Waits to become leader (as long as the options' wait allows: no
    /// bound unless set). Cancel safe: a dropped campaign leaves nothing
    /// behind.
    pub async fn campaign(&self) -> Result<Leadership, LockError> {
        let guard = self.client.lock_with(&self.name, &self.options).await?;
        Ok(Leadership { guard })
    }

    /// Becomes leader if nobody leads now; never waits.
    pub async fn try_campaign(&self) -> Result<Option<Leadership>, LockError> {
        let guard = self.client.try_lock_with(&self.name, &self.options).await?;
        Ok(guard.map(|guard| Leadership { guard }))
    }

    /// The current leader, if any.
    pub async fn leader(&self) -> Result<Option<Leader>, LockError> {
        Ok(self.client.inspect(&self.name).await?.map(Leader::from))
    }

    /// The leader as it changes: the current one first, then each new one
    /// (or `None` while nobody leads) as it is seen. A task of the client's
    /// runtime watches whether the stream is read or not, and stops when
    /// the stream is dropped; the changes wait for the reader.
    ///
    /// Where the backend's server tells of changes
    /// ([`Capabilities::pushes_changes`](crate::Capabilities::pushes_changes):
    /// ZooKeeper's watches, the memory backend) a change is seen as it
    /// happens, and the leader is looked at anyway every
    /// [`PUSHED_RECHECK`] observe intervals. Elsewhere it is looked at every
    /// observe interval (see
    /// [`with_observe_interval`](Self::with_observe_interval)), and when
    /// the leader's lease runs out. A leadership shorter than that may go
    /// unseen (so may one that a push and the look after it both missed);
    /// the ones seen come in the order of their epochs. An error is
    /// yielded and the watching goes on.
    pub async fn observe(&self) -> impl Stream<Item = Result<Option<Leader>, LockError>> + Send + 'static {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let election = self.clone();
        let backend = self.client.backend().clone();
        let within = match backend.capabilities().pushes_changes {
            true => self.interval.saturating_mul(PUSHED_RECHECK),
            false => self.interval,
        };
        tokio::spawn(async move {
            let mut last: Option<Option<Leader>> = None;
            // Watches that fire at once again and again (a connection
            // going up and down) do not make it look more often than this.
            let floor = election.interval.min(Duration::from_millis(10));
            loop {
                let looked = tokio::time::Instant::now();
                // Armed before the look: a change between the two is not
                // missed.
                let watch = backend.watch_holder(&election.name, within).await;
                let now = election.client.inspect(&election.name).await;
                // The leader's lease running out ends its leadership.
                let expiry = now.as_ref().ok().and_then(|l| l.as_ref()).and_then(|l| l.remaining);
                let now = now.map(|l| l.map(Leader::from));
                let changed = match &now {
                    Ok(leader) if last.as_ref() == Some(leader) => false,
                    Ok(leader) => {
                        last = Some(leader.clone());
                        true
                    }
                    Err(_) => true,
                };
                if changed && tx.send(now).is_err() {
                    return;
                }
                let watch: HolderWatch = match watch {
                    Ok(watch) => watch,
                    Err(e) => {
                        if tx.send(Err(e)).is_err() {
                            return;
                        }
                        Box::pin(tokio::time::sleep(election.interval))
                    }
                };
                let pause = expiry.map_or(within, |e| within.min(e + Duration::from_millis(1)));
                tokio::select! {
                    _ = watch => {}
                    _ = tokio::time::sleep(pause) => {}
                    _ = tx.closed() => return,
                }
                tokio::time::sleep_until(looked + floor).await;
            }
        });
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
    }
}

/// Being the leader: what [`Election::campaign`] gives. The leadership
/// lasts while its lock is held (the watchdog extends it); stop leading
/// when [`lost`](Self::lost) fires. Dropping it resigns (in the
/// background, as a dropped [`LockGuard`] releases).
#[derive(Debug)]
#[must_use = "dropping a leadership resigns it"]
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// The role's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The leader's owner id.
    pub fn owner(&self) -> &str {
        self.guard.owner()
    }

    /// The epoch: the fencing token of this leadership, greater than every
    /// earlier leadership's. Hand it to what the leader writes to.
    pub fn epoch(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Until when this leadership is certainly valid (see
    /// [`LockGuard::valid_until`]).
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// Whether the leadership is lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Why it was lost, once it is.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.guard.lost_reason()
    }

    /// Resolves when the leadership is lost — no later than the moment
    /// another candidate could be elected. Cancel safe.
    pub async fn lost(&self) {
        self.guard.lost().await
    }

    /// A cloneable handle on the lost signal, for tasks doing the leader's
    /// work.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    /// The leadership's lock guard.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The leadership as its lock guard (unlocking it resigns).
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// Stops renewing without stepping down, as a crashed leader does: the
    /// leadership ends when its lease does (the session, on ZooKeeper),
    /// and the next candidate is elected then.
    pub fn abandon(self) {
        self.guard.abandon()
    }

    /// Steps down: the next candidate in line becomes leader.
    pub async fn resign(self) -> Result<(), LockError> {
        self.guard.unlock().await.map(|_| ())
    }
}
