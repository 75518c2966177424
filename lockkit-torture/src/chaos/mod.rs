//! The coordinator: starts the worker processes, runs the seeded chaos
//! schedule (SIGKILL holders, SIGSTOP them past their lease and SIGCONT
//! them, run the server restart command, restart killed workers), then
//! stops everything, reaps every child and runs the checker.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::check::{self, ProcLog, Report};
use crate::faults::Faults;
use crate::log::{Event, Holder, LineWriter, Record, mono_ns, nanos, read_lines};

/// A small seeded generator (SplitMix64): the same seed, the same schedule.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

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
}

/// The bound and the session timeout the URL implies.
fn bounds(args: &RunArgs) -> Result<(Duration, Option<Duration>), String> {
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

/// Follows a worker's log as it grows: which of its owners hold a lock now,
/// and how many grants it logged.
#[derive(Debug, Default)]
struct Tail {
    offset: u64,
    partial: Vec<u8>,
    holding: HashMap<String, String>,
    grants: usize,
}

impl Tail {
    fn refresh(&mut self, path: &Path) {
        let Ok(mut f) = File::open(path) else { return };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        if f.read_to_end(&mut buf).is_err() {
            return;
        }
        self.offset += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            match serde_json::from_slice::<Record>(&line) {
                Ok(Record::Grant { owner, name, .. }) => {
                    self.grants += 1;
                    self.holding.insert(owner, name);
                }
                Ok(Record::Release { owner, .. }) => {
                    self.holding.remove(&owner);
                }
                _ => {}
            }
        }
    }
}

/// One worker slot: the process now running in it, if any.
struct Slot {
    worker: usize,
    incarnation: u32,
    child: Option<Child>,
    pid: u32,
    paused_until: Option<u64>,
    respawn_at: Option<u64>,
    tail: Tail,
}

/// Everything the coordinator started; dropping it kills and reaps what
/// still runs (so a panicking coordinator leaves no orphans either).
struct Fleet {
    slots: Vec<Slot>,
    events: LineWriter,
}

