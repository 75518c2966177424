//! Connecting: [`Sessions::get`] hands out the live session or makes a
//! new one, fencing the one it replaces; [`Session::connect`] makes it
//! (authenticated, chrooted, with its marker node) and starts its tasks —
//! the held nodes' watches, the heartbeat, and the state watcher that
//! turns the connection's state into loss signals ([`Session::on_state`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use lockkit_core::LockError;
use lockkit_core::raw::{SessionDeadline, valid_until};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, CreateMode, Error as ZkError, SessionState};

use super::acl::acls;
use super::counters::Counters;
use super::heartbeat;
use super::liveness;
use super::mutex::lock;
use super::seq_guess;
use super::session::{SESSIONS, Session, Sessions};
use super::watch::arm_watches;
use crate::config::ZkConfig;
use crate::error::{BACKEND, ConnectTimeout, zk};
use crate::orphan::Orphan;

impl Sessions {
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

impl Session {
    /// Makes a new session (see [`open`], [`mark`]) and starts its tasks.
    async fn connect(
        sessions: &Arc<Sessions>,
        config: &ZkConfig,
        counters: &Arc<Counters>,
        orphans: &Arc<Mutex<Vec<Orphan>>>,
    ) -> Result<Arc<Session>, LockError> {
        let secured = config.digest.is_some();
        let (client, started) = open(config).await?;
        let id = client.session_id().0;
        let marker = mark(&client, id, secured).await?;
        let deadline = SessionDeadline::new(valid_until(started, client.session_timeout()));
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
        session.start();
        Ok(session)
    }

    /// Starts the session's tasks: the held nodes' watches, the heartbeat,
    /// and the state watcher that turns the connection's state into loss
    /// signals (see [`Session::on_state`]). Each holds the session weakly:
    /// it ends once the session is dropped.
    fn start(self: &Arc<Self>) {
        let mut watcher = self.client.state_watcher();
        let weak = Arc::downgrade(self);
        if self.client.state() != SessionState::SyncConnected {
            self.on_state(self.client.state());
        }
        tokio::spawn(arm_watches(Arc::downgrade(self)));
        tokio::spawn(heartbeat::beat(Arc::downgrade(self)));
        tokio::spawn(async move {
            loop {
                let state = watcher.changed().await;
                let Some(session) = weak.upgrade() else { return };
                if !session.on_state(state) {
                    return;
                }
            }
        });
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
}

/// Connects to the configured servers, authenticated and chrooted (see
/// [`chrooted`]): the client, and when the connect started — the server
/// makes the session after it, so the session lives at least a session
/// timeout from then.
async fn open(config: &ZkConfig) -> Result<(Client, std::time::Instant), LockError> {
    let mut connector = Client::connector()
        .with_session_timeout(config.session_timeout)
        .with_fail_eagerly();
    // Sent again on every reconnection of the session.
    if let Some((user, password)) = &config.digest {
        connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    let hosts = config.connect_string();
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
    Ok((chrooted(client, config).await?, started))
}

/// `client` under the configured chroot, the chroot node made first if it
/// is missing.
async fn chrooted(client: Client, config: &ZkConfig) -> Result<Client, LockError> {
    if config.chroot == "/" {
        return Ok(client);
    }
    if client
        .check_stat(&config.chroot)
        .await
        .map_err(|e| zk("connect", None, e))?
        .is_none()
    {
        let persistent = CreateMode::Persistent.with_acls(acls(config.digest.is_some()));
        client
            .mkdir(&config.chroot, &persistent)
            .await
            .map_err(|e| zk("create the chroot node", None, e))?;
    }
    client
        .chroot(config.chroot.clone())
        .map_err(|_| LockError::config("url path", format!("{:?} is not a valid chroot", config.chroot)))
}

/// Makes the marker of the session `id`, which every contender create
/// checks (see [`SESSIONS`]); its parent first, in the same round trip.
/// `None`: the session's credentials may not write under the chroot (it
/// cannot lock either), so it goes without — its creates fail anyway.
async fn mark(client: &Client, id: i64, secured: bool) -> Result<Option<String>, LockError> {
    let marker = format!("{SESSIONS}/{id:016x}");
    let parent = client.create(SESSIONS, &[], &CreateMode::Persistent.with_acls(acls(secured)));
    let made = client.create(
        &marker,
        liveness::LIVE_TAG,
        &CreateMode::Ephemeral.with_acls(acls(secured)),
    );
    match (parent.await, made.await) {
        (Ok(_) | Err(ZkError::NodeExists), Ok(_) | Err(ZkError::NodeExists)) => Ok(Some(marker)),
        (Err(ZkError::NoAuth), _) | (_, Err(ZkError::NoAuth)) => Ok(None),
        (_, Err(e)) | (Err(e), _) => Err(zk("create the session marker", None, e)),
    }
}
