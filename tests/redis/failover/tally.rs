//! What one measured configuration gave: double grants from the holds'
//! record, fencing from the store's log, the failovers' durations.

use std::time::Duration;

use lockkit::LostReason;

use super::load::{End, Hold};
use super::store::Fencing;

/// Two holds of one name by different owners that overlap by their
/// holders' own clock: the later one was granted (its `lock` returned)
/// before the earlier one's holder stopped acting on it (saw the lost
/// signal or called `unlock`). A hand-off never counts: the earlier holder
/// calls `unlock` before its release reaches the server, and the later
/// `lock` returns after the server granted.
pub fn double_grants(holds: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut sorted = holds.to_vec();
    sorted.sort_by_key(|h| (h.name, h.granted));
    let mut pairs = Vec::new();
    for (i, a) in sorted.iter().enumerate() {
        for b in &sorted[i + 1..] {
            if b.name != a.name || b.granted >= a.ended {
                break;
            }
            if b.owner != a.owner {
                pairs.push((*a, *b));
            }
        }
    }
    pairs
}

fn gone_in_lease(h: &Hold) -> bool {
    let answered = match h.end {
        End::NotHeld => h.unlocked,
        End::Lost(LostReason::NotHeld) => h.ended,
        _ => return false,
    };
    h.valid_until.is_some_and(|until| answered < until)
}

fn leftover_reentries(holds: &[Hold]) -> u64 {
    let mut seen = std::collections::HashSet::new();
    holds
        .iter()
        .filter(|h| !seen.insert((h.name, h.owner, h.token)))
        .count() as u64
}

fn describe((a, b): &(Hold, Hold)) -> String {
    format!(
        "name {}: hold {} (owner {}, token {}, ended {:?}) overlapped by hold {} (owner {}, token {}, after failover {}) for {:?}",
        a.name,
        a.id,
        a.owner,
        a.token,
        a.end,
        b.id,
        b.owner,
        b.token,
        b.epoch,
        a.ended - b.granted
    )
}

#[derive(Debug, Default)]
pub struct Tally {
    pub failovers: usize,
    pub grants: u64,
    /// Holds whose holder learned the server no longer had them (`unlock`
    /// said not held, or an extension did).
    pub holds_gone: u64,
    /// Of those, the holds the server had let go while their lease still
    /// ran by the holder's clock: the "not held" answer came before the
    /// lease's end (the failover lost them; the rest ran out of lease
    /// while the servers were away).
    pub holds_gone_in_lease: u64,
    /// Holds whose lost signal fired at the validity deadline.
    pub holds_expired: u64,
    /// Holds whose `unlock` failed (the master was down).
    pub unlocks_failed: u64,
    /// Grants that were a re-entry into an earlier hold of the same owner
    /// (same token) whose `unlock` had failed: the server still had it.
    pub leftover_reentries: u64,
    pub double_grants: u64,
    /// Double grants where the later hold has the greater token, so the
    /// store takes the later holder's writes (all, while the server clocks
    /// that draw tokens agree).
    pub double_grants_tokens_ordered: u64,
    /// The longest overlap of a double grant.
    pub longest_overlap: Duration,
    /// A few double grants, described.
    pub examples: Vec<String>,
    /// Double grants whose later grant came before the first failover.
    pub double_grants_without_failover: u64,
    /// Failovers after which at least one double grant began.
    pub failovers_with_double_grant: usize,
    pub fencing: Fencing,
    pub lock_errors: u64,
    /// From each kill to the replica serving as master.
    pub outages: Vec<Duration>,
}

