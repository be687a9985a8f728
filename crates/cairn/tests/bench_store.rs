//! `cairn bench store`: the real binary benchmarks a memstore and a small
//! BlueStore in a temporary directory (no cluster, no configuration file),
//! prints one JSON document with the selected points, and tidies up after
//! itself; bad arguments are one line on stderr and a non-zero exit, and
//! touch nothing.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const CAIRN: &str = env!("CARGO_BIN_EXE_cairn");

/// Run `cairn ARGS` with `env` set, in an empty working directory (so no
/// `./cairn.toml` is found), failing if it runs longer than `limit`.
fn run_env(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let cwd = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(CAIRN);
    cmd.args(args)
        .current_dir(cwd.path())
        .env_remove("CAIRN_CONF")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run cairn");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "cairn {args:?} still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(args: &[&str]) -> Output {
    run_env(args, &[], Duration::from_secs(60))
}

/// Run `cairn --json ARGS`, expect success, and parse the document.
fn json_ok(args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = run_env(&full, env, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cairn {full:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{full:?}: not JSON ({e}): {stdout}"))
}

/// Expect failure: non-zero exit, exactly one line on stderr; returns it.
fn one_line_failure(out: &Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{what} should have failed");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{what}: error should be one line: {err:?}"
    );
    assert!(!err.trim().is_empty(), "{what}: empty error");
    err
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The store rows of a document, by point name.
fn store_points(doc: &Value) -> Vec<(String, f64)> {
    doc["points"]
        .as_array()
        .expect("points")
        .iter()
        .filter(|p| p["path"] == "store")
        .map(|p| {
            (
                p["point"].as_str().expect("point name").to_string(),
                p["iops"].as_f64().expect("iops"),
            )
        })
        .collect()
}

#[test]
fn memstore_points_in_json_and_nothing_left_behind() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_str().expect("utf-8 path");
    let doc = json_ok(
        &[
            "bench",
            "store",
            "--store",
            "memstore",
            "--dir",
            dir,
            "--size",
            "64M",
            "--runtime",
            "1",
            "--ramp",
            "0",
            "--no-fio",
            "--points",
            "4k-randwrite-1,4k-randread-32",
        ],
        &[],
    );
    let points = store_points(&doc);
    let names: Vec<&str> = points.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["4k-randwrite-1", "4k-randread-32"], "{doc}");
    for (name, iops) in &points {
        assert!(*iops > 0.0, "{name}: {iops} IOPS");
    }
    let rows = doc["points"].as_array().expect("points");
    assert_eq!(rows.len(), 2, "--no-fio: no fio rows: {doc}");
    assert_eq!(rows[1]["rw"], "randread");
    assert_eq!(rows[1]["iodepth"], 32);
    assert!(rows[1]["p99.99_us"].as_f64().expect("p99.99") > 0.0);
    for row in rows {
        // The process did work for every measured op: CPU per op is
        // positive and bounded (a second per op would be a broken window).
        let cpu = row["cpu_us_per_op"].as_f64().expect("cpu_us_per_op");
        assert!(cpu > 0.0 && cpu < 1e6, "{row}");
        assert!(row["context_switches_per_op"].as_f64().is_some(), "{row}");
    }
    assert_eq!(doc["store"], "memstore");
    assert_eq!(doc["size"], 64u64 << 20);
    assert_eq!(doc["fio"]["state"], "disabled");
    assert_eq!(doc["precondition"]["bytes"], 64u64 << 20);
    assert!(doc.get("perf").is_none(), "perf is BlueStore's: {doc}");
    assert!(
        entries(tmp.path()).is_empty(),
        "left behind: {:?}",
        entries(tmp.path())
    );
}

#[test]
fn bluestore_points_with_counters_and_keep() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("bench");
    let dir_s = dir.to_str().expect("utf-8 path");
    let doc = json_ok(
        &[
            "bench",
            "store",
            "--store",
            "bluestore",
            "--dir",
            dir_s,
            "--size",
            "32M",
            "--runtime",
            "1",
            "--ramp",
            "0",
            "--no-fio",
            "--points",
            "4k-randwrite-32,1m-read-1",
            "--set",
            "osd.bluestore_csum_type=none",
            "--keep",
        ],
        &[],
    );
    let points = store_points(&doc);
    let names: Vec<&str> = points.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["4k-randwrite-32", "1m-read-1"], "{doc}");
    for (name, iops) in &points {
        assert!(*iops > 0.0, "{name}: {iops} IOPS");
    }
    assert_eq!(doc["store"], "bluestore");
    // 32M + 25% + 64M, rounded up to a MiB.
    assert_eq!(doc["bluestore_block_size"], 104u64 << 20);
    let perf = &doc["perf"];
    assert!(
        perf["kv_commits"].as_u64().expect("kv_commits") > 0,
        "{doc}"
    );
    let writes = perf["deferred_writes"].as_u64().expect("deferred")
        + perf["direct_writes"].as_u64().expect("direct");
    assert!(writes > 0, "{doc}");
    assert!(
        doc["points"][0]["perf"]["transactions"]
            .as_u64()
            .expect("per-point perf")
            > 0
    );
    // The process's peak memory, against the default 128 MiB cache.
    let memory = &doc["memory"];
    assert!(
        memory["peak_rss_bytes"].as_u64().expect("peak rss") > 1 << 20,
        "{doc}"
    );
    assert_eq!(memory["budget"], "cache_size", "{doc}");
    assert_eq!(memory["budget_bytes"], 128u64 << 20, "{doc}");
    // --keep: the store stays, in DIR/store.
    assert!(dir.join("store/block").is_file(), "{:?}", entries(&dir));
    assert!(dir.join("store/db").is_dir());

    // Without --keep a run in a non-empty DIR needs --force, replaces what
    // the earlier run left there, and removes only what it made.
    std::fs::write(dir.join("mine.txt"), b"keep me").expect("write");
    let args = [
        "bench",
        "store",
        "--store",
        "memstore",
        "--dir",
        dir_s,
        "--size",
        "1M",
        "--runtime",
        "1",
        "--ramp",
        "0",
        "--no-fio",
        "--points",
        "1m-write-1",
    ];
    let err = one_line_failure(&run(&args), "non-empty dir without --force");
    assert!(
        err.contains("not empty") && err.contains("--force"),
        "{err}"
    );
    let mut forced = args.to_vec();
    forced.push("--force");
    let doc = json_ok(&forced, &[]);
    assert_eq!(store_points(&doc).len(), 1);
    assert_eq!(entries(&dir), ["mine.txt"]);
}

