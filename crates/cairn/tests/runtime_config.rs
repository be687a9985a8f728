//! Runtime configuration against a real cluster: `config set` reaches
//! running OSDs and the monitor and changes what they do, `tell` changes
//! one OSD, a restarted OSD applies the database, and every bad change is
//! one line, a non-zero exit, and changes nothing.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::Image;
use cairn_volume::Volume;
use common::TestCluster;
use serde_json::Value;

fn json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = cluster.ok(&full);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

fn log(cluster: &TestCluster, daemon: &str) -> String {
    std::fs::read_to_string(cluster.path().join(format!("{daemon}.log"))).unwrap_or_default()
}

/// The running value of `key` on `who`, and where it came from.
fn running(cluster: &TestCluster, who: &str, key: &str) -> (Value, String) {
    let v = json(cluster, &["config", "show", who, key]);
    (
        v["value"].clone(),
        v["source"].as_str().unwrap_or("?").to_string(),
    )
}

/// Write one 4 KiB block to each of `objects` objects of a fresh image, so
/// that every OSD is primary for some of the writes.
async fn write_across_objects(cluster: &TestCluster, name: &str, objects: u64) {
    let client = cluster.client().await;
    let size = ((objects * 4) << 20).to_string();
    cluster.ok(&["image", "create", &format!("rbd/{name}"), "--size", &size]);
    let image = Image::open(&client, "rbd", name).await.expect("open");
    for k in 0..objects {
        image
            .write(k * (4 << 20), Bytes::from(vec![k as u8; 4096]))
            .await
            .expect("write");
    }
    image.close().await.expect("close");
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: not within 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_set_changes_running_daemons_and_rm_takes_it_back() {
    let cluster = TestCluster::up(3);

    // The log level of one running OSD: its next writes are logged at
    // debug, the other OSDs' are not.
    let out = cluster.ok(&["config", "set", "osd.1", "log_level", "debug"]);
    assert!(out.contains("osd.1 global.log_level = debug"), "{out}");
    wait_for("osd.1 applies the new level", || {
        log(&cluster, "osd.1").contains("log level now debug")
    });
    assert_eq!(
        running(&cluster, "osd.1", "log_level"),
        ("debug".into(), "mon".into())
    );
    assert_eq!(
        running(&cluster, "osd.0", "log_level"),
        ("info".into(), "default".into())
    );
    write_across_objects(&cluster, "a", 24).await;
    assert!(
        log(&cluster, "osd.1").contains(" written at "),
        "osd.1 logs its writes at debug"
    );
    for other in ["osd.0", "osd.2"] {
        assert!(
            !log(&cluster, other).contains("DEBUG"),
            "{other} logged at debug"
        );
    }

    // Removed: back to the file's level; new writes are not logged.
    cluster.ok(&["config", "rm", "osd.1", "log_level"]);
    wait_for("osd.1 back at info", || {
        log(&cluster, "osd.1").contains("log level now info")
    });
    let before = log(&cluster, "osd.1").matches(" written at ").count();
    write_across_objects(&cluster, "b", 24).await;
    assert_eq!(
        log(&cluster, "osd.1").matches(" written at ").count(),
        before
    );

    // The monitor: a new pool's default size.
    cluster.ok(&["config", "set", "mon", "pool_default_size", "2"]);
    assert_eq!(
        running(&cluster, "mon", "pool_default_size"),
        (2.into(), "mon".into())
    );
    cluster.ok(&["pool", "create", "p2", "--pg-num", "8"]);
    assert_eq!(json(&cluster, &["pool", "get", "p2", "size"])["size"], 2);
    cluster.ok(&["config", "rm", "mon", "pool_default_size"]);
    cluster.ok(&["pool", "create", "p3", "--pg-num", "8"]);
    assert_eq!(json(&cluster, &["pool", "get", "p3", "size"])["size"], 3);
}

#[test]
fn tell_changes_one_osd_and_the_database_reaches_a_restarted_one() {
    let cluster = TestCluster::up(3);

    let out = cluster.ok(&["tell", "osd.0", "config", "set", "recovery_max_active", "7"]);
    assert!(out.contains("osd.0: osd.recovery_max_active = 7"), "{out}");
    assert_eq!(
        running(&cluster, "osd.0", "recovery_max_active"),
        (7.into(), "override".into())
    );
    assert_eq!(
        running(&cluster, "osd.2", "recovery_max_active"),
        (3.into(), "default".into())
    );
    let shown = json(
        &cluster,
        &["tell", "osd.0", "config", "show", "recovery_max_active"],
    );
    assert_eq!(shown["value"], 7);
    assert_eq!(shown["runtime"], true);

    // A database entry for every OSD: the override still wins on osd.0.
    cluster.ok(&["config", "set", "osd", "recovery_max_active", "5"]);
    wait_for("osd.2 applies the entry", || {
        running(&cluster, "osd.2", "recovery_max_active").0 == 5
    });
    assert_eq!(running(&cluster, "osd.0", "recovery_max_active").0, 7);
    let entries = json(&cluster, &["config", "dump"]);
    assert_eq!(
        entries,
        serde_json::json!([{ "who": "osd", "key": "osd.recovery_max_active", "value": "5" }])
    );
    assert_eq!(
        json(&cluster, &["config", "get", "osd.2", "recovery_max_active"])["value"],
        "5"
    );

    // A killed OSD that starts again takes the entry at once; the override
    // died with the process it was told to.
    cluster.kill9("osd.2");
    cluster.kill9("osd.0");
    cluster.restart_missing();
    assert_eq!(
        running(&cluster, "osd.2", "recovery_max_active"),
        (5.into(), "mon".into())
    );
    assert_eq!(
        running(&cluster, "osd.0", "recovery_max_active"),
        (5.into(), "mon".into())
    );
}

#[test]
fn bad_changes_are_one_line_and_change_nothing() {
    let cluster = TestCluster::up(3);
    cluster.ok(&["config", "set", "osd", "max_scrubs", "2"]);
    let before = json(&cluster, &["config", "dump"]);
    for (args, says) in [
        (
            &["config", "set", "osd", "max_scrub", "2"][..],
            "did you mean 'osd.max_scrubs'",
        ),
        (
            &["config", "set", "osdd", "max_scrubs", "2"],
            "expected global, mon, osd, osd.N or client",
        ),
        (
            &["config", "set", "osd", "max_scrubs", "0"],
            "must be at least 1",
        ),
        (
            &["config", "set", "osd", "max_scrubs", "lots"],
            "osd.max_scrubs",
        ),
        (
            &["config", "set", "osd", "store", "memstore"],
            "read only when a daemon starts",
        ),
        (
            &["config", "set", "mon", "max_scrubs", "2"],
            "not read by mon",
        ),
        (
            &["config", "set", "mon", "osd_full_ratio", "1.5"],
            "osd_full_ratio",
        ),
        (
            &["config", "set", "mon", "osd_nearfull_ratio", "0.99"],
            "must not exceed",
        ),
        (
            &["config", "rm", "osd", "max_backfills"],
            "no configuration entry",
        ),
        (&["config", "show", "client"], "not one running daemon"),
        (&["config", "show", "osd.7"], "osd.7 does not exist"),
        (
            &["tell", "mon", "config", "set", "log_level", "debug"],
            "needs one OSD",
        ),
        (
            &["tell", "osd.1", "config", "set", "store", "memstore"],
            "read only when a daemon starts",
        ),
        (
            &["tell", "osd.1", "config", "set", "max_scrubs", "0"],
            "must be at least 1",
        ),
        (
            &["tell", "osd.1", "config", "set", "nosuch", "1"],
            "unknown option",
        ),
    ] {
        let err = cluster.fails(args);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!(json(&cluster, &["config", "dump"]), before);
    assert_eq!(
        running(&cluster, "osd.1", "max_scrubs"),
        (2.into(), "mon".into())
    );
}
