//! Result rows: the stdout table and the JSON lines.

use std::io::Write;

use hdrhistogram::Histogram;
use serde::Serialize;

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `lockkit`, `floor` or a peer library's crate name.
    #[serde(rename = "impl")]
    pub imp: &'static str,
    /// How the implementation waits, where it does not wait for a release
    /// (a peer that polls, or cannot wait and is retried).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<&'static str>,
    /// The backend kind (`redis`, `mysql`, …).
    pub backend: String,
    /// The backend URL, password hidden (pairs a lockkit row with its floor).
    pub url: String,
    /// `w1` … `w4`.
    pub workload: &'static str,
    /// Concurrent clients.
    pub clients: usize,
    /// Measured seconds.
    pub seconds: f64,
    /// Operations (cycles, acquisitions) per second.
    pub ops_per_s: f64,
    /// Latency (w1, w3) or acquire wait (w2) percentiles, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Worst, microseconds.
    pub max_us: f64,
    /// Client CPU per operation, µs: the user + system time of the whole
    /// bench process (`getrusage(RUSAGE_SELF)`) over exactly the measured
    /// intervals of this row, divided by its operations (w4: its round
    /// trips). The whole process is intended: every thread, so background
    /// tasks (lease renewals, a client library's connection tasks) count,
    /// and so does an in-process database's work (SQLite). No other
    /// implementation runs in those intervals (w1 and w3 alternate them in
    /// slices, w2 measures one after the other). Not on crowd rows (their
    /// waiters run in worker processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu_us_per_op: Option<f64>,
    /// Server time per operation on Redis and Redlock, µs: the CPU time
    /// the servers' main threads used over the same intervals (`INFO cpu`,
    /// summed over the nodes; see `cost::RedisStats`), divided by the same
    /// operations. Other clients' work in those intervals counts too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_us_per_op: Option<f64>,
    /// Floor w1: one round trip (a ping), p50 microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_trip_us: Option<f64>,
    /// w2: from a holder's `unlock` call to the next holder's `lock`
    /// returning, p50 microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff_p50_us: Option<f64>,
    /// w2: hand-off p99, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff_p99_us: Option<f64>,
    /// w2: acquisitions by a different client than the previous holder, per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switches_per_s: Option<f64>,
    /// w2: fewest acquisitions of one client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairness_min: Option<u64>,
    /// w2: most acquisitions of one client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairness_max: Option<u64>,
    /// w2: clients still waiting in `lock` a minute after the measurement
    /// ended, given up (a peer that never got the name again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck: Option<usize>,
    /// w2: the shared counter equalled the acquisitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counter_exact: Option<bool>,
    /// w4: backend round trips per renewal period (ttl/3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_trips_per_period: Option<f64>,
    /// w4: commands the server executed per renewal period, where it
    /// counts them (Redis).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_commands_per_period: Option<f64>,
    /// w4: resident memory of the process holding the locks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// w4: locks held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<usize>,
    /// w5: the semaphore's permits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// w5: the most permits held at once (never above `permits`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub most_held: Option<usize>,
    /// w6: the writes' wait, p50 microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_p50_us: Option<f64>,
    /// w6: the writes' wait, p99 microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_p99_us: Option<f64>,
    /// `crowd`, `crowd-once`: what the crowd did beside the common fields
    /// (there `clients` is the number of waiters, `ops_per_s` grants per
    /// second, the latencies the waits of the grants, `fairness_min`/`max`
    /// the fewest and most grants of one waiter, `switches_per_s` the
    /// mutex's hand-offs, `permits` a semaphore's N, `most_held` the most
    /// holders at once, `counter_exact` no forbidden overlap).
    #[serde(flatten)]
    pub crowd: Option<CrowdStats>,
    /// The latency distribution (for charts), microseconds → count.
    #[serde(skip)]
    pub distribution: Vec<(u64, u64)>,
}

