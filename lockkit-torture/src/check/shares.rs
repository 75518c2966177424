//! The checker's rules about shares of a hold (see [`crate::check`]):
//!
//! - **shares**: each grant is one share of its owner's hold on the server.
//!   A share is gone once its `unlock` returned; a share whose holder was
//!   killed, lost it, or failed to unlock may stand until its lease ends —
//!   and while another process of the same owner keeps the owner's hold
//!   alive (`--shared-owners`), until that one's end plus the lease.
//! - **tokens** strictly increase over distinct holds; a grant while a share
//!   of the same owner may stand is either a re-entry (the standing
//!   share's token) or a new hold (a greater token).
//! - **counts balance**: a grant reports at most 1 + the owner's shares
//!   that may stand; an `unlock` leaves at most the owner's other shares
//!   that may stand.
//! - **inspections** after the run: a name is free once every holder
//!   released it; a name whose last holders did not release cleanly is free
//!   one lease bound later.

use std::collections::HashMap;

use super::checker::{Hold, ProcInfo};
use super::report::Report;
use crate::log::Event;

/// The holds of one name, for the checks of it.
#[derive(Clone, Copy)]
pub(crate) struct NameHolds<'a> {
    pub(crate) name: &'a str,
    /// Indexes into `holds` of the name's holds.
    pub(crate) ids: &'a [usize],
    pub(crate) holds: &'a [Hold],
    /// A hold as a violation names it.
    pub(crate) describe: &'a dyn Fn(&Hold) -> String,
}

/// When a hold's share certainly left the server, if its holder said so:
/// its `unlock` returned (or, for a release line without an outcome, the
/// task wrote its next line, which it does only after `unlock` returned
/// `NotHeld`). An unlock that left holds the checker cannot account for
/// is reported (see [`check_counts`]) and then taken at its word: the
/// owner's hold stands on, as after a failed unlock, so one lost count is
/// one violation, not one per later re-entry.
fn clean_end(h: &Hold) -> Option<u64> {
    if h.unlock_failed {
        return None;
    }
    if let Some((t, remaining)) = h.unlocked {
        return (remaining == 0).then_some(t);
    }
    match h.release {
        Some((_, false)) => h.next_t,
        _ => None,
    }
}

/// Sets every hold's [`Hold::share_end`]: its clean end, or for a share
/// left behind, the end of its region (the same owner's overlapping shares
/// of the name) plus `bound` (the lease bound and slack).
pub(crate) fn share_ends(holds: &mut [Hold], info: &[ProcInfo], bound: u64) {
    let mut order: Vec<usize> = (0..holds.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&holds[a], &holds[b]);
        (&x.name, &x.owner, x.grant_t).cmp(&(&y.name, &y.owner, y.grant_t))
    });
    let mut region: Vec<usize> = Vec::new();
    let (mut end, mut unclean) = (0u64, false);
    let close = |holds: &mut [Hold], region: &mut Vec<usize>, end: u64| {
        for h in region.drain(..) {
            holds[h].share_end = clean_end(&holds[h]).unwrap_or(end);
        }
    };
    for i in order {
        let joins = region.first().is_some_and(|&r| {
            let (a, b) = (&holds[r], &holds[i]);
            a.name == b.name && a.owner == b.owner && b.grant_t < end
        });
        if !joins {
            close(holds, &mut region, end);
            (end, unclean) = (0, false);
        }
        match clean_end(&holds[i]) {
            Some(e) => end = end.max(if unclean { e.saturating_add(bound) } else { e }),
            None => {
                unclean = true;
                let h = &holds[i];
                let last = h
                    .unlocked
                    .map(|(t, _)| t)
                    .or(h.release.map(|(t, _)| t))
                    .unwrap_or(info[h.proc].end);
                end = end.max(last.saturating_add(bound));
            }
        }
        region.push(i);
    }
    close(holds, &mut region, end);
}

