//! The `cairn` command line against a real cluster: every mistake is one
//! line on stderr with a non-zero exit and changes nothing; `--json` output
//! parses; configuration errors stop daemons before they start.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{TestCluster, CAIRN};
use serde_json::Value;

/// Run `cairn ARGS`, killing it (and failing) if it runs longer than `limit`.
fn run_with_deadline(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(CAIRN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cairn");
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

fn json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = cluster.ok(&full);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// What the cluster looks like to the CLI: pools and images with their info.
fn snapshot(cluster: &TestCluster) -> (Value, Vec<Value>) {
    let pools = json(cluster, &["pool", "ls"]);
    let images: Vec<String> =
        serde_json::from_value(json(cluster, &["image", "ls"])).expect("image names");
    let infos = images
        .iter()
        .map(|n| json(cluster, &["image", "info", &format!("rbd/{n}")]))
        .collect();
    (pools, infos)
}

#[test]
fn every_mistake_is_one_line_and_changes_nothing() {
    let cluster = TestCluster::up(3);
    cluster.ok(&["image", "create", "rbd/a", "--size", "1M"]);
    let before = snapshot(&cluster);

    let cases: &[(&[&str], &[&str])] = &[
        // (arguments, words the message must contain)
        (
            &["image", "create", "nopool/x", "--size", "1M"],
            &["nopool", "does not exist"],
        ),
        (
            &["image", "info", "rbd/nosuch"],
            &["rbd/nosuch", "does not exist"],
        ),
        (
            &["image", "resize", "rbd/nosuch", "--size", "2M"],
            &["rbd/nosuch", "does not exist"],
        ),
        (
            &["image", "rm", "rbd/nosuch"],
            &["rbd/nosuch", "does not exist"],
        ),
        (
            &["image", "info", "nopool/a"],
            &["nopool", "does not exist"],
        ),
        (&["image", "ls", "nopool"], &["nopool", "does not exist"]),
        (
            &["image", "create", "rbd/a", "--size", "2M"],
            &["rbd/a", "already exists"],
        ),
        (&["pool", "create", "rbd"], &["rbd", "already exists"]),
        (
            &["pool", "rm", "nopool", "--yes-i-really-mean-it"],
            &["nopool", "does not exist"],
        ),
        // Removing a pool needs confirmation; without it nothing happens.
        (&["pool", "rm", "rbd"], &["--yes-i-really-mean-it"]),
        (&["image", "create", "rbd/z", "--size", "0"], &["size"]),
        (&["image", "create", "rbd/z", "--size", "1000"], &["512"]),
        (&["image", "create", "rbd/z", "--size", "12q"], &["12q"]),
        (&["image", "create", "rbd/z", "--size", "lots"], &["lots"]),
        (&["image", "resize", "rbd/a", "--size", "0"], &["size"]),
        (&["image", "resize", "rbd/a", "--size", "1000"], &["512"]),
        (&["image", "resize", "rbd/a", "--size", "bad"], &["bad"]),
        (
            &[
                "image",
                "create",
                "rbd/z",
                "--size",
                "1M",
                "--object-size",
                "3000",
            ],
            &["object size"],
        ),
        (
            &["pool", "create", "p", "--pg-num", "12"],
            &["power of two"],
        ),
        (&["pool", "create", "p", "--pg-num", "0"], &["power of two"]),
        (
            &["pool", "set", "rbd", "pg_num", "24"],
            &["pg_num 24", "power of two"],
        ),
        (
            &["pool", "set", "rbd", "pg_num", "8"],
            &["smaller", "merging"],
        ),
        (
            &["pool", "set", "rbd", "pg_num", "many"],
            &["pg_num", "many"],
        ),
        (
            &["pool", "set", "rbd", "colour", "blue"],
            &["colour", "settable: size, min_size, pg_num"],
        ),
        (
            &["pool", "set", "nopool", "pg_num", "32"],
            &["nopool", "does not exist"],
        ),
        (&["image", "create", "x", "--size", "1M"], &["POOL/NAME"]),
        (&["image", "create", "rbd/", "--size", "1M"], &["POOL/NAME"]),
        (&["image", "info", "a"], &["POOL/NAME"]),
        (&["image", "rm", "a"], &["POOL/NAME"]),
        (&["image", "resize", "a", "--size", "1M"], &["POOL/NAME"]),
        (
            &["image", "create", "rbd/bad name", "--size", "1M"],
            &["bad name"],
        ),
    ];
    for (args, words) in cases {
        let err = cluster.fails(args);
        for word in *words {
            assert!(
                err.to_lowercase().contains(&word.to_lowercase()),
                "cairn {args:?}: message {err:?} should mention {word:?}"
            );
        }
        assert!(err.starts_with("cairn: error: "), "cairn {args:?}: {err:?}");
    }
    assert_eq!(
        snapshot(&cluster),
        before,
        "a failed command changed the cluster"
    );
    let info = json(&cluster, &["image", "info", "rbd/a"]);
    assert_eq!(info["size"].as_u64(), Some(1 << 20));
    let pools = json(&cluster, &["pool", "ls"]);
    assert_eq!(pools.as_array().map(Vec::len), Some(1), "pools: {pools}");
}

#[test]
fn no_cluster_running_is_one_line_naming_the_monitor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("cairn.toml");
    // A port nothing listens on.
    let port = free_port();
    std::fs::write(
        &conf,
        format!("[global]\nmon_addr = \"127.0.0.1:{port}\"\n"),
    )
    .expect("write");
    let conf = conf.display().to_string();
    for args in [
        &["status"][..],
        &["osd", "ls"],
        &["pool", "ls"],
        &["pool", "create", "p"],
        &["image", "ls"],
        &["image", "create", "rbd/x", "--size", "1M"],
        &["image", "info", "rbd/x"],
        &["--json", "status"],
    ] {
        let mut full = vec!["--conf", &conf];
        full.extend_from_slice(args);
        let out = run_with_deadline(&full, Duration::from_secs(60));
        let err = one_line_failure(&out, &format!("{args:?} without a cluster"));
        let lower = err.to_lowercase();
        assert!(
            lower.contains("monitor") && lower.contains("cluster"),
            "{args:?}: {err:?} should say the monitor/cluster is unreachable"
        );
        assert!(
            err.contains(&port.to_string()),
            "{args:?}: {err:?} should name the address"
        );
    }
    // A configuration file that does not exist is also one line.
    let missing = dir.path().join("nope.toml").display().to_string();
    let out = run_with_deadline(&["--conf", &missing, "status"], Duration::from_secs(60));
    let err = one_line_failure(&out, "missing config");
    assert!(err.contains("nope.toml"), "{err}");
}

#[test]
fn json_output_parses_with_the_expected_fields() {
    let cluster = TestCluster::up(3);
    let created = json(
        &cluster,
        &[
            "image",
            "create",
            "rbd/j",
            "--size",
            "3M",
            "--object-size",
            "1M",
        ],
    );
    assert_eq!(created["name"], "j");
    assert_eq!(created["size"].as_u64(), Some(3 << 20));

    let status = json(&cluster, &["status"]);
    for key in ["fsid", "epoch", "health", "osds", "pools", "pgs", "objects"] {
        assert!(status.get(key).is_some(), "status lacks {key}: {status}");
    }
    assert_eq!(status["osds"]["total"].as_u64(), Some(3), "{status}");
    assert_eq!(status["osds"]["up"].as_u64(), Some(3), "{status}");
    assert_eq!(status["osds"]["in"].as_u64(), Some(3), "{status}");
    assert_eq!(status["pools"].as_u64(), Some(1), "{status}");
    assert_eq!(status["pgs"]["total"].as_u64(), Some(16), "{status}");
    assert!(status["pgs"]["active"].is_u64() && status["pgs"]["clean"].is_u64());
    assert!(status["pgs"]["by_state"].is_object(), "{status}");

    let osds = json(&cluster, &["osd", "ls"]);
    let osds = osds.as_array().expect("osd ls is an array");
    assert_eq!(osds.len(), 3);
    for (i, osd) in osds.iter().enumerate() {
        assert_eq!(osd["id"].as_u64(), Some(i as u64), "{osd}");
        assert_eq!(osd["up"], true, "{osd}");
        assert_eq!(osd["is_in"], true, "{osd}");
        let addr = osd["addr"].as_str().expect("addr");
        assert!(
            addr.parse::<std::net::SocketAddr>().is_ok(),
            "osd addr {addr:?}"
        );
        assert!(
            osd["crush_weight"].as_f64().is_some_and(|w| w > 0.0),
            "{osd}"
        );
        assert_eq!(osd["full"], "none", "{osd}");
    }
    assert!(status["full"]["ratios"]["full"].is_f64(), "{status}");

    let pools = json(&cluster, &["pool", "ls"]);
    let pools = pools.as_array().expect("pool ls is an array");
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0]["name"], "rbd");
    assert_eq!(pools[0]["size"].as_u64(), Some(3));
    assert_eq!(pools[0]["min_size"].as_u64(), Some(2));
    assert_eq!(pools[0]["pg_num"].as_u64(), Some(16));
    assert!(pools[0]["id"].is_u64());

    let images = json(&cluster, &["image", "ls"]);
    assert_eq!(images, serde_json::json!(["j"]));
    let images = json(&cluster, &["image", "ls", "rbd"]);
    assert_eq!(images, serde_json::json!(["j"]));

    let info = json(&cluster, &["image", "info", "rbd/j"]);
    assert_eq!(info["pool"], "rbd");
    assert_eq!(info["name"], "j");
    assert_eq!(info["size"].as_u64(), Some(3 << 20));
    assert_eq!(info["object_size"].as_u64(), Some(1 << 20));
    assert!(info["id"].as_str().is_some_and(|s| !s.is_empty()), "{info}");
    assert_eq!(info["id"], created["id"]);

    let pgs = json(&cluster, &["pg", "ls"]);
    assert_eq!(pgs.as_array().map(Vec::len), Some(16), "{pgs}");

    // Human output carries the same facts.
    let text = cluster.ok(&["image", "info", "rbd/j"]);
    assert!(text.contains("3145728 bytes"), "{text}");
    let text = cluster.ok(&["status"]);
    assert!(text.contains("3 total, 3 up, 3 in"), "{text}");
}

