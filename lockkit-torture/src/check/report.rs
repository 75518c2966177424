//! What the checker counted and found: the report of a run.

/// What the checker counted and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub grants: usize,
    /// Grants that were valid for some time.
    pub holds: usize,
    /// Grants logged after their own deadline (never held).
    pub never_held: usize,
    /// Holds ended by the lost signal.
    pub lost: usize,
    pub kills: usize,
    pub pauses: usize,
    pub server_restarts: usize,
    pub worker_restarts: usize,
    /// Killed holds whose name came free in time.
    pub frees_in_time: usize,
    /// Killed holds not judged: a server restart overlapped the window.
    pub frees_excused: usize,
    /// Killed holds not judged: nobody eligible waited for the name.
    pub frees_unchecked: usize,
    /// Network and node faults, by kind (see [`crate::log::FAULT_KINDS`]).
    pub faults: std::collections::BTreeMap<String, usize>,
    /// Grants that re-entered a hold of the same owner held by another
    /// process (`--shared-owners`).
    pub shared_reentries: usize,
    /// Unlocks that returned (their remaining hold counts were checked).
    pub unlocks: usize,
    /// Names inspected after the run (each once per round).
    pub inspected: usize,
    /// Names found still held at the first inspection, excused because a
    /// holder was killed or lost or its unlock failed (they must be free at
    /// the second).
    pub leftovers_excused: usize,
    /// `lock` calls that ran out of their wait bound (not a violation: a
    /// crowd on a slow kind shows here).
    pub timeouts: usize,
    /// `lock` calls that failed otherwise (faults, a backend's errors).
    pub failed_calls: usize,
    pub violations: Vec<String>,
}

impl Report {
    /// The one-line summary.
    pub fn summary(&self) -> String {
        let faults: String = crate::log::FAULT_KINDS
            .iter()
            .map(|k| format!("{k}={} ", self.faults.get(*k).copied().unwrap_or(0)))
            .collect();
        format!(
            "grants={} holds={} never_held={} lost={} kills={} pauses={} server_restarts={} worker_restarts={} \
             frees_in_time={} frees_excused={} frees_unchecked={} {faults}shared_reentries={} unlocks={} \
             inspected={} leftovers_excused={} timeouts={} failed_calls={} violations={}",
            self.grants,
            self.holds,
            self.never_held,
            self.lost,
            self.kills,
            self.pauses,
            self.server_restarts,
            self.worker_restarts,
            self.frees_in_time,
            self.frees_excused,
            self.frees_unchecked,
            self.shared_reentries,
            self.unlocks,
            self.inspected,
            self.leftovers_excused,
            self.timeouts,
            self.failed_calls,
            self.violations.len()
        )
    }
}