/// The holds of one owner of one name, in the order their `lock` calls
/// began, with the longest time any of them may stand (for a window
/// search).
struct OwnerHolds {
    ids: Vec<usize>,
    span: u64,
}

fn by_owner<'h>(ids: &[usize], holds: &'h [Hold]) -> HashMap<&'h str, OwnerHolds> {
    let mut map: HashMap<&str, OwnerHolds> = HashMap::new();
    for &h in ids {
        let o = map.entry(holds[h].owner.as_str()).or_insert(OwnerHolds {
            ids: Vec::new(),
            span: 0,
        });
        o.ids.push(h);
        o.span = o.span.max(holds[h].share_end.saturating_sub(holds[h].want_t));
    }
    for o in map.values_mut() {
        o.ids.sort_by_key(|&h| holds[h].want_t);
    }
    map
}

/// The owner's shares other than `except` that may have stood at some
/// moment in `(lo, hi)`, the span in which the server acted on a call
/// (between the log lines before and after it). A share may stand from the
/// start of its `lock` call (the server may have granted it before the
/// process logged it — another process of the owner can log its re-entry
/// first) to its share end.
fn standing<'a>(
    o: &'a OwnerHolds,
    holds: &'a [Hold],
    except: usize,
    lo: u64,
    hi: u64,
) -> impl Iterator<Item = usize> + 'a {
    let from = o.ids.partition_point(|&h| holds[h].want_t < lo.saturating_sub(o.span));
    o.ids[from..]
        .iter()
        .take_while(move |&&h| holds[h].want_t < hi)
        .filter(move |&&h| h != except && lo < holds[h].share_end)
        .copied()
}

/// Tokens in grant order over the holds that were valid at all: each hold
/// has a token above every earlier one (a new hold), or is a re-entry: the
/// token of a share of its owner that may have stood while this hold's
/// `lock` call was under way (that share may be logged later, or may be
/// the hold this call made before its reply was lost), and no older than
/// any other owner's hold granted before (no other owner held the name in
/// between).
pub(crate) fn check_tokens(on: &NameHolds<'_>, report: &mut Report) {
    let NameHolds {
        name,
        ids,
        holds,
        describe,
    } = *on;
    let owners = by_owner(ids, holds);
    let mut valid: Vec<usize> = ids
        .iter()
        .copied()
        .filter(|&h| !holds[h].intervals.is_empty())
        .collect();
    valid.sort_by_key(|&h| holds[h].grant_t);
    let mut max: Option<usize> = None;
    // The greatest token each owner was granted so far.
    let mut by_owner_max: HashMap<&str, u64> = HashMap::new();
    for b in valid {
        let hb = &holds[b];
        let fresh = max.is_none_or(|m| hb.token > holds[m].token);
        if !fresh {
            let others_max = by_owner_max
                .iter()
                .filter(|(o, _)| **o != hb.owner)
                .map(|(_, t)| *t)
                .max()
                .unwrap_or(0);
            let o = &owners[hb.owner.as_str()];
            // (A pending call's share has a token the log does not know.)
            let reentered =
                standing(o, holds, b, hb.want_t, hb.grant_t).find(|&a| holds[a].token == hb.token || holds[a].pending);
            match reentered {
                Some(a) if hb.token >= others_max => {
                    if holds[a].proc != hb.proc {
                        report.shared_reentries += 1;
                    }
                }
                _ => {
                    let m = max.expect("not fresh: a hold before");
                    report.violations.push(format!(
                        "token order on {name}: {} then {}",
                        describe(&holds[m]),
                        describe(hb)
                    ));
                }
            }
        }
        let e = by_owner_max.entry(hb.owner.as_str()).or_insert(0);
        *e = (*e).max(hb.token);
        if fresh {
            max = Some(b);
        }
    }
}