#[test]
fn config_defaults_is_valid_toml_with_every_section() {
    let out = run_with_deadline(&["config", "defaults"], Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    for section in ["[global]", "[mon]", "[osd]", "[client]"] {
        assert!(
            text.lines().any(|l| l.trim() == section),
            "defaults lack {section}"
        );
    }
    // The toml crate is not a dependency of this package; the configuration
    // parser (TOML, strict about unknown keys) must accept the output and
    // produce exactly the defaults.
    let parsed = cairn_config::Config::parse(&text)
        .unwrap_or_else(|e| panic!("`cairn config defaults` does not parse: {e}"));
    assert_eq!(parsed, cairn_config::Config::default());
    // Every documented option appears in it.
    for option in cairn_config::options() {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{} = ", option.name))),
            "defaults lack {}.{}",
            option.section,
            option.name
        );
    }
    let out = run_with_deadline(&["--json", "config", "defaults"], Duration::from_secs(60));
    let value: Value = serde_json::from_slice(&out.stdout).expect("defaults JSON");
    assert!(value.as_array().is_some_and(|a| !a.is_empty()));
    // Defaults are values: numbers as numbers, strings unquoted.
    let find = |section: &str, name: &str| {
        value
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["section"] == section && o["name"] == name)
            .unwrap_or_else(|| panic!("no {section}.{name}"))["default"]
            .clone()
    };
    assert!(find("osd", "heartbeat_interval_ms").is_u64());
    assert_eq!(find("osd", "store"), Value::from("bluestore"));
    assert_eq!(find("client", "watch_timeout_ms"), Value::from(30_000));
}

