//! After the run: the names inspected through the backend, and the
//! checker run over a log directory.

use std::path::Path;
use std::time::Duration;

use crate::check::{self, ProcLog, Report};
use crate::faults::Faults;
use crate::kind::{HoldKind, RunKind};
use crate::log::{Event, Holder, mono_ns, read_lines};

/// What holds `name` as `kind` (a semaphore's or read-write lock's first
/// holder), if anything.
async fn holder(client: &lockkit::LockClient, name: &str, kind: RunKind) -> Result<Option<Holder>, lockkit::LockError> {
    let kinds: &[HoldKind] = match kind {
        RunKind::Mutex | RunKind::Election => &[HoldKind::Mutex],
        RunKind::Semaphore(n) => &[HoldKind::Permit(n)],
        RunKind::Rw { .. } => &[HoldKind::Write, HoldKind::Read],
    };
    for k in kinds {
        let held = client.backend().holders(name, k.lock_kind()).await?;
        if let Some(i) = held.into_iter().next() {
            return Ok(Some(Holder {
                owner: i.owner,
                count: i.hold_count,
                token: i.token,
            }));
        }
    }
    Ok(None)
}

/// Inspects `names` (taken as `kind`) through the backend (directly, not
/// through a proxy): at once, then the held ones again after `bound`.
pub(super) fn inspect(
    backend: &str,
    kind: RunKind,
    names: &[String],
    bound: Duration,
    faults: Option<&Faults>,
    event: &mut dyn FnMut(Event),
) {
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
                    Some(c) => match holder(c, name, kind).await {
                        Ok(holder) => (holder, None),
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