/// Hold counts balance: a grant's count is at most one more than the
/// owner's shares that may stand, and an unlock leaves at most the owner's
/// other shares that may stand (in a run without shared owners: a grant
/// has count 1 and an unlock leaves 0, unless an unclean share of the same
/// task may still stand).
pub(crate) fn check_counts(on: &NameHolds<'_>, report: &mut Report) {
    let (name, holds, describe) = (on.name, on.holds, on.describe);
    let owners = by_owner(on.ids, holds);
    for o in owners.values() {
        for &b in &o.ids {
            let hb = &holds[b];
            if let Some(count) = hb.count {
                let most = 1 + standing(o, holds, b, hb.want_t, hb.grant_t).count();
                if count as usize > most {
                    report.violations.push(format!(
                        "hold count on {name}: granted with count {count}, at most {most} possible (the owner's shares that may stand, and this one): {}",
                        describe(hb)
                    ));
                }
            }
            if let Some((t, remaining)) = hb.unlocked {
                report.unlocks += 1;
                let released = hb.release.map_or(t, |(r, _)| r);
                let most = standing(o, holds, b, released, t).count();
                if remaining as usize > most {
                    report.violations.push(format!(
                        "unbalanced unlock on {name}: {remaining} holds left after the unlock at {:.3} ms past the grant, at most {most} other shares of the owner may stand: {}",
                        (t.saturating_sub(hb.grant_t)) as f64 / 1e6,
                        describe(hb)
                    ));
                }
            }
        }
    }
}

/// The inspections after the run: at the first round a held name's holder
/// must have a share of it that may still stand (a holder killed or lost,
/// its unlock failed, its call cancelled by the end); at the second, one
/// lease bound later, every name must be free.
pub(crate) fn check_inspections(
    events: &[Event],
    by_name: &HashMap<&str, Vec<usize>>,
    holds: &[Hold],
    bound: u64,
    secs: &dyn Fn(u64) -> f64,
    report: &mut Report,
) {
    for e in events {
        let Event::Inspect {
            t,
            round,
            name,
            holder,
            error,
        } = e
        else {
            continue;
        };
        report.inspected += 1;
        if let Some(error) = error {
            report
                .violations
                .push(format!("inspection of {name} failed at {:.3}s: {error}", secs(*t)));
            continue;
        }
        let Some(holder) = holder else { continue };
        let what = format!("owner {} count {} token {}", holder.owner, holder.count, holder.token);
        if *round == 0 {
            let ids = by_name.get(name.as_str()).map_or(&[][..], Vec::as_slice);
            if ids
                .iter()
                .any(|&h| holds[h].owner == holder.owner && holds[h].want_t < *t && *t < holds[h].share_end)
            {
                report.leftovers_excused += 1;
                continue;
            }
            report.violations.push(format!(
                "leftover hold on {name} at {:.3}s, after every holder released it: {what}",
                secs(*t)
            ));
        } else {
            report.violations.push(format!(
                "leftover hold on {name} at {:.3}s, {:.3}s (the lease bound and slack) after the first inspection: {what}",
                secs(*t),
                bound as f64 / 1e9
            ));
        }
    }
}

/// When a killed share of `h`'s owner can start running out: the kill, or
/// later while other processes of the same owner held the name (each
/// re-entering within `bound` of the previous end keeps the hold alive).
pub(crate) fn co_owner_end(holds: &[Hold], h: &Hold, killed: u64, bound: u64) -> u64 {
    let mut others: Vec<&Hold> = holds
        .iter()
        .filter(|o| !o.pending && o.proc != h.proc && o.name == h.name && o.owner == h.owner)
        .collect();
    others.sort_by_key(|o| o.grant_t);
    let mut end = killed;
    for o in others {
        if o.grant_t > end.saturating_add(bound) {
            break;
        }
        let last = o
            .unlocked
            .map(|(t, _)| t)
            .or(o.release.map(|(t, _)| t))
            .unwrap_or(o.share_end);
        end = end.max(last);
    }
    end
}
