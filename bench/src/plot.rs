//! `--plot`: latency CDFs as SVG, one panel per workload (payload × concurrency), one
//! curve per system, log latency axis. SVG only: plotters' naive text metrics need
//! no font library, and the viewer draws the text.

use std::path::Path;

use plotters::prelude::*;

use crate::report::size_label;
use crate::system::System;

/// One workload's curves: (system, [(latency µs, fraction of calls at or below)]).
pub(crate) struct Panel {
    pub(crate) payload: usize,
    pub(crate) concurrency: usize,
    pub(crate) curves: Vec<(System, Vec<(f64, f64)>)>,
}

fn colour(s: System) -> RGBColor {
    match s {
        System::RdmaRpc => RGBColor(214, 39, 40),
        System::RdmaRpcUd => RGBColor(255, 127, 14),
        System::RdmaRpcTcp => RGBColor(140, 86, 75),
        System::Tonic => RGBColor(31, 119, 180),
        System::TonicUds => RGBColor(148, 103, 189),
        System::Tcp => RGBColor(44, 160, 44),
        System::TcpSpin => RGBColor(127, 127, 127),
    }
}

/// A short axis label for a latency in µs: `20µs`, `1.5ms`, `300ms`, `2s`.
fn latency_label(us: f64) -> String {
    let (v, unit) = match us {
        u if u >= 1e6 => (u / 1e6, "s"),
        u if u >= 1e3 => (u / 1e3, "ms"),
        u => (u, "µs"),
    };
    if v < 10.0 && v.fract() != 0.0 {
        format!("{v:.1}{unit}")
    } else {
        format!("{v:.0}{unit}")
    }
}

/// Writes the panels to `path` as SVG, in a grid with one row per payload size.
pub(crate) fn write(path: &Path, panels: &[Panel]) -> Result<(), String> {
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let mut sizes: Vec<usize> = panels.iter().map(|p| p.payload).collect();
        let mut concs: Vec<usize> = panels.iter().map(|p| p.concurrency).collect();
        sizes.sort_unstable();
        sizes.dedup();
        concs.sort_unstable();
        concs.dedup();
        let (rows, cols) = (sizes.len().max(1), concs.len().max(1));
        let root =
            SVGBackend::new(path, (420 * cols as u32, 320 * rows as u32 + 40)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(
            "rpc-bench: unary echo latency CDF (x: latency, log scale; y: fraction of calls ≤ x)",
            ("sans-serif", 20),
        )?;
        let areas = root.split_evenly((rows, cols));
        for p in panels {
            let row = sizes.iter().position(|&s| s == p.payload).unwrap_or(0);
            let col = concs.iter().position(|&c| c == p.concurrency).unwrap_or(0);
            let area = &areas[row * cols + col];
            let xs = p.curves.iter().flat_map(|(_, c)| c.iter().map(|&(x, _)| x));
            let lo = xs.clone().fold(f64::INFINITY, f64::min).max(0.1);
            let hi = xs.fold(0.0, f64::max).max(lo * 2.0);
            let mut chart = ChartBuilder::on(area)
                .caption(
                    format!("{} × {} in flight", size_label(p.payload), p.concurrency),
                    ("sans-serif", 16),
                )
                .margin(8)
                .x_label_area_size(28)
                .y_label_area_size(36)
                .build_cartesian_2d((lo * 0.9..hi * 1.1).log_scale(), 0.0..1.0)?;
            chart
                .configure_mesh()
                .x_labels(6)
                .y_labels(5)
                .x_label_formatter(&|v| latency_label(*v))
                .draw()?;
            for (sys, pts) in &p.curves {
                let c = colour(*sys);
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?
                    .label(sys.name())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| format!("plotting to {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn latency_labels_pick_a_unit() {
        assert_eq!(super::latency_label(20.0), "20µs");
        assert_eq!(super::latency_label(1500.0), "1.5ms");
        assert_eq!(super::latency_label(300_000.0), "300ms");
        assert_eq!(super::latency_label(2_000_000.0), "2s");
    }
}
