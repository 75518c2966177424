//! The crowd workloads: many waiters on ONE name, per lock kind (mutex,
//! semaphore of N, read-write lock with mostly readers), spread over
//! worker processes (this binary run again as `crowd-worker`), each
//! process with a few clients and each waiter an owner of its own.
//!
//! - `crowd`: C waiters (16, 64, 256) each take, hold for the section
//!   (2 ms by default: long enough for a semaphore's permits to overlap
//!   when the backend lets them, short beside any hand-off) and give back
//!   in a loop for the measurement's seconds. Calls still waiting at the end
//!   are dropped and counted as such.
//! - `crowd-once`: the crowd table: 200 waiters (8 clients × 25
//!   owners, in one process unless `--crowd-procs` says otherwise) each
//!   take once with `wait` 120 s and a zero-length section (a yield); the
//!   time until the last call ended, the rate, the most holders at once.
//!
//! Every worker logs each grant's span (from its `lock` returning to its
//! `unlock` being called) on `CLOCK_MONOTONIC`; the coordinator merges
//! them ([`history`]) for the most holders at once and any overlap the
//! kind forbids (a violation, as w2's wrong counter). A wait that timed
//! out, a call that failed, a waiter never served and a worker that died
//! are counted and shown in the row, never dropped.

pub mod history;
mod table;
pub mod wire;
pub mod worker;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc;

pub use table::{print_crowd_table, print_once_table};
use wire::{CrowdKind, Go, Ready, Waiter, mono_ns};

use crate::error::BenchError;
use crate::report::{CrowdStats, Row, Series, histogram};
use crate::workloads::{label, run_id};

/// How the crowds of a run are laid out.
#[derive(Debug, Clone)]
pub struct CrowdPlan {
    /// `crowd`: the crowd sizes.
    pub sizes: Vec<usize>,
    pub kinds: Vec<CrowdKind>,
    /// `crowd`: worker processes (one for `memory://`, which is in-process).
    pub procs: usize,
    /// `crowd`: clients per worker process.
    pub clients: usize,
    /// `crowd`: how long a holder holds.
    pub section: Duration,
    /// `crowd`: the measurement of each row.
    pub seconds: Duration,
    /// The wait bound of each `lock` call.
    pub wait: Duration,
    /// `crowd-once`: worker processes, clients in all, owners per client.
    pub once_procs: usize,
    pub once_clients: usize,
    pub once_owners: usize,
}

/// One crowd to run.
#[derive(Debug, Clone, Copy)]
struct Spec {
    kind: CrowdKind,
    waiters: usize,
    procs: usize,
    /// Per process.
    clients: usize,
    section: Duration,
    seconds: Duration,
    wait: Duration,
    once: bool,
}

/// `crowd` on `url`: a row per kind and size.
pub async fn crowd(url: &str, plan: &CrowdPlan) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    for &kind in &plan.kinds {
        for &waiters in &plan.sizes {
            let spec = Spec {
                kind,
                waiters,
                procs: plan.procs,
                clients: plan.clients,
                section: plan.section,
                seconds: plan.seconds,
                wait: plan.wait,
                once: false,
            };
            rows.push(run(url, spec).await?);
        }
    }
    Ok(rows)
}

/// `crowd-once` on `url`: a row per kind.
pub async fn crowd_once(url: &str, plan: &CrowdPlan) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    let procs = plan.once_procs.clamp(1, plan.once_clients.max(1));
    for &kind in &plan.kinds {
        let spec = Spec {
            kind,
            waiters: plan.once_clients * plan.once_owners,
            procs,
            clients: plan.once_clients.div_ceil(procs),
            section: Duration::ZERO,
            seconds: plan.wait,
            wait: plan.wait,
            once: true,
        };
        rows.push(run(url, spec).await?);
    }
    Ok(rows)
}