#[test]
fn fio_is_reported_missing_when_not_installed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_str().expect("utf-8 path");
    let empty = tempfile::tempdir().expect("tempdir");
    let path = empty.path().to_str().expect("utf-8 path");
    let args = [
        "bench",
        "store",
        "--store",
        "memstore",
        "--dir",
        dir,
        "--size",
        "4M",
        "--runtime",
        "1",
        "--ramp",
        "0",
        "--points",
        "4k-randwrite-1",
    ];
    let doc = json_ok(&args, &[("PATH", path)]);
    assert_eq!(doc["fio"]["state"], "missing", "{doc}");
    assert_eq!(doc["points"].as_array().expect("points").len(), 1);
    // The table says so in one line.
    let out = run_env(&args, &[("PATH", path)], Duration::from_secs(60));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let said: Vec<&str> = text.lines().filter(|l| l.starts_with("fio:")).collect();
    assert_eq!(said.len(), 1, "{text}");
    assert!(said[0].contains("not installed"), "{text}");
}

#[test]
fn fio_points_sit_beside_the_store_points() {
    if Command::new("fio").arg("--version").output().is_err() {
        eprintln!("fio is not installed: skipping");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_str().expect("utf-8 path");
    let doc = json_ok(
        &[
            "bench",
            "store",
            "--store",
            "memstore",
            "--dir",
            dir,
            "--size",
            "16M",
            "--runtime",
            "1",
            "--ramp",
            "0",
            "--points",
            "4k-randwrite-1",
        ],
        &[],
    );
    if doc["fio"]["state"] == "failed" {
        panic!("fio failed: {doc}");
    }
    let rows = doc["points"].as_array().expect("points");
    let fio: Vec<&Value> = rows.iter().filter(|r| r["path"] == "fio").collect();
    assert_eq!(fio.len(), 1, "{doc}");
    assert_eq!(fio[0]["point"], "4k-randwrite-1");
    assert!(fio[0]["iops"].as_f64().expect("iops") > 0.0, "{doc}");
    assert!(fio[0]["p50_us"].as_f64().expect("p50") > 0.0, "{doc}");
    let ratio = doc["ratios"]["randwrite_4k_qd1_mean_latency"]
        .as_f64()
        .expect("ratio");
    assert!(ratio > 0.0, "{doc}");
    // 4k-randwrite-1 is selected, so it runs once more with fdatasync: the
    // latency target's baseline, with its own row and ratio.
    let synced: Vec<&Value> = rows.iter().filter(|r| r["path"] == "fio+sync").collect();
    assert_eq!(synced.len(), 1, "{doc}");
    assert_eq!(synced[0]["point"], "4k-randwrite-1");
    assert_eq!(synced[0]["rw"], "randwrite");
    assert_eq!(synced[0]["bs"], 4096);
    assert_eq!(synced[0]["iodepth"], 1);
    assert!(synced[0]["iops"].as_f64().expect("iops") > 0.0, "{doc}");
    assert!(synced[0]["mean_us"].as_f64().expect("mean") > 0.0, "{doc}");
    let target = doc["ratios"]["randwrite_4k_qd1_latency_vs_fio_fdatasync"]
        .as_f64()
        .expect("target ratio");
    assert!(target > 0.0, "{doc}");
    assert!(entries(tmp.path()).is_empty(), "fio.dat left behind");

    // Without 4k-randwrite-1 there is no fdatasync point and no target ratio.
    let doc = json_ok(
        &[
            "bench",
            "store",
            "--store",
            "memstore",
            "--dir",
            dir,
            "--size",
            "4M",
            "--runtime",
            "1",
            "--ramp",
            "0",
            "--points",
            "4k-randread-1",
        ],
        &[],
    );
    assert_eq!(doc["fio"]["state"], "ran", "{doc}");
    let paths: Vec<&str> = doc["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|r| r["path"].as_str().expect("path"))
        .collect();
    assert_eq!(paths, ["store", "fio"], "{doc}");
    assert!(
        doc["ratios"]["randwrite_4k_qd1_latency_vs_fio_fdatasync"].is_null(),
        "{doc}"
    );
}

#[test]
fn bad_arguments_are_one_line_and_touch_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("never");
    let dir_s = dir.to_str().expect("utf-8 path");
    let base = ["bench", "store", "--dir", dir_s, "--no-fio"];
    let cases: [(&[&str], &str); 7] = [
        (&["--store", "rocks"], "unknown store"),
        (&["--size", "0"], "--size"),
        (&["--size", "lots"], "invalid size"),
        (&["--runtime", "0"], "--runtime"),
        (&["--points", "4k-randwrite-2000"], "unknown point"),
        (&["--set", "osd.no_such_option=1"], "no_such_option"),
        (
            &["--set", "osd.bluestore_csum_type=md5"],
            "bluestore_csum_type",
        ),
    ];
    for (extra, want) in cases {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let err = one_line_failure(&run(&args), &format!("{extra:?}"));
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(!dir.exists(), "{extra:?} made {}", dir.display());
    }

    // A non-empty DIR is refused without --force, and left as it was.
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("data"), b"precious").expect("write");
    let mut args = base.to_vec();
    args.extend_from_slice(&["--store", "memstore", "--size", "1M"]);
    let err = one_line_failure(&run(&args), "non-empty dir");
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(entries(&dir), ["data"]);
    assert_eq!(std::fs::read(dir.join("data")).expect("read"), b"precious");

    // A file is not a directory.
    let file = dir.join("data");
    let args = [
        "bench",
        "store",
        "--dir",
        file.to_str().expect("utf-8"),
        "--force",
    ];
    let err = one_line_failure(&run(&args), "file as dir");
    assert!(err.contains("not a directory"), "{err}");
}
