//! The worker process: T tasks, each its own owner, taking random names of
//! the run with auto-extend on, holding them for a short critical section
//! and logging every grant, renewal and release (see [`crate::log`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit::{Leadership, LockClient, LockError, LockGuard, LockOptions};

use crate::chaos::SplitMix;
use crate::kind::{HoldKind, RunKind};
use crate::log::{LineWriter, Record, instant_ns, mono_ns};

/// What a worker is told by the coordinator.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The backend URL.
    #[arg(long)]
    pub backend: String,
    /// This worker's index.
    #[arg(long)]
    pub worker: usize,
    /// How many times this worker was started before.
    #[arg(long, default_value_t = 0)]
    pub incarnation: u32,
    /// Tasks (contenders) in this process.
    #[arg(long, default_value_t = 2)]
    pub tasks: usize,
    /// The lock names: `{prefix}/0` … `{prefix}/{names-1}`.
    #[arg(long, default_value_t = 3)]
    pub names: usize,
    /// The name prefix (unique per run).
    #[arg(long)]
    pub prefix: String,
    /// The lease (TTL backends).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    pub ttl: Duration,
    /// How long a `lock` call waits at most.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s")]
    pub wait: Duration,
    /// Stop taking locks at this `CLOCK_MONOTONIC` time (ns).
    #[arg(long)]
    pub stop_at: u64,
    /// The log file.
    #[arg(long)]
    pub log: PathBuf,
    /// Seed of this worker's choices.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Owner ids `{owner_base}-t{task}` instead of random ones (two
    /// processes given the same base share their owners' holds).
    #[arg(long)]
    pub owner_base: Option<String>,
    /// The longest short critical section (default ttl/10).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub short_hold: Option<Duration>,
    /// The share of holds that outlive a lease (up to 1.5 ttl, so the
    /// watchdog's renewals count).
    #[arg(long, default_value_t = 1.0 / 3.0)]
    pub long_holds: f64,
    /// The longest gap between two holds of a task (default ttl/4).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub gap: Option<Duration>,
    /// Stop early once this file exists (it holds the stop time, ns).
    #[arg(long)]
    pub stop_file: Option<PathBuf>,
    /// What to take: `mutex`, `semaphore:N`, `rw[:W]`, `election` (see [`RunKind`]).
    #[arg(long, default_value = "mutex")]
    pub kind: RunKind,
}

/// What the next acquisition of a task takes (for `rw`, a write hold W
/// times in 1000).
fn hold_kind(kind: RunKind, rng: &mut SplitMix) -> HoldKind {
    match kind {
        RunKind::Mutex | RunKind::Election => HoldKind::Mutex,
        RunKind::Semaphore(n) => HoldKind::Permit(n),
        RunKind::Rw { writes_per_mille } if rng.below(1000) < u64::from(writes_per_mille) => HoldKind::Write,
        RunKind::Rw { .. } => HoldKind::Read,
    }
}

/// Takes `name` as `hold` (a mutex hold as a leadership in an election
/// run).
async fn take(
    client: &LockClient,
    run: RunKind,
    hold: HoldKind,
    name: &str,
    options: &LockOptions,
) -> Result<LockGuard, LockError> {
    match hold {
        HoldKind::Mutex if run == RunKind::Election => {
            let election = client.election(name)?.with_options(options.clone());
            election.campaign().await.map(Leadership::into_guard)
        }
        HoldKind::Mutex => client.lock_with(name, options).await,
        HoldKind::Permit(n) => match client.semaphore(name, n) {
            Ok(sem) => sem.acquire_with(options).await,
            Err(e) => Err(e),
        },
        HoldKind::Read | HoldKind::Write => match client.rw_lock(name) {
            Ok(rw) if hold == HoldKind::Read => rw.read_with(options).await,
            Ok(rw) => rw.write_with(options).await,
            Err(e) => Err(e),
        },
    }
}

/// The `CLOCK_MONOTONIC` time (ns) at which workers stop: `--stop-at`, or
/// earlier once the coordinator's stop file appears.
static STOP_AT: AtomicU64 = AtomicU64::new(u64::MAX);

fn stop_at() -> u64 {
    STOP_AT.load(Ordering::SeqCst)
}

