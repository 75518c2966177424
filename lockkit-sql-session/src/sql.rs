//! The statements of the session mode, per database. Each acquisition,
//! release and look is one statement.

use lockkit_sql::Dialect;

/// The statement texts of one backend (the sequence name spliced in; it
/// comes from the validated table name).
#[derive(Debug, Clone)]
pub(crate) struct SessionSql {
    /// Try the lock without waiting; the lock result (1/true: granted) and a
    /// token, drawn after the lock was decided (a token drawn for a refused
    /// try is skipped: tokens only need to grow). Postgres takes the
    /// connection's server session id as `$2` and tries only on that
    /// session (NULL elsewhere: a pooler moved the statement).
    pub try_lock: String,
    /// Wait for the lock server-side, bounded: MySQL `GET_LOCK(key,
    /// seconds)` (0: timed out), Postgres `lock_timeout` (an error
    /// `55P03` when it runs out); then a token.
    pub wait_lock: String,
    /// Release one server hold of the key on this connection.
    pub unlock: String,
    /// Whether any connection holds the key.
    pub held: String,
    /// How many connections wait for the key (Postgres; MySQL cannot tell
    /// without `performance_schema`).
    pub waiting: Option<String>,
    /// This connection's id (to end its statement from another one).
    pub conn_id: &'static str,
    /// Draw a token (checks the sequence at connect).
    pub next_token: String,
    /// Create the sequence.
    pub create_seq: String,
    /// The sequence's name, for messages.
    pub seq: String,
}

impl SessionSql {
    pub(crate) fn new(dialect: Dialect, table: &str) -> Self {
        let seq = format!("{table}_session_seq");
        match dialect {
            Dialect::Postgres => {
                let next = format!("nextval('\"{seq}\"')");
                SessionSql {
                    try_lock: format!(
                        "SELECT CASE WHEN pg_backend_pid() = $2 THEN pg_try_advisory_lock($1) END, {next}"
                    ),
                    // The FROM item runs first: the token is drawn after the
                    // grant. set_config applies to this statement's wait.
                    wait_lock: format!(
                        "SELECT {next} FROM (SELECT set_config('lock_timeout', $2, false), pg_advisory_lock($1)) AS w"
                    ),
                    unlock: "SELECT pg_advisory_unlock($1)".into(),
                    held: pg_locks("granted").replace("COUNT(*)", "COUNT(*) > 0"),
                    waiting: Some(pg_locks("NOT granted")),
                    conn_id: "SELECT pg_backend_pid()",
                    next_token: format!("SELECT {next}"),
                    // CACHE 1: a Postgres sequence caches per session, so
                    // cached values would not grow across connections.
                    create_seq: format!("CREATE SEQUENCE IF NOT EXISTS \"{seq}\""),
                    seq,
                }
            }
            _ => {
                let next = format!("NEXTVAL(`{seq}`)");
                SessionSql {
                    try_lock: format!("SELECT GET_LOCK(?, 0), {next}"),
                    wait_lock: format!("SELECT GET_LOCK(?, ?), {next}"),
                    unlock: "SELECT RELEASE_LOCK(?)".into(),
                    held: "SELECT IS_USED_LOCK(?) IS NOT NULL".into(),
                    waiting: None,
                    conn_id: "SELECT CONNECTION_ID()",
                    next_token: format!("SELECT {next}"),
                    // A MariaDB sequence's cache is shared by all connections:
                    // values grow across them, and the sequence row is
                    // written (flushed) once per 1000 tokens.
                    create_seq: format!("CREATE SEQUENCE IF NOT EXISTS `{seq}` CACHE 1000"),
                    seq,
                }
            }
        }
    }
}

/// Counts this database's advisory locks on the one-`bigint` key `$1` that
/// match `state` (`granted` / `NOT granted`).
fn pg_locks(state: &str) -> String {
    format!(
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND classid = (($1::int8 >> 32) & 4294967295)::oid AND objid = ($1::int8 & 4294967295)::oid \
         AND objsubid = 1 AND {state}"
    )
}