/// What a crowd row adds (see `crate::crowd`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CrowdStats {
    /// `mutex`, `semaphore:N` or `rw`.
    pub kind: String,
    /// Worker processes the waiters were spread over.
    pub procs: usize,
    /// Clients (`lockkit::connect`) over all processes; each waiter is an
    /// owner of its own on one of them.
    pub connects: usize,
    /// How long each holder kept its hold, µs (0: a yield).
    pub section_us: u64,
    /// The backend has no such kind: nothing ran.
    pub unsupported: bool,
    /// Waiters with at least one grant.
    pub served: usize,
    /// Grants in all.
    pub grants: u64,
    /// Read-write crowds: writers, and writers served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writers_served: Option<usize>,
    /// Read-write crowds: the most readers at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub most_readers: Option<usize>,
    /// `lock` calls that timed out.
    pub timeouts: u64,
    /// `lock` calls that failed otherwise, and `unlock` calls that failed.
    pub errors: u64,
    /// The first failure, with its sources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Calls still waiting when a measured crowd ended, and the longest of
    /// their waits, µs.
    pub unfinished: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unfinished_max_us: Option<u64>,
    /// From the start to each waiter's first grant, µs: p50 and the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_grant_p50_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_grant_max_us: Option<u64>,
    /// Holds the kind forbids together, or exclusive tokens out of order.
    pub violations: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_violation: Option<String>,
    /// A worker process that failed (the row is incomplete).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// What a row measured: which implementation, backend and workload.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    /// `lockkit`, `floor` or a peer library's crate name.
    pub imp: &'static str,
    /// The backend kind.
    pub backend: &'a str,
    /// The backend URL (redacted in the row).
    pub url: &'a str,
    /// `w1` … `w4`.
    pub workload: &'static str,
    /// Concurrent clients.
    pub clients: usize,
}

impl Row {
    /// A row of `series` with `ops` operations in `seconds` and the latency
    /// fields taken from `hist` (microseconds).
    pub fn new(series: Series<'_>, seconds: f64, ops: u64, hist: &Histogram<u64>) -> Self {
        let Series {
            imp,
            backend,
            url,
            workload,
            clients,
        } = series;
        Row {
            imp,
            note: None,
            backend: backend.to_owned(),
            url: lockkit::raw::redact(url),
            workload,
            clients,
            seconds,
            ops_per_s: ops as f64 / seconds.max(1e-9),
            p50_us: hist.value_at_quantile(0.5) as f64,
            p99_us: hist.value_at_quantile(0.99) as f64,
            max_us: hist.max() as f64,
            client_cpu_us_per_op: None,
            server_us_per_op: None,
            round_trip_us: None,
            handoff_p50_us: None,
            handoff_p99_us: None,
            switches_per_s: None,
            fairness_min: None,
            fairness_max: None,
            stuck: None,
            counter_exact: None,
            round_trips_per_period: None,
            server_commands_per_period: None,
            rss_bytes: None,
            held: None,
            permits: None,
            most_held: None,
            write_p50_us: None,
            write_p99_us: None,
            crowd: None,
            distribution: hist
                .iter_log(1, 1.25)
                .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
                .collect(),
        }
    }
}

