//! The raw fio side of `cairn bench store`: lay out `DIR/fio.dat`, run the
//! selected points on it with `direct=1` and io_uring, then the 4 KiB random
//! write at iodepth 1 once more with an fdatasync after every write (the
//! `fio+sync` row, the baseline of the latency target), and read fio's JSON
//! into table rows. What went wrong is a [`FioStatus`], never an error.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use cairn_bench::RwMode;
use serde::Serialize;
use serde_json::Value;

use super::plan::{Plan, Point};
use super::report::{Fill, Out, Row};
use super::{FILL_BS, FILL_IODEPTH, MIB};

/// The point that runs once more with `--fdatasync=1` (after the matrix,
/// if selected): the latency target is the store's write latency at
/// iodepth 1 against raw fio's write + fdatasync.
pub(super) const SYNC_POINT: Point = Point {
    rw: RwMode::RandWrite,
    bs: 4 << 10,
    iodepth: 1,
};
/// The path of its row.
pub(super) const SYNC_PATH: &str = "fio+sync";

/// What became of the fio comparison.
#[derive(Debug, Clone, Serialize)]
pub(super) struct FioStatus {
    /// `ran`, `disabled` (--no-fio), `missing` (not installed) or `failed`.
    pub(super) state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) layout: Option<Fill>,
}

