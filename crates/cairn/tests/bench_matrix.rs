//! `cairn bench matrix` and `cairn bench compare` end to end: short real
//! matrices through both drivers against real local clusters, bad specs
//! refused before anything runs, Ctrl-C keeping finished points, and a
//! point whose OSD is killed recorded as failed while the matrix goes on.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const CAIRN: &str = env!("CARGO_BIN_EXE_cairn");

fn spec(dir: &Path, driver: &str, workload: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{driver}.toml"));
    let text = format!(
        r#"name = "ci-{driver}"
[cluster]
osds = 3
store = "bluestore"
pg_num = 16
set = ["osd.bluestore_block_size=536870912", "osd.bluestore_cache_size=33554432",
       "mon.osd_heartbeat_grace_ms=3000"]
[workload]
{workload}
[driver]
kind = "{driver}"
"#
    );
    std::fs::write(&path, text).unwrap();
    path
}

const SHORT: &str = r#"rw = "randwrite"
bs = "4k"
iodepth = 4
clients = [1, 2]
image_size = "32M"
ramp = 1
runtime = 2
"#;

fn run(args: &[&str]) -> Output {
    Command::new(CAIRN).args(args).output().expect("run cairn")
}

fn results(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    serde_json::from_str(&text).expect("results.json is JSON")
}

/// No process runs with the run's cluster directory in its command line
/// (every daemon `cluster up` starts names its directory there).
fn assert_cluster_stopped(out: &Path) {
    let dir = out
        .join("cluster")
        .canonicalize()
        .expect("the cluster directory");
    let needle = dir.to_string_lossy().into_owned();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rfind(')')
            .is_some_and(|i| stat[i + 2..].starts_with('Z'));
        if cmdline.contains(&needle) && !zombie {
            left.push(cmdline);
        }
    }
    assert!(left.is_empty(), "still running after the matrix: {left:#?}");
    let daemons = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .count();
    assert!(daemons >= 4, "the cluster ran a monitor and 3 OSDs");
    assert!(!dir.join("osd.0").exists(), "the OSDs' data is removed");
}