/// A histogram for microsecond latencies up to 10 minutes.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Prints the rows as a table (all but the crowd rows).
pub fn print_table(rows: &[Row], out: &mut impl Write) -> std::io::Result<()> {
    // Crowd rows have a table of their own (`crowd::table`).
    if !rows.is_empty() && rows.iter().all(|r| r.crowd.is_some()) {
        return Ok(());
    }
    writeln!(
        out,
        "{:<22} {:<9} {:<3} {:>4} {:>11} {:>9} {:>9} {:>10} {:>9} {:>9}  extra",
        "impl", "backend", "wl", "C", "ops/s", "p50 µs", "p99 µs", "max µs", "cpu µs/op", "srv µs/op"
    )?;
    for r in rows.iter().filter(|r| r.crowd.is_none()) {
        let mut extra = Vec::new();
        if let Some(rt) = r.round_trip_us {
            extra.push(format!("one round trip {rt:.0} µs"));
        }
        if let (Some(p50), Some(p99)) = (r.handoff_p50_us, r.handoff_p99_us) {
            extra.push(format!("hand-off p50 {p50:.0} µs p99 {p99:.0} µs"));
        }
        if let Some(s) = r.switches_per_s {
            extra.push(format!("switches/s {s:.0}"));
        }
        if let (Some(lo), Some(hi)) = (r.fairness_min, r.fairness_max) {
            let share = if hi > 0 { lo as f64 / hi as f64 } else { 0.0 };
            extra.push(format!("per-client {lo}..{hi} (min/max {share:.2})"));
        }
        if let (Some(n), Some(most)) = (r.permits, r.most_held) {
            extra.push(format!("{n} permits, at most {most} held at once"));
        }
        if let (Some(p50), Some(p99)) = (r.write_p50_us, r.write_p99_us) {
            extra.push(format!("writes p50 {p50:.0} µs p99 {p99:.0} µs"));
        }
        if let Some(ok) = r.counter_exact {
            extra.push(if ok {
                "counter exact".into()
            } else {
                "COUNTER WRONG".into()
            });
        }
        if let Some(n) = r.stuck {
            extra.push(format!("{n} clients stuck in lock after the measurement"));
        }
        if let Some(note) = r.note {
            extra.push(note.into());
        }
        if let Some(rt) = r.round_trips_per_period {
            extra.push(format!("{rt:.1} round trips/period"));
        }
        if let Some(c) = r.server_commands_per_period {
            extra.push(format!("{c:.1} server commands/period"));
        }
        if let Some(h) = r.held {
            extra.push(format!("{h} held"));
        }
        if let Some(rss) = r.rss_bytes {
            extra.push(format!("rss {:.1} MiB", rss as f64 / 1048576.0));
        }
        writeln!(
            out,
            "{:<22} {:<9} {:<3} {:>4} {:>11.0} {:>9.0} {:>9.0} {:>10.0} {:>9} {:>9}  {}",
            r.imp,
            r.backend,
            r.workload,
            r.clients,
            r.ops_per_s,
            r.p50_us,
            r.p99_us,
            r.max_us,
            per_op(r.client_cpu_us_per_op),
            per_op(r.server_us_per_op),
            extra.join(", ")
        )?;
    }
    Ok(())
}

/// A per-operation cost for the table: one decimal, `-` when not measured.
fn per_op(us: Option<f64>) -> String {
    us.map_or_else(|| "-".into(), |us| format!("{us:.1}"))
}

/// Writes one JSON object per row.
pub fn write_json(rows: &[Row], out: &mut impl Write) -> std::io::Result<()> {
    for r in rows {
        serde_json::to_writer(&mut *out, r)?;
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_are_columns_and_json_fields_where_measured() {
        let mut hist = histogram();
        hist.record(100).unwrap();
        let series = Series {
            imp: "lockkit",
            backend: "redis",
            url: "redis://h:1",
            workload: "w1",
            clients: 1,
        };
        let mut measured = Row::new(series, 1.0, 10, &hist);
        measured.client_cpu_us_per_op = Some(31.4);
        measured.server_us_per_op = Some(48.0);
        let bare = Row::new(series, 1.0, 10, &hist);
        let mut table = Vec::new();
        print_table(&[measured.clone(), bare.clone()], &mut table).unwrap();
        let table = String::from_utf8(table).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].contains("cpu µs/op") && lines[0].contains("srv µs/op"),
            "{table}"
        );
        assert!(lines[1].contains(" 31.4 ") && lines[1].contains(" 48.0 "), "{table}");
        assert_eq!(lines[2].matches(" - ").count(), 2, "{table}");

        let mut json = Vec::new();
        write_json(&[measured, bare], &mut json).unwrap();
        let json: Vec<serde_json::Value> = String::from_utf8(json)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(json[0]["client_cpu_us_per_op"], 31.4);
        assert_eq!(json[0]["server_us_per_op"], 48.0);
        assert!(json[1].get("client_cpu_us_per_op").is_none() && json[1].get("server_us_per_op").is_none());
    }
}
