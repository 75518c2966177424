//! SVG charts (plotters), drawn for the questions a reader asks:
//!
//! - `throughput.svg`: one panel per workload, backends side by side, and in
//!   each backend's group lockkit beside its floor and the peers (w2:
//!   switches/s, fair and `fair=false`; w3 at one concurrency).
//! - `ratio.svg`: lockkit ÷ floor per backend and workload (w1, w3 at each
//!   concurrency), each bar with its goal marked.
//! - `w2-wait.svg`: the w2 acquire-wait distribution (CDF), one panel per
//!   backend: lockkit fair and `fair=false`, and the peers.
//! - `crowd.svg`: grants/s of the crowds, one panel per crowd size (and
//!   one for the served-once crowd), each backend's group with the kinds
//!   side by side: the issue asks whether a semaphore or a read-write lock
//!   serves a crowd at least as fast as the mutex of the same backend,
//!   which bars side by side answer at a glance, and whether that holds as
//!   the crowd grows (a herd shows as a rate falling from panel to panel).
//!   The waits are in the table and the JSON rows (p50, p99, max).

use std::collections::BTreeMap;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::BenchError;
use crate::report::Row;

/// Room on the right of a bar chart for its legend, in backend groups.
const LEGEND_ROOM: f64 = 1.3;

/// The suffix of a backend label whose URL turned the fair queue off.
const UNFAIR: &str = " fair=false";

/// Writes `throughput.svg`, `ratio.svg` (where a backend has a floor),
/// `w2-wait.svg` (where w2 ran) and `crowd.svg` (where a crowd ran) into
/// `dir`.
pub fn write(rows: &[Row], dir: &Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir)?;
    if rows.is_empty() || rows.iter().any(|r| r.crowd.is_none()) {
        throughput(rows, &dir.join("throughput.svg"))?;
    }
    if rows.iter().any(|r| r.crowd.is_some()) {
        crowds(rows, &dir.join("crowd.svg"))?;
    }
    if rows.iter().any(|r| r.imp == "floor") {
        ratios(rows, &dir.join("ratio.svg"))?;
    }
    if rows.iter().any(|r| r.workload == "w2") {
        waits(rows, &dir.join("w2-wait.svg"))?;
    }
    Ok(())
}

/// The backend a row belongs to, without its `fair=false` mark.
fn group(r: &Row) -> &str {
    r.backend.strip_suffix(UNFAIR).unwrap_or(&r.backend)
}

/// What a row measured within its backend's group: the implementation,
/// marked when lockkit's fair queue was off.
fn series(r: &Row) -> String {
    if r.backend.ends_with(UNFAIR) {
        format!("{}{UNFAIR}", r.imp)
    } else {
        r.imp.to_owned()
    }
}

/// The fixed colour of a series, the same in every chart.
fn color(series: &str) -> RGBColor {
    match series {
        "lockkit" => RGBColor(31, 119, 180),
        "floor" => RGBColor(255, 127, 14),
        "rslock" => RGBColor(44, 160, 44),
        "distributed-lock-redis" => RGBColor(214, 39, 40),
        "zookeeper-client" => RGBColor(148, 103, 189),
        "mutex" => RGBColor(31, 119, 180),
        s if s.starts_with("semaphore") => RGBColor(255, 127, 14),
        "rw" => RGBColor(44, 160, 44),
        s if s.starts_with("lockkit") => RGBColor(158, 202, 225),
        _ => RGBColor(140, 86, 75),
    }
}

/// The distinct items in the order they first appear.
fn distinct<'a>(items: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = Vec::new();
    for i in items {
        if !seen.contains(&i) {
            seen.push(i);
        }
    }
    seen
}

/// Distinct series in a fixed order: lockkit, its unfair variant, the
/// floor, then the peers as they first appear.
fn series_order<'a>(all: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut order = distinct(all);
    let rank = |s: &str| match s {
        "lockkit" => 0,
        s if s.starts_with("lockkit") => 1,
        "floor" => 2,
        _ => 3,
    };
    order.sort_by_key(|s| rank(s));
    order
}