/// The backend's label in crowd rows: session mode marked (its kind is
/// the table's).
fn crowd_label(client: &lockkit::LockClient, url: &str) -> String {
    let session = lockkit::raw::ConnectUrl::parse(url)
        .is_ok_and(|u| u.url.query_pairs().any(|(k, v)| k == "mode" && v == "session"));
    let kind = label(client);
    if session { format!("{kind} mode=session") } else { kind }
}

/// Runs one crowd; its row. A worker that fails makes the row say so; an
/// error here means the backend could not be reached at all.
async fn run(url: &str, mut spec: Spec) -> Result<Row, BenchError> {
    let probe = lockkit::connect(url).await?;
    let backend = crowd_label(&probe, url);
    if lockkit::raw::ConnectUrl::parse(url)?.scheme == "memory" {
        // In-process: every waiter must share the one backend.
        spec.procs = 1;
    }
    spec.procs = spec.procs.clamp(1, spec.waiters.max(1));
    let mut stats = CrowdStats {
        kind: spec.kind.to_string(),
        procs: spec.procs,
        connects: spec.procs * spec.clients,
        section_us: spec.section.as_micros() as u64,
        ..CrowdStats::default()
    };
    let series = Series {
        imp: "lockkit",
        backend: &backend,
        url,
        workload: if spec.once { "crowd-once" } else { "crowd" },
        clients: spec.waiters,
    };
    if !probe.capabilities().supports(spec.kind.needs()) {
        stats.unsupported = true;
        let mut row = Row::new(series, 0.0, 0, &histogram());
        row.crowd = Some(stats);
        return Ok(row);
    }
    drop(probe);
    let name = format!("bench/crowd/{}", run_id());
    let (waiters, start, failed) = run_workers(url, &name, spec).await?;
    let m = history::merge(spec.kind, &waiters, start);
    let seconds = if spec.once {
        m.took_s
    } else {
        spec.seconds.as_secs_f64()
    };
    let mut row = Row::new(series, seconds, m.grants, &m.waits);
    if spec.kind == CrowdKind::Mutex {
        row.switches_per_s = Some(m.switches as f64 / seconds.max(1e-9));
    }
    row.fairness_min = Some(m.share_min);
    row.fairness_max = Some(m.share_max);
    if let CrowdKind::Semaphore(n) = spec.kind {
        row.permits = Some(n);
    }
    row.most_held = Some(m.most_holders);
    row.counter_exact = Some(m.violations == 0);
    let rw = spec.kind == CrowdKind::Rw;
    row.crowd = Some(CrowdStats {
        served: m.served,
        grants: m.grants,
        writers: rw.then_some(m.writers),
        writers_served: rw.then_some(m.writers_served),
        most_readers: rw.then_some(m.most_readers),
        timeouts: m.timeouts,
        errors: m.errors + m.unlock_errors,
        first_error: m.first_error,
        unfinished: m.unfinished,
        unfinished_max_us: m.unfinished_max_us,
        first_grant_p50_us: m.first_grant_p50_us,
        first_grant_max_us: m.first_grant_max_us,
        violations: m.violations,
        first_violation: m.first_violation,
        failed,
        ..stats
    });
    Ok(row)
}

