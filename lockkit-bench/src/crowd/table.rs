//! The crowd rows on stdout: the measured crowds' table, and the
//! served-once crowds as the markdown table (a backend a line, a
//! kind a column).

use std::io::Write;

use crate::charts::short_us;
use crate::report::{CrowdStats, Row};

fn crowd_rows<'a>(rows: &'a [Row], workload: &str) -> Vec<(&'a Row, &'a CrowdStats)> {
    rows.iter()
        .filter(|r| r.workload == workload)
        .filter_map(|r| Some((r, r.crowd.as_ref()?)))
        .collect()
}

/// What went wrong in a crowd, shortest first; empty when nothing did.
fn troubles(r: &Row, c: &CrowdStats) -> Vec<String> {
    let mut t = Vec::new();
    if let Some(f) = &c.failed {
        t.push(format!("FAILED: {f}"));
    }
    if c.served < r.clients {
        t.push(format!(
            "{} of {} waiters never served",
            r.clients - c.served,
            r.clients
        ));
    }
    if let (Some(w), Some(s)) = (c.writers, c.writers_served)
        && s < w
    {
        t.push(format!("{} of {w} writers never served", w - s));
    }
    if c.timeouts > 0 {
        t.push(format!("{} timed out", c.timeouts));
    }
    if c.errors > 0 {
        let first = c.first_error.as_deref().unwrap_or("?");
        t.push(format!("{} failed: {first:.160}", c.errors));
    }
    if c.violations > 0 {
        let first = c.first_violation.as_deref().unwrap_or("?");
        t.push(format!("{} VIOLATIONS, first: {first}", c.violations));
    }
    t
}

/// A measured crowd's line at its end (a line is always there; its
/// longest wait beside the longest served one shows a waiter left behind).
fn in_line(c: &CrowdStats) -> Option<String> {
    let longest = c.unfinished_max_us?;
    Some(format!(
        "{} in line at the end (longest {})",
        c.unfinished,
        short_us(longest as f64)
    ))
}

/// The most holders at once, as the kind reads it.
fn at_once(r: &Row, c: &CrowdStats) -> String {
    let most = r.most_held.unwrap_or(0);
    match (r.permits, c.most_readers) {
        (Some(n), _) => format!("{most}/{n}"),
        (_, Some(readers)) => format!("{readers} readers"),
        _ => most.to_string(),
    }
}

/// Prints the `crowd` rows (nothing if there are none).
pub fn print_crowd_table(rows: &[Row], out: &mut impl Write) -> std::io::Result<()> {
    let crowd = crowd_rows(rows, "crowd");
    let Some((_, first)) = crowd.first() else {
        return Ok(());
    };
    writeln!(
        out,
        "\ncrowd: C waiters on one name, spread over worker processes (P×c: processes × clients each, one owner a waiter), \
         each holding {} per grant, in a loop for the measurement",
        short_us(first.section_us as f64)
    )?;
    writeln!(
        out,
        "{:<22} {:<11} {:>4} {:>5} {:>9} {:>10} {:>8} {:>8} {:>8} {:>10} {:>17} {:>10} {:>8}  troubles; line at the end",
        "backend",
        "kind",
        "C",
        "P×c",
        "grants/s",
        "switches/s",
        "wait p50",
        "p99",
        "max",
        "per waiter",
        "1st grant p50/max",
        "at once",
        "served"
    )?;
    // Troubles first, then the line at the end.
    for (r, c) in crowd {
        if c.unsupported {
            writeln!(out, "{:<22} {:<11} {:>4}  not supported", r.backend, c.kind, r.clients)?;
            continue;
        }
        let first = match (c.first_grant_p50_us, c.first_grant_max_us) {
            (Some(a), Some(b)) => format!("{}/{}", short_us(a as f64), short_us(b as f64)),
            _ => "—".into(),
        };
        let switches = r.switches_per_s.map_or("—".into(), |s| format!("{s:.0}"));
        let shares = format!("{}..{}", r.fairness_min.unwrap_or(0), r.fairness_max.unwrap_or(0));
        writeln!(
            out,
            "{:<22} {:<11} {:>4} {:>5} {:>9.1} {:>10} {:>8} {:>8} {:>8} {:>10} {:>17} {:>10} {:>8}  {}",
            r.backend,
            c.kind,
            r.clients,
            format!("{}×{}", c.procs, c.connects / c.procs.max(1)),
            r.ops_per_s,
            switches,
            short_us(r.p50_us),
            short_us(r.p99_us),
            short_us(r.max_us),
            shares,
            first,
            at_once(r, c),
            format!("{}/{}", c.served, r.clients),
            troubles(r, c)
                .into_iter()
                .chain(in_line(c))
                .collect::<Vec<_>>()
                .join("; ")
        )?;
    }
    Ok(())
}

