//! SVG line charts of a run, written beside `report.md`:
//!
//! - `iops-vs-clients.svg`, `mean-latency-vs-clients.svg`,
//!   `p9999-latency-vs-clients.svg`: one line per workload, queue depth
//!   and job count, over the number of clients;
//! - `iops-vs-latency.svg`: one line per workload and client count, its
//!   points the queue depths (IOPS across, mean latency up);
//! - `iops-vs-bs.svg`, `throughput-vs-bs.svg`: block-size sweeps.
//!
//! A chart is written only if one of its lines has two points or more.
//! The SVG is plain (axes, ticks, polylines, a legend), drawn here.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::results::{PointSummary, Results};
use crate::spec::Point;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A chart to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub file: &'static str,
    pub title: String,
    pub x_label: &'static str,
    pub y_label: &'static str,
    /// Logarithmic x axis (block sizes).
    pub x_log: bool,
    pub series: Vec<Series>,
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Group measured points into lines: `key` names the line, `xy` places a
/// point on it, `order` orders a line's points (the x value, or the queue
/// depth for IOPS-against-latency curves).
fn lines(
    results: &Results,
    key: impl Fn(&Point) -> String,
    xy: impl Fn(&Point, &PointSummary) -> (f64, f64),
    order: impl Fn(&Point, (f64, f64)) -> f64,
) -> Vec<Series> {
    // Per line: (order key, point).
    type Keyed = Vec<(f64, (f64, f64))>;
    let mut by: BTreeMap<String, Keyed> = BTreeMap::new();
    for p in &results.points {
        if let Some(s) = &p.summary {
            let at = xy(&p.point, s);
            by.entry(key(&p.point))
                .or_default()
                .push((order(&p.point, at), at));
        }
    }
    by.into_iter()
        .map(|(name, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                name,
                points: points.into_iter().map(|(_, at)| at).collect(),
            }
        })
        .collect()
}

/// Order a line's points by x.
fn by_x(_: &Point, at: (f64, f64)) -> f64 {
    at.0
}

fn jobs(p: &Point) -> String {
    if p.numjobs > 1 {
        format!(" ×{} jobs", p.numjobs)
    } else {
        String::new()
    }
}

/// The charts this run's points support.
pub fn charts(results: &Results) -> Vec<Chart> {
    let per_clients = |p: &Point| format!("{} qd{}{}", p.workload(), p.iodepth, jobs(p));
    let clients = |p: &Point| f64::from(p.clients);
    let mut out = vec![
        Chart {
            file: "iops-vs-clients.svg",
            title: "IOPS vs clients".into(),
            x_label: "clients",
            y_label: "IOPS",
            x_log: false,
            series: lines(
                results,
                per_clients,
                |p, s| (clients(p), s.median.iops),
                by_x,
            ),
        },
        Chart {
            file: "mean-latency-vs-clients.svg",
            title: "Mean latency vs clients".into(),
            x_label: "clients",
            y_label: "mean latency (µs)",
            x_log: false,
            series: lines(
                results,
                per_clients,
                |p, s| (clients(p), s.median.lat.mean_us),
                by_x,
            ),
        },
        Chart {
            file: "p9999-latency-vs-clients.svg",
            title: "p99.99 latency vs clients".into(),
            x_label: "clients",
            y_label: "p99.99 latency (µs)",
            x_log: false,
            series: lines(
                results,
                per_clients,
                |p, s| (clients(p), s.median.lat.p99_99_us),
                by_x,
            ),
        },
    ];
    // Across queue depths: IOPS against mean latency.
    out.push(Chart {
        file: "iops-vs-latency.svg",
        title: "IOPS vs mean latency across queue depths".into(),
        x_label: "IOPS",
        y_label: "mean latency (µs)",
        x_log: false,
        series: lines(
            results,
            |p| format!("{}{} {} clients", p.workload(), jobs(p), p.clients),
            |_, s| (s.median.iops, s.median.lat.mean_us),
            |p, _| f64::from(p.iodepth),
        ),
    });
    let per_bs = |p: &Point| format!("{} qd{}{} {} clients", p.rw, p.iodepth, jobs(p), p.clients);
    out.push(Chart {
        file: "iops-vs-bs.svg",
        title: "IOPS vs block size".into(),
        x_label: "block size (KiB)",
        y_label: "IOPS",
        x_log: true,
        series: lines(
            results,
            per_bs,
            |p, s| (p.bs as f64 / 1024.0, s.median.iops),
            by_x,
        ),
    });
    out.push(Chart {
        file: "throughput-vs-bs.svg",
        title: "Throughput vs block size".into(),
        x_label: "block size (KiB)",
        y_label: "MiB/s",
        x_log: true,
        series: lines(
            results,
            per_bs,
            |p, s| (p.bs as f64 / 1024.0, s.median.mib_s),
            by_x,
        ),
    });
    out.retain(|c| c.series.iter().any(|s| s.points.len() >= 2));
    out
}

