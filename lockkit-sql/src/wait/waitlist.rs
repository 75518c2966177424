//! Postgres: telling releasers that somebody waits, without a write.
//!
//! A `NOTIFY` in every release would serialize the commits of all releases
//! on the server's notification queue, which more than halved the
//! throughput of many names at once. So a release notifies only when somebody may be
//! waiting for the name, and waiting is announced with a shared session-level
//! advisory lock on the name (key [`Statements::wait_join`]) held by this
//! backend's wait-list connection for as long as any of its callers waits.
//! A release tries the same key exclusively inside its own transaction: if
//! it gets it, nobody waits and it skips the `NOTIFY`; if not, it notifies.
//!
//! No wake-up is lost: a waiter joins the list *before* its next attempt. A
//! release that ran before the join held the key exclusively until its
//! commit, so the join waited for that commit and the attempt after it sees
//! the name free; a release after the join sees the shared lock and
//! notifies. If the wait-list connection is down, releases do not see the
//! waiters; they then wake on their backoff (bounded by the holder's lease,
//! `max_backoff` 1 s by default), and the listener wakes everybody when it
//! reconnects. While anybody waits the connection is checked every second
//! and, when it is gone (a server restart), remade with every place retaken.
//!
//! The same connection carries the backend's liveness key (see `live.rs`)
//! as an exclusive session advisory lock, taken on each new connection
//! before the places: a claim skips the places in line of a process whose
//! wait-list session is gone.
//!
//! A name's place is kept for [`LINGER`] after its last waiter left: a
//! client that locks the same contended name again and again (each turn a
//! new wait) would otherwise take and drop the place twice a turn, two
//! statements beside its claims; meanwhile releases of the name notify
//! although nobody may wait, which costs nothing but the notification.
//!
//! [`Statements::wait_join`]: crate::sql::Statements

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

enum Cmd {
    Join(Vec<u8>, oneshot::Sender<()>),
    Leave(Vec<u8>),
}

/// The handle on the wait-list task of one backend.
#[derive(Debug)]
pub(crate) struct WaitList {
    tx: mpsc::UnboundedSender<Cmd>,
}

/// A caller's place on the wait list; leaving it is dropping it (also when
/// the waiting future is cancelled).
#[derive(Debug)]
pub(crate) struct Joined {
    tx: mpsc::UnboundedSender<Cmd>,
    name: Vec<u8>,
}

impl Drop for Joined {
    fn drop(&mut self) {
        let _ = self.tx.send(Cmd::Leave(std::mem::take(&mut self.name)));
    }
}

/// What the wait-list task runs: `join` and `leave` take the name's bytes
/// (`$1`); `live` tries the liveness key `key` (`$1`), setting `held`.
pub(crate) struct Statements {
    pub join: Arc<str>,
    pub leave: Arc<str>,
    pub live: Arc<str>,
    pub key: i64,
    pub held: Arc<AtomicBool>,
}

impl WaitList {
    /// Starts the task; it connects on the first join.
    pub fn spawn(
        options: PgConnectOptions,
        connect_timeout: Duration,
        sql: Statements,
        stop: CancellationToken,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(serve(options, connect_timeout, sql, rx, stop));
        WaitList { tx }
    }

    /// Joins the wait list of `name`. The receiver resolves once releasers
    /// can see the place (or at once if the wait list cannot reach the
    /// server); the place is held from now on, whether or not the caller
    /// waits for that.
    pub fn join(&self, name: &[u8]) -> (Joined, oneshot::Receiver<()>) {
        let (done, confirmed) = oneshot::channel();
        let _ = self.tx.send(Cmd::Join(name.to_vec(), done));
        let joined = Joined {
            tx: self.tx.clone(),
            name: name.to_vec(),
        };
        (joined, confirmed)
    }
}

/// The wait-list task: serves joins and leaves until `stop` or until every
/// handle is gone, then closes its connection.
async fn serve(
    options: PgConnectOptions,
    connect_timeout: Duration,
    sql: Statements,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    stop: CancellationToken,
) {
    let mut server = Server {
        options,
        connect_timeout,
        sql,
        places: HashMap::new(),
        lingering: HashMap::new(),
        conn: None,
    };
    // While anybody waits, the connection is checked (and remade, with every
    // place retaken) this often: a server restart drops its locks silently.
    let mut check = tokio::time::interval(CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next_leave = server.lingering.values().min().copied();
        let event = tokio::select! {
            _ = stop.cancelled() => break,
            _ = sleep_until(next_leave) => Event::Lingered,
            _ = check.tick() => Event::Check,
            cmd = rx.recv() => match cmd {
                Some(cmd) => Event::Cmd(cmd),
                None => break,
            },
        };
        match event {
            Event::Lingered => server.drop_lingering().await,
            Event::Check => server.check().await,
            Event::Cmd(Cmd::Join(name, done)) => server.join(name, done).await,
            Event::Cmd(Cmd::Leave(name)) => server.leave(name),
        }
    }
    if let Some(c) = server.conn {
        let _ = c.close().await;
    }
}