impl Tally {
    pub fn of(holds: &[Hold], fencing: Fencing, outages: Vec<Duration>, lock_errors: u64) -> Tally {
        let pairs = double_grants(holds);
        let mut epochs: Vec<usize> = pairs.iter().map(|(_, b)| b.epoch).filter(|e| *e > 0).collect();
        epochs.sort_unstable();
        epochs.dedup();
        Tally {
            failovers: outages.len(),
            grants: holds.len() as u64,
            holds_gone: holds
                .iter()
                .filter(|h| matches!(h.end, End::NotHeld | End::Lost(LostReason::NotHeld)))
                .count() as u64,
            holds_gone_in_lease: holds.iter().filter(|h| gone_in_lease(h)).count() as u64,
            holds_expired: holds.iter().filter(|h| h.end == End::Lost(LostReason::Expired)).count() as u64,
            unlocks_failed: holds.iter().filter(|h| h.end == End::Failed).count() as u64,
            leftover_reentries: leftover_reentries(holds),
            double_grants: pairs.len() as u64,
            double_grants_tokens_ordered: pairs.iter().filter(|(a, b)| b.token > a.token).count() as u64,
            longest_overlap: pairs.iter().map(|(a, b)| a.ended - b.granted).max().unwrap_or_default(),
            examples: pairs.iter().take(5).map(describe).collect(),
            double_grants_without_failover: pairs.iter().filter(|(_, b)| b.epoch == 0).count() as u64,
            failovers_with_double_grant: epochs.len(),
            fencing,
            lock_errors,
            outages,
        }
    }

    /// One line for the run's output (docs/failover.md reads these).
    pub fn line(&self, config: &str) -> String {
        let per_100 = |n: u64| n as f64 * 100.0 / self.failovers.max(1) as f64;
        let mean = self.outages.iter().sum::<Duration>() / self.outages.len().max(1) as u32;
        let max = self.outages.iter().max().copied().unwrap_or_default();
        let f = &self.fencing;
        format!(
            "failover {config}: failovers={} grants={} double_grants={} ({:.1} per 100 failovers; \
             {} failovers had one; later token higher in {}; longest {:?}) holds_gone={} holds_gone_in_lease={} holds_expired={} unlocks_failed={} leftover_reentries={} writes={} stale={} stale_stopped={} \
             fresh_refused={} out_of_order={} lock_errors={} outage_mean={:?} outage_max={:?}",
            self.failovers,
            self.grants,
            self.double_grants,
            per_100(self.double_grants),
            self.failovers_with_double_grant,
            self.double_grants_tokens_ordered,
            self.longest_overlap,
            self.holds_gone,
            self.holds_gone_in_lease,
            self.holds_expired,
            self.unlocks_failed,
            self.leftover_reentries,
            f.writes,
            f.stale,
            f.stale_stopped,
            f.fresh_refused,
            f.out_of_order,
            self.lock_errors,
            mean,
            max,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn hold(id: u64, owner: usize, from_ms: u64, to_ms: u64, base: Instant) -> Hold {
        Hold {
            id,
            name: 0,
            owner,
            token: id,
            granted: base + Duration::from_millis(from_ms),
            ended: base + Duration::from_millis(to_ms),
            end: End::Released,
            valid_until: None,
            unlocked: base + Duration::from_millis(to_ms),
            epoch: 1,
        }
    }

    #[test]
    fn a_double_grant_is_an_overlap_of_two_owners() {
        let base = Instant::now();
        let holds = [
            hold(1, 0, 0, 100, base),
            // A hand-off: granted after the holder stopped.
            hold(2, 1, 100, 200, base),
            // The same owner inside its own hold (a re-entry): not counted.
            hold(3, 1, 150, 160, base),
            // Another owner inside hold 2: counted once.
            hold(4, 2, 190, 300, base),
        ];
        let pairs = double_grants(&holds);
        let ids: Vec<(u64, u64)> = pairs.iter().map(|(a, b)| (a.id, b.id)).collect();
        assert_eq!(ids, [(2, 4)]);
        let t = Tally::of(&holds, Fencing::default(), vec![Duration::from_secs(1)], 0);
        assert_eq!((t.double_grants, t.failovers_with_double_grant), (1, 1));
        assert_eq!(t.longest_overlap, Duration::from_millis(10));
    }
}