/// `12.3k`-style short number for bar labels.
fn short(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 1_000.0 {
        format!("{:.1}k", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// One panel of grouped bars: per backend, one bar per series, log scale.
struct Panel<'a> {
    title: String,
    y_desc: &'static str,
    /// `(backend, series, value)`.
    bars: Vec<(&'a str, String, f64)>,
    /// `(backend, series)` of bars whose label gets a `!` (a crowd that
    /// left waiters unserved, failed or overlapped).
    marked: Vec<(&'a str, String)>,
}

/// The throughput panels: w1 cycles, w2 switches, w3 at C=16 (or the
/// largest C measured), w5 and w6 operations, each per second.
fn throughput_panels(rows: &[Row]) -> Vec<Panel<'_>> {
    let mut panels = Vec::new();
    let of = |w: &str, c: Option<usize>| -> Vec<&Row> {
        rows.iter()
            .filter(|r| r.workload == w && c.is_none_or(|c| r.clients == c))
            .collect()
    };
    fn bars(rows: Vec<&Row>, value: fn(&Row) -> f64) -> Vec<(&str, String, f64)> {
        rows.into_iter().map(|r| (group(r), series(r), value(r))).collect()
    }
    let w1 = of("w1", None);
    if !w1.is_empty() {
        panels.push(Panel {
            title: "w1 uncontended: acquire + release cycles/s, one client".into(),
            y_desc: "cycles/s (log)",
            bars: bars(w1, |r| r.ops_per_s),
            marked: Vec::new(),
        });
    }
    let w2 = of("w2", None);
    if let Some(c) = w2.first().map(|r| r.clients) {
        panels.push(Panel {
            title: format!("w2 contended: hand-offs between clients/s (switches/s), C={c} on one name"),
            y_desc: "switches/s (log)",
            bars: bars(w2, |r| r.switches_per_s.unwrap_or(0.0)),
            marked: Vec::new(),
        });
    }
    let w3_cs: Vec<usize> = of("w3", None).iter().map(|r| r.clients).collect();
    if let Some(c) = w3_cs.iter().copied().find(|&c| c == 16).or(w3_cs.iter().copied().max()) {
        panels.push(Panel {
            title: format!("w3 many names: cycles/s, C={c} tasks on 10,000 names"),
            y_desc: "cycles/s (log)",
            bars: bars(of("w3", Some(c)), |r| r.ops_per_s),
            marked: Vec::new(),
        });
    }
    for (w, what) in [
        ("w5", "w5 semaphore: permits/s"),
        ("w6", "w6 read-write lock, 90 % reads: operations/s"),
    ] {
        let rs = of(w, None);
        if let Some(c) = rs.first().map(|r| r.clients) {
            panels.push(Panel {
                title: format!("{what}, C={c}"),
                y_desc: "ops/s (log)",
                bars: bars(rs, |r| r.ops_per_s),
                marked: Vec::new(),
            });
        }
    }
    panels
}

fn throughput(rows: &[Row], path: &Path) -> Result<(), BenchError> {
    draw_panels(&throughput_panels(rows), path)
}

/// The panels one above the other in one SVG.
fn draw_panels(panels: &[Panel<'_>], path: &Path) -> Result<(), BenchError> {
    let height = 300 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE)?;
    for (panel, area) in panels.iter().zip(root.split_evenly((panels.len().max(1), 1))) {
        bar_panel(panel, &area)?;
    }
    root.present()?;
    Ok(())
}

/// Draws one panel of grouped bars on `area`, log scale, values on the bars.
fn bar_panel(panel: &Panel<'_>, area: &DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), BenchError> {
    let groups = distinct(panel.bars.iter().map(|b| b.0));
    let order = series_order(panel.bars.iter().map(|b| b.1.as_str()));
    let max = panel.bars.iter().map(|b| b.2).fold(10.0, f64::max) * 8.0;
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 17))
        .margin(8)
        .x_label_area_size(22)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..groups.len() as f64 + LEGEND_ROOM, (1.0..max).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&|v| short(*v))
        .y_desc(panel.y_desc)
        .draw()?;
    let width = 0.8 / order.len().max(1) as f64;
    for (k, s) in order.iter().enumerate() {
        let c = color(s);
        let bars: Vec<(usize, f64)> = panel
            .bars
            .iter()
            .filter(|(_, bs, _)| bs.as_str() == *s)
            .filter_map(|(b, _, v)| Some((groups.iter().position(|g| g == b)?, *v)))
            .collect();
        let x0 = |g: usize| g as f64 + 0.1 + k as f64 * width;
        chart
            .draw_series(
                bars.iter()
                    .map(|&(g, v)| Rectangle::new([(x0(g), 1.0), (x0(g) + width * 0.92, v.max(1.0))], c.filled())),
            )?
            .label(*s)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        let mark = |g: usize| {
            let marked = panel.marked.iter().any(|(b, ms)| ms == s && *b == groups[g]);
            if marked { "!" } else { "" }
        };
        chart.draw_series(bars.iter().map(|&(g, v)| {
            Text::new(
                format!("{}{}", short(v), mark(g)),
                (x0(g), v.max(1.0) * 1.5),
                ("sans-serif", 10).into_font().color(&BLACK),
            )
        }))?;
    }
    chart.draw_series(groups.iter().enumerate().map(|(i, g)| {
        Text::new(
            // Session mode's long label would run into the next group's.
            g.replace(" mode=session", " session"),
            (i as f64 + 0.35, max / 1.8),
            ("sans-serif", 13).into_font().color(&BLACK),
        )
    }))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .draw()?;
    Ok(())
}