/// A started worker process and its stdout's lines (read by a thread of
/// their own); killed and reaped when dropped, so no worker outlives a
/// failed run.
struct Proc {
    child: Child,
    lines: mpsc::UnboundedReceiver<std::io::Result<String>>,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Result<Proc, BenchError> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("worker without stdout")?;
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Ok(Proc { child, lines })
    }

    /// The next line, parsed, within `within`.
    async fn line<T: serde::de::DeserializeOwned>(&mut self, within: Duration) -> Result<T, BenchError> {
        match tokio::time::timeout(within, self.lines.recv()).await {
            Err(_) => Err(format!("nothing within {within:?}").into()),
            Ok(None) => Err("it exited".into()),
            Ok(Some(Err(e))) => Err(e.into()),
            Ok(Some(Ok(l))) => Ok(serde_json::from_str(&l).map_err(|e| format!("{e}: {l:.200}"))?),
        }
    }

    fn send(&mut self, text: &str) {
        if let Some(stdin) = self.child.stdin.as_mut() {
            // A worker that died already shows when its tally is read.
            let _ = stdin.write_all(text.as_bytes()).and_then(|()| stdin.flush());
        }
    }

    /// Waits up to `within` for the exit; a failure's description.
    async fn finish(&mut self, within: Duration) -> Option<String> {
        let until = tokio::time::Instant::now() + within;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return None,
                Ok(Some(status)) => return Some(format!("a worker exited with {status}")),
                Err(e) => return Some(format!("a worker could not be waited for: {e}")),
                Ok(None) if tokio::time::Instant::now() >= until => {
                    return Some(format!("a worker did not exit within {within:?}"));
                }
                Ok(None) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Starts the workers, lets them go together, and collects every waiter's
/// tally; the start (ns) and what failed. A waiter whose worker failed is
/// there without grants.
async fn run_workers(url: &str, name: &str, spec: Spec) -> Result<(Vec<Waiter>, u64, Option<String>), BenchError> {
    let exe = std::env::current_exe()?;
    let mut procs = Vec::with_capacity(spec.procs);
    for w in 0..spec.procs {
        let mut cmd = Command::new(&exe);
        cmd.arg("crowd-worker")
            .args(["--backend", url, "--name", name, "--kind", &spec.kind.to_string()])
            .args(["--worker", &w.to_string(), "--procs", &spec.procs.to_string()])
            .args([
                "--waiters",
                &spec.waiters.to_string(),
                "--clients",
                &spec.clients.to_string(),
            ])
            .args(["--section", &format!("{}us", spec.section.as_micros())])
            .args(["--wait", &format!("{}ms", spec.wait.as_millis())]);
        if spec.once {
            cmd.arg("--once");
        }
        procs.push(Proc::spawn(cmd)?);
    }
    let mut failed: Vec<String> = Vec::new();
    let mut started = vec![false; procs.len()];
    // Connecting (and a first hold on a side name) may take a while on a
    // loaded machine; it is not measured.
    let ready_by = Duration::from_secs(120);
    for (w, p) in procs.iter_mut().enumerate() {
        match p.line::<Ready>(ready_by).await {
            Ok(Ready { error: None }) => started[w] = true,
            Ok(Ready { error: Some(e) }) => failed.push(format!("worker {w} could not start: {e}")),
            Err(e) => failed.push(format!("worker {w} did not start: {e}")),
        }
    }
    let start = mono_ns() + 200_000_000;
    let go = Go {
        start,
        end: start + spec.seconds.as_nanos() as u64,
    };
    let mut text = serde_json::to_string(&go)?;
    text.push('\n');
    for p in &mut procs {
        p.send(&text);
    }
    // A measured crowd's calls end with it; a served-once crowd's at their
    // wait bound. Then the holders' last section and unlock.
    let done_by = spec.seconds.max(spec.wait) + Duration::from_secs(60);
    let mut waiters: Vec<Waiter> = Vec::with_capacity(spec.waiters);
    for (w, p) in procs.iter_mut().enumerate() {
        if !started[w] {
            continue;
        }
        match p.line::<Vec<Waiter>>(done_by).await {
            Ok(mut ws) => waiters.append(&mut ws),
            Err(e) => failed.push(format!("worker {w} reported nothing: {e}")),
        }
    }
    for p in &mut procs {
        failed.extend(p.finish(Duration::from_secs(10)).await);
    }
    drop(procs);
    // Waiters of failed workers: there, never served.
    let mut seen = vec![false; spec.waiters];
    for w in &waiters {
        if let Some(s) = seen.get_mut(w.id) {
            *s = true;
        }
    }
    for (id, _) in seen.iter().enumerate().filter(|(_, s)| !**s) {
        waiters.push(Waiter {
            id,
            write: spec.kind == CrowdKind::Rw && wire::is_writer(id),
            ..Waiter::default()
        });
    }
    let failed = (!failed.is_empty()).then(|| failed.join("; "));
    Ok((waiters, start, failed))
}
