//! The worker processes: their slots, the log each one writes (followed as
//! it grows), starting them, and restarting the ones that ended.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::args::RunArgs;
use super::rng::SplitMix;
use crate::log::{Event, LineWriter, Record, mono_ns};

/// Follows a worker's log as it grows: which of its owners hold a lock now,
/// and how many grants it logged.
#[derive(Debug, Default)]
pub(super) struct Tail {
    offset: u64,
    partial: Vec<u8>,
    pub(super) holding: HashMap<String, String>,
    pub(super) grants: usize,
}

impl Tail {
    pub(super) fn refresh(&mut self, path: &Path) {
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
pub(super) struct Slot {
    pub(super) worker: usize,
    pub(super) incarnation: u32,
    pub(super) child: Option<Child>,
    pub(super) pid: u32,
    pub(super) paused_until: Option<u64>,
    pub(super) respawn_at: Option<u64>,
    pub(super) tail: Tail,
}

/// Everything the coordinator started; dropping it kills and reaps what
/// still runs (so a panicking coordinator leaves no orphans either).
pub(super) struct Fleet {
    pub(super) slots: Vec<Slot>,
    pub(super) events: LineWriter,
}

impl Fleet {
    /// Resumes the worker of slot `i` if it is paused (SIGCONT), and logs it.
    pub(super) fn resume(&mut self, i: usize) {
        let s = &mut self.slots[i];
        if s.paused_until.take().is_some() {
            signal(s.pid, libc::SIGCONT);
            let e = Event::Resume {
                t: mono_ns(),
                worker: s.worker,
                incarnation: s.incarnation,
                pid: s.pid,
            };
            self.event(e);
        }
    }

    pub(super) fn event(&mut self, e: Event) {
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

pub(super) fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child we started and have not reaped yet.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

pub(super) fn log_path(dir: &Path, worker: usize, incarnation: u32) -> PathBuf {
    dir.join(format!("w{worker}-{incarnation}.jsonl"))
}

/// What starting a worker process takes, the same for every one.
#[derive(Clone, Copy)]
pub(super) struct Launch<'a> {
    pub(super) args: &'a RunArgs,
    pub(super) exe: &'a Path,
    pub(super) worker_url: &'a str,
    pub(super) prefix: &'a str,
    pub(super) wait: Duration,
    pub(super) stop_at: u64,
    pub(super) stop_file: &'a Path,
    pub(super) owner_run: &'a str,
}

impl Launch<'_> {
    /// Starts incarnation `incarnation` of worker `worker` (and logs it).
    pub(super) fn spawn(
        &self,
        fleet: &mut Fleet,
        worker: usize,
        incarnation: u32,
        rng: &mut SplitMix,
    ) -> Result<Slot, String> {
        let Launch {
            args,
            exe,
            worker_url,
            prefix,
            wait,
            stop_at,
            stop_file,
            owner_run,
        } = *self;
        let log = log_path(&args.log_dir, worker, incarnation);
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(args.log_dir.join(format!("w{worker}-{incarnation}.out")))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe);
        cmd.arg("worker")
            .args(["--backend", worker_url])
            .args(["--worker", &worker.to_string()])
            .args(["--incarnation", &incarnation.to_string()])
            .args(["--tasks", &args.tasks.to_string()])
            .args(["--names", &args.names.to_string()])
            .args(["--prefix", prefix])
            .args(["--ttl", &humantime::format_duration(args.ttl).to_string()])
            .args(["--wait", &humantime::format_duration(wait).to_string()])
            .args(["--stop-at", &stop_at.to_string()])
            .args(["--seed", &rng.next_u64().to_string()])
            .args(["--kind", &args.kind.to_string()])
            .arg("--log")
            .arg(&log)
            .arg("--stop-file")
            .arg(stop_file);
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
    }
}

/// Children that exited on their own, resumes, respawns.
pub(super) fn tend(
    fleet: &mut Fleet,
    launch: &Launch,
    rng: &mut SplitMix,
    now: u64,
    end: u64,
    past_grants: &mut usize,
) -> Result<(), String> {
    let args = launch.args;
    for i in 0..fleet.slots.len() {
        let s = &mut fleet.slots[i];
        if s.paused_until.is_some_and(|u| now >= u) {
            fleet.resume(i);
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
                *past_grants += old.tail.grants;
                fleet.slots[i] = launch.spawn(fleet, w, inc, rng)?;
            } else {
                fleet.slots[i].respawn_at = None;
            }
        }
    }
    Ok(())
}
