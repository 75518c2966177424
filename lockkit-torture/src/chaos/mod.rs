//! The coordinator: starts the worker processes, runs the seeded chaos
//! schedule (SIGKILL holders, SIGSTOP them past their lease and SIGCONT
//! them, run the server restart command, restart killed workers), then
//! stops everything, reaps every child and runs the checker.

pub(crate) mod args;
mod fleet;
mod inspect;
pub(crate) mod rng;

use std::fs::OpenOptions;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use args::RunArgs;
pub use inspect::check_dir;
pub use rng::SplitMix;

use crate::check::Report;
use crate::faults::Faults;
use crate::log::{Event, LineWriter, mono_ns, nanos};
use args::bounds;
use fleet::{Fleet, Launch, log_path, signal, tend};
use inspect::inspect;

/// Runs the torture; the checker's report.
pub fn run(args: &RunArgs) -> Result<Report, String> {
    let args = &args.resolved();
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
    let wait = args.wait(bound);
    eprintln!(
        "torture: seed {seed} backend {} kind {}{} procs {} tasks {} names {} for {:?}, ttl {:?}, bound {:?} + slack {:?}, logs in {}",
        args.backend,
        args.kind,
        if args.crowd { " (crowd)" } else { "" },
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
            lockkit::raw::redact(&worker_url)
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

    let launch = Launch {
        args,
        exe: &exe,
        worker_url: &worker_url,
        prefix: &prefix,
        wait,
        stop_at,
        stop_file: &stop_file,
        owner_run: &owner_run,
    };

    for w in 0..args.procs {
        let slot = launch.spawn(&mut fleet, w, 0, &mut rng)?;
        fleet.slots.push(slot);
    }

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
        tend(&mut fleet, &launch, &mut rng, now, end, &mut past_grants)?;
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
            next_chaos = kill_or_pause(&mut fleet, &mut rng, &mut actions, now, args, bound);
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

    wind_down(&mut fleet, &mut faults, restart, args, &stop_file, bound, &prefix)?;
    drop(faults);
    drop(fleet);
    check_dir(&args.log_dir)
}

/// A random gap around `mean` (half to one and a half of it).
fn gap(rng: &mut SplitMix, mean: Duration) -> u64 {
    nanos(mean.mul_f64(0.5 + rng.unit()))
}

/// Kills or pauses a random holder (in a crowd, any live worker when none
/// holds), unless too few workers are up or none holds; when to try next.
fn kill_or_pause(
    fleet: &mut Fleet,
    rng: &mut SplitMix,
    actions: &mut u32,
    now: u64,
    args: &RunArgs,
    bound: Duration,
) -> u64 {
    let next_chaos;
    let down = fleet
        .slots
        .iter()
        .filter(|s| s.child.is_none() || s.paused_until.is_some())
        .count();
    let (mut holders, mut live) = (Vec::new(), Vec::new());
    for (i, s) in fleet.slots.iter_mut().enumerate() {
        if s.child.is_some() && s.paused_until.is_none() {
            s.tail.refresh(&log_path(&args.log_dir, s.worker, s.incarnation));
            live.push(i);
            if !s.tail.holding.is_empty() {
                holders.push(i);
            }
        }
    }
    // In a crowd every process has tasks in line: with no holder to hit,
    // killing or pausing waiters leaves dead or stalled places in the line,
    // which the others must get past.
    if args.crowd && holders.is_empty() {
        holders = live;
    }
    if down + 1 >= args.procs || holders.is_empty() {
        next_chaos = now + 100_000_000;
    } else {
        let i = holders[rng.below(holders.len() as u64) as usize];
        // The first two actions are a kill and a pause (so even a short run
        // has both), then either at random.
        let kill = match *actions {
            0 => true,
            1 => false,
            _ => rng.below(2) == 0,
        };
        *actions += 1;
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
        next_chaos = now + gap(rng, args.chaos_every);
    }
    next_chaos
}

/// The end: stop the workers, heal the faults, resume the paused, let the
/// restart finish, let workers stop, reap all.
fn wind_down(
    fleet: &mut Fleet,
    faults: &mut Option<Faults>,
    mut restart: Option<Child>,
    args: &RunArgs,
    stop_file: &Path,
    bound: Duration,
    prefix: &str,
) -> Result<(), String> {
    std::fs::write(stop_file, mono_ns().to_string()).map_err(|e| format!("{}: {e}", stop_file.display()))?;
    fleet.event(Event::End { t: mono_ns() });
    if let Some(f) = faults.as_mut() {
        f.finish(&mut |e| fleet.event(e));
    }
    for i in 0..fleet.slots.len() {
        fleet.resume(i);
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
    inspect(
        &args.backend,
        args.kind,
        &names,
        bound + args.slack,
        faults.as_ref(),
        &mut |e| fleet.event(e),
    );
    Ok(())
}
