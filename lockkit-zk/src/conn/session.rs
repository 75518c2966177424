//! [`Session`], one ZooKeeper session, and [`Sessions`], the backend's
//! current one: their state, and what a session does on its own — its
//! end, its connection epoch, the options of the nodes it creates, handing
//! a leftover over to the next session. Connecting one is in
//! [`super::connect`]; its held nodes' watches, liveness record and
//! heartbeat in [`super::watch`], [`super::liveness`] and
//! [`super::heartbeat`].

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lockkit_core::raw::{SessionDeadline, valid_until};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, CreateMode, CreateOptions, SessionState};

use super::acl::acls;
use super::arming::Arming;
use super::counters::Counters;
use super::mutex::lock;
use super::seq_guess::SeqGuess;
use crate::config::ZkConfig;
use crate::error::BACKEND;
use crate::layout::Mark;
use crate::orphan::Orphan;

/// How often an operation starts over with a new session when its session
/// ends under it, before it gives up.
pub(crate) const SESSION_RESTARTS: usize = 3;

/// How a live session takes back a leftover that an ended one handed over
/// (see [`Session::orphan`]): in the background. The backend gives it to
/// [`Sessions::new`]: it is
/// [`Leftover::adopt`](crate::leftover::Leftover::adopt).
pub(crate) type Adopt = fn(&Arc<Session>, Orphan);

/// The backend's current session, and a new one once it has ended.
pub(crate) struct Sessions {
    pub(super) config: ZkConfig,
    pub(super) counters: Arc<Counters>,
    pub(super) current: Mutex<Option<Arc<Session>>>,
    /// Held while connecting, so concurrent callers share one new session.
    pub(super) connecting: tokio::sync::Mutex<()>,
    /// Leftovers of acquisitions whose session ended before they were taken
    /// back, for the next live session (shared with every session).
    pub(super) orphans: Arc<Mutex<Vec<Orphan>>>,
    /// Takes a leftover back in the live session (see [`Adopt`]).
    adopt: Adopt,
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("session", &self.peek().map(|s| s.id_hex()))
            .finish()
    }
}

impl Sessions {
    /// The backend's sessions, none made yet (the first
    /// [`get`](Sessions::get) makes one); `adopt` takes back, in the live
    /// session, what ended sessions hand over.
    pub fn new(config: ZkConfig, counters: Arc<Counters>, adopt: Adopt) -> Self {
        Sessions {
            config,
            counters,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            orphans: Arc::new(Mutex::new(Vec::new())),
            adopt,
        }
    }

    /// Takes back, in `session`, the leftovers that ended sessions handed
    /// over (see [`Adopt`]).
    pub(super) fn adopt_orphans(&self, session: &Arc<Session>) {
        let orphans = std::mem::take(&mut *lock(&self.orphans));
        for orphan in orphans {
            (self.adopt)(session, orphan);
        }
    }

    pub fn config(&self) -> &ZkConfig {
        &self.config
    }

    /// The current session if it has not ended (it may be suspended: its
    /// requests then wait for the reconnection).
    pub fn peek(&self) -> Option<Arc<Session>> {
        lock(&self.current).as_ref().filter(|s| !s.is_dead()).cloned()
    }
}

/// The parent of the session markers: one ephemeral node per session,
/// `SESSIONS/<id>`, made when the session starts. Every contender node is
/// created in a `multi` that checks the marker of its session, and a
/// backend that starts a new session deletes the marker of the one it gave
/// up. A create that the old session sent and the server runs late (the
/// server keeps a session for its timeout after it last heard of it; a slow
/// path can deliver a request seconds after the client moved on) then fails
/// instead of making a node that nobody waits for — which would otherwise
/// stand as a share of its owner's next hold until the old session ends.
pub(crate) const SESSIONS: &str = "/lockkit-sessions";

/// One ZooKeeper session.
pub(crate) struct Session {
    pub client: Client,
    /// Authenticated with digest credentials: nodes get
    /// [`SECURED`](super::acl::SECURED) ACLs.
    pub(super) secured: bool,
    pub id: i64,
    /// This session's marker node (see [`SESSIONS`]); `None` when its
    /// credentials may not make one.
    pub marker: Option<String>,
    /// The current connection epoch; cancelled while suspended.
    pub(super) epoch: Mutex<CancellationToken>,
    /// Cancelled when the session has ended (expired, closed, auth failed).
    pub(super) dead: CancellationToken,
    /// When this client gave the session up (see [`Session::gone_by`]).
    pub(super) ended_at: Mutex<Option<std::time::Instant>>,
    /// The backend's leftovers for its next session (see [`Sessions`]).
    pub(super) orphans: Arc<Mutex<Vec<Orphan>>>,
    /// The backend's sessions, for a leftover of this one once it ended.
    pub(super) sessions: Weak<Sessions>,
    /// Until when the session certainly lives (see [`SessionDeadline`]):
    /// every lease of the session carries it, and
    /// [`heartbeat`](super::heartbeat) moves it forward.
    pub deadline: SessionDeadline,
    /// Loss tokens of the held nodes being watched, by path.
    pub(super) nodes: Mutex<HashMap<String, (u64, CancellationToken)>>,
    pub(super) next_watch: AtomicU64,
    /// Held nodes whose watch is not armed yet, oldest first (see
    /// [`ARM_AFTER`](super::watch::ARM_AFTER)); one task arms them when due.
    pub(super) arming: Mutex<VecDeque<Arming>>,
    pub(super) arm_wake: Arc<Notify>,
    pub(super) counters: Arc<Counters>,
    /// What keeps the liveness record fresh now (see [`liveness`](super::liveness)).
    pub(super) live_needed: std::sync::atomic::AtomicUsize,
    /// Wakes the heartbeat when the first of them comes.
    pub(super) live_wake: Arc<Notify>,
    /// The send time of the last answered refresh of the liveness record.
    pub(super) last_refresh: Mutex<Option<std::time::Instant>>,
    /// Where the next contender create under a parent likely lands.
    pub seq_guess: SeqGuess,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id_hex())
            .field("state", &self.client.state())
            .finish()
    }
}

