//! The session-lock mode (`?mode=session`) on MariaDB and Postgres: what
//! the conformance kit cannot see. A hold whose connection is killed
//! server-side is lost (its lost signal fires, a new contender gets a
//! greater token); a dropped waiting `lock` leaves no wait and no lock on
//! the server; tokens keep growing across backend instances; a least-
//! privilege user needs only rights on the sequence; SQLite refuses the mode.
#![cfg(any(feature = "mysql", feature = "postgres"))]

use std::time::Duration;

use lockkit::{LockClient, LockError};
use lockkit_core::testkit::server_url;
use lockkit_sql::Dialect;
use lockkit_sql_session::server_key;
use tokio::time::{Instant, timeout};

use crate::common::{tag, unique, with_params};

mod cancel;
mod crowd;

/// The generous bound for anything that should happen promptly.
const BOUND: Duration = Duration::from_secs(15);

async fn session_client(url: &str, extra: &str) -> LockClient {
    lockkit::connect(&with_params(url, &format!("mode=session{extra}")))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// A connection of the test's own, as the server's administrator would use.
enum Admin {
    #[cfg(feature = "mysql")]
    Mysql(sqlx::MySqlConnection),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgConnection),
}

impl Admin {
    async fn open(dialect: Dialect, url: &str) -> Admin {
        use sqlx::Connection;
        match dialect {
            #[cfg(feature = "mysql")]
            Dialect::Mysql => Admin::Mysql(sqlx::MySqlConnection::connect(url).await.expect("admin connection")),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => Admin::Postgres(sqlx::PgConnection::connect(url).await.expect("admin connection")),
            other => panic!("no session locks on {other:?}"),
        }
    }

    /// The server id of the connection holding `name`'s lock, if any.
    async fn holder_of(&mut self, name: &str) -> Option<i64> {
        match self {
            #[cfg(feature = "mysql")]
            Admin::Mysql(c) => sqlx::query_scalar::<_, Option<i64>>("SELECT IS_USED_LOCK(?)")
                .bind(server_key(Dialect::Mysql, name))
                .fetch_one(&mut *c)
                .await
                .expect("IS_USED_LOCK"),
            #[cfg(feature = "postgres")]
            Admin::Postgres(c) => sqlx::query_scalar::<_, i32>(sqlx::AssertSqlSafe(pg_locks("granted", "pid")))
                .bind(pg_key(name))
                .fetch_optional(&mut *c)
                .await
                .expect("pg_locks")
                .map(i64::from),
        }
    }