fn write_conf(dir: &Path, body: &str) -> String {
    let path = dir.join("bad.toml");
    std::fs::write(&path, body).expect("write config");
    path.display().to_string()
}

#[test]
fn unknown_config_key_stops_daemons_before_they_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let g = "[global]\nmon_addr = \"127.0.0.1:PORT\"\n";
    let cases = [
        (
            format!("{g}[osd]\nheartbeat_intervl_ms = 500\n"),
            "heartbeat_intervl_ms",
        ),
        (
            format!("{g}[mon]\nosd_heartbeat_grace = 5000\n"),
            "osd_heartbeat_grace",
        ),
        (format!("{g}mon_adress = \"127.0.0.1:1\"\n"), "mon_adress"),
        (format!("{g}[osd.0]\nstorre = \"memstore\"\n"), "storre"),
        (format!("{g}[osdd]\nstore = \"memstore\"\n"), "osdd"),
        // A key before any section header is at the top level.
        (format!("stray_key = 1\n{g}"), "stray_key"),
    ];
    for (i, (body, key)) in cases.iter().enumerate() {
        let body = body.replace("PORT", &port.to_string());
        let conf = write_conf(dir.path(), &body);
        let mon_dir = dir.path().join(format!("mon{i}"));
        let osd_dir = dir.path().join(format!("osd{i}"));
        let mon_dir_s = mon_dir.display().to_string();
        let osd_dir_s = osd_dir.display().to_string();
        for (what, args) in [
            ("mon", vec!["--conf", &conf, "mon", "--dir", &mon_dir_s]),
            (
                "osd",
                vec!["--conf", &conf, "osd", "--id", "0", "--dir", &osd_dir_s],
            ),
        ] {
            let out = run_with_deadline(&args, Duration::from_secs(30));
            let err = one_line_failure(&out, &format!("{what} with {body:?}"));
            assert!(
                err.contains(key),
                "{what} with {body:?}: {err:?} should name {key}"
            );
        }
        assert!(
            !mon_dir.exists(),
            "mon created its directory despite {body:?}"
        );
        assert!(
            !osd_dir.exists(),
            "osd created its directory despite {body:?}"
        );
        // `cairn config check` reports the same.
        let out = run_with_deadline(
            &["--conf", &conf, "config", "check"],
            Duration::from_secs(30),
        );
        let err = one_line_failure(&out, "config check");
        assert!(err.contains(key), "config check: {err:?} should name {key}");
    }
    // A bad --set override is refused the same way.
    let conf = write_conf(
        dir.path(),
        &format!("[global]\nmon_addr = \"127.0.0.1:{port}\"\n"),
    );
    let mon_dir = dir.path().join("mon-set").display().to_string();
    let out = run_with_deadline(
        &[
            "--conf",
            &conf,
            "mon",
            "--dir",
            &mon_dir,
            "--set",
            "mon.no_such_option=1",
        ],
        Duration::from_secs(30),
    );
    let err = one_line_failure(&out, "mon --set unknown");
    assert!(err.contains("no_such_option"), "{err}");
    assert!(!Path::new(&mon_dir).exists());
}

