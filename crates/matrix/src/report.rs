//! The files a matrix run leaves in its output directory:
//! `results.json` (everything, raw), `results.csv` (one row per point) and
//! `report.md` (tables like the source documents' reports). Each is
//! written to a temporary name and renamed, so an interrupted run never
//! leaves half a file.

use std::fmt::Write as _;
use std::path::Path;

use crate::results::{PointResult, Results};
use crate::spec::bs_name;

/// Write `text` to `path` atomically (temporary file, then rename).
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// `results.json`.
pub fn json(results: &Results) -> String {
    serde_json::to_string_pretty(results).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Read a `results.json`.
pub fn load(path: &Path) -> Result<Results, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a results.json: {e}", path.display()))
}

const CSV_HEADER: &str = "id,workload,rw,rwmixread,bs,iodepth,numjobs,clients,repetitions,\
iops,iops_min,iops_max,read_iops,write_iops,mib_s,mean_us,p50_us,p99_us,p99_9_us,p99_99_us,\
cpu_s,iops_per_cpu_s,osd_cpu_us_per_op,gateway_cpu_us_per_op,osd_csw_per_op,error";

/// `results.csv`: one row per point, medians over repetitions.
pub fn csv(results: &Results) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for p in &results.points {
        let pt = &p.point;
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{},",
            p.id,
            pt.workload(),
            pt.rw,
            pt.rwmixread,
            pt.bs,
            pt.iodepth,
            pt.numjobs,
            pt.clients
        );
        match &p.summary {
            Some(s) => {
                let m = &s.median;
                let _ = write!(
                    out,
                    "{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.2},{:.1},{:.1},{:.1},{:.1},{:.1},{:.3},{:.1},",
                    s.repetitions,
                    m.iops,
                    s.iops_min,
                    s.iops_max,
                    m.read_iops,
                    m.write_iops,
                    m.mib_s,
                    m.lat.mean_us,
                    m.lat.p50_us,
                    m.lat.p99_us,
                    m.lat.p99_9_us,
                    m.lat.p99_99_us,
                    m.cpu_s,
                    m.iops_per_cpu_s
                );
                for v in [
                    m.osd_cpu_us_per_op,
                    m.gateway_cpu_us_per_op,
                    m.osd_csw_per_op,
                ] {
                    if let Some(v) = v {
                        let _ = write!(out, "{v:.1}");
                    }
                    out.push(',');
                }
            }
            None => out.push_str(&",".repeat(17)),
        }
        let error = p.error.as_deref().unwrap_or("").replace(['"', '\n'], " ");
        if error.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "\"{error}\"");
        }
    }
    out
}

/// A count with thousands separators: `12345.6` -> `12,346`.
pub fn thousands(x: f64) -> String {
    let n = x.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// Microseconds, with a precision that suits their size.
pub fn micros(us: f64) -> String {
    if us >= 100.0 {
        thousands(us)
    } else {
        format!("{us:.1}")
    }
}

/// `report.md`.
pub fn markdown(results: &Results) -> String {
    let spec = &results.spec;
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", spec.name);
    if !spec.description.is_empty() {
        let _ = writeln!(out, "{}\n", spec.description);
    }
    let t = &results.target;
    let _ = writeln!(out, "- Target: {} {} ({})", t.system, t.version, t.config);
    let _ = writeln!(out, "- Driver: {}", spec.driver.as_str());
    let _ = writeln!(out, "- Machine: {}", results.machine);
    let _ = writeln!(out, "- Started: {}", results.started);
    let _ = writeln!(
        out,
        "- Each point: {} s ramp, {} s measured, {} repetition(s) (median; IOPS range in brackets), \
         images of {} bytes{}",
        spec.ramp_s,
        spec.runtime_s,
        spec.repetitions,
        spec.image_size,
        if spec.precondition {
            ", written in full first"
        } else {
            ""
        }
    );
    if results.interrupted {
        let _ = writeln!(out, "- **Interrupted**: only the points below ran.");
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "| workload | iodepth | jobs | clients | IOPS | MiB/s | mean (µs) | p99 (µs) | p99.99 (µs) | IOPS per CPU-s | OSD CPU µs/op | OSD switches/op | gateway CPU µs/op |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for p in &results.points {
        let _ = writeln!(out, "{}", row(p, spec.repetitions > 1));
    }
    let failed: Vec<&PointResult> = results
        .points
        .iter()
        .filter(|p| p.error.is_some())
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "\nFailed points:\n");
        for p in failed {
            let _ = writeln!(out, "- `{}`: {}", p.id, p.error.as_deref().unwrap_or(""));
        }
    }
    out
}

fn row(p: &PointResult, spread: bool) -> String {
    let pt = &p.point;
    let head = format!(
        "| {} | {} | {} | {} ",
        pt.workload(),
        pt.iodepth,
        pt.numjobs,
        pt.clients
    );
    match &p.summary {
        Some(s) => {
            let m = &s.median;
            let iops = if spread {
                format!(
                    "{} [{}–{}]",
                    thousands(m.iops),
                    thousands(s.iops_min),
                    thousands(s.iops_max)
                )
            } else {
                thousands(m.iops)
            };
            let per_cpu = if m.iops_per_cpu_s > 0.0 {
                thousands(m.iops_per_cpu_s)
            } else {
                "–".into()
            };
            let or_dash = |v: Option<f64>, f: fn(f64) -> String| v.map_or("–".into(), f);
            format!(
                "{head}| {iops} | {:.1} | {} | {} | {} | {per_cpu} | {} | {} | {} |",
                m.mib_s,
                micros(m.lat.mean_us),
                micros(m.lat.p99_us),
                micros(m.lat.p99_99_us),
                or_dash(m.osd_cpu_us_per_op, |v| format!("{v:.0}")),
                or_dash(m.osd_csw_per_op, |v| format!("{v:.1}")),
                or_dash(m.gateway_cpu_us_per_op, |v| format!("{v:.0}")),
            )
        }
        None => format!("{head}| failed | | | | | | | | |"),
    }
}

/// A block size for labels: `4K`, `1M`.
pub fn bs_label(bs: u64) -> String {
    bs_name(bs).to_uppercase()
}