/// Check a finished run's points: measured, consistent, with CPU time.
fn check_points(doc: &Value, ids: &[&str]) {
    let points = doc["points"].as_array().unwrap();
    let got: Vec<&str> = points.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(got, ids);
    for p in points {
        assert!(p["error"].is_null(), "{}", p["error"]);
        let iops = p["summary"]["median"]["iops"].as_f64().unwrap();
        assert!(iops > 50.0, "{}: {iops} IOPS", p["id"]);
        let rep = &p["reps"][0];
        let clients = rep["clients"].as_array().unwrap();
        assert_eq!(
            clients.len() as u64,
            p["point"]["clients"].as_u64().unwrap()
        );
        for c in clients {
            let ops = c["write"]["ops"].as_u64().unwrap();
            assert!(ops > 0, "{c}");
            let counted: u64 = c["write"]["lat_ns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b[1].as_u64().unwrap())
                .sum();
            let blocks = c["write"]["bytes"].as_u64().unwrap() / 4096;
            if doc["spec"]["driver"] == "builtin" {
                assert_eq!(counted, ops, "one latency per operation");
                assert_eq!(blocks, ops);
            } else {
                // fio counts operations and completion latencies apart;
                // they differ by at most the operations in flight at the
                // window's edges.
                let in_flight = p["point"]["iodepth"].as_u64().unwrap();
                assert!(
                    counted.abs_diff(ops) <= in_flight,
                    "{counted} latencies, {ops} ops"
                );
                assert!(
                    blocks.abs_diff(ops) <= in_flight,
                    "{blocks} blocks, {ops} ops"
                );
            }
        }
        let cpu = rep["cpu_s"].as_object().unwrap();
        for osd in ["osd.0", "osd.1", "osd.2"] {
            assert!(cpu[osd].as_f64().unwrap() > 0.0, "{osd} used no CPU: {rep}");
        }
        assert!(p["summary"]["median"]["iops_per_cpu_s"].as_f64().unwrap() > 0.0);
        let csw = rep["csw"].as_object().unwrap();
        for osd in ["osd.0", "osd.1", "osd.2"] {
            assert!(
                csw[osd].as_u64().unwrap() > 0,
                "{osd} never switched: {rep}"
            );
        }
        let median = &p["summary"]["median"];
        assert!(
            median["osd_cpu_us_per_op"].as_f64().unwrap() > 0.0,
            "{median}"
        );
        assert!(median["osd_csw_per_op"].as_f64().unwrap() > 0.0, "{median}");
        if doc["spec"]["driver"] == "fio" {
            // One gateway per client image, measured like a daemon.
            assert!(
                cpu["nbd.0"].as_f64().unwrap() > 0.0,
                "the gateway used no CPU: {rep}"
            );
            assert!(
                median["gateway_cpu_us_per_op"].as_f64().unwrap() > 0.0,
                "{median}"
            );
        } else {
            assert!(median["gateway_cpu_us_per_op"].is_null(), "{median}");
        }
    }
}

#[test]
fn a_short_matrix_through_both_drivers_and_compare() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = ["randwrite-4k-qd4-j1-c1", "randwrite-4k-qd4-j1-c2"];
    let mut outs = Vec::new();
    for driver in ["builtin", "fio"] {
        let out = tmp.path().join(driver);
        let s = spec(tmp.path(), driver, SHORT);
        let r = run(&[
            "bench",
            "matrix",
            "--spec",
            s.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(
            r.status.success(),
            "{driver}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let doc = results(&out);
        assert_eq!(doc["interrupted"], false);
        assert_eq!(doc["spec"]["driver"], driver);
        check_points(&doc, &ids);
        let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
        assert_eq!(csv.lines().count(), 3, "{csv}");
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(md.contains("| randwrite 4K | 4 | 1 | 2 |"), "{md}");
        let svg = std::fs::read_to_string(out.join("iops-vs-clients.svg")).unwrap();
        assert!(svg.contains("<polyline"), "{svg}");
        assert_cluster_stopped(&out);
        outs.push(out);
    }
    // The same directory again is refused without --force.
    let s = spec(tmp.path(), "builtin", SHORT);
    let r = run(&[
        "bench",
        "matrix",
        "--spec",
        s.to_str().unwrap(),
        "--out",
        outs[0].to_str().unwrap(),
    ]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("already holds results"));

    let md = tmp.path().join("compare.md");
    let a = outs[0].join("results.json");
    let b = outs[1].join("results.json");
    let r = run(&[
        "bench",
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--out",
        md.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.contains("randwrite 4K, qd4, 1 client: IOPS "),
        "{text}"
    );
    assert!(
        text.contains("randwrite 4K, qd4, 2 clients: IOPS "),
        "{text}"
    );
    let table = std::fs::read_to_string(&md).unwrap();
    assert_eq!(
        table
            .lines()
            .filter(|l| l.starts_with("| randwrite"))
            .count(),
        2,
        "{table}"
    );
}

#[test]
fn bad_specs_are_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    for (workload, want) in [
        (
            SHORT.replace("iodepth = 4", "iodepth = 0"),
            "line 11: iodepth 0 is not in 1..=",
        ),
        (
            SHORT.replace("\"randwrite\"", "\"randwrites\""),
            "line 9: unknown rw \"randwrites\"",
        ),
        (
            SHORT.replace("\"4k\"", "\"1000\""),
            "line 10: bs 1000 is not a positive multiple of 512",
        ),
        (
            SHORT.replace("clients = [1, 2]", "clients = [1, 40]"),
            "40 clients need 40 images",
        ),
    ] {
        let s = spec(tmp.path(), "builtin", &workload);
        let r = run(&[
            "bench",
            "matrix",
            "--spec",
            s.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(!r.status.success());
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains(want), "wanted {want:?} in: {err}");
        assert!(!out.exists(), "nothing runs for a bad spec");
    }
    // --dry-run lists the points of a good spec and starts nothing.
    let s = spec(tmp.path(), "builtin", SHORT);
    let r = run(&[
        "bench",
        "matrix",
        "--spec",
        s.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--dry-run",
    ]);
    assert!(r.status.success());
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.contains("2 points x 1 repetitions") && text.contains("randwrite-4k-qd4-j1-c2"),
        "{text}"
    );
    assert!(!out.exists());
}

/// Start a matrix with its stderr read line by line.
fn spawn_matrix(
    spec: &Path,
    out: &Path,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(CAIRN)
        .args([
            "bench",
            "matrix",
            "--spec",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

fn wait_line(rx: &std::sync::mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) {
            let found = line.contains(needle);
            seen.push(line);
            if found {
                return;
            }
        }
    }
    panic!("no line with {needle:?}; saw: {seen:#?}");
}

#[test]
fn ctrl_c_keeps_the_finished_points() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let workload = SHORT
        .replace("clients = [1, 2]", "clients = [1, 2]\nrepetitions = 1")
        .replace("iodepth = 4", "iodepth = [4, 8]");
    let s = spec(tmp.path(), "builtin", &workload);
    let (child, rx) = spawn_matrix(&s, &out);
    let mut seen = Vec::new();
    // The first point finished; the second is running.
    wait_line(&rx, "randwrite-4k-qd4-j1-c1: ", &mut seen);
    wait_line(&rx, "2/4 randwrite-4k-qd4-j1-c2 rep 1/1", &mut seen);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait_with_output().unwrap().status;
    assert_eq!(
        status.code(),
        Some(130),
        "an interrupted run says so: {status}"
    );
    let doc = results(&out);
    assert_eq!(doc["interrupted"], true);
    let ids: Vec<&str> = doc["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["randwrite-4k-qd4-j1-c1"], "the finished point only");
    assert!(
        doc["points"][0]["summary"]["median"]["iops"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("Interrupted"), "{md}");
    assert_cluster_stopped(&out);
}

#[test]
fn a_point_whose_osd_dies_fails_and_the_matrix_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let workload = SHORT
        .replace("clients = [1, 2]", "clients = 1")
        .replace("iodepth = 4", "iodepth = [4, 8]")
        .replace("runtime = 2", "runtime = 4");
    let s = spec(tmp.path(), "builtin", &workload);
    let (child, rx) = spawn_matrix(&s, &out);
    let mut seen = Vec::new();
    wait_line(&rx, "1/2 randwrite-4k-qd4-j1-c1 rep 1/1", &mut seen);
    std::thread::sleep(Duration::from_secs(2));
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("cluster/cluster.json")).unwrap())
            .unwrap();
    let osd2 = state["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "osd.2")
        .expect("osd.2 in cluster.json")["pid"]
        .as_u64()
        .unwrap();
    // SAFETY: a daemon this test's matrix started.
    unsafe { libc::kill(osd2 as i32, libc::SIGKILL) };
    let status = child.wait_with_output().unwrap().status;
    assert!(status.success(), "{status}");
    let doc = results(&out);
    let points = doc["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{doc}");
    let err = points[0]["error"].as_str().expect("the first point failed");
    assert!(err.contains("osd.2"), "{err}");
    assert!(points[0]["summary"].is_null());
    assert!(points[1]["error"].is_null(), "{}", points[1]["error"]);
    assert!(points[1]["summary"]["median"]["iops"].as_f64().unwrap() > 0.0);
    assert_cluster_stopped(&out);
}

/// Every spec shipped in bench/specs is valid.
#[test]
fn shipped_specs_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/specs");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = entry.path();
        // A spec run by a script of its own names it (`runner = "bench/..."`);
        // the script must exist.
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(runner) = text.lines().find_map(|l| l.strip_prefix("runner = ")) {
            let script = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(runner.trim_matches('"'));
            assert!(
                script.exists(),
                "{}: no runner {}",
                path.display(),
                script.display()
            );
            checked += 1;
            continue;
        }
        if path.extension().is_some_and(|e| e == "toml") {
            let r = run(&[
                "bench",
                "matrix",
                "--spec",
                path.to_str().unwrap(),
                "--out",
                "/nonexistent/x",
                "--dry-run",
            ]);
            assert!(
                r.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&r.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= 6, "the specs (a)-(d) are there");
}

/// Against Ceph without Ceph installed: refused before anything runs.
#[test]
fn ceph_not_installed_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("bin");
    std::fs::create_dir(&empty).unwrap();
    let out = tmp.path().join("out");
    let s = spec(tmp.path(), "fio", SHORT);
    let r = Command::new(CAIRN)
        .args([
            "bench",
            "matrix",
            "--spec",
            s.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .arg("--ceph")
        .arg(tmp.path())
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("Ceph is not installed"), "{err}");
    assert!(!out.exists());
}

/// Sequential fio jobs walk block-aligned slices of their image, even when
/// the image does not divide evenly between them.
#[test]
fn sequential_fio_jobs_of_an_uneven_split() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let workload = SHORT
        .replace("rw = \"randwrite\"", "rw = \"write\"")
        .replace("bs = \"4k\"", "bs = \"64k\"")
        .replace("clients = [1, 2]", "clients = 1\nnumjobs = 3");
    let s = spec(tmp.path(), "fio", &workload);
    let r = run(&[
        "bench",
        "matrix",
        "--spec",
        s.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let doc = results(&out);
    let p = &doc["points"][0];
    assert!(p["error"].is_null(), "{}", p["error"]);
    assert_eq!(p["id"], "write-64k-qd4-j3-c1");
    assert!(p["reps"][0]["clients"][0]["write"]["ops"].as_u64().unwrap() > 0);
    assert_cluster_stopped(&out);
}
