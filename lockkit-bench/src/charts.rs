//! SVG charts (plotters): throughput per backend per workload beside its
//! floor, and the w2 acquire-wait distribution.

use std::path::Path;

use plotters::prelude::*;

use crate::report::Row;
use crate::workloads::BenchError;

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Writes `throughput.svg` and `w2-wait.svg` into `dir`.
pub fn write(rows: &[Row], dir: &Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir)?;
    throughput(rows, &dir.join("throughput.svg"))?;
    if rows.iter().any(|r| r.workload == "w2") {
        waits(rows, &dir.join("w2-wait.svg"))?;
    }
    Ok(())
}

fn label(r: &Row) -> String {
    format!("{} {} {} C={}", r.backend, r.imp, r.workload, r.clients)
}

fn throughput(rows: &[Row], path: &Path) -> Result<(), BenchError> {
    let bars: Vec<&Row> = rows.iter().filter(|r| r.workload != "w4").collect();
    let n = bars.len().max(1);
    let height = 120 + 32 * n as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = bars.iter().map(|r| r.ops_per_s).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "operations per second, log scale (blue: lockkit, orange: floor)",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(260)
        .build_cartesian_2d((1.0..max).log_scale(), (0..n).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => bars.get(*i).map(|r| label(r)).unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc("ops/s (log)")
        .draw()?;
    for (imp, color) in [("lockkit", PALETTE[0]), ("floor", PALETTE[1])] {
        chart.draw_series(
            Histogram::horizontal(&chart)
                .style(color.filled())
                .margin(4)
                .baseline(1.0)
                .data(
                    bars.iter()
                        .enumerate()
                        .filter(|(_, r)| r.imp == imp)
                        .map(|(i, r)| (i, r.ops_per_s)),
                ),
        )?;
    }
    root.present()?;
    Ok(())
}

fn waits(rows: &[Row], path: &Path) -> Result<(), BenchError> {
    let series: Vec<&Row> = rows
        .iter()
        .filter(|r| r.workload == "w2" && !r.distribution.is_empty())
        .collect();
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let max_x = series
        .iter()
        .flat_map(|r| r.distribution.iter().map(|(v, _)| *v))
        .max()
        .unwrap_or(10)
        .max(10);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "w2 acquire wait: share of acquisitions at or below a wait",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1u64..max_x).log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("wait, µs (log)")
        .y_desc("cumulative share")
        .draw()?;
    for (i, r) in series.iter().enumerate() {
        let total: u64 = r.distribution.iter().map(|(_, c)| c).sum::<u64>().max(1);
        let mut acc = 0;
        let points: Vec<(u64, f64)> = r
            .distribution
            .iter()
            .map(|(v, c)| {
                acc += c;
                ((*v).max(1), acc as f64 / total as f64)
            })
            .collect();
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label(r))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