/// A round step for about `n` ticks over `span`.
fn nice_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn tick_label(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{}M", v / 1_000_000.0)
    } else if v >= 10_000.0 {
        format!("{}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Draw a chart as SVG.
pub fn svg(chart: &Chart) -> String {
    let (w, h) = (760.0, 440.0);
    let (left, right, top, bottom) = (80.0, 250.0, 40.0, 60.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let all: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    let fx = |x: f64| if chart.x_log { x.max(1e-9).log2() } else { x };
    let (mut x0, mut x1) = all
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(fx(p.0)), b.max(fx(p.0)))
        });
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if !chart.x_log {
        x0 = x0.min(0.0);
    }
    let y_max = all.iter().map(|p| p.1).fold(0.0, f64::max);
    let y_step = nice_step(if y_max > 0.0 { y_max } else { 1.0 }, 5.0);
    let y1 = (y_max / y_step).ceil().max(1.0) * y_step;
    let sx = |x: f64| left + (fx(x) - x0) / (x1 - x0) * pw;
    let sy = |y: f64| top + ph - y / y1 * ph;

    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        esc(&chart.title)
    );
    // Axes and y ticks.
    let _ = writeln!(
        o,
        r##"<path d="M{left} {top} V{} H{}" stroke="#333" fill="none"/>"##,
        top + ph,
        left + pw
    );
    let mut y = 0.0;
    while y <= y1 + y_step / 2.0 {
        let py = sy(y);
        let _ = writeln!(
            o,
            r##"<line x1="{left}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            py + 4.0,
            tick_label(y)
        );
        y += y_step;
    }
    // X ticks: every distinct x of the data (block sizes, client counts),
    // or round steps for a continuous axis (IOPS).
    let mut xs: Vec<f64> = all.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    if !chart.x_log && (xs.len() > 12 || chart.x_label == "IOPS") {
        let step = nice_step(x1 - x0, 6.0);
        xs = (0..=((x1 - x0) / step).ceil() as usize)
            .map(|i| x0 + i as f64 * step)
            .collect();
    }
    for x in xs {
        let px = sx(x);
        if px > left + pw + 1.0 {
            continue;
        }
        let _ = writeln!(
            o,
            r##"<line x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{}" stroke="#333"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
            top + ph,
            top + ph + 5.0,
            top + ph + 18.0,
            tick_label(x)
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        h - 18.0,
        esc(chart.x_label)
    );
    let _ = writeln!(
        o,
        r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + ph / 2.0,
        esc(chart.y_label)
    );
    for (i, s) in chart.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = writeln!(
            o,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            pts.join(" ")
        );
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(o, r#"<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>"#);
        }
        let ly = top + 10.0 + i as f64 * 18.0;
        let _ = writeln!(
            o,
            r#"<rect x="{}" y="{}" width="12" height="3" fill="{color}"/><text x="{}" y="{}">{}</text>"#,
            w - right + 16.0,
            ly - 4.0,
            w - right + 34.0,
            ly,
            esc(&s.name)
        );
    }
    o.push_str("</svg>\n");
    o
}
