//! `--plot FILE.svg`: latency over the run (p50, p99 and max of each time window)
//! beside the latency CDF. SVG only, as rpc-bench draws: no font library needed.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use super::record::Record;

const WINDOWS: usize = 100;

/// Writes the two panels of `record` (which kept its samples) to `path`.
pub(crate) fn write(path: &Path, record: &Record, title: &str) -> Result<(), String> {
    let over_time = windows(record);
    let cdf: Vec<(f64, f64)> = record
        .latency
        .iter_quantiles(1)
        .map(|q| {
            let us = record.latency.highest_equivalent(q.value_iterated_to()) as f64 / 1e3;
            (us.max(0.1), q.quantile_iterated_to())
        })
        .collect();
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1000, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 18))?;
        let (left, right) = root.split_horizontally(500);

        let t_max = over_time.iter().map(|w| w.0).fold(0.0, f64::max).max(1e-3);
        let l_max = over_time.iter().map(|w| w.3).fold(0.0, f64::max).max(1.0);
        let mut chart = ChartBuilder::on(&left)
            .caption("latency over the run (µs)", ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(48)
            .build_cartesian_2d(0.0..t_max * 1.02, 0.0..l_max * 1.05)?;
        chart.configure_mesh().x_desc("seconds").draw()?;
        let lines = [
            ("p50", RGBColor(31, 119, 180), 1usize),
            ("p99", RGBColor(255, 127, 14), 2),
            ("max", RGBColor(214, 39, 40), 3),
        ];
        for (label, colour, column) in lines {
            let points = over_time.iter().map(move |w| {
                let y = match column {
                    1 => w.1,
                    2 => w.2,
                    _ => w.3,
                };
                (w.0, y)
            });
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;

        let lo = cdf
            .iter()
            .map(|p| p.0)
            .fold(f64::INFINITY, f64::min)
            .max(0.1);
        let hi = cdf.iter().map(|p| p.0).fold(0.0, f64::max).max(lo * 2.0);
        let mut chart = ChartBuilder::on(&right)
            .caption("latency CDF (µs, log scale)", ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(36)
            .build_cartesian_2d((lo * 0.9..hi * 1.1).log_scale(), 0.0..1.0)?;
        chart
            .configure_mesh()
            .y_desc("fraction of calls ≤ x")
            .draw()?;
        chart.draw_series(LineSeries::new(
            cdf.iter().copied(),
            RGBColor(214, 39, 40).stroke_width(2),
        ))?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| format!("plotting to {}: {e}", path.display()))
}

/// `(window end s, p50 µs, p99 µs, max µs)` of the calls started in each of
/// `WINDOWS` equal windows of the run (windows with no call left out).
fn windows(record: &Record) -> Vec<(f64, f64, f64, f64)> {
    let samples = record.samples.as_deref().unwrap_or_default();
    let end = samples
        .iter()
        .map(|s| s.start)
        .max()
        .unwrap_or_default()
        .max(Duration::from_micros(1));
    let mut buckets: Vec<Vec<f64>> = vec![Vec::new(); WINDOWS];
    for s in samples {
        let i = ((s.start.as_secs_f64() / end.as_secs_f64()) * (WINDOWS - 1) as f64) as usize;
        buckets[i.min(WINDOWS - 1)].push(s.latency.as_secs_f64() * 1e6);
    }
    let width = end.as_secs_f64() / (WINDOWS - 1) as f64;
    buckets
        .into_iter()
        .enumerate()
        .filter(|(_, b)| !b.is_empty())
        .map(|(i, mut b)| {
            b.sort_by(f64::total_cmp);
            let at = |q: f64| b[((b.len() - 1) as f64 * q).round() as usize];
            ((i + 1) as f64 * width, at(0.5), at(0.99), at(1.0))
        })
        .collect()
}