impl Session {
    /// Marks the session ended: every lease of it is lost, and the next
    /// operation connects a new session.
    pub fn end(&self, why: impl fmt::Display) {
        if !self.dead.is_cancelled() {
            tracing::warn!(backend = BACKEND, session = %self.id_hex(), %why, "session ended");
        }
        lock(&self.ended_at).get_or_insert_with(std::time::Instant::now);
        self.dead.cancel();
        lock(&self.epoch).cancel();
    }

    pub fn is_dead(&self) -> bool {
        self.dead.is_cancelled()
    }

    /// When the server has certainly ended this session, which the client
    /// gave up (or gives up now): the client ends a session on its own
    /// when it could not reconnect in time (a slow path, replies lost),
    /// while its requests may still have reached the server, which then
    /// keeps the session, and its nodes, for a session timeout after the
    /// last one, and up to one tick (at most half a timeout: the server
    /// grants no session shorter than two ticks) later. Nothing is sent on
    /// it after the client gave it up, but what was sent may be on its way
    /// still: another half timeout for that.
    pub fn gone_by(&self) -> tokio::time::Instant {
        let ended = lock(&self.ended_at).unwrap_or_else(std::time::Instant::now);
        tokio::time::Instant::from_std(ended) + self.client.session_timeout() * 2
    }

    /// Cancelled when the session has ended.
    pub fn dead_signal(&self) -> CancellationToken {
        self.dead.clone()
    }

    /// Hands a leftover this ended session could not take back to the
    /// backend's next session: the live one if there is one already, else
    /// the next one made. (Pushed first, then looked for: a session made
    /// meanwhile either is seen here or adopts it itself.)
    pub fn orphan(&self, orphan: Orphan) {
        lock(&self.orphans).push(orphan);
        if let Some(sessions) = self.sessions()
            && let Some(live) = sessions.peek().filter(|s| s.id != self.id)
            && tokio::runtime::Handle::try_current().is_ok()
        {
            sessions.adopt_orphans(&live);
        }
    }

    /// The backend's sessions, unless the backend is gone.
    pub fn sessions(&self) -> Option<Arc<Sessions>> {
        self.sessions.upgrade()
    }

    /// Waits until the connection is up (true) or the session has ended
    /// (false). While suspended, requests fail at once.
    pub async fn until_connected(&self) -> bool {
        loop {
            if self.is_dead() {
                return false;
            }
            if self.connected() {
                return true;
            }
            tokio::select! {
                _ = tokio::time::sleep(RECONNECT_POLL) => {}
                _ = self.dead.cancelled() => return false,
            }
        }
    }

    /// A request sent at `sent` was answered: the server heard from this
    /// session then or later, so it lives at least a session timeout from
    /// `sent`.
    pub fn proven(&self, sent: std::time::Instant) {
        self.deadline
            .extend_to(valid_until(sent, self.client.session_timeout()));
    }

    /// Whether the connection is up: requests sent now are answered without
    /// waiting for a reconnection. The client's own state says so at once,
    /// before the epoch is cancelled (its task runs a little later).
    pub fn connected(&self) -> bool {
        !self.epoch().is_cancelled()
            && matches!(
                self.client.state(),
                SessionState::SyncConnected | SessionState::ConnectedReadOnly
            )
    }

    /// Resolves when the session has ended.
    pub async fn ended(&self) {
        self.dead.cancelled().await
    }

    /// Options of the lock nodes: ephemeral-sequential.
    pub fn contender_options(&self) -> CreateOptions<'static> {
        CreateMode::EphemeralSequential.with_acls(acls(self.secured))
    }

    /// Options of the share nodes: ephemeral, one per session and hold.
    pub fn share_options(&self) -> CreateOptions<'static> {
        CreateMode::Ephemeral.with_acls(acls(self.secured))
    }

    /// Options of the per-name parents of contenders marked `mark`:
    /// containers, removed by the server once their last child is gone —
    /// but a read-write lock's parent is persistent: its data keeps the
    /// name's last write token while nobody holds it.
    pub fn parent_options(&self, mark: Mark) -> CreateOptions<'static> {
        let mode = match mark {
            Mark::Read | Mark::Write => CreateMode::Persistent,
            _ => CreateMode::Container,
        };
        mode.with_acls(acls(self.secured))
    }

    /// The backend's counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn id_hex(&self) -> String {
        format!("{:#x}", self.id)
    }

    /// The current connection epoch. Take it *before* sending the request
    /// whose answer proves a hold: if it is cancelled by the time the answer
    /// arrives, the proof may be stale.
    pub fn epoch(&self) -> CancellationToken {
        lock(&self.epoch).clone()
    }
}

/// How often a leftover's clean-up looks whether a suspended connection is
/// back.
const RECONNECT_POLL: Duration = Duration::from_millis(20);
