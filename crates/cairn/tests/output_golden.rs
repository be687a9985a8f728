//! The output contract of every command that prints state: `--json` is
//! one JSON value on stdout whose shape (the keys, nested) matches the
//! recorded one in `golden/json_shapes.txt`, numbers are numbers (a key
//! naming a unit or a count never holds a string), and text output read
//! by `head -1` ends without a panic.
//!
//! A deliberate change of a command's JSON is recorded by running this
//! test with `CAIRN_UPDATE_GOLDEN=1` and committing the file.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestCluster, CAIRN};
use serde_json::Value;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/json_shapes.txt");

/// Every command that prints state, as run (after `--json`).
const COMMANDS: &[&[&str]] = &[
    &["status"],
    &["health"],
    &["health", "detail"],
    &["df"],
    &["osd", "df"],
    &["osd", "ls"],
    &["osd", "dump"],
    &["osd", "tree"],
    &["osd", "perf", "0"],
    &["osd", "perf"],
    &["osd", "blocklist", "ls"],
    &["osd", "crush", "rule", "ls"],
    &["pool", "ls"],
    &["pool", "get", "rbd", "size"],
    &["pool", "stats"],
    &["pg", "ls"],
    &["pg", "query", "1.0"],
    &["pg", "inconsistent"],
    &["image", "ls"],
    &["image", "info", "rbd/g"],
    &["image", "status", "rbd/g"],
    &["image", "du", "rbd/g"],
    &["image", "lock", "ls", "rbd/g"],
    &["config", "dump"],
    &["config", "get", "osd.0"],
    &["config", "show", "osd.0"],
    &["config", "show", "mon"],
    &["tell", "osd.0", "config", "show", "max_scrubs"],
    &["config", "defaults"],
    &["config", "check"],
    &["cluster", "status"],
];

/// Objects whose keys are data (names), not fields: their shape is `map`.
const MAPS: &[&str] = &["by_state", "perf"];

/// The keys of `v`, nested `depth` levels; an array by its first element.
fn shape(v: &Value, key: &str, depth: usize) -> String {
    match v {
        Value::Object(_) if MAPS.contains(&key) => "{map}".to_string(),
        Value::Object(m) if depth == 0 => format!("{{{} keys}}", m.len()),
        Value::Object(m) => {
            let inner: Vec<String> = m
                .iter()
                .map(|(k, v)| {
                    let s = shape(v, k, depth - 1);
                    if s.is_empty() {
                        k.clone()
                    } else {
                        format!("{k}:{s}")
                    }
                })
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(a) => match a.first() {
            Some(first) => format!("[{}]", shape(first, key, depth)),
            None => "[]".to_string(),
        },
        _ => String::new(),
    }
}

/// Keys that name a unit or a count hold numbers (or null when unknown).
fn numbers_are_numbers(v: &Value, path: &str, bad: &mut Vec<String>) {
    const UNITS: &[&str] = &[
        "_bytes", "_ms", "_s", "_us", "_ratio", "_pct", "epoch", "objects", "size", "pg_num",
    ];
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let numeric = UNITS.iter().any(|u| k.ends_with(u));
                if numeric && !(child.is_number() || child.is_null() || child.is_object()) {
                    bad.push(format!("{path}.{k} = {child}"));
                }
                numbers_are_numbers(child, &format!("{path}.{k}"), bad);
            }
        }
        Value::Array(a) => {
            for child in a {
                numbers_are_numbers(child, path, bad);
            }
        }
        _ => {}
    }
}

fn run(cluster: &TestCluster, args: &[&str]) -> std::process::Output {
    Command::new(CAIRN)
        .arg("--conf")
        .arg(cluster.conf())
        .args(args)
        .env("CAIRN_CONF", cluster.conf())
        .output()
        .expect("run cairn")
}

#[test]
fn every_state_command_keeps_its_json_shape_and_survives_a_closed_pipe() {
    let cluster = TestCluster::up(3);
    cluster.ok(&["image", "create", "rbd/g", "--size", "8M"]);
    cluster.ok(&["config", "set", "osd", "max_scrubs", "2"]);
    // Wait for every OSD's usage and every PG's stats, so no figure is
    // missing when the shapes are taken.
    let start = Instant::now();
    loop {
        let df: Value =
            serde_json::from_slice(&run(&cluster, &["--json", "df"]).stdout).unwrap_or(Value::Null);
        let osds: Value = serde_json::from_slice(&run(&cluster, &["--json", "osd", "df"]).stdout)
            .unwrap_or(Value::Null);
        let osds_ok = osds
            .as_array()
            .is_some_and(|o| o.iter().all(|o| o["total_bytes"].is_number()));
        if osds_ok && df["pools"][0]["pgs_reporting"] == 16 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "stats never complete: {df}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    let mut shapes = BTreeMap::new();
    let mut bad = Vec::new();
    for args in COMMANDS {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = run(&cluster, &full);
        let name = args.join(" ");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!("`cairn --json {name}` is not one JSON value ({e}): {text}")
        });
        numbers_are_numbers(&value, &name, &mut bad);
        let key = if args.len() == 3 && args.starts_with(&["osd", "perf"]) {
            "perf"
        } else {
            ""
        };
        shapes.insert(name, shape(&value, key, 3));
    }
    assert!(bad.is_empty(), "numbers written as text: {bad:#?}");

    let recorded: String = shapes.iter().map(|(k, v)| format!("{k}\t{v}\n")).collect();
    if std::env::var_os("CAIRN_UPDATE_GOLDEN").is_some() {
        std::fs::write(GOLDEN, &recorded).expect("write golden");
    } else {
        let golden = std::fs::read_to_string(GOLDEN).expect("tests/golden/json_shapes.txt");
        for (line, want) in recorded.lines().zip(golden.lines()) {
            assert_eq!(
                line, want,
                "a command's JSON changed shape (rerun with CAIRN_UPDATE_GOLDEN=1 if meant)"
            );
        }
        assert_eq!(
            recorded.lines().count(),
            golden.lines().count(),
            "commands added or removed"
        );
    }

    // Text output with its reader gone after one line: no panic.
    for args in COMMANDS {
        let mut child = Command::new(CAIRN)
            .arg("--conf")
            .arg(cluster.conf())
            .args(*args)
            .env("CAIRN_CONF", cluster.conf())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run cairn");
        let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        let _ = reader.read_line(&mut first);
        drop(reader);
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        assert!(
            !err.contains("panicked") && (out.status.success() || out.status.signal() == Some(13)),
            "`cairn {}` | head -1 ended with {:?}: {err}",
            args.join(" "),
            out.status
        );
        assert!(
            !first.is_empty(),
            "`cairn {}` printed nothing",
            args.join(" ")
        );
    }
}
