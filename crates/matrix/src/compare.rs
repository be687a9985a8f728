//! `cairn bench compare A.json B.json`: for every point both runs measured,
//! the change from A to B of IOPS, mean and p99.99 latency, in percent.

use std::fmt::Write as _;

use crate::report::{micros, thousands};
use crate::results::{PointResult, Results};
use crate::spec::Point;

/// One matching point.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub point: Point,
    pub a_iops: f64,
    pub b_iops: f64,
    pub a_mean_us: f64,
    pub b_mean_us: f64,
    pub a_p99_99_us: f64,
    pub b_p99_99_us: f64,
}

/// `(b - a) / a` in percent; `None` when `a` is 0.
pub fn pct(a: f64, b: f64) -> Option<f64> {
    (a != 0.0).then(|| (b - a) / a * 100.0)
}

/// `+134%`, `−70%` (a real minus sign), `n/a`.
pub fn fmt_pct(p: Option<f64>) -> String {
    match p {
        Some(p) if p < -0.5 => format!("\u{2212}{:.0}%", -p),
        Some(p) => format!("+{:.0}%", p.max(0.0)),
        None => "n/a".into(),
    }
}

impl Change {
    /// `randwrite 4K, qd32, 16 clients`.
    pub fn label(&self) -> String {
        let p = &self.point;
        let jobs = if p.numjobs > 1 {
            format!(", {} jobs", p.numjobs)
        } else {
            String::new()
        };
        let clients = if p.clients == 1 { "client" } else { "clients" };
        format!(
            "{}, qd{}{jobs}, {} {clients}",
            p.workload(),
            p.iodepth,
            p.clients
        )
    }

    /// `randwrite 4K, qd32, 16 clients: IOPS +134%, mean −70%, p99.99 −91%`.
    pub fn line(&self) -> String {
        format!(
            "{}: IOPS {}, mean {}, p99.99 {}",
            self.label(),
            fmt_pct(pct(self.a_iops, self.b_iops)),
            fmt_pct(pct(self.a_mean_us, self.b_mean_us)),
            fmt_pct(pct(self.a_p99_99_us, self.b_p99_99_us))
        )
    }
}

/// The points both runs measured successfully, in A's order; and the ids
/// of the points only one of them has (or that failed on either side).
pub fn changes(a: &Results, b: &Results) -> (Vec<Change>, Vec<String>) {
    let mut out = Vec::new();
    let mut unmatched = Vec::new();
    for pb in &b.points {
        if !a.points.iter().any(|p| p.id == pb.id) {
            unmatched.push(pb.id.clone());
        }
    }
    for pa in &a.points {
        // By id: `rwmixread` only matters for randrw, and the id says so.
        let pb: Option<&PointResult> = b.points.iter().find(|p| p.id == pa.id);
        match (pa.summary.as_ref(), pb.and_then(|p| p.summary.as_ref())) {
            (Some(sa), Some(sb)) => out.push(Change {
                point: pa.point,
                a_iops: sa.median.iops,
                b_iops: sb.median.iops,
                a_mean_us: sa.median.lat.mean_us,
                b_mean_us: sb.median.lat.mean_us,
                a_p99_99_us: sa.median.lat.p99_99_us,
                b_p99_99_us: sb.median.lat.p99_99_us,
            }),
            _ => unmatched.insert(0, pa.id.clone()),
        }
    }
    (out, unmatched)
}

fn name(r: &Results) -> String {
    format!("{} {} ({})", r.target.system, r.target.version, r.spec.name)
}

/// The comparison as text lines (for the terminal).
pub fn text(a: &Results, b: &Results) -> String {
    let (changes, unmatched) = changes(a, b);
    let mut out = format!("B = {} against A = {}\n", name(b), name(a));
    for c in &changes {
        let _ = writeln!(out, "{}", c.line());
    }
    if changes.is_empty() {
        out.push_str("no point was measured by both runs\n");
    }
    if !unmatched.is_empty() {
        let _ = writeln!(
            out,
            "not compared (missing or failed): {}",
            unmatched.join(", ")
        );
    }
    out
}

/// The comparison as a markdown table.
pub fn markdown(a: &Results, b: &Results) -> String {
    let (changes, unmatched) = changes(a, b);
    let mut out = format!(
        "# {} vs {}\n\nA: {} — {}\n\nB: {} — {}\n\n",
        name(b),
        name(a),
        name(a),
        a.target.config,
        name(b),
        b.target.config
    );
    out.push_str(
        "| point | IOPS A | IOPS B | IOPS | mean A (µs) | mean B (µs) | mean | p99.99 A (µs) | p99.99 B (µs) | p99.99 |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for c in &changes {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.label(),
            thousands(c.a_iops),
            thousands(c.b_iops),
            fmt_pct(pct(c.a_iops, c.b_iops)),
            micros(c.a_mean_us),
            micros(c.b_mean_us),
            fmt_pct(pct(c.a_mean_us, c.b_mean_us)),
            micros(c.a_p99_99_us),
            micros(c.b_p99_99_us),
            fmt_pct(pct(c.a_p99_99_us, c.b_p99_99_us)),
        );
    }
    if !unmatched.is_empty() {
        let _ = writeln!(
            out,
            "\nNot compared (missing or failed): {}",
            unmatched.join(", ")
        );
    }
    out
}