#[test]
fn pool_create_ls_rm_round_trip_and_osd_ls() {
    let cluster = TestCluster::up(3);

    // osd ls: three OSDs, all up and in.
    let text = cluster.ok(&["osd", "ls"]);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("osd.")).collect();
    assert_eq!(rows.len(), 3, "osd ls: {text}");
    for (i, row) in rows.iter().enumerate() {
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[0], format!("osd.{i}"), "{row}");
        assert_eq!(cols[2], "up", "{row}");
        assert_eq!(cols[3], "in", "{row}");
    }

    let out = cluster.ok(&[
        "pool",
        "create",
        "p2",
        "--pg-num",
        "8",
        "--size",
        "2",
        "--min-size",
        "1",
    ]);
    assert!(out.contains("p2"), "{out}");
    let pools = json(&cluster, &["pool", "ls"]);
    let p2 = pools
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "p2"))
        .unwrap_or_else(|| panic!("p2 missing: {pools}"))
        .clone();
    assert_eq!(p2["pg_num"].as_u64(), Some(8));
    assert_eq!(p2["size"].as_u64(), Some(2));
    assert_eq!(p2["min_size"].as_u64(), Some(1));
    let text = cluster.ok(&["pool", "ls"]);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().nth(1) == Some("p2")),
        "{text}"
    );
    let status = cluster.status();
    assert_eq!(status["pools"].as_u64(), Some(2));
    assert_eq!(status["pgs"]["total"].as_u64(), Some(24), "{status}");

    // The new pool is usable.
    cluster.ok(&["image", "create", "p2/img", "--size", "1M"]);
    let images = json(&cluster, &["image", "ls", "p2"]);
    assert_eq!(images, serde_json::json!(["img"]));
    let images = json(&cluster, &["image", "ls"]);
    assert_eq!(
        images,
        serde_json::json!([]),
        "rbd must not see p2's images"
    );

    let err = cluster.fails(&["pool", "create", "p2"]);
    assert!(err.contains("already exists"), "{err}");

    let err = cluster.fails(&["pool", "rm", "p2"]);
    assert!(err.contains("--yes-i-really-mean-it"), "{err}");
    assert_eq!(
        json(&cluster, &["image", "ls", "p2"]),
        serde_json::json!(["img"])
    );
    cluster.ok(&["pool", "rm", "p2", "--yes-i-really-mean-it"]);
    let pools = json(&cluster, &["pool", "ls"]);
    assert!(
        pools
            .as_array()
            .expect("array")
            .iter()
            .all(|p| p["name"] != "p2"),
        "{pools}"
    );
    assert!(!cluster.ok(&["pool", "ls"]).contains("p2"));
    let err = cluster.fails(&["pool", "rm", "p2", "--yes-i-really-mean-it"]);
    assert!(err.contains("does not exist"), "{err}");
    let err = cluster.fails(&["image", "ls", "p2"]);
    assert!(err.contains("does not exist"), "{err}");
    let status = cluster.status();
    assert_eq!(status["pools"].as_u64(), Some(1));
    assert_eq!(status["pgs"]["total"].as_u64(), Some(16), "{status}");

    // The name can be used again, and the new pool starts empty.
    cluster.ok(&["pool", "create", "p2", "--pg-num", "4"]);
    let images = json(&cluster, &["image", "ls", "p2"]);
    assert_eq!(
        images,
        serde_json::json!([]),
        "a re-created pool must be empty"
    );
    cluster.ok(&["pool", "rm", "p2", "--yes-i-really-mean-it"]);
}

