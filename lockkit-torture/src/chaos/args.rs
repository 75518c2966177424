//! The coordinator's settings, and the bound and session a backend URL
//! implies.

use std::path::PathBuf;
use std::time::Duration;

/// The coordinator's settings (see `lockkit-torture run --help`).
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The backend URL (sqlite://, redis://, redlock://, mysql://, postgres://, zk://).
    #[arg(long)]
    pub backend: String,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    pub procs: usize,
    /// Tasks (independent owners) per worker process.
    #[arg(long, default_value_t = 2)]
    pub tasks: usize,
    /// Lock names contended for.
    #[arg(long, default_value_t = 3)]
    pub names: usize,
    /// How long the chaos runs.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s")]
    pub seconds: Duration,
    /// The chaos seed (default: from the clock; printed either way).
    #[arg(long)]
    pub seed: Option<u64>,
    /// The lease of TTL backends (workers hold with auto-extend).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    pub ttl: Duration,
    /// Where the logs go (created; one file per worker process, chaos.jsonl).
    #[arg(long)]
    pub log_dir: PathBuf,
    /// A shell command that restarts the server with its data (none: no restarts).
    #[arg(long)]
    pub restart_cmd: Option<String>,
    /// Mean time between server restarts.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub restart_every: Duration,
    /// Mean time between kills/pauses.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    pub chaos_every: Duration,
    /// How long a killed holder's name may stay taken (default from the URL:
    /// ttl; SQL ttl + sweep_interval; ZooKeeper session_timeout + 2 s server tick).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub bound: Option<Duration>,
    /// Scheduling slack on top of the bound.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    pub slack: Duration,
    /// Put a fault proxy in front of each server of the URL (workers connect
    /// through it) and inject latency above the response timeout, lost
    /// replies and connection resets. `redis://` gets `response_timeout=300ms`
    /// unless the URL sets one.
    #[arg(long)]
    pub proxy: bool,
    /// `redlock://` with at least 3 private nodes: pause one node, kill it
    /// and restart it empty (`--node-restart-cmd`), wipe it (`FLUSHALL`).
    /// Never on servers other tests use.
    #[arg(long)]
    pub node_faults: bool,
    /// A shell command that kills the Redis node listening on `{port}` and
    /// starts it again empty (for `--node-faults`).
    #[arg(long)]
    pub node_restart_cmd: Option<String>,
    /// How long a wiped node stays silent (`CLIENT PAUSE`) before it takes
    /// part again; also the quiet time (plus half of it and 1 s) a wipe or
    /// kill waits for after the last fault. `0s` (the default): it rejoins
    /// at once, and faults follow each other without a quiet time — what
    /// the restart guard is for. A delayed rejoin (at least 2 ttl + 1 s)
    /// is the operator's discipline a run without the guard needs.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub node_outage: Duration,
    /// Mean time between network/node faults (one at a time).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1500ms")]
    pub fault_every: Duration,
    /// The timeout a slow server's latency must exceed (default: the URL's
    /// `response_timeout` for Redis, `node_timeout` for Redlock, a quarter
    /// of the session for ZooKeeper, 500 ms for SQL).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub latency: Option<Duration>,
    /// Worker processes 2k and 2k+1 share their tasks' owner ids (their
    /// holds of a name are one hold with a count on the server).
    #[arg(long)]
    pub shared_owners: bool,
    /// Stop once the workers logged this many grants (`--seconds` stays the
    /// limit).
    #[arg(long)]
    pub grants: Option<usize>,
    /// The longest short critical section (default ttl/10).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub short_hold: Option<Duration>,
    /// The share of holds that outlive a lease (default 1/3).
    #[arg(long)]
    pub long_holds: Option<f64>,
    /// The longest gap between two holds of a task (default ttl/4).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub gap: Option<Duration>,
    /// What the workers take: `mutex` (locks), `semaphore:N` (permits of
    /// semaphores of N), `rw[:W]` (read-write locks, W writes per mille,
    /// default 100).
    #[arg(long, default_value = "mutex")]
    pub kind: crate::kind::RunKind,
    /// A crowd: at least 4 processes × 64 tasks (each an owner of its own)
    /// on at most 2 names, every `lock` call waiting up to 120 s (a line
    /// of 128 per name takes its time on a slow kind), and unless given, short sections and gaps (5 ms) with one
    /// hold in a hundred outliving a lease; with any `--kind` and every
    /// fault.
    #[arg(long)]
    pub crowd: bool,
}

/// How long a crowd's `lock` call waits at least.
pub const CROWD_WAIT: Duration = Duration::from_secs(120);

impl RunArgs {
    /// The settings with `--crowd` applied.
    pub fn resolved(&self) -> RunArgs {
        let mut args = self.clone();
        if args.crowd {
            args.procs = args.procs.max(4);
            args.tasks = args.tasks.max(64);
            args.names = args.names.min(2);
            args.short_hold.get_or_insert(Duration::from_millis(5));
            args.gap.get_or_insert(Duration::from_millis(5));
            args.long_holds.get_or_insert(0.01);
        }
        args
    }

    /// How long a worker's `lock` call waits: past two bounds (a killed
    /// holder's name comes free within one), at least 20 s, and for a
    /// crowd at least [`CROWD_WAIT`].
    pub(super) fn wait(&self, bound: Duration) -> Duration {
        let wait = (2 * (bound + self.slack)).max(Duration::from_secs(20));
        if self.crowd { wait.max(CROWD_WAIT) } else { wait }
    }
}

/// The bound and the session timeout the URL implies.
pub(super) fn bounds(args: &RunArgs) -> Result<(Duration, Option<Duration>), String> {
    let (scheme, query) = match args.backend.split_once("://") {
        Some((s, rest)) => (s.to_ascii_lowercase(), rest.split_once('?').map_or("", |(_, q)| q)),
        None => (args.backend.split(':').next().unwrap_or("").to_ascii_lowercase(), ""),
    };
    let param = |key: &str| -> Result<Option<Duration>, String> {
        for kv in query.split('&') {
            if let Some((k, v)) = kv.split_once('=')
                && k == key
            {
                return humantime::parse_duration(v)
                    .map(Some)
                    .map_err(|e| format!("{key}={v}: {e}"));
            }
        }
        Ok(None)
    };
    let computed = match scheme.as_str() {
        "mysql" | "mariadb" | "postgres" | "postgresql" | "sqlite" => (
            args.ttl + param("sweep_interval")?.unwrap_or(Duration::from_secs(15)),
            None,
        ),
        "zk" | "zookeeper" => {
            let session = param("session_timeout")?.unwrap_or(Duration::from_secs(10));
            (session + Duration::from_secs(2), Some(session))
        }
        "memory" => return Err("memory:// is in-process only: nothing to torture across processes".into()),
        _ => (args.ttl, None),
    };
    Ok((args.bound.unwrap_or(computed.0), computed.1))
}