impl Fleet {
    fn event(&mut self, e: Event) {
        if let Err(err) = self.events.write(&e) {
            eprintln!("torture: cannot write the chaos log: {err}");
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for s in &mut self.slots {
            if let Some(mut c) = s.child.take() {
                signal(s.pid, libc::SIGCONT);
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child we started and have not reaped yet.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

fn log_path(dir: &Path, worker: usize, incarnation: u32) -> PathBuf {
    dir.join(format!("w{worker}-{incarnation}.jsonl"))
}

/// Runs the torture; the checker's report.
pub fn run(args: &RunArgs) -> Result<Report, String> {
    let (bound, session) = bounds(args)?;
    let (mut faults, worker_url) = Faults::setup(args)?;
    let seed = args
        .seed
        .unwrap_or_else(|| mono_ns() ^ (u64::from(std::process::id()) << 32));
    let mut rng = SplitMix::new(seed);
    std::fs::create_dir_all(&args.log_dir).map_err(|e| format!("{}: {e}", args.log_dir.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let prefix = format!("torture/{seed:x}-{:x}", mono_ns() % 0xFFFF_FFFF);
    let events = LineWriter::create(&args.log_dir.join("chaos.jsonl")).map_err(|e| format!("chaos.jsonl: {e}"))?;
    let start = mono_ns();
    let mut end = start + nanos(args.seconds);
    let stop_at = end;
    let stop_file = args.log_dir.join("stop");
    let _ = std::fs::remove_file(&stop_file);
    let wait = (2 * (bound + args.slack)).max(Duration::from_secs(20));
    eprintln!(
        "torture: seed {seed} backend {} procs {} tasks {} names {} for {:?}, ttl {:?}, bound {:?} + slack {:?}, logs in {}",
        args.backend,
        args.procs,
        args.tasks,
        args.names,
        args.seconds,
        args.ttl,
        bound,
        args.slack,
        args.log_dir.display()
    );
    if let Some(f) = &faults {
        eprintln!(
            "torture: faults {:?}, workers connect to {}",
            f.kinds(),
            lockkit::url::redact(&worker_url)
        );
    }

    let mut fleet = Fleet {
        slots: Vec::new(),
        events,
    };
    fleet.event(Event::Run {
        t: start,
        seed,
        backend: args.backend.clone(),
        bound_ns: nanos(bound),
        slack_ns: nanos(args.slack),
        session_ns: session.map(nanos),
        shared_owners: args.shared_owners,
    });
    let owner_run = format!("torture-{seed:x}-{:x}", mono_ns() % 0xFFFF_FFFF);

    let spawn = |fleet: &mut Fleet, worker: usize, incarnation: u32, rng: &mut SplitMix| -> Result<Slot, String> {
        let log = log_path(&args.log_dir, worker, incarnation);
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(args.log_dir.join(format!("w{worker}-{incarnation}.out")))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&exe);
        cmd.arg("worker")
            .args(["--backend", &worker_url])
            .args(["--worker", &worker.to_string()])
            .args(["--incarnation", &incarnation.to_string()])
            .args(["--tasks", &args.tasks.to_string()])
            .args(["--names", &args.names.to_string()])
            .args(["--prefix", &prefix])
            .args(["--ttl", &humantime::format_duration(args.ttl).to_string()])
            .args(["--wait", &humantime::format_duration(wait).to_string()])
            .args(["--stop-at", &stop_at.to_string()])
            .args(["--seed", &rng.next_u64().to_string()])
            .arg("--log")
            .arg(&log)
            .arg("--stop-file")
            .arg(&stop_file);
        if args.shared_owners {
            cmd.args(["--owner-base", &format!("{owner_run}-pair{}", worker / 2)]);
        }
        if let Some(d) = args.short_hold {
            cmd.args(["--short-hold", &humantime::format_duration(d).to_string()]);
        }
        if let Some(f) = args.long_holds {
            cmd.args(["--long-holds", &f.to_string()]);
        }
        if let Some(d) = args.gap {
            cmd.args(["--gap", &humantime::format_duration(d).to_string()]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("spawning a worker: {e}"))?;
        let pid = child.id();
        fleet.event(Event::Spawn {
            t: mono_ns(),
            worker,
            incarnation,
            pid,
        });
        Ok(Slot {
            worker,
            incarnation,
            child: Some(child),
            pid,
            paused_until: None,
            respawn_at: None,
            tail: Tail::default(),
        })
    };

    for w in 0..args.procs {
        let slot = spawn(&mut fleet, w, 0, &mut rng)?;
        fleet.slots.push(slot);
    }

    let gap = |rng: &mut SplitMix, mean: Duration| nanos(mean.mul_f64(0.5 + rng.unit()));
    let mut next_chaos = start + gap(&mut rng, args.chaos_every);
    let mut next_restart = start + gap(&mut rng, args.restart_every);
    let mut restart: Option<Child> = None;
    let mut actions = 0u32;
    let restart_log = args.log_dir.join("restart.log");
    // Grants of worker processes that ended, and when the live ones were counted last.
    let mut past_grants = 0usize;
    let mut next_count = start;

    loop {
        let now = mono_ns();
        // Children that exited on their own, resumes, respawns.
        for i in 0..fleet.slots.len() {
            let s = &mut fleet.slots[i];
            if s.paused_until.is_some_and(|u| now >= u) {
                signal(s.pid, libc::SIGCONT);
                s.paused_until = None;
                let e = Event::Resume {
                    t: mono_ns(),
                    worker: s.worker,
                    incarnation: s.incarnation,
                    pid: s.pid,
                };
                fleet.event(e);
                continue;
            }
            let s = &mut fleet.slots[i];
            if s.paused_until.is_none()
                && let Some(c) = s.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                eprintln!(
                    "torture: worker w{}-{} exited on its own: {status}",
                    s.worker, s.incarnation
                );
                s.child = None;
                s.respawn_at = Some(now + 500_000_000);
                let e = Event::Exit {
                    t: mono_ns(),
                    worker: s.worker,
                    incarnation: s.incarnation,
                    pid: s.pid,
                    forced: false,
                };
                fleet.event(e);
            }
            let s = &fleet.slots[i];
            if s.child.is_none() && s.respawn_at.is_some_and(|r| now >= r) {
                let (w, inc) = (s.worker, s.incarnation + 1);
                if now + 1_000_000_000 < end {
                    let old = &mut fleet.slots[i];
                    old.tail.refresh(&log_path(&args.log_dir, old.worker, old.incarnation));
                    past_grants += old.tail.grants;
                    fleet.slots[i] = spawn(&mut fleet, w, inc, &mut rng)?;
                } else {
                    fleet.slots[i].respawn_at = None;
                }
            }
        }
        // Enough grants: stop early (the workers watch the stop file).
        if let Some(target) = args.grants
            && now >= next_count
        {
            next_count = now + 250_000_000;
            let mut live = 0;
            for s in fleet.slots.iter_mut().filter(|s| s.child.is_some()) {
                s.tail.refresh(&log_path(&args.log_dir, s.worker, s.incarnation));
                live += s.tail.grants;
            }
            if past_grants + live >= target {
                end = end.min(now);
            }
        }
        if now >= end {
            break;
        }

        // Network and node faults.
        if let Some(f) = faults.as_mut() {
            f.tick(now, end, &mut rng, &mut |e| fleet.event(e));
        }

        // Kill or pause a holder.
        if now >= next_chaos {
            let down = fleet
                .slots
                .iter()
                .filter(|s| s.child.is_none() || s.paused_until.is_some())
                .count();
            let mut holders = Vec::new();
            for (i, s) in fleet.slots.iter_mut().enumerate() {
                if s.child.is_some() && s.paused_until.is_none() {
                    s.tail.refresh(&log_path(&args.log_dir, s.worker, s.incarnation));
                    if !s.tail.holding.is_empty() {
                        holders.push(i);
                    }
                }
            }
            if down + 1 >= args.procs || holders.is_empty() {
                next_chaos = now + 100_000_000;
            } else {
                let i = holders[rng.below(holders.len() as u64) as usize];
                // The first two actions are a kill and a pause (so even a short run
                // has both), then either at random.
                let kill = match actions {
                    0 => true,
                    1 => false,
                    _ => rng.below(2) == 0,
                };
                actions += 1;
                let s = &mut fleet.slots[i];
                let (worker, incarnation, pid) = (s.worker, s.incarnation, s.pid);
                if kill {
                    signal(pid, libc::SIGKILL);
                    let t = mono_ns();
                    if let Some(mut c) = s.child.take() {
                        let _ = c.wait();
                    }
                    s.respawn_at = Some(t + 300_000_000 + rng.below(1_200_000_000));
                    fleet.event(Event::Kill {
                        t,
                        worker,
                        incarnation,
                        pid,
                    });
                } else {
                    signal(pid, libc::SIGSTOP);
                    let t = mono_ns();
                    // Past the lease (and the session, with its server tick).
                    s.paused_until = Some(t + nanos(bound) + 500_000_000 + rng.below(1_500_000_000));
                    fleet.event(Event::Pause {
                        t,
                        worker,
                        incarnation,
                        pid,
                    });
                }
                next_chaos = now + gap(&mut rng, args.chaos_every);
            }
        }

        // Restart the server.
        if let Some(c) = restart.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            restart = None;
            fleet.event(Event::RestartEnd {
                t: mono_ns(),
                ok: status.success(),
            });
            if !status.success() {
                eprintln!(
                    "torture: the restart command failed ({status}); see {}",
                    restart_log.display()
                );
            }
            next_restart = mono_ns() + gap(&mut rng, args.restart_every);
        }
        if let Some(cmd) = &args.restart_cmd
            && restart.is_none()
            && now >= next_restart
            && now + 3_000_000_000 < end
        {
            let out = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&restart_log)
                .map_err(|e| e.to_string())?;
            fleet.event(Event::RestartBegin { t: mono_ns() });
            let child = Command::new("sh")
                .args(["-c", cmd])
                .stdin(Stdio::null())
                .stdout(out.try_clone().map_err(|e| e.to_string())?)
                .stderr(out)
                .spawn()
                .map_err(|e| format!("restart command: {e}"))?;
            restart = Some(child);
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    // The end: stop the workers, heal the faults, resume the paused, let the
    // restart finish, let workers stop, reap all.
    std::fs::write(&stop_file, mono_ns().to_string()).map_err(|e| format!("{}: {e}", stop_file.display()))?;
    fleet.event(Event::End { t: mono_ns() });
    if let Some(f) = faults.as_mut() {
        f.finish(&mut |e| fleet.event(e));
    }
    for i in 0..fleet.slots.len() {
        let s = &mut fleet.slots[i];
        if s.paused_until.take().is_some() {
            signal(s.pid, libc::SIGCONT);
            let e = Event::Resume {
                t: mono_ns(),
                worker: s.worker,
                incarnation: s.incarnation,
                pid: s.pid,
            };
            fleet.event(e);
        }
    }
    if let Some(mut c) = restart.take() {
        let status = c.wait().map_err(|e| format!("restart command: {e}"))?;
        fleet.event(Event::RestartEnd {
            t: mono_ns(),
            ok: status.success(),
        });
    }
    let grace = mono_ns() + nanos(args.ttl * 2 + Duration::from_secs(10));
    for i in 0..fleet.slots.len() {
        let s = &mut fleet.slots[i];
        let Some(mut c) = s.child.take() else { continue };
        let (worker, incarnation, pid) = (s.worker, s.incarnation, s.pid);
        let mut forced = false;
        loop {
            match c.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if mono_ns() >= grace => {
                    let _ = c.kill();
                    let _ = c.wait();
                    forced = true;
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        fleet.event(Event::Exit {
            t: mono_ns(),
            worker,
            incarnation,
            pid,
            forced,
        });
    }
    // Every worker is gone: the names must be free, or come free within the bound.
    let names: Vec<String> = (0..args.names).map(|i| format!("{prefix}/{i}")).collect();
    inspect(&args.backend, &names, bound + args.slack, faults.as_ref(), &mut |e| {
        fleet.event(e)
    });
    drop(faults);
    drop(fleet);
    check_dir(&args.log_dir)
}

/// Inspects `names` through the backend (directly, not through a proxy):
/// at once, then the held ones again after `bound`.
fn inspect(backend: &str, names: &[String], bound: Duration, faults: Option<&Faults>, event: &mut dyn FnMut(Event)) {
    let own;
    let rt = match faults {
        Some(f) => f.runtime(),
        None => match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => {
                own = rt;
                &own
            }
            Err(e) => {
                eprintln!("torture: no runtime for the inspection: {e}");
                return;
            }
        },
    };
    rt.block_on(async {
        let client = match lockkit::connect(backend).await {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("torture: cannot connect for the inspection: {e}");
                None
            }
        };
        let mut pending: Vec<&String> = names.iter().collect();
        for round in 0..2u32 {
            if round == 1 {
                if pending.is_empty() {
                    break;
                }
                tokio::time::sleep(bound).await;
            }
            let mut held = Vec::new();
            for name in pending {
                let (holder, error) = match &client {
                    None => (None, Some("no connection".to_owned())),
                    Some(c) => match c.inspect(name).await {
                        Ok(info) => (
                            info.map(|i| Holder {
                                owner: i.owner,
                                count: i.hold_count,
                                token: i.token,
                            }),
                            None,
                        ),
                        Err(e) => (None, Some(e.to_string())),
                    },
                };
                if holder.is_some() || error.is_some() {
                    held.push(name);
                }
                event(Event::Inspect {
                    t: mono_ns(),
                    round,
                    name: name.clone(),
                    holder,
                    error,
                });
            }
            pending = held;
        }
    });
}

/// Runs the checker over a run's log directory.
pub fn check_dir(dir: &Path) -> Result<Report, String> {
    let events: Vec<Event> = read_lines(&dir.join("chaos.jsonl")).map_err(|e| format!("chaos.jsonl: {e}"))?;
    let mut procs = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(stem) = file
            .to_str()
            .and_then(|f| f.strip_suffix(".jsonl"))
            .and_then(|f| f.strip_prefix('w'))
        else {
            continue;
        };
        let Some((w, inc)) = stem.split_once('-') else { continue };
        let (Ok(worker), Ok(incarnation)) = (w.parse(), inc.parse()) else {
            continue;
        };
        let records = read_lines(&entry.path()).map_err(|e| format!("{}: {e}", entry.path().display()))?;
        procs.push(ProcLog {
            worker,
            incarnation,
            records,
        });
    }
    procs.sort_by_key(|p| (p.worker, p.incarnation));
    Ok(check::check(&procs, &events))
}
