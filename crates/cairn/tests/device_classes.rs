//! Slow and fast devices on one machine: `cluster up --hosts 3
//! --hdd-osds-per-host 1 --nvme-osds-per-host 1` gives each host an
//! emulated spinning disk (class hdd) and a device of class nvme, with
//! rules placing on each class only; data written to a pool on either
//! reads back, and the emulated disks really serve like spinning ones.

mod common;

use bytes::Bytes;
use cairn_client::Image;
use cairn_volume::Volume;
use common::{pattern, TestCluster};
use serde_json::Value;

fn json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    serde_json::from_str(&cluster.ok(&full)).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hdd_and_nvme_osds_with_a_rule_for_each() {
    let cluster = TestCluster::up_with(
        6,
        &[
            "--pg-num",
            "8",
            "--hosts",
            "3",
            "--hdd-osds-per-host",
            "1",
            "--nvme-osds-per-host",
            "1",
        ],
    );
    let osds = json(&cluster, &["osd", "ls"]);
    let class = |id: u64| -> String {
        osds.as_array()
            .into_iter()
            .flatten()
            .find(|o| o["id"] == id)
            .and_then(|o| o["class"].as_str())
            .unwrap_or("?")
            .to_string()
    };
    for id in 0..6u64 {
        let want = if id % 2 == 0 { "hdd" } else { "nvme" };
        assert_eq!(class(id), want, "osd.{id}: {osds}");
    }
    cluster.ok(&[
        "pool", "create", "slow", "--rule", "hdd_rule", "--pg-num", "8",
    ]);
    cluster.ok(&[
        "pool",
        "create",
        "fast",
        "--rule",
        "nvme_rule",
        "--pg-num",
        "8",
    ]);

    let client = cluster.client().await;
    for (pool, seed) in [("slow", 1u64), ("fast", 2)] {
        cluster.ok(&["image", "create", &format!("{pool}/d"), "--size", "8M"]);
        let image = Image::open(&client, pool, "d").await.expect("open");
        let data = pattern(seed, 1 << 20);
        image
            .write(0, Bytes::from(data.clone()))
            .await
            .expect("write");
        let back = image.read(0, data.len() as u64).await.expect("read");
        assert!(back[..] == data[..], "{pool}/d reads back");
        image.close().await.expect("close");
    }

    // Every PG of each pool on OSDs of its class only, one per host.
    let pgs = json(&cluster, &["pg", "ls"]);
    for pg in pgs.as_array().expect("pg ls") {
        let id = pg["pg"].as_str().unwrap_or("");
        let want = match id.split('.').next() {
            Some("2") => "hdd",
            Some("3") => "nvme",
            _ => continue,
        };
        let acting: Vec<u64> = pg["acting"]
            .as_array()
            .expect("acting")
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        assert_eq!(acting.len(), 3, "{pg}");
        assert!(
            acting.iter().all(|o| class(*o) == want),
            "pg {id} on {acting:?}"
        );
    }

    // The emulated disks serve like spinning ones: a commit costs at least
    // one flush, and a flush at least one seek (6 ms by default).
    let log = std::fs::read_to_string(cluster.path().join("osd.0.log")).unwrap_or_default();
    let perf = json(&cluster, &["osd", "perf", "0"]);
    if perf["backend"] == "bluestore" {
        assert!(
            log.contains("served as an emulated spinning disk"),
            "osd.0 log"
        );
        let mean = perf["kv_commit_mean_us"].as_f64().unwrap_or(0.0);
        assert!(mean >= 6000.0, "osd.0 (emulated hdd) commits in {mean} µs");
        let fast = std::fs::read_to_string(cluster.path().join("osd.1.log")).unwrap_or_default();
        assert!(
            !fast.contains("emulated spinning disk"),
            "osd.1 is not emulated"
        );
    }
}