    /// Ends the connection `id` server-side.
    async fn kill(&mut self, id: i64) {
        match self {
            #[cfg(feature = "mysql")]
            Admin::Mysql(c) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL {id}")))
                    .execute(&mut *c)
                    .await
                    .expect("KILL");
            }
            #[cfg(feature = "postgres")]
            Admin::Postgres(c) => {
                let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
                    .bind(id as i32)
                    .fetch_one(&mut *c)
                    .await
                    .expect("pg_terminate_backend");
                assert!(ended, "pg_terminate_backend({id})");
            }
        }
    }

    /// How many server-side waits there are for `name` (MariaDB: the
    /// connections of this user waiting in `GET_LOCK`, whatever the name —
    /// the caller makes sure it is the only one of its user).
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    async fn waits(&mut self, name: &str) -> i64 {
        match self {
            #[cfg(feature = "mysql")]
            Admin::Mysql(c) => sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE STATE = 'User lock' AND USER = SUBSTRING_INDEX(CURRENT_USER(), '@', 1)",
            )
            .fetch_one(&mut *c)
            .await
            .expect("processlist"),
            #[cfg(feature = "postgres")]
            Admin::Postgres(c) => sqlx::query_scalar(sqlx::AssertSqlSafe(pg_locks("NOT granted", "COUNT(*)")))
                .bind(pg_key(name))
                .fetch_one(&mut *c)
                .await
                .expect("pg_locks"),
        }
    }

    /// How many server-side waits there are for `name` by clients whose
    /// token sequence is `seq` (MariaDB: the connections waiting in a
    /// `GET_LOCK` statement that names the sequence; Postgres: all waits
    /// for the name's key).
    #[cfg_attr(not(feature = "mysql"), allow(unused_variables))]
    async fn seq_waits(&mut self, name: &str, seq: &str) -> i64 {
        match self {
            #[cfg(feature = "mysql")]
            Admin::Mysql(c) => sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE STATE = 'User lock' AND INFO LIKE CONCAT('%', ?, '%')",
            )
            .bind(seq)
            .fetch_one(&mut *c)
            .await
            .expect("processlist"),
            #[cfg(feature = "postgres")]
            Admin::Postgres(_) => self.waits(name).await,
        }
    }

    /// The server ids of the connections waiting for `name` (MariaDB: the
    /// connections waiting in a `GET_LOCK` statement that names the
    /// sequence `seq`), in id order.
    #[cfg_attr(not(feature = "mysql"), allow(unused_variables))]
    async fn wait_ids(&mut self, name: &str, seq: &str) -> Vec<i64> {
        match self {
            #[cfg(feature = "mysql")]
            Admin::Mysql(c) => sqlx::query_scalar::<_, i64>(
                "SELECT ID FROM information_schema.PROCESSLIST \
                 WHERE STATE = 'User lock' AND INFO LIKE CONCAT('%', ?, '%') ORDER BY ID",
            )
            .bind(seq)
            .fetch_all(&mut *c)
            .await
            .expect("processlist"),
            #[cfg(feature = "postgres")]
            Admin::Postgres(c) => {
                sqlx::query_scalar::<_, i32>(sqlx::AssertSqlSafe(pg_locks("NOT granted", "pid") + " ORDER BY pid"))
                    .bind(pg_key(name))
                    .fetch_all(&mut *c)
                    .await
                    .expect("pg_locks")
                    .into_iter()
                    .map(i64::from)
                    .collect()
            }
        }
    }

    async fn exec(&mut self, text: &str) {
        let q = sqlx::raw_sql(sqlx::AssertSqlSafe(text.to_owned()));
        match self {
            #[cfg(feature = "mysql")]
            Admin::Mysql(c) => q.execute(&mut *c).await.map(|_| ()),
            #[cfg(feature = "postgres")]
            Admin::Postgres(c) => q.execute(&mut *c).await.map(|_| ()),
        }
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    }
}

#[cfg(feature = "postgres")]
fn pg_key(name: &str) -> i64 {
    server_key(Dialect::Postgres, name).parse().expect("a bigint key")
}

#[cfg(feature = "postgres")]
fn pg_locks(state: &str, what: &str) -> String {
    format!(
        "SELECT {what} FROM pg_locks WHERE locktype = 'advisory' \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND classid = (($1::int8 >> 32) & 4294967295)::oid AND objid = ($1::int8 & 4294967295)::oid \
         AND objsubid = 1 AND {state}"
    )
}

