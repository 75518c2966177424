//! Sessions: one live ZooKeeper session per backend, its state turned into
//! loss signals, and a new session after expiry.
//!
//! Every lease hangs off the *connection epoch* it was proven in: a token
//! cancelled as soon as the connection is suspended (`Disconnected`) and
//! replaced by a fresh one when it is back (`SyncConnected`, same session).
//! A holder cannot know whether its session survives a disconnection, so it
//! must stop at once: another owner may acquire as soon as the session
//! expires on the server, and the client hears of that only later.
//!
//! Each held node is also watched (a get-data watch, re-armed on data
//! changes), so a node that disappears — deleted by an operator — fires the
//! loss too. A lease rests on its own session's node only (its contender
//! node, or its share node of a hold another session's node carries).
//!
//! Here: [`Sessions`] and [`Session`]; in [`watch`] the held nodes' watches,
//! in [`heartbeat`] the session's deadline, in [`reconnect`] waiting out a
//! lost connection.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use lockkit_core::LockError;
use lockkit_core::lease::{self, SessionDeadline};
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Acl, Acls, Client, CreateMode, CreateOptions, Error as ZkError, Permission, SessionState};

use crate::config::ZkConfig;
use crate::error::{BACKEND, ConnectTimeout, zk};
use crate::layout::Mark;
use crate::leftover::{Leftover, Orphan};

pub(crate) mod heartbeat;
pub(crate) mod liveness;
pub(crate) mod reconnect;
pub(crate) mod seq_guess;
mod watch;

use watch::{Arming, arm_watches};

/// Counters of one backend, for monitoring (and the herd-effect test).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub sessions: AtomicU64,
    pub watches: AtomicU64,
    pub wakeups: AtomicU64,
    pub suspensions: AtomicU64,
    /// Listings of a line's children by acquisitions.
    pub listings: AtomicU64,
    /// Reads of other contenders' nodes by acquisitions.
    pub reads: AtomicU64,
    /// Dead waiters' nodes taken out of a line.
    pub dead_waiters: AtomicU64,
    /// Rewrites of the liveness record.
    pub refreshes: AtomicU64,
    /// Own nodes' stats read after the create's answer.
    pub late_stat_reads: AtomicU64,
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How often an operation starts over with a new session when its session
/// ends under it, before it gives up.
pub(crate) const SESSION_RESTARTS: usize = 3;

/// The backend's current session, and a new one once it has ended.
pub(crate) struct Sessions {
    config: ZkConfig,
    counters: Arc<Counters>,
    current: Mutex<Option<Arc<Session>>>,
    /// Held while connecting, so concurrent callers share one new session.
    connecting: tokio::sync::Mutex<()>,
    /// Leftovers of acquisitions whose session ended before they were taken
    /// back, for the next live session (shared with every session).
    orphans: Arc<Mutex<Vec<Orphan>>>,
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("session", &self.peek().map(|s| s.id_hex()))
            .finish()
    }
}