/// The goal of lockkit ÷ floor for a backend on a workload:
/// w1 ≥ 0.95 (Redis, MariaDB/MySQL, Postgres, SQLite), ≥ 0.90 (Redlock,
/// ZooKeeper); w3 ≥ 0.75 everywhere.
pub fn goal(backend: &str, workload: &str) -> Option<f64> {
    match (workload, backend) {
        ("w1", "redlock" | "zookeeper") => Some(0.90),
        ("w1", "redis" | "mysql" | "postgres" | "sqlite") => Some(0.95),
        ("w3", _) => Some(0.75),
        _ => None,
    }
}

/// `(backend, workload with C, ratio, goal)` for every lockkit row with a
/// floor row of the same URL, workload and C.
pub fn ratio_bars(rows: &[Row]) -> Vec<(&str, String, f64, Option<f64>)> {
    rows.iter()
        .filter(|r| r.imp == "lockkit" && matches!(r.workload, "w1" | "w3"))
        .filter_map(|r| {
            let floor = rows
                .iter()
                .find(|f| f.imp == "floor" && f.url == r.url && f.workload == r.workload && f.clients == r.clients)?;
            let what = if r.workload == "w1" {
                "w1".to_owned()
            } else {
                format!("w3 C={}", r.clients)
            };
            let backend = r.backend.as_str();
            Some((
                backend,
                what,
                r.ops_per_s / floor.ops_per_s.max(1e-9),
                goal(group(r), r.workload),
            ))
        })
        .collect()
}

fn ratios(rows: &[Row], path: &Path) -> Result<(), BenchError> {
    let bars = ratio_bars(rows);
    let groups = distinct(bars.iter().map(|b| b.0));
    let order = distinct(bars.iter().map(|b| b.1.as_str()));
    let root = SVGBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = bars.iter().map(|b| b.2).fold(1.2, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "lockkit ÷ floor, same run (red: the goal each bar should reach)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(22)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..groups.len() as f64 + LEGEND_ROOM, 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("lockkit ÷ floor")
        .draw()?;
    let palette = [
        RGBColor(31, 119, 180),
        RGBColor(158, 202, 225),
        RGBColor(107, 174, 214),
        RGBColor(66, 146, 198),
        RGBColor(8, 81, 156),
    ];
    let width = 0.8 / order.len().max(1) as f64;
    for (k, w) in order.iter().enumerate() {
        let c = palette[k % palette.len()];
        let mine: Vec<(usize, f64, Option<f64>)> = bars
            .iter()
            .filter(|b| b.1 == *w)
            .filter_map(|(b, _, v, g)| Some((groups.iter().position(|x| x == b)?, *v, *g)))
            .collect();
        let x0 = |g: usize| g as f64 + 0.1 + k as f64 * width;
        chart
            .draw_series(
                mine.iter()
                    .map(|&(g, v, _)| Rectangle::new([(x0(g), 0.0), (x0(g) + width * 0.9, v)], c.filled())),
            )?
            .label(*w)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        chart.draw_series(mine.iter().filter_map(|&(g, _, goal)| {
            Some(PathElement::new(
                vec![(x0(g), goal?), (x0(g) + width * 0.9, goal?)],
                RED.stroke_width(3),
            ))
        }))?;
        chart.draw_series(mine.iter().map(|&(g, v, _)| {
            Text::new(
                format!("{v:.2}"),
                (x0(g), v + top * 0.02),
                ("sans-serif", 10).into_font().color(&BLACK),
            )
        }))?;
    }
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 1.0), (groups.len() as f64, 1.0)],
            BLACK.mix(0.4).stroke_width(1),
        )))?
        .label("1.0: as fast as the floor")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLACK.mix(0.4)));
    chart.draw_series(groups.iter().enumerate().map(|(i, g)| {
        Text::new(
            g.to_string(),
            (i as f64 + 0.4, top * 0.97),
            ("sans-serif", 13).into_font().color(&BLACK),
        )
    }))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .draw()?;
    root.present()?;
    Ok(())
}