/// Polls until `admin` counts `n` server-side waits for `name`, within [`BOUND`].
async fn until_waits(what: &str, admin: &mut Admin, name: &str, n: i64) {
    let deadline = Instant::now() + BOUND;
    while admin.waits(name).await != n {
        assert!(Instant::now() < deadline, "{what}: not within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A test's own stage: a token sequence of its own (a table name of its
/// own: on MariaDB its waits are told apart from other tests' by the
/// sequence name in their statement), a unique lock name, a client holding
/// it, and an admin connection. [`finish`](Scene::finish) checks that
/// nothing is left waiting or held, and drops the sequence.
struct Scene {
    dialect: Dialect,
    admin_url: String,
    seq: String,
    url: String,
    name: String,
    admin: Admin,
    holder: LockClient,
}

impl Scene {
    /// The stage, and the holder's guard of the name.
    async fn new(dialect: Dialect, admin_url: &str, case: &str) -> (Scene, lockkit::LockGuard) {
        let table = format!("sess_{}", &tag()[..12]);
        let url = with_params(admin_url, &format!("mode=session&table={table}"));
        let holder = session_client(&url, "").await;
        let name = unique(case);
        let held = holder.lock(&name).await.expect("the holder locks");
        let scene = Scene {
            dialect,
            admin_url: admin_url.to_owned(),
            seq: format!("{table}_session_seq"),
            url,
            name,
            admin: Admin::open(dialect, admin_url).await,
            holder,
        };
        (scene, held)
    }

    /// Another client of the stage's sequence.
    async fn client(&self) -> LockClient {
        session_client(&self.url, "").await
    }

    /// How many server-side waits there are for the name.
    async fn waits(&mut self) -> i64 {
        self.admin.seq_waits(&self.name, &self.seq).await
    }

    /// The server ids of the connections waiting for the name.
    async fn wait_ids(&mut self) -> Vec<i64> {
        self.admin.wait_ids(&self.name, &self.seq).await
    }

    /// Polls until the server counts `n` waits for the name, within
    /// [`BOUND`].
    async fn until_waits(&mut self, what: &str, n: i64) {
        let deadline = Instant::now() + BOUND;
        loop {
            let now = self.waits().await;
            if now == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{:?}: {what}: {now} waits, not {n}, within {BOUND:?}",
                self.dialect
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Nothing waits for the name or holds it (a grant nobody took is
    /// given back), within [`BOUND`].
    async fn until_free(&mut self) {
        self.until_waits("nobody waits", 0).await;
        let deadline = Instant::now() + BOUND;
        while let Some(id) = self.admin.holder_of(&self.name).await {
            assert!(
                Instant::now() < deadline,
                "{:?}: connection {id} still holds the name",
                self.dialect
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// [`until_free`](Self::until_free); then the sequence is dropped.
    async fn finish(mut self) {
        self.until_free().await;
        drop(self.holder);
        let mut admin = Admin::open(self.dialect, &self.admin_url).await;
        match self.dialect {
            Dialect::Mysql => admin.exec(&format!("DROP SEQUENCE IF EXISTS `{}`", self.seq)).await,
            _ => admin.exec(&format!("DROP SEQUENCE IF EXISTS \"{}\"", self.seq)).await,
        }
    }
}

/// The databases configured, with their admin (table owner) URLs.
fn servers() -> Vec<(Dialect, String)> {
    let mut out = Vec::new();
    #[cfg(feature = "mysql")]
    out.extend(server_url("LOCKKIT_MYSQL_URL").map(|u| (Dialect::Mysql, u)));
    #[cfg(feature = "postgres")]
    out.extend(server_url("LOCKKIT_POSTGRES_URL").map(|u| (Dialect::Postgres, u)));
    out
}

/// A hold whose connection is killed server-side is lost: its lost signal
/// fires, a new contender gets the name with a greater token, and the old
/// guard's unlock says it no longer held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connection_loses_its_holds() {
    for (dialect, url) in servers() {
        let (a, b) = (
            session_client(&url, "&ping_interval=100ms").await,
            session_client(&url, "").await,
        );
        let name = unique("session_killed");
        let other = unique("session_killed_other");
        let held = a.lock(&name).await.expect("lock");
        let beside = a.lock(&other).await.expect("a second hold on the same connection");
        let mut admin = Admin::open(dialect, &url).await;
        let id = admin.holder_of(&name).await.expect("the server shows the hold");
        assert_eq!(
            admin.holder_of(&other).await,
            Some(id),
            "{dialect:?}: both holds share the connection"
        );
        assert!(
            b.try_lock(&name).await.expect("try_lock").is_none(),
            "{dialect:?}: held"
        );
        admin.kill(id).await;
        timeout(BOUND, held.lost())
            .await
            .unwrap_or_else(|_| panic!("{dialect:?}: the lost signal fires after the kill"));
        timeout(BOUND, beside.lost())
            .await
            .unwrap_or_else(|_| panic!("{dialect:?}: every hold on the connection is lost"));
        assert!(held.is_lost());
        let next = b.lock(&name).await.expect("the name is free after the kill");
        assert!(
            next.fencing_token() > held.fencing_token(),
            "{dialect:?}: token {} after {}",
            next.fencing_token(),
            held.fencing_token()
        );
        let e = held.unlock().await.expect_err("the killed hold is gone");
        assert!(
            matches!(e, LockError::NotHeld { .. } | LockError::Lost { .. }),
            "{dialect:?}: {e:?}"
        );
        // The backend opens a new connection for what comes next.
        let again = a.lock(&other).await.expect("lock after the lost connection");
        assert!(again.fencing_token() > next.fencing_token());
        next.unlock().await.expect("unlock");
        again.unlock().await.expect("unlock");
        let _ = beside.unlock().await;
        assert_eq!(admin.holder_of(&name).await, None, "{dialect:?}: nothing left held");
        assert_eq!(admin.holder_of(&other).await, None, "{dialect:?}: nothing left held");
    }
}

/// A connection that dies while it carries no holds (a server restart, an
/// idle timeout, a `KILL`) costs nothing: the next `try_lock` goes to a new
/// connection instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connection_killed_is_replaced() {
    for (dialect, url) in servers() {
        let a = session_client(&url, "").await;
        let name = unique("session_idle_killed");
        let g = a.lock(&name).await.expect("lock");
        let mut admin = Admin::open(dialect, &url).await;
        let id = admin.holder_of(&name).await.expect("the server shows the hold");
        let token = g.fencing_token();
        g.unlock().await.expect("unlock");
        admin.kill(id).await;
        let g = a
            .try_lock(&name)
            .await
            .unwrap_or_else(|e| panic!("{dialect:?}: try_lock after the idle connection was killed: {e}"))
            .expect("free");
        assert!(g.fencing_token() > token);
        assert_ne!(
            admin.holder_of(&name).await,
            Some(id),
            "{dialect:?}: a new connection holds"
        );
        g.unlock().await.expect("unlock");
    }
}

/// A `lock` dropped while it waits server-side leaves neither a wait nor a
/// lock behind: after the holder releases, the name is free, not granted
/// to a forgotten waiter. Runs as the least-privilege user with only the
/// rights the mode documents (so, on MariaDB, its waits are the only ones
/// of that user and can be counted in the process list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_wait_leaves_nothing_behind() {
    for (dialect, url) in servers() {
        let app_var = match dialect {
            Dialect::Mysql => "LOCKKIT_MYSQL_APP_URL",
            _ => "LOCKKIT_POSTGRES_APP_URL",
        };
        let Some(app_url) = server_url(app_var) else { continue };
        let table = format!("sess_{}", &tag()[..12]);
        let params = format!("&table={table}");
        // The owner creates the sequence; the app user gets only its rights.
        drop(session_client(&url, &params).await);
        let mut admin = Admin::open(dialect, &url).await;
        if dialect == Dialect::Mysql {
            // MariaDB lets a user into a database only with a right in it:
            // one on a table of no interest, so that what fails below is
            // the sequence, whichever tests ran before on this server.
            admin
                .exec(&format!("CREATE TABLE IF NOT EXISTS `{table}_probe` (id INT)"))
                .await;
            admin
                .exec(&format!(
                    "GRANT SELECT ON `{table}_probe` TO 'lockkit_app'@'127.0.0.1', 'lockkit_app'@'localhost'"
                ))
                .await;
        }
        let e = lockkit::connect(&with_params(&app_url, &format!("mode=session{params}")))
            .await
            .expect_err("no rights on the sequence yet");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{dialect:?}: {e:?}");
        assert!(
            e.to_string().contains(&format!("{table}_session_seq")),
            "{dialect:?}: {e}"
        );
        match dialect {
            Dialect::Mysql => {
                admin
                    .exec(&format!(
                        "GRANT SELECT, INSERT ON `{table}_session_seq` TO 'lockkit_app'@'127.0.0.1', 'lockkit_app'@'localhost'"
                    ))
                    .await
            }
            _ => admin.exec(&format!("GRANT USAGE ON SEQUENCE \"{table}_session_seq\" TO lockkit_app")).await,
        }
        let holder = session_client(&app_url, &params).await;
        let waiter = session_client(&app_url, &params).await;
        let name = unique("session_dropped_wait");
        let held = holder.lock(&name).await.expect("lock");
        let mut app_admin = Admin::open(dialect, &app_url).await;
        let before = app_admin.waits(&name).await;
        let wait = tokio::spawn({
            let (waiter, name) = (waiter.clone(), name.clone());
            async move { waiter.lock(&name).await }
        });
        until_waits("the waiter waits on the server", &mut app_admin, &name, before + 1).await;
        wait.abort();
        assert!(wait.await.expect_err("aborted").is_cancelled());
        until_waits(
            "the dropped wait is gone from the server",
            &mut app_admin,
            &name,
            before,
        )
        .await;
        held.unlock().await.expect("unlock");
        assert_eq!(
            app_admin.holder_of(&name).await,
            None,
            "{dialect:?}: nobody holds the name after the release"
        );
        let next = waiter.try_lock(&name).await.expect("try_lock").expect("free");
        next.unlock().await.expect("unlock");
        drop((holder, waiter));
        match dialect {
            Dialect::Mysql => {
                admin.exec(&format!("DROP SEQUENCE `{table}_session_seq`")).await;
                admin.exec(&format!("DROP TABLE `{table}_probe`")).await
            }
            _ => admin.exec(&format!("DROP SEQUENCE \"{table}_session_seq\"")).await,
        }
    }
}

/// A client that connects while another client waits on the server is not
/// held up by that wait, nor are its acquisitions. (MariaDB: connecting
/// once ran `CREATE SEQUENCE IF NOT EXISTS`, which queued for an exclusive
/// metadata lock behind the wait's statement, and every token draw queued
/// behind it, until the wait ended.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_while_another_waits() {
    for (dialect, url) in servers() {
        let (mut scene, held) = Scene::new(dialect, &url, "session_connect_while_waiting").await;
        let waiter = scene.client().await;
        let waiting = tokio::spawn({
            let (waiter, name) = (waiter.clone(), scene.name.clone());
            async move {
                waiter
                    .lock_with(&name, &waiter.options().wait(Duration::from_secs(60)))
                    .await
            }
        });
        scene.until_waits("the waiter waits on the server", 1).await;
        let late = timeout(BOUND, scene.client())
            .await
            .unwrap_or_else(|_| panic!("{dialect:?}: connecting is held up by another client's wait"));
        let g = timeout(BOUND, late.try_lock(&unique("session_connect_other")))
            .await
            .unwrap_or_else(|_| panic!("{dialect:?}: a try is held up by another client's wait"))
            .expect("try_lock")
            .expect("free");
        g.unlock().await.expect("unlock");
        held.unlock().await.expect("unlock");
        let w = timeout(BOUND, waiting)
            .await
            .expect("granted")
            .expect("task")
            .expect("lock");
        w.unlock().await.expect("unlock");
        drop((waiter, late));
        scene.finish().await;
    }
}

/// Tokens keep growing across backend instances (a restarted client is a
/// new instance with new connections): they come from the server's
/// sequence, not from the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_across_backend_instances() {
    for (dialect, url) in servers() {
        let name = unique("session_tokens");
        let mut last = 0;
        for round in 0..3 {
            let client = session_client(&url, "").await;
            let g = client.lock(&name).await.expect("lock");
            assert!(
                g.fencing_token() > last,
                "{dialect:?} round {round}: {} after {last}",
                g.fencing_token()
            );
            last = g.fencing_token();
            g.unlock().await.expect("unlock");
            drop(client);
        }
    }
}

/// SQLite has no session locks: a typed configuration error naming `mode`.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_refuses_session_mode() {
    let e = lockkit::connect("sqlite::memory:?mode=session")
        .await
        .expect_err("no session locks on SQLite");
    match e {
        LockError::InvalidConfig { ref part, .. } => assert_eq!(part, "query parameter mode", "{e}"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}