/// One cell of the served-once table.
fn once_cell(r: &Row, c: &CrowdStats) -> String {
    if c.unsupported {
        return "not supported".into();
    }
    let n = r.clients;
    let mut cell = if let Some(f) = &c.failed {
        format!("**{}/{n}; failed: {f:.120}**", c.served)
    } else if c.errors > 0 {
        let first = c.first_error.as_deref().unwrap_or("?");
        format!("**{}/{n}; {} failed: \"{first:.120}\"**", c.served, c.errors)
    } else if c.timeouts > 0 || c.served < n {
        format!("**{}/{n} in {:.0} s; {} timed out**", c.served, r.seconds, c.timeouts)
    } else {
        format!("{}/{n}, {:.0}/s", c.served, r.ops_per_s)
    };
    match (r.permits, c.most_readers) {
        (Some(_), _) if r.most_held == Some(1) => cell.push_str(", never more than 1 at once"),
        (Some(_), _) => cell.push_str(&format!(", {} at once", r.most_held.unwrap_or(0))),
        (_, Some(1)) => cell.push_str(", never more than 1 reader at once"),
        (_, Some(readers)) => cell.push_str(&format!(", {readers} readers at once")),
        _ => {}
    }
    if c.violations > 0 {
        let first = c.first_violation.as_deref().unwrap_or("?");
        cell.push_str(&format!(" **{} VIOLATIONS: {first}**", c.violations));
    }
    cell
}

/// Prints the `crowd-once` rows as the table (nothing if there
/// are none).
pub fn print_once_table(rows: &[Row], out: &mut impl Write) -> std::io::Result<()> {
    let once = crowd_rows(rows, "crowd-once");
    let Some((r0, c0)) = once.first() else {
        return Ok(());
    };
    let mut kinds: Vec<&str> = Vec::new();
    let mut backends: Vec<&str> = Vec::new();
    for (r, c) in &once {
        if !kinds.contains(&c.kind.as_str()) {
            kinds.push(&c.kind);
        }
        if !backends.contains(&r.backend.as_str()) {
            backends.push(&r.backend);
        }
    }
    writeln!(
        out,
        "\ncrowd-once: {} waiters on one name ({} clients in {} process(es), one owner a waiter), each takes once and \
         gives back at once; waits bounded by the run's --crowd-wait\n",
        r0.clients, c0.connects, c0.procs
    )?;
    let heads: Vec<String> = kinds.iter().map(|k| kind_title(k)).collect();
    writeln!(out, "| backend | {} |", heads.join(" | "))?;
    writeln!(out, "|---|{}", "---|".repeat(kinds.len()))?;
    for b in backends {
        let cells: Vec<String> = kinds
            .iter()
            .map(|k| {
                once.iter()
                    .find(|(r, c)| r.backend == b && c.kind == *k)
                    .map_or("—".into(), |(r, c)| once_cell(r, c))
            })
            .collect();
        writeln!(out, "| {b} | {} |", cells.join(" | "))?;
    }
    Ok(())
}

fn kind_title(kind: &str) -> String {
    match kind.split_once(':') {
        Some(("semaphore", n)) => format!("semaphore of {n}"),
        _ if kind == "rw" => "read-write lock".into(),
        _ => kind.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Series, histogram};

    fn row(workload: &'static str, backend: &str, kind: &str, stats: CrowdStats) -> Row {
        let mut r = Row::new(
            Series {
                imp: "lockkit",
                backend,
                url: "x://",
                workload,
                clients: 200,
            },
            2.0,
            stats.grants,
            &histogram(),
        );
        r.most_held = Some(1);
        if kind.starts_with("semaphore") {
            r.permits = Some(3);
        }
        r.crowd = Some(CrowdStats {
            kind: kind.into(),
            procs: 1,
            connects: 8,
            ..stats
        });
        r
    }

    #[test]
    fn the_once_table_shows_failures_as_failures() {
        let rows = [
            row(
                "crowd-once",
                "postgres",
                "mutex",
                CrowdStats {
                    served: 200,
                    grants: 200,
                    ..CrowdStats::default()
                },
            ),
            row(
                "crowd-once",
                "postgres",
                "semaphore:3",
                CrowdStats {
                    served: 102,
                    grants: 102,
                    timeouts: 98,
                    ..CrowdStats::default()
                },
            ),
            row(
                "crowd-once",
                "postgres mode=session",
                "mutex",
                CrowdStats {
                    served: 12,
                    grants: 12,
                    errors: 188,
                    first_error: Some("pool timed out while waiting for an open connection".into()),
                    ..CrowdStats::default()
                },
            ),
            row(
                "crowd-once",
                "postgres mode=session",
                "semaphore:3",
                CrowdStats {
                    unsupported: true,
                    ..CrowdStats::default()
                },
            ),
        ];
        let mut out = Vec::new();
        print_once_table(&rows, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("| backend | mutex | semaphore of 3 |"), "{text}");
        assert!(
            text.contains(
                "| postgres | 200/200, 100/s | **102/200 in 2 s; 98 timed out**, never more than 1 at once |"
            ),
            "{text}"
        );
        assert!(text.contains("**12/200; 188 failed: \"pool timed out"), "{text}");
        assert!(text.contains("| not supported |"), "{text}");
    }

    #[test]
    fn the_crowd_table_lists_troubles() {
        let rows = [row(
            "crowd",
            "sqlite",
            "mutex",
            CrowdStats {
                served: 190,
                grants: 1000,
                unfinished: 10,
                unfinished_max_us: Some(2_000_000),
                violations: 1,
                first_violation: Some("waiter 3 granted beside 1".into()),
                ..CrowdStats::default()
            },
        )];
        let mut out = Vec::new();
        print_crowd_table(&rows, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("10 of 200 waiters never served"), "{text}");
        assert!(text.contains("10 in line at the end (longest 2.0 s)"), "{text}");
        assert!(text.contains("1 VIOLATIONS"), "{text}");
    }
}