/// Send `signal` (`-STOP`, `-CONT`) to a process.
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}

#[test]
fn a_stopped_daemon_makes_commands_fail_within_their_timeout_naming_it() {
    let cluster = TestCluster::up(3);
    let conf = cluster.conf();
    let conf = conf.to_str().expect("conf path");
    let with_timeout = |args: &[&str]| {
        let mut full = vec!["--conf", conf, "--timeout", "2"];
        full.extend_from_slice(args);
        let started = Instant::now();
        let out = run_with_deadline(&full, Duration::from_secs(20));
        (out, started.elapsed())
    };

    // The monitor stopped: connecting gets no map.
    let mon = cluster.pid("mon");
    signal(mon, "-STOP");
    for args in [
        &["status"][..],
        &["image", "create", "rbd/t", "--size", "1M"],
    ] {
        let (out, took) = with_timeout(args);
        signal(mon, "-CONT");
        let err = one_line_failure(&out, &format!("{args:?} with the monitor stopped"));
        assert!(
            err.contains("monitor") && err.contains("sent no map within 2.0 s"),
            "{args:?}: {err}"
        );
        assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
        signal(mon, "-STOP");
    }
    signal(mon, "-CONT");

    // Every OSD stopped: the object op names its PG and primary.
    let osds: Vec<u32> = (0..3).map(|i| cluster.pid(&format!("osd.{i}"))).collect();
    for &pid in &osds {
        signal(pid, "-STOP");
    }
    let (out, took) = with_timeout(&["image", "create", "rbd/t", "--size", "1M"]);
    for &pid in &osds {
        signal(pid, "-CONT");
    }
    let err = one_line_failure(&out, "image create with the OSDs stopped");
    assert!(
        err.contains("no answer within 2.0 s") && err.contains("primary osd."),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");

    // Back to normal: the same command works.
    cluster.ok(&["image", "create", "rbd/t2", "--size", "1M"]);
}

#[test]
fn a_reader_that_goes_away_ends_a_command_without_a_panic() {
    let cluster = TestCluster::up(3);
    for i in 0..40 {
        cluster.ok(&["image", "create", &format!("rbd/img{i:02}"), "--size", "1M"]);
    }
    let conf = cluster.conf();
    let conf = conf.to_str().expect("conf path");
    for args in [
        &["pg", "ls"][..],
        &["image", "ls"],
        &["osd", "ls"],
        &["status"],
        &["--json", "pg", "ls"],
        &["config", "defaults"],
    ] {
        let mut full = vec!["--conf", conf];
        full.extend_from_slice(args);
        let mut child = Command::new(CAIRN)
            .args(&full)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run cairn");
        // Close the read end at once, as `| head -0` would.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {err}");
        use std::os::unix::process::ExitStatusExt;
        assert!(
            out.status.success() || out.status.signal() == Some(libc_sigpipe()),
            "{args:?} ended with {:?}: {err}",
            out.status
        );
    }
}

/// SIGPIPE's number on Linux.
fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn one_output_contract_text_for_people_json_on_request_errors_included() {
    let cluster = TestCluster::up(3);

    // Errors under --json are JSON on stderr, with the same exit code.
    let text = cluster.cairn(&["image", "info", "rbd/nosuch"]);
    let json_err = cluster.cairn(&["--json", "image", "info", "rbd/nosuch"]);
    assert_eq!(text.status.code(), json_err.status.code());
    assert_ne!(json_err.status.code(), Some(0));
    let err = String::from_utf8_lossy(&json_err.stderr);
    let v: Value = serde_json::from_str(err.trim())
        .unwrap_or_else(|e| panic!("error under --json is not JSON ({e}): {err}"));
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("does not exist")),
        "{v}"
    );

    let v = json(&cluster, &["config", "check"]);
    assert_eq!(v["ok"], true, "{v}");
    assert!(cluster.ok(&["config", "check"]).trim().ends_with(": ok"));

    // A state change says what it did in text; JSON only when asked.
    assert_eq!(cluster.ok(&["osd", "out", "2"]).trim(), "marked osd.2 out");
    let v = json(&cluster, &["osd", "in", "2"]);
    assert_eq!(v["in"], true, "{v}");

    // Daemon logs in files carry no colour codes.
    let log = std::fs::read_to_string(cluster.path().join("osd.0.log")).expect("osd.0.log");
    assert!(
        !log.is_empty() && !log.contains('\u{1b}'),
        "ANSI codes in osd.0.log"
    );

    // `cluster status` finds the cluster from CAIRN_CONF, and exits
    // non-zero naming a daemon that is not running.
    let status = |()| {
        Command::new(CAIRN)
            .args(["cluster", "status"])
            .env("CAIRN_CONF", cluster.conf())
            .env_remove("CAIRN_DIR")
            .current_dir("/")
            .output()
            .expect("cluster status")
    };
    let out = status(());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("osd.2"));
    cluster.kill9("osd.2");
    let out = status(());
    let err = one_line_failure(&out, "cluster status with osd.2 killed");
    assert!(err.contains("not running: osd.2"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("stopped"));

    // `cluster up` on the existing cluster refuses flags it cannot apply,
    // and says what it restarted.
    let dir = cluster.path().display().to_string();
    for (flags, words) in [
        (&["--set", "osd.heartbeat_interval_ms=999"][..], "--set"),
        (&["--pg-num", "64"], "pool set rbd pg_num 64"),
    ] {
        let mut args = vec!["cluster", "up", "--osds", "3", "--dir", &dir];
        args.extend_from_slice(flags);
        let out = run_with_deadline(&args, Duration::from_secs(60));
        let err = one_line_failure(
            &out,
            &format!("cluster up {flags:?} on an existing cluster"),
        );
        assert!(err.contains(words), "{err}");
    }
    let args = [
        "cluster",
        "up",
        "--osds",
        "3",
        "--dir",
        &dir,
        "--timeout",
        "90",
    ];
    let out = run_with_deadline(&args, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("started osd.2"), "{text}");

    // A typo in a daemon's section does not stop a client command (a
    // warning names it); `config check` and the daemon still refuse it.
    let copy = cluster.path().join("typo.toml");
    let mut body = std::fs::read_to_string(cluster.conf()).expect("conf");
    body.push_str("\n[osd.7]\nheartbeat_intervl_ms = 5\n");
    std::fs::write(&copy, body).expect("write");
    let copy = copy.display().to_string();
    let out = run_with_deadline(&["--conf", &copy, "status"], Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "status with a typo under [osd.7]: {err}"
    );
    assert!(
        err.contains("warning") && err.contains("did you mean 'osd.7.heartbeat_interval_ms'"),
        "{err}"
    );
    let out = run_with_deadline(
        &["--conf", &copy, "config", "check"],
        Duration::from_secs(30),
    );
    let err = one_line_failure(&out, "config check with a typo");
    assert!(err.contains("osd.7.heartbeat_intervl_ms"), "{err}");
}
