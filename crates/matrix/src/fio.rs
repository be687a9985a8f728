//! fio's JSON output (`--output-format=json+`) read into a client's raw
//! measurement.
//!
//! fio reports each job separately; one client's jobs are summed. Latency
//! is fio's completion latency (`clat_ns`), whose `json+` output carries
//! the full histogram as `bins` (bucket value in ns -> count), so clients
//! and repetitions merge exactly like Cairn's own histograms. Submission
//! latency, which `clat` leaves out, is a few microseconds for the engines
//! used here (nbd, rbd) and is not added.

use serde_json::Value;

use crate::results::{ClientRaw, DirRaw};

/// Why fio's output could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FioError {
    #[error("fio output is not JSON: {0}")]
    NotJson(String),
    #[error("fio output has no jobs")]
    NoJobs,
    #[error("fio job {job:?} failed with error {error}")]
    JobFailed { job: String, error: i64 },
    #[error("fio output lacks {0} (was it run with --output-format=json+?)")]
    Missing(String),
}

/// Parse fio's JSON output as one client's measurement: every job summed.
/// fio may print warnings before the JSON: everything up to the first `{`
/// is skipped. Returns the measurement and the longest job runtime in
/// seconds.
pub fn parse(output: &str, client: u32) -> Result<(ClientRaw, f64), FioError> {
    let jobs = jobs(output)?;
    let mut raw = ClientRaw {
        client,
        ..ClientRaw::default()
    };
    let mut seconds: f64 = 0.0;
    for job in jobs {
        seconds = seconds.max(add_job(&mut raw, &job)?);
    }
    Ok((raw, seconds))
}

/// Parse the output of one fio run holding every client: the jobs of
/// client `i` are the ones named `c{i}` (one per `numjobs`). Returns a
/// measurement per client, in order, and the longest job runtime.
pub fn parse_clients(output: &str, clients: u32) -> Result<(Vec<ClientRaw>, f64), FioError> {
    let mut out: Vec<ClientRaw> = (0..clients)
        .map(|client| ClientRaw {
            client,
            ..ClientRaw::default()
        })
        .collect();
    let mut seen = vec![false; clients as usize];
    let mut seconds: f64 = 0.0;
    for job in jobs(output)? {
        let name = job
            .get("jobname")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let i = name
            .strip_prefix('c')
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&i| i < out.len())
            .ok_or_else(|| FioError::Missing(format!("a client for job {name:?}")))?;
        seconds = seconds.max(add_job(&mut out[i], &job)?);
        seen[i] = true;
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        return Err(FioError::Missing(format!("job c{i}")));
    }
    Ok((out, seconds))
}

/// The `jobs` array of fio's JSON output (the first JSON value after any
/// warnings; anything printed after it is ignored).
fn jobs(output: &str) -> Result<Vec<Value>, FioError> {
    let start = output
        .find('{')
        .ok_or_else(|| FioError::NotJson("no '{' in it".into()))?;
    let value: Value = serde_json::Deserializer::from_str(&output[start..])
        .into_iter::<Value>()
        .next()
        .ok_or_else(|| FioError::NotJson("empty".into()))?
        .map_err(|e| FioError::NotJson(e.to_string()))?;
    match value.get("jobs").and_then(Value::as_array) {
        Some(jobs) if !jobs.is_empty() => Ok(jobs.clone()),
        _ => Err(FioError::NoJobs),
    }
}

/// Add one job's reads and writes to `raw`; returns its runtime in seconds
/// (0 if it did nothing).
fn add_job(raw: &mut ClientRaw, job: &Value) -> Result<f64, FioError> {
    let name = job
        .get("jobname")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();
    let error = job.get("error").and_then(Value::as_i64).unwrap_or(0);
    if error != 0 {
        return Err(FioError::JobFailed { job: name, error });
    }
    let mut seconds: f64 = 0.0;
    for (dir, into) in [("read", &mut raw.read), ("write", &mut raw.write)] {
        let d = job
            .get(dir)
            .ok_or_else(|| FioError::Missing(format!("jobs[].{dir}")))?;
        let field = |key: &str| {
            d.get(key)
                .and_then(Value::as_u64)
                .ok_or_else(|| FioError::Missing(format!("jobs[].{dir}.{key}")))
        };
        let ops = field("total_ios")?;
        into.ops += ops;
        into.bytes += field("io_bytes")?;
        let runtime_ms = field("runtime")?;
        if ops > 0 {
            seconds = seconds.max(runtime_ms as f64 / 1000.0);
            merge_bins(into, d, dir)?;
        }
    }
    Ok(seconds)
}

/// Add `clat_ns.bins` of a direction to `into`'s buckets.
fn merge_bins(into: &mut DirRaw, dir: &Value, name: &str) -> Result<(), FioError> {
    let bins = dir
        .get("clat_ns")
        .and_then(|c| c.get("bins"))
        .and_then(Value::as_object)
        .ok_or_else(|| FioError::Missing(format!("jobs[].{name}.clat_ns.bins")))?;
    let mut buckets: std::collections::BTreeMap<u64, u64> = into.lat_ns.iter().copied().collect();
    for (value, count) in bins {
        let value: u64 = value.parse().map_err(|_| {
            FioError::Missing(format!("a numeric bin in jobs[].{name}.clat_ns.bins"))
        })?;
        let count = count
            .as_u64()
            .ok_or_else(|| FioError::Missing(format!("a count in jobs[].{name}.clat_ns.bins")))?;
        *buckets.entry(value).or_default() += count;
    }
    into.lat_ns = buckets.into_iter().filter(|&(_, c)| c > 0).collect();
    Ok(())
}