/// What the wait-list task woke for.
enum Event {
    /// A lingering place's time is up.
    Lingered,
    /// The connection's check is due.
    Check,
    /// A caller joined or left.
    Cmd(Cmd),
}

/// The wait-list task's state: what it runs, the places it holds and the
/// connection that holds them.
struct Server {
    options: PgConnectOptions,
    connect_timeout: Duration,
    sql: Statements,
    /// Places per name; the server holds one shared lock per listed name
    /// (also for those lingering at zero, until their time).
    places: HashMap<Vec<u8>, usize>,
    /// When each name without places lets its lock go.
    lingering: HashMap<Vec<u8>, Instant>,
    conn: Option<PgConnection>,
}

impl Server {
    /// A caller's place on `name`'s list: the first takes the name's
    /// shared lock (unless it lingers, still held), remaking the connection
    /// if it is gone. `done` tells the caller that releasers see it (or
    /// that the server cannot be reached).
    async fn join(&mut self, name: Vec<u8>, done: oneshot::Sender<()>) {
        let count = self.places.entry(name.clone()).or_insert(0);
        *count += 1;
        // A lingering place is still held.
        let first = *count == 1 && self.lingering.remove(&name).is_none();
        if self.conn.is_none() {
            self.reconnect().await;
        } else if first
            && let Some(c) = self.conn.as_mut()
            && let Err(e) = run(c, &self.sql.join, name).await
        {
            tracing::debug!(error = %e, "lockkit wait list lost its connection; retaking the places");
            self.reconnect().await;
        }
        let _ = done.send(());
    }

    /// A caller left `name`'s list: the last one leaves the name's lock
    /// lingering for [`LINGER`].
    fn leave(&mut self, name: Vec<u8>) {
        let Some(count) = self.places.get_mut(&name) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.lingering.insert(name, Instant::now() + LINGER);
        }
    }

    /// Lets go of the names whose lingering time is up.
    async fn drop_lingering(&mut self) {
        let now = Instant::now();
        let due: Vec<Vec<u8>> = self
            .lingering
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            self.lingering.remove(&name);
            self.places.remove(&name);
            if let Some(c) = self.conn.as_mut()
                && run(c, &self.sql.leave, name).await.is_err()
            {
                self.conn = None;
                self.sql.held.store(false, Ordering::SeqCst);
            }
        }
    }

    /// While anybody waits: remakes a connection that is gone, and tries
    /// the liveness key again where an earlier session of ours held it.
    async fn check(&mut self) {
        if self.places.is_empty() {
            return;
        }
        let alive = match self.conn.as_mut() {
            Some(c) => c.ping().await.is_ok(),
            None => false,
        };
        if !alive {
            self.reconnect().await;
        } else if !self.sql.held.load(Ordering::SeqCst)
            && let Some(c) = self.conn.as_mut()
        {
            take_live(c, &self.sql).await;
        }
    }

    /// Replaces the connection by a new one holding every place (`None` if
    /// the server cannot be reached).
    async fn reconnect(&mut self) {
        self.conn = reconnect(&self.options, self.connect_timeout, &self.sql, &self.places).await;
    }
}

/// How often the connection is checked while somebody waits.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long a name's place is kept after its last waiter left.
const LINGER: Duration = Duration::from_millis(250);

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A new connection holding the liveness key and every listed place (a
/// new session has none of the old one's locks), or `None` if the server
/// cannot be reached.
async fn reconnect(
    options: &PgConnectOptions,
    timeout: Duration,
    sql: &Statements,
    places: &HashMap<Vec<u8>, usize>,
) -> Option<PgConnection> {
    sql.held.store(false, Ordering::SeqCst);
    let mut c = connect(options, timeout).await?;
    take_live(&mut c, sql).await;
    for name in places.keys() {
        if let Err(e) = run(&mut c, &sql.join, name.clone()).await {
            tracing::debug!(error = %e, "lockkit wait list cannot retake its places");
            sql.held.store(false, Ordering::SeqCst);
            return None;
        }
    }
    Some(c)
}

/// Tries the liveness key on `conn`; `held` says whether it has it.
async fn take_live(conn: &mut PgConnection, sql: &Statements) {
    let taken: Result<bool, sqlx::Error> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.live.clone()))
        .bind(sql.key)
        .fetch_one(conn)
        .await;
    match taken {
        Ok(held) => sql.held.store(held, Ordering::SeqCst),
        Err(e) => {
            tracing::debug!(error = %e, "lockkit wait list cannot take the liveness key");
            sql.held.store(false, Ordering::SeqCst);
        }
    }
}

/// Runs one wait-list statement on `name`.
async fn run(conn: &mut PgConnection, sql: &Arc<str>, name: Vec<u8>) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
        .bind(name)
        .execute(conn)
        .await
        .map(drop)
}

async fn connect(options: &PgConnectOptions, timeout: Duration) -> Option<PgConnection> {
    match tokio::time::timeout(timeout, PgConnection::connect_with(options)).await {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "lockkit wait list cannot connect; waiters fall back to their backoff");
            None
        }
        Err(_) => None,
    }
}
