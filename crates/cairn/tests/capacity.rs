//! Capacity and health views against a real cluster: `df`, `osd df` and
//! `image du` match the data written; `health detail` names the pools,
//! PGs and OSDs of each check; `cairn -w` prints changes as they happen.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::Image;
use cairn_volume::Volume;
use common::{pattern, TestCluster, CAIRN};
use serde_json::Value;

fn json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = cluster.ok(&full);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

const MIB: u64 = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn df_osd_df_and_image_du_match_the_data_written() {
    let cluster = TestCluster::up(3);
    cluster.ok(&["image", "create", "rbd/du", "--size", "256M"]);
    cluster.ok(&["image", "create", "rbd/empty", "--size", "64M"]);
    let client = cluster.client().await;
    let image = Image::open(&client, "rbd", "du").await.expect("open");
    // Three whole objects and 8 KiB of a fourth, far into the image.
    image
        .write(0, Bytes::from(pattern(1, (12 * MIB) as usize)))
        .await
        .expect("write");
    image
        .write(100 * MIB, Bytes::from(pattern(2, 8192)))
        .await
        .expect("write");
    image.close().await.expect("close");
    let written = 12 * MIB + 8192;

    let du = json(&cluster, &["image", "du", "rbd/du"]);
    assert_eq!(du[0]["provisioned_bytes"], 256 * MIB, "{du}");
    assert_eq!(du[0]["used_bytes"], written, "{du}");
    assert_eq!(
        (du[0]["objects"].as_u64(), du[0]["objects_max"].as_u64()),
        (Some(4), Some(64))
    );
    let all = json(&cluster, &["image", "du"]);
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");
    let text = cluster.ok(&["image", "du", "rbd"]);
    assert!(
        text.contains("rbd/du") && text.contains("rbd/empty") && text.contains("<TOTAL>"),
        "{text}"
    );

    // Pool figures come from the primaries' stats (counted every few
    // seconds): wait for the data to show.
    let start = Instant::now();
    let df = loop {
        let df = json(&cluster, &["df"]);
        // Objects and bytes are counted at different moments: wait for
        // both (four data objects, two headers, the directory).
        let pool = &df["pools"][0];
        if pool["stored_bytes"].as_u64() >= Some(written) && pool["objects"].as_u64() == Some(7) {
            break df;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "df never shows the data: {df}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let pool = &df["pools"][0];
    assert_eq!(pool["name"], "rbd");
    let stored = pool["stored_bytes"].as_u64().expect("stored_bytes");
    // The headers and the directory hold omap only: no bytes.
    assert_eq!(stored, written, "{df}");
    assert_eq!(pool["used_bytes"].as_u64(), Some(stored * 3), "{df}");
    let raw = &df["raw"];
    let (total, used, avail) = (
        raw["total_bytes"].as_u64().expect("total"),
        raw["used_bytes"].as_u64().expect("used"),
        raw["avail_bytes"].as_u64().expect("avail"),
    );
    assert_eq!(total, used + avail, "{df}");
    assert!(
        used >= 3 * written,
        "three copies use at least {} bytes: {df}",
        3 * written
    );
    let max_avail = pool["max_avail_bytes"].as_u64().expect("max_avail");
    assert!(max_avail > 0 && max_avail < avail / 3 + 1, "{df}");

    let osds = json(&cluster, &["osd", "df"]);
    let osds = osds.as_array().expect("osd df is a list");
    assert_eq!(osds.len(), 3);
    let pgs: u64 = osds.iter().map(|o| o["pgs"].as_u64().unwrap_or(0)).sum();
    assert_eq!(pgs, 16 * 3, "every PG copy is on an OSD: {osds:?}");
    for o in osds {
        // Size 3 on three OSDs: each holds a copy of everything.
        assert!(o["used_bytes"].as_u64() >= Some(written), "{o}");
        let ratio = o["used_ratio"].as_f64().expect("used_ratio");
        assert!(ratio > 0.0 && ratio < 1.0, "{o}");
    }
    let text = cluster.ok(&["osd", "df"]);
    assert!(text.contains("osd.2") && text.contains("%USE"), "{text}");
    let text = cluster.ok(&["df"]);
    assert!(
        text.contains("RAW STORAGE") && text.contains("MAX AVAIL"),
        "{text}"
    );
}

#[test]
fn health_detail_names_pools_pgs_and_osds_and_watch_prints_changes() {
    let cluster = TestCluster::up(3);
    let conf = cluster.conf();
    let mut watch = Command::new(CAIRN)
        .arg("--conf")
        .arg(&conf)
        .arg("-w")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cairn -w");
    let lines = BufReader::new(watch.stdout.take().expect("stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let expect_line = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(what) => return,
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        panic!("cairn -w never printed {what:?}; it printed {seen:?}");
    };
    expect_line("health: HEALTH_OK");

    // Out of three OSDs, one out: size 3 cannot be met.
    cluster.ok(&["osd", "out", "2"]);
    expect_line("osd.2 out");
    expect_line("health HEALTH_WARN");
    let start = Instant::now();
    let health = loop {
        let h = json(&cluster, &["health", "detail"]);
        if checks_with(&h, "POOL_SIZE_UNMET").is_some() {
            break h;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{h}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let unmet = checks_with(&health, "POOL_SIZE_UNMET").expect("POOL_SIZE_UNMET");
    assert_eq!(unmet["pools"], serde_json::json!(["rbd"]), "{unmet}");
    assert!(
        unmet["detail"][0]
            .as_str()
            .is_some_and(|d| d.contains("pool rbd (size 3)")),
        "{unmet}"
    );
    let text = cluster.ok(&["health", "detail"]);
    assert!(
        text.contains("POOL_SIZE_UNMET") && text.contains("pool rbd (size 3)"),
        "{text}"
    );

    // A stopped OSD is named, in health detail and by -w.
    cluster.ok(&["osd", "in", "2"]);
    expect_line("osd.2 in");
    cluster.kill9("osd.1");
    let _ = cluster.cairn(&["osd", "down", "1"]);
    expect_line("osd.1 down");
    let start = Instant::now();
    let h = loop {
        let h = json(&cluster, &["health", "detail"]);
        if checks_with(&h, "OSD_DOWN").is_some() && checks_with(&h, "PG_UNDERSIZED").is_some() {
            break h;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{h}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let down = checks_with(&h, "OSD_DOWN").expect("OSD_DOWN");
    assert_eq!(down["osds"], serde_json::json!([1]), "{down}");
    // Size 3 on three OSDs: every PG has lost a member.
    let undersized = checks_with(&h, "PG_UNDERSIZED").expect("PG_UNDERSIZED");
    assert_eq!(
        undersized["pools"],
        serde_json::json!(["rbd"]),
        "{undersized}"
    );
    assert_eq!(
        undersized["pgs"].as_array().map(Vec::len),
        Some(16),
        "{undersized}"
    );
    let summary = undersized["summary"].as_str().unwrap_or("");
    assert!(
        summary.contains("16 pgs undersized (pool rbd: 16)"),
        "{undersized}"
    );
    assert!(
        undersized["detail"][0]
            .as_str()
            .is_some_and(|d| d.contains("(pool rbd)")),
        "{undersized}"
    );
    let _ = watch.kill();
    let _ = watch.wait();
}

/// The health check `code` of a `health detail` reply.
fn checks_with<'a>(health: &'a Value, code: &str) -> Option<&'a Value> {
    health["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["check"] == code)
}
