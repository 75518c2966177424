//! [`Kit`]: how the conformance cases reach a backend.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::{LockClient, LockError, LockOptions};

/// With this environment variable set to `1`, a missing or unreachable
/// server fails the test instead of skipping it (set by `scripts/test` and CI).
pub const REQUIRE_SERVICES_VAR: &str = "LOCKKIT_REQUIRE_SERVICES";

/// Whether missing servers must fail the run.
pub fn services_required() -> bool {
    std::env::var(REQUIRE_SERVICES_VAR).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The server URL in the environment variable `var`: `None` (and a
/// "skipped" line on stderr) when it is unset, unless [`services_required`],
/// in which case it panics — CI never skips.
pub fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if services_required() => {
            panic!("{var} is not set and {REQUIRE_SERVICES_VAR}=1: start the servers with scripts/services up")
        }
        _ => {
            eprintln!(
                "skipped: {var} is not set (run scripts/services up, or set {REQUIRE_SERVICES_VAR}=1 to fail instead)"
            );
            None
        }
    }
}

type ConnectFn = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<LockClient, LockError>> + Send>> + Send + Sync>;

/// A backend under test: how to make a new, independent client (its own
/// connections, its own owner id), and the timings the cases use.
#[derive(Clone)]
pub struct Kit {
    label: String,
    connect: ConnectFn,
    /// The short lease of the expiry cases (default 1 s). Cases that wait for
    /// a lease to run out take a few of these.
    pub ttl: Duration,
    /// The generous bound for anything that should happen "promptly"
    /// (default 15 s): far above any healthy latency, far below a stuck lock.
    pub bound: Duration,
    /// Tasks in the stress case (default 8).
    pub stress_tasks: usize,
    /// Acquisitions per task in the stress case (default 200).
    pub stress_iterations: usize,
    /// Clients of the crowd cases, each with its own connections (default 8).
    pub crowd_clients: usize,
    /// Waiting owners per client in the crowd cases (default 25: 200
    /// waiters on one name in all).
    pub crowd_per_client: usize,
    /// How long a waiter of a crowd may wait (default 120 s): far above a
    /// healthy crowd's few seconds, so a case that fails shows waiters that
    /// are not served at all.
    pub crowd_wait: Duration,
    /// How long after a release the waiter behind a dead one may wait for
    /// the name (default 1.5 s). A dead waiter should cost at most 500 ms;
    /// the bound leaves room for a loaded machine, and stays far below
    /// place leases of seconds or a session timeout.
    pub dead_waiter_bound: Duration,
}

impl std::fmt::Debug for Kit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kit")
            .field("label", &self.label)
            .field("ttl", &self.ttl)
            .field("bound", &self.bound)
            .finish()
    }
}

impl Kit {
    /// A kit that connects with `connect` (called once per client).
    pub fn new<F, Fut>(label: impl Into<String>, connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<LockClient, LockError>> + Send + 'static,
    {
        Kit {
            label: label.into(),
            connect: Arc::new(move || Box::pin(connect())),
            ttl: Duration::from_secs(1),
            bound: Duration::from_secs(15),
            stress_tasks: 8,
            stress_iterations: 200,
            crowd_clients: 8,
            crowd_per_client: 25,
            crowd_wait: Duration::from_secs(120),
            dead_waiter_bound: Duration::from_millis(1500),
        }
    }

    /// A kit for the server whose URL is in the environment variable `var`.
    ///
    /// `None` (and a "skipped" line on stderr) when the variable is unset,
    /// unless [`services_required`], in which case it panics: CI never skips.
    pub fn from_env<F, Fut>(var: &str, connect: F) -> Option<Self>
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<LockClient, LockError>> + Send + 'static,
    {
        let url = server_url(var)?;
        Some(Kit::new(var, move || connect(url.clone())))
    }

    /// Sets the short lease of the expiry cases.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets the stress case's size.
    pub fn with_stress(mut self, tasks: usize, iterations: usize) -> Self {
        self.stress_tasks = tasks;
        self.stress_iterations = iterations;
        self
    }

    /// Sets how long after a release the waiter behind a dead one may wait
    /// (see [`dead_waiter_bound`](Self::dead_waiter_bound)), for a backend
    /// that leaves some dead waiters to their server session.
    pub fn with_dead_waiter_bound(mut self, bound: Duration) -> Self {
        self.dead_waiter_bound = bound;
        self
    }

    /// Sets the crowd cases' size: `clients` clients (at least 1) with
    /// `per_client` waiting owners each (at least 1).
    pub fn with_crowd(mut self, clients: usize, per_client: usize) -> Self {
        self.crowd_clients = clients.max(1);
        self.crowd_per_client = per_client.max(1);
        self
    }

    /// What this kit tests, for messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// A new client with its own connections and owner id. Panics (failing
    /// the case) if the backend cannot be reached.
    pub async fn client(&self) -> LockClient {
        match (self.connect)().await {
            Ok(client) => client,
            Err(e) => panic!("{}: cannot connect: {}", self.label, error_chain(&e)),
        }
    }

    /// A name unique to this case and run.
    pub fn name(&self, case: &str) -> String {
        format!("lockkit-test/{case}/{:016x}", rand::random::<u64>())
    }

    /// Options with a long lease (60 s) and the kit's bound as wait: for
    /// cases where the lease must not run out by itself.
    pub fn long(&self, client: &LockClient) -> LockOptions {
        client.options().ttl(Duration::from_secs(60)).wait(self.bound)
    }

    /// Options with the kit's short lease, no auto-extend.
    pub fn short(&self, client: &LockClient) -> LockOptions {
        client.options().ttl(self.ttl).auto_extend(false).wait(self.bound)
    }
}

/// An error and its sources, one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