/// The cumulative share of a row's acquisitions at or below each wait.
fn cdf(r: &Row) -> Vec<(u64, f64)> {
    let total: u64 = r.distribution.iter().map(|(_, c)| c).sum::<u64>().max(1);
    let mut acc = 0;
    r.distribution
        .iter()
        .map(|(v, c)| {
            acc += c;
            ((*v).max(1), acc as f64 / total as f64)
        })
        .collect()
}

fn waits(rows: &[Row], path: &Path) -> Result<(), BenchError> {
    let w2: Vec<&Row> = rows
        .iter()
        .filter(|r| r.workload == "w2" && !r.distribution.is_empty())
        .collect();
    let groups = distinct(w2.iter().map(|r| group(r)));
    let by_group: BTreeMap<&str, Vec<&Row>> = groups
        .iter()
        .map(|g| (*g, w2.iter().copied().filter(|r| group(r) == *g).collect()))
        .collect();
    let cols = 2;
    let panel_rows = groups.len().div_ceil(cols).max(1);
    let root = SVGBackend::new(path, (1000, 320 * panel_rows as u32 + 40)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(40);
    title.titled(
        "w2 acquire wait: share of acquisitions at or below a wait (solid: fair, dashed: fair=false)",
        ("sans-serif", 18),
    )?;
    for (g, area) in groups.iter().zip(body.split_evenly((panel_rows, cols))) {
        let lines = &by_group[g];
        let max_x = lines
            .iter()
            .flat_map(|r| r.distribution.iter().map(|(v, _)| *v))
            .max()
            .unwrap_or(10)
            .max(10);
        let clients = lines.first().map(|r| r.clients).unwrap_or(0);
        let mut chart = ChartBuilder::on(&area)
            .caption(format!("{g}, C={clients}"), ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d((1u64..max_x).log_scale(), 0.0..1.0)?;
        chart.configure_mesh().x_desc("wait, µs (log)").y_labels(5).draw()?;
        for r in lines {
            let s = series(r);
            let c = color(&s);
            let points = cdf(r);
            let worst = r.max_us;
            let name = format!("{s} (worst {})", short_us(worst));
            if r.backend.ends_with(UNFAIR) {
                chart
                    .draw_series(DashedLineSeries::new(points, 6, 4, color("lockkit").stroke_width(2)))?
                    .label(name)
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color("lockkit").stroke_width(1)));
            } else {
                chart
                    .draw_series(LineSeries::new(points, c.stroke_width(2)))?
                    .label(name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// The crowd panels: one per crowd size, one for the served-once crowd;
/// bars per backend and kind (a kind the backend lacks has no bar).
fn crowd_panels(rows: &[Row]) -> Vec<Panel<'_>> {
    let ran = |r: &&Row| r.crowd.as_ref().is_some_and(|c| !c.unsupported);
    let troubled = |r: &Row| {
        r.crowd.as_ref().is_some_and(|c| {
            c.served < r.clients || c.failed.is_some() || c.violations > 0 || c.timeouts > 0 || c.errors > 0
        })
    };
    fn bar(r: &Row) -> (&str, String, f64) {
        (
            group(r),
            r.crowd.as_ref().map_or(String::new(), |c| c.kind.clone()),
            r.ops_per_s,
        )
    }
    let mut sizes: Vec<usize> = rows
        .iter()
        .filter(|r| r.workload == "crowd")
        .map(|r| r.clients)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    fn panel<'a>(title: String, of: Vec<&'a Row>, troubled: impl Fn(&Row) -> bool) -> Panel<'a> {
        Panel {
            title,
            y_desc: "grants/s (log)",
            marked: of
                .iter()
                .filter(|r| troubled(r))
                .map(|r| {
                    let (g, s, _) = bar(r);
                    (g, s)
                })
                .collect(),
            bars: of.iter().map(|r| bar(r)).collect(),
        }
    }
    let mut panels = Vec::new();
    for c in sizes {
        let of: Vec<&Row> = rows
            .iter()
            .filter(|r| r.workload == "crowd" && r.clients == c)
            .filter(ran)
            .collect();
        let section = of.first().and_then(|r| r.crowd.as_ref()).map_or(0, |s| s.section_us);
        panels.push(panel(
            format!(
                "crowd: grants/s, C={c} waiters on one name over processes, {} sections (!: troubles, see the table)",
                short_us(section as f64)
            ),
            of,
            troubled,
        ));
    }
    let once: Vec<&Row> = rows.iter().filter(|r| r.workload == "crowd-once").filter(ran).collect();
    if let Some(n) = once.first().map(|r| r.clients) {
        panels.push(panel(
            format!("crowd-once: {n} waiters each served once, grants/s until the last call ended (!: troubles)"),
            once,
            troubled,
        ));
    }
    panels
}

fn crowds(rows: &[Row], path: &Path) -> Result<(), BenchError> {
    draw_panels(&crowd_panels(rows), path)
}

/// A wait in µs as `850 µs`, `12 ms` or `1.2 s`.
pub(crate) fn short_us(us: f64) -> String {
    if us >= 1_000_000.0 {
        format!("{:.1} s", us / 1e6)
    } else if us >= 1_000.0 {
        format!("{:.0} ms", us / 1e3)
    } else {
        format!("{us:.0} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Series, histogram};

    fn row(imp: &'static str, backend: &str, workload: &'static str, clients: usize, ops: u64) -> Row {
        let mut hist = histogram();
        hist.record(100).unwrap();
        let series = Series {
            imp,
            backend,
            url: "redis://h:1",
            workload,
            clients,
        };
        Row::new(series, 1.0, ops, &hist)
    }

    #[test]
    fn ratios_pair_each_lockkit_row_with_its_floor() {
        let rows = vec![
            row("floor", "redis", "w1", 1, 1000),
            row("lockkit", "redis", "w1", 1, 900),
            row("rslock", "redis", "w1", 1, 500),
            row("lockkit", "redis", "w3", 16, 850),
            row("floor", "redis", "w3", 16, 1000),
            row("lockkit", "redis", "w3", 4, 1),
        ];
        let bars = ratio_bars(&rows);
        assert_eq!(bars.len(), 2, "no floor for w3 C=4, peers are not lockkit: {bars:?}");
        assert_eq!(bars[0].1, "w1");
        assert!((bars[0].2 - 0.9).abs() < 1e-9);
        assert_eq!(bars[0].3, Some(0.95));
        assert_eq!(bars[1].1, "w3 C=16");
        assert!((bars[1].2 - 0.85).abs() < 1e-9);
        assert_eq!(bars[1].3, Some(0.75));
    }

    #[test]
    fn goals_follow_the_issue() {
        assert_eq!(goal("zookeeper", "w1"), Some(0.90));
        assert_eq!(goal("redlock", "w1"), Some(0.90));
        assert_eq!(goal("mysql", "w1"), Some(0.95));
        assert_eq!(goal("memory", "w1"), None);
        assert_eq!(goal("memory", "w3"), Some(0.75));
    }

    #[test]
    fn unfair_rows_join_their_backend_as_their_own_series() {
        let fair = row("lockkit", "redis", "w2", 8, 1);
        let unfair = row("lockkit", "redis fair=false", "w2", 8, 1);
        assert_eq!(group(&unfair), "redis");
        assert_eq!(series(&fair), "lockkit");
        assert_eq!(series(&unfair), "lockkit fair=false");
        let all = [
            series(&row("rslock", "redis", "w2", 8, 1)),
            series(&unfair),
            series(&fair),
        ];
        let order = series_order(all.iter().map(String::as_str));
        assert_eq!(order, ["lockkit", "lockkit fair=false", "rslock"]);
    }

    #[test]
    fn charts_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![
            row("floor", "redis", "w1", 1, 1000),
            row("lockkit", "redis", "w1", 1, 900),
            row("rslock", "redis", "w1", 1, 500),
            row("lockkit", "redis", "w2", 4, 300),
            row("lockkit", "redis fair=false", "w2", 4, 300),
        ];
        write(&rows, dir.path()).unwrap();
        for f in ["throughput.svg", "ratio.svg", "w2-wait.svg"] {
            let svg = std::fs::read_to_string(dir.path().join(f)).unwrap();
            assert!(svg.contains("<svg"), "{f}");
        }
        let waits = std::fs::read_to_string(dir.path().join("w2-wait.svg")).unwrap();
        assert!(waits.contains("lockkit fair=false"), "the unfair line is labelled");
    }
}