/// The fio comparison. Never fails: what went wrong is in the status.
pub(super) async fn fio_points(plan: &Plan, out: &Out, rows: &mut Vec<Row>) -> FioStatus {
    let mut status = FioStatus {
        state: "ran",
        version: None,
        detail: None,
        layout: None,
    };
    match tokio::process::Command::new("fio")
        .arg("--version")
        .kill_on_drop(true)
        .output()
        .await
    {
        Ok(o) if o.status.success() => {
            status.version = Some(String::from_utf8_lossy(&o.stdout).trim().to_string());
        }
        Ok(o) => {
            status.state = "missing";
            status.detail = Some(format!(
                "fio --version failed: {}",
                first_line(&o.stderr).unwrap_or_else(|| o.status.to_string())
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            status.state = "missing";
            status.detail = Some("fio is not installed (not in PATH)".to_string());
        }
        Err(e) => {
            status.state = "missing";
            status.detail = Some(format!("cannot run fio: {e}"));
        }
    }
    if status.state == "missing" {
        out.line(format!(
            "fio: skipped, {}",
            status.detail.as_deref().unwrap_or("not available")
        ));
        return status;
    }
    let file = plan.fio_file();
    let started = Instant::now();
    let layout = fio_json(&[
        "--name=layout".to_string(),
        format!("--filename={}", file.display()),
        format!("--size={}", plan.size),
        "--rw=write".to_string(),
        format!("--bs={FILL_BS}"),
        format!("--iodepth={FILL_IODEPTH}"),
        "--direct=1".to_string(),
        "--ioengine=io_uring".to_string(),
        "--output-format=json".to_string(),
    ])
    .await;
    if let Err(e) = layout {
        status.state = "failed";
        status.detail = Some(format!("laying out {}: {e:#}", file.display()));
        return status;
    }
    let fill = Fill::new(plan.size, started.elapsed());
    out.line(fill.text(&format!("fio layout of {}", file.display())));
    status.layout = Some(fill);
    for &p in &plan.points {
        let row = match fio_json(&point_args(plan, &file, p))
            .await
            .and_then(|v| fio_row(&v, p))
        {
            Ok(row) => row,
            Err(e) => {
                status.state = "failed";
                status.detail = Some(format!("point {}: {e:#}", p.name()));
                return status;
            }
        };
        out.line(row.line());
        rows.push(row);
    }
    // The latency target's baseline, if its point is selected.
    if plan.points.contains(&SYNC_POINT) {
        let mut args = point_args(plan, &file, SYNC_POINT);
        args.push("--fdatasync=1".to_string());
        let row = match fio_json(&args)
            .await
            .and_then(|v| fio_sync_row(&v, SYNC_POINT))
        {
            Ok(row) => row,
            Err(e) => {
                status.state = "failed";
                status.detail = Some(format!("point {} with fdatasync: {e:#}", SYNC_POINT.name()));
                return status;
            }
        };
        out.line(row.line());
        rows.push(row);
    }
    status
}

/// fio's arguments for point `p` on `file`.
fn point_args(plan: &Plan, file: &Path, p: Point) -> Vec<String> {
    vec![
        "--name=raw".to_string(),
        format!("--filename={}", file.display()),
        format!("--size={}", plan.size),
        format!("--rw={}", p.rw),
        format!("--bs={}", p.bs),
        format!("--iodepth={}", p.iodepth),
        "--direct=1".to_string(),
        "--ioengine=io_uring".to_string(),
        "--randrepeat=0".to_string(),
        "--norandommap".to_string(),
        format!("--runtime={}", plan.runtime.as_secs()),
        format!("--ramp_time={}", plan.ramp.as_secs()),
        "--time_based".to_string(),
        "--output-format=json".to_string(),
    ]
}

fn first_line(bytes: &[u8]) -> Option<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// Run fio with `args` and parse its JSON output.
async fn fio_json(args: &[String]) -> Result<Value> {
    let output = tokio::process::Command::new("fio")
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("cannot run fio")?;
    if !output.status.success() {
        bail!(
            "{}",
            first_line(&output.stderr)
                .or_else(|| first_line(&output.stdout))
                .unwrap_or_else(|| format!("fio exited with {}", output.status))
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    // fio may print notes before the document.
    let start = text.find('{').context("fio printed no JSON")?;
    let value: Value =
        serde_json::from_str(&text[start..]).context("cannot parse fio's JSON output")?;
    let error = value["jobs"][0]["error"].as_i64().unwrap_or(0);
    if error != 0 {
        bail!("fio job failed with error {error}");
    }
    Ok(value)
}

/// A row from fio's JSON: `iops`, `bw_bytes`, `lat_ns.mean` and the
/// `clat_ns` percentiles of the job's direction.
fn fio_row(value: &Value, p: Point) -> Result<Row> {
    let dir = if p.rw.writes() { "write" } else { "read" };
    let d = &value["jobs"][0][dir];
    if d.is_null() {
        bail!("fio's JSON has no jobs[0].{dir}");
    }
    let num = |v: &Value, what: &str| -> Result<f64> {
        v.as_f64()
            .with_context(|| format!("fio's JSON has no number {dir}.{what}"))
    };
    let pct = &d["clat_ns"]["percentile"];
    let us = |key: &str| -> Result<f64> { Ok(num(&pct[key], key)? / 1000.0) };
    let bw = match d["bw_bytes"].as_f64() {
        Some(b) => b,
        None => num(&d["bw"], "bw")? * 1024.0,
    };
    Ok(Row {
        iops: num(&d["iops"], "iops")?,
        mib_per_s: bw / MIB as f64,
        mean_us: num(&d["lat_ns"]["mean"], "lat_ns.mean")? / 1000.0,
        p50_us: us("50.000000")?,
        p99_us: us("99.000000")?,
        p99_99_us: us("99.990000")?,
        ..Row::new("fio", p)
    })
}

/// The `fio+sync` row, from a run with `--fdatasync=1`: fio's write row
/// (IOPS and bandwidth count writes, each waited for with its fdatasync)
/// with the `sync` section's `lat_ns` added to the latencies. The mean is
/// exact (write mean + fdatasync mean); each percentile is the sum of the
/// two percentiles, an estimate, as fio keeps none of the sum.
fn fio_sync_row(value: &Value, p: Point) -> Result<Row> {
    let write = fio_row(value, p)?;
    let sync = &value["jobs"][0]["sync"]["lat_ns"];
    let us = |v: &Value, what: &str| -> Result<f64> {
        let ns = v
            .as_f64()
            .with_context(|| format!("fio's JSON has no number sync.lat_ns.{what}"))?;
        Ok(ns / 1000.0)
    };
    let mean = us(&sync["mean"], "mean")?;
    if mean <= 0.0 {
        bail!("fio's JSON shows no fdatasync (sync.lat_ns.mean is 0)");
    }
    let pct = |key: &str| us(&sync["percentile"][key], key);
    Ok(Row {
        path: SYNC_PATH,
        mean_us: write.mean_us + mean,
        p50_us: write.p50_us + pct("50.000000")?,
        p99_us: write.p99_us + pct("99.000000")?,
        p99_99_us: write.p99_99_us + pct("99.990000")?,
        ..write
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_json_is_read_like_foundation_py() {
        let json = serde_json::json!({
            "jobs": [{
                "error": 0,
                "write": {
                    "iops": 2000.5,
                    "bw_bytes": 8_194_048,
                    "lat_ns": { "mean": 480_000.0 },
                    "clat_ns": { "percentile": {
                        "50.000000": 450_000, "99.000000": 900_000, "99.990000": 2_000_000
                    } }
                },
                "read": { "iops": 0.0 }
            }]
        });
        let p = Point {
            rw: RwMode::RandWrite,
            bs: 4096,
            iodepth: 1,
        };
        let row = fio_row(&json, p).expect("row");
        assert_eq!(row.path, "fio");
        assert_eq!(row.iops, 2000.5);
        assert!((row.mib_per_s - 8_194_048.0 / MIB as f64).abs() < 1e-9);
        assert_eq!(
            (row.mean_us, row.p50_us, row.p99_us, row.p99_99_us),
            (480.0, 450.0, 900.0, 2000.0)
        );
        let read = Point {
            rw: RwMode::RandRead,
            ..p
        };
        assert!(fio_row(&json, read).is_err());

        // Without a sync section there is no fio+sync row ...
        assert!(fio_sync_row(&json, p).is_err());
        // ... and with one, its latencies are added to the write's.
        let mut synced = json.clone();
        synced["jobs"][0]["sync"] = serde_json::json!({
            "total_ios": 0,
            "lat_ns": {
                "mean": 120_000.0, "N": 1000,
                "percentile": {
                    "50.000000": 100_000, "99.000000": 300_000, "99.990000": 1_000_000
                }
            }
        });
        let row = fio_sync_row(&synced, p).expect("sync row");
        assert_eq!(row.path, SYNC_PATH);
        assert_eq!(row.iops, 2000.5);
        assert_eq!(
            (row.mean_us, row.p50_us, row.p99_us, row.p99_99_us),
            (600.0, 550.0, 1200.0, 3000.0)
        );
    }
}