/// Watches for the stop file; wakes `stopped` waiters when it appears.
async fn watch_stop_file(path: PathBuf, stopped: tokio::sync::watch::Sender<bool>) {
    loop {
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Ok(at) = text.trim().parse::<u64>()
        {
            STOP_AT.fetch_min(at, Ordering::SeqCst);
            stopped.send_replace(true);
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

type Log = Arc<Mutex<LineWriter>>;

fn write(log: &Log, record: Record) {
    let mut w = log.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = w.write(&record) {
        eprintln!("worker: cannot write the log: {e}");
        std::process::exit(3);
    }
}

/// Runs the worker until `stop_at`; the process exit code.
pub fn run(args: WorkerArgs) -> i32 {
    // Die with the coordinator: no orphans even if it is killed.
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number; no memory is passed.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let log = match LineWriter::create(&args.log) {
        Ok(w) => Arc::new(Mutex::new(w)),
        Err(e) => {
            eprintln!("worker: cannot create {}: {e}", args.log.display());
            return 3;
        }
    };
    write(
        &log,
        Record::Start {
            t: mono_ns(),
            pid: std::process::id(),
            worker: args.worker,
            incarnation: args.incarnation,
        },
    );
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("worker: no runtime: {e}");
            return 3;
        }
    };
    STOP_AT.store(args.stop_at, Ordering::SeqCst);
    rt.block_on(work(args, log));
    // Guards dropped on lost locks release in the background: let them go.
    rt.shutdown_timeout(Duration::from_secs(2));
    0
}

/// Time left until the stop time, or `None` once it passed.
fn left() -> Option<Duration> {
    let (now, stop_at) = (mono_ns(), stop_at());
    (now < stop_at).then(|| Duration::from_nanos(stop_at - now))
}

async fn connect(args: &WorkerArgs) -> Option<LockClient> {
    loop {
        match lockkit::connect(&args.backend).await {
            Ok(c) => return Some(c),
            Err(e) => {
                eprintln!("worker {}: connect failed (retrying): {e}", args.worker);
                left()?;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

async fn work(args: WorkerArgs, log: Log) {
    let Some(client) = connect(&args).await else { return };
    let args = Arc::new(args);
    let (stop_tx, stopped) = tokio::sync::watch::channel(false);
    if let Some(path) = &args.stop_file {
        tokio::spawn(watch_stop_file(path.clone(), stop_tx.clone()));
    }
    let mut tasks = Vec::new();
    for i in 0..args.tasks {
        let client = match &args.owner_base {
            Some(base) => match client.with_owner(format!("{base}-t{i}")) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("worker {}: bad owner id: {e}", args.worker);
                    return;
                }
            },
            None => client.with_new_owner(),
        };
        let seed = args.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        tasks.push(tokio::spawn(task(
            client,
            args.clone(),
            log.clone(),
            seed,
            stopped.clone(),
        )));
    }
    for t in tasks {
        let _ = t.await;
    }
    drop(stop_tx);
    // Calls cancelled by the end and guards dropped as lost release in the
    // background: give them a moment before the runtime goes.
    tokio::time::sleep(Duration::from_millis(500)).await;
}

async fn task(
    client: LockClient,
    args: Arc<WorkerArgs>,
    log: Log,
    seed: u64,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut rng = SplitMix::new(seed);
    let owner = client.owner().to_owned();
    let options = LockOptions::new().ttl(args.ttl).wait(args.wait).auto_extend(true);
    let ms = nanos_ms(args.ttl);
    let short_ms = args.short_hold.map_or(ms / 10, nanos_ms0);
    let gap_ms = args.gap.map_or(ms / 4, nanos_ms0);
    let long_per_mille = (args.long_holds.clamp(0.0, 1.0) * 1000.0) as u64;
    while let Some(remaining) = left() {
        let name = format!("{}/{}", args.prefix, rng.below(args.names as u64));
        let kind = hold_kind(args.kind, &mut rng);
        write(
            &log,
            Record::Want {
                t: mono_ns(),
                name: name.clone(),
                owner: owner.clone(),
                kind,
            },
        );
        let outcome = tokio::select! {
            r = take(&client, args.kind, kind, &name, &options) => Some(r),
            _ = tokio::time::sleep(remaining) => None,
            _ = stopped.wait_for(|s| *s) => None,
        };
        match outcome {
            Some(Ok(guard)) => {
                let t = mono_ns();
                let token = guard.fencing_token();
                let valid = guard.valid_until().map(instant_ns);
                write(
                    &log,
                    Record::Grant {
                        t,
                        name: name.clone(),
                        owner: owner.clone(),
                        token,
                        valid,
                        count: Some(guard.hold_count()),
                        kind,
                    },
                );
                // Mostly short critical sections (many hand-offs), some up to
                // 1.5 ttl (outliving one lease, so the watchdog's renewals count).
                let hold = if rng.below(1000) < long_per_mille {
                    Duration::from_millis(ms / 4 + rng.below(ms * 5 / 4 + 1))
                } else {
                    Duration::from_millis(1 + rng.below(short_ms + 1))
                };
                if hold_for(&guard, hold, &args, &log, &name, &owner, token).await {
                    drop(guard); // lost: the background release is told NotHeld
                } else {
                    match guard.unlock().await {
                        Ok(u) => write(
                            &log,
                            Record::Unlocked {
                                t: mono_ns(),
                                name: name.clone(),
                                owner: owner.clone(),
                                token,
                                remaining: u.remaining_holds,
                            },
                        ),
                        Err(lockkit::LockError::NotHeld { .. }) => {}
                        Err(e) => write(
                            &log,
                            Record::UnlockFailed {
                                t: mono_ns(),
                                name: name.clone(),
                                owner: owner.clone(),
                                token,
                                error: e.to_string(),
                            },
                        ),
                    }
                }
            }
            // Failed, or the run ended first.
            failed => {
                let error = match &failed {
                    Some(Err(e)) => e.to_string(),
                    _ => "run ended".into(),
                };
                let timed_out = matches!(failed, Some(Err(LockError::WaitTimeout { .. })));
                write(
                    &log,
                    Record::Fail {
                        t: mono_ns(),
                        name,
                        owner: owner.clone(),
                        error,
                        timed_out,
                    },
                );
                if failed.is_none() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100 + rng.below(200))).await;
            }
        }
        // A short gap between holds (sometimes none).
        let gap = rng.below(gap_ms + 1);
        if gap > 0 {
            tokio::time::sleep(Duration::from_millis(gap)).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}

fn nanos_ms(d: Duration) -> u64 {
    (d.as_millis() as u64).max(4)
}

fn nanos_ms0(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Holds `guard` for `hold` (or until its lost signal fires), logging each
/// validity deadline it sees move, then logs the release (before the
/// caller unlocks). Whether the lost signal ended the hold.
async fn hold_for(
    guard: &LockGuard,
    hold: Duration,
    args: &WorkerArgs,
    log: &Log,
    name: &str,
    owner: &str,
    token: u64,
) -> bool {
    let end = tokio::time::Instant::now() + hold;
    let poll = (args.ttl / 6).clamp(Duration::from_millis(20), Duration::from_millis(500));
    let mut last = guard.valid_until();
    let lost = loop {
        if guard.is_lost() {
            break true;
        }
        let now = tokio::time::Instant::now();
        if now >= end {
            break false;
        }
        let step = (end - now).min(poll);
        tokio::select! {
            _ = guard.lost() => break true,
            _ = tokio::time::sleep(step) => {}
        }
        let current = guard.valid_until();
        // Session leases have no deadline to log.
        let moved = match (current, last) {
            (Some(c), Some(l)) => c > l,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if moved && !guard.is_lost() {
            // Read the deadline before the clock: a deadline seen at `t` held then.
            let valid = current.map(instant_ns);
            let t = mono_ns();
            if current.is_some_and(|c| c > Instant::now()) {
                write(
                    log,
                    Record::Valid {
                        t,
                        name: name.into(),
                        owner: owner.into(),
                        token,
                        valid,
                    },
                );
            }
            last = current;
        }
    };
    write(
        log,
        Record::Release {
            t: mono_ns(),
            name: name.into(),
            owner: owner.into(),
            token,
            lost,
        },
    );
    lost
}