impl Sessions {
    pub fn new(config: ZkConfig, counters: Arc<Counters>) -> Self {
        Sessions {
            config,
            counters,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            orphans: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Takes back, in `session`, the leftovers that ended sessions handed
    /// over (see [`Leftover::orphaned`]).
    fn adopt_orphans(&self, session: &Arc<Session>) {
        let orphans = std::mem::take(&mut *lock(&self.orphans));
        for orphan in orphans {
            tokio::spawn(Leftover::orphaned(session, orphan).take_back_retrying());
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

    /// The live session, connecting a new one if there is none or it ended.
    pub async fn get(self: &Arc<Self>) -> Result<Arc<Session>, LockError> {
        if let Some(s) = self.peek() {
            self.adopt_orphans(&s);
            return Ok(s);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(s) = self.peek() {
            self.adopt_orphans(&s);
            return Ok(s);
        }
        let session = Session::connect(self, &self.config, &self.counters, &self.orphans).await?;
        let old = lock(&self.current).replace(session.clone());
        if let Some((old, marker)) = old
            .filter(|o| o.id != session.id)
            .and_then(|o| o.marker.clone().map(|m| (o, m)))
        {
            // The server may keep the old session a while after this client
            // gave it up, and run requests of it that are still on their way:
            // without its marker, their creates fail.
            match session.client.delete(&marker, None).await {
                Ok(()) | Err(ZkError::NoNode) => {}
                Err(error) => {
                    tracing::warn!(backend = BACKEND, session = %old.id_hex(), %error, "could not fence the ended session; late creates of it stand until the server ends it")
                }
            }
        }
        self.adopt_orphans(&session);
        Ok(session)
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
    /// Authenticated with digest credentials: nodes get [`SECURED`] ACLs.
    secured: bool,
    pub id: i64,
    /// This session's marker node (see [`SESSIONS`]); `None` when its
    /// credentials may not make one.
    pub marker: Option<String>,
    /// The current connection epoch; cancelled while suspended.
    epoch: Mutex<CancellationToken>,
    /// Cancelled when the session has ended (expired, closed, auth failed).
    dead: CancellationToken,
    /// When this client gave the session up (see [`Session::gone_by`]).
    ended_at: Mutex<Option<std::time::Instant>>,
    /// The backend's leftovers for its next session (see [`Sessions`]).
    orphans: Arc<Mutex<Vec<Orphan>>>,
    /// The backend's sessions, for a leftover of this one once it ended.
    sessions: Weak<Sessions>,
    /// Until when the session certainly lives (see [`SessionDeadline`]):
    /// every lease of the session carries it, and [`heartbeat`]
    /// moves it forward.
    pub deadline: SessionDeadline,
    /// Loss tokens of the held nodes being watched, by path.
    nodes: Mutex<HashMap<String, (u64, CancellationToken)>>,
    next_watch: AtomicU64,
    /// Held nodes whose watch is not armed yet, oldest first (see
    /// [`watch::ARM_AFTER`]); one task arms them when due.
    arming: Mutex<VecDeque<Arming>>,
    arm_wake: Arc<Notify>,
    counters: Arc<Counters>,
    /// What keeps the liveness record fresh now (see [`liveness`]).
    live_needed: std::sync::atomic::AtomicUsize,
    /// Wakes the heartbeat when the first of them comes.
    live_wake: Arc<Notify>,
    /// The send time of the last answered refresh of the liveness record.
    last_refresh: Mutex<Option<std::time::Instant>>,
    /// Where the next contender create under a parent likely lands.
    pub seq_guess: seq_guess::SeqGuess,
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
    async fn connect(
        sessions: &Arc<Sessions>,
        config: &ZkConfig,
        counters: &Arc<Counters>,
        orphans: &Arc<Mutex<Vec<Orphan>>>,
    ) -> Result<Arc<Session>, LockError> {
        let mut connector = Client::connector()
            .with_session_timeout(config.session_timeout)
            .with_fail_eagerly();
        // Sent again on every reconnection of the session.
        if let Some((user, password)) = &config.digest {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let secured = config.digest.is_some();
        let hosts = config.connect_string();
        // The server makes the session after this: it lives at least a
        // session timeout from here.
        let started = std::time::Instant::now();
        let client = tokio::time::timeout(config.connect_timeout, connector.connect(&hosts))
            .await
            .map_err(|_| {
                LockError::backend(
                    BACKEND,
                    "connect",
                    None,
                    true,
                    ConnectTimeout {
                        hosts: hosts.clone(),
                        after: config.connect_timeout,
                    },
                )
            })?
            .map_err(|e| zk("connect", None, e))?;
        let client = if config.chroot == "/" {
            client
        } else {
            if client
                .check_stat(&config.chroot)
                .await
                .map_err(|e| zk("connect", None, e))?
                .is_none()
            {
                let persistent = CreateMode::Persistent.with_acls(acls(secured));
                client
                    .mkdir(&config.chroot, &persistent)
                    .await
                    .map_err(|e| zk("create the chroot node", None, e))?;
            }
            client
                .chroot(config.chroot.clone())
                .map_err(|_| LockError::config("url path", format!("{:?} is not a valid chroot", config.chroot)))?
        };
        let id = client.session_id().0;
        let marker = format!("{SESSIONS}/{id:016x}");
        // The marker every contender create checks (see `SESSIONS`); its
        // parent first, in the same round trip.
        let parent = client.create(SESSIONS, &[], &CreateMode::Persistent.with_acls(acls(secured)));
        let made = client.create(
            &marker,
            liveness::LIVE_TAG,
            &CreateMode::Ephemeral.with_acls(acls(secured)),
        );
        let marked = match (parent.await, made.await) {
            (Ok(_) | Err(ZkError::NodeExists), Ok(_) | Err(ZkError::NodeExists)) => true,
            // A session whose credentials may not write under the chroot
            // (it cannot lock either) goes without: its creates fail anyway.
            (Err(ZkError::NoAuth), _) | (_, Err(ZkError::NoAuth)) => false,
            (_, Err(e)) | (Err(e), _) => return Err(zk("create the session marker", None, e)),
        };
        let marker = marked.then_some(marker);
        let deadline = SessionDeadline::new(lease::valid_until(started, client.session_timeout()));
        let session = Arc::new(Session {
            secured,
            id,
            marker,
            client,
            epoch: Mutex::new(CancellationToken::new()),
            dead: CancellationToken::new(),
            ended_at: Mutex::new(None),
            orphans: orphans.clone(),
            sessions: Arc::downgrade(sessions),
            deadline,
            nodes: Mutex::new(HashMap::new()),
            next_watch: AtomicU64::new(0),
            arming: Mutex::new(VecDeque::new()),
            arm_wake: Arc::new(Notify::new()),
            counters: counters.clone(),
            live_needed: std::sync::atomic::AtomicUsize::new(0),
            live_wake: Arc::new(Notify::new()),
            last_refresh: Mutex::new(None),
            seq_guess: seq_guess::SeqGuess::default(),
        });
        Counters::bump(&counters.sessions);
        tracing::debug!(
            backend = BACKEND,
            session = %session.id_hex(),
            timeout = ?session.client.session_timeout(),
            "session established"
        );
        let mut watcher = session.client.state_watcher();
        let weak = Arc::downgrade(&session);
        if session.client.state() != SessionState::SyncConnected {
            session.on_state(session.client.state());
        }
        tokio::spawn(arm_watches(Arc::downgrade(&session)));
        tokio::spawn(heartbeat::beat(Arc::downgrade(&session)));
        tokio::spawn(async move {
            loop {
                let state = watcher.changed().await;
                let Some(session) = weak.upgrade() else { return };
                if !session.on_state(state) {
                    return;
                }
            }
        });
        Ok(session)
    }

    /// Applies a state change; false once the session has ended.
    fn on_state(&self, state: SessionState) -> bool {
        match state {
            SessionState::Disconnected => {
                let epoch = lock(&self.epoch);
                if !epoch.is_cancelled() {
                    Counters::bump(&self.counters.suspensions);
                    tracing::warn!(backend = BACKEND, session = %self.id_hex(), "session suspended: locks held by it are lost");
                    epoch.cancel();
                }
                true
            }
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                let mut epoch = lock(&self.epoch);
                if epoch.is_cancelled() {
                    tracing::info!(backend = BACKEND, session = %self.id_hex(), "session reconnected");
                    *epoch = CancellationToken::new();
                }
                true
            }
            SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => {
                self.end(state);
                false
            }
        }
    }

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
            .extend_to(lease::valid_until(sent, self.client.session_timeout()));
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

/// The ACL of every node a session with digest credentials creates: all
/// rights for sessions with the creator's credentials (`auth` stands for the
/// creating session's authenticated ids), read for everyone, so others can
/// list and watch the queue but not delete a lock node (DELETE on its
/// parent), change its data (WRITE) or queue under the name (CREATE).
static SECURED: [Acl; 2] = [
    Acl::new_const(Permission::ALL, "auth", ""),
    Acl::new_const(Permission::READ, "world", "anyone"),
];

/// Open nodes without credentials, [`SECURED`] with them.
fn acls(secured: bool) -> Acls<'static> {
    if secured {
        Acls::new(&SECURED)
    } else {
        Acls::anyone_all()
    }
}
