//! Pools after they are made: `pool get|set` (size, min_size) and
//! `pool rename`, against a real cluster, with the data checked.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::Image;
use cairn_volume::Volume;
use common::{pattern, TestCluster};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in {WAIT:?} (hang)"))
}

/// Poll `pg ls` until every PG of pool `pool` is active+clean with
/// `copies` members acting.
fn wait_pool_clean(cluster: &TestCluster, pool: u64, copies: usize) {
    let start = Instant::now();
    loop {
        let pgs: Value = serde_json::from_str(&cluster.ok(&["--json", "pg", "ls"])).expect("pg ls");
        let mine: Vec<&Value> = pgs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["pg"]
                    .as_str()
                    .is_some_and(|id| id.starts_with(&format!("{pool}.")))
            })
            .collect();
        let done = !mine.is_empty()
            && mine.iter().all(|p| {
                p["state"] == "active+clean" && p["acting"].as_array().map(Vec::len) == Some(copies)
            });
        if done {
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "pool {pool} not clean with {copies} copies: {mine:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_grows_with_backfilled_copies_and_a_renamed_pool_keeps_its_data() {
    let cluster = TestCluster::up(3);
    cluster.ok(&[
        "pool",
        "create",
        "p2",
        "--size",
        "2",
        "--min-size",
        "1",
        "--pg-num",
        "8",
    ]);
    let pool: Value =
        serde_json::from_str(&cluster.ok(&["--json", "pool", "get", "p2"])).expect("get");
    assert_eq!(
        (pool["size"].as_u64(), pool["min_size"].as_u64()),
        (Some(2), Some(1)),
        "{pool}"
    );
    let id = pool["id"].as_u64().expect("id");
    cluster.ok(&[
        "image",
        "create",
        "p2/disk",
        "--size",
        "8M",
        "--object-size",
        "1M",
    ]);
    let client = cluster.client().await;
    let data = pattern(7, 8 << 20);
    {
        let image = within("open", Image::open(&client, "p2", "disk"))
            .await
            .expect("open");
        within("write", image.write(0, Bytes::from(data.clone())))
            .await
            .expect("write");
        within("close", image.close()).await.expect("close");
    }
    wait_pool_clean(&cluster, id, 2);

    // A third copy of everything.
    assert_eq!(
        cluster.ok(&["pool", "set", "p2", "size", "3"]).trim(),
        "set pool p2 size 3"
    );
    assert_eq!(cluster.ok(&["pool", "get", "p2", "size"]).trim(), "size: 3");
    wait_pool_clean(&cluster, id, 3);

    // Impossible or unknown settings: one line, nothing changed.
    for (args, words) in [
        (&["pool", "set", "p2", "size", "4"][..], "4"),
        (&["pool", "set", "p2", "min_size", "4"], "min_size"),
        (&["pool", "set", "p2", "min_size", "0"], "min_size"),
        (&["pool", "set", "p2", "size", "many"], "number"),
        (&["pool", "set", "p2", "colour", "blue"], "settable"),
        (&["pool", "get", "p2", "colour"], "readable"),
        (&["pool", "rename", "p2", "rbd"], "already exists"),
        (&["pool", "rename", "nope", "x"], "does not exist"),
    ] {
        let err = cluster.fails(args);
        assert!(err.contains(words), "cairn {args:?}: {err}");
    }
    let pool: Value =
        serde_json::from_str(&cluster.ok(&["--json", "pool", "get", "p2"])).expect("get");
    assert_eq!(
        (pool["size"].as_u64(), pool["min_size"].as_u64()),
        (Some(3), Some(1)),
        "{pool}"
    );

    // Renamed: the same id, the image and its bytes under the new name.
    assert_eq!(
        cluster.ok(&["pool", "rename", "p2", "p3"]).trim(),
        "set pool p3 name p3"
    );
    let err = cluster.fails(&["image", "ls", "p2"]);
    assert!(err.contains("does not exist"), "{err}");
    let client = cluster.client().await;
    // Every copy is whole: with two of the three OSDs gone (min_size 1),
    // the one left serves every byte.
    cluster.kill9("osd.0");
    cluster.kill9("osd.1");
    let image = within("open renamed", Image::open(&client, "p3", "disk"))
        .await
        .expect("open renamed");
    let back = within("read", image.read(0, 8 << 20)).await.expect("read");
    assert!(back[..] == data[..], "the renamed pool's image lost bytes");
}

/// Sum of one counter of `osd perf` over the cluster's OSDs, and the
/// store backend they run.
fn perf_sum(cluster: &TestCluster, counter: &str) -> (u64, String) {
    let mut sum = 0;
    let mut backend = String::new();
    for id in 0..cluster.osds {
        let perf: Value =
            serde_json::from_str(&cluster.ok(&["--json", "osd", "perf", &id.to_string()]))
                .expect("osd perf");
        sum += perf[counter].as_u64().unwrap_or(0);
        backend = perf["backend"].as_str().unwrap_or("?").to_string();
    }
    (sum, backend)
}

/// Compressible bytes: a repeated phrase.
fn compressible(len: usize) -> Vec<u8> {
    b"cairn stores blocks; "
        .iter()
        .copied()
        .cycle()
        .take(len)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_is_set_per_pool_and_application_tags_are_kept() {
    let cluster = TestCluster::up(3);
    cluster.ok(&["pool", "create", "zip", "--pg-num", "8"]);
    for (args, words) in [
        (
            &["pool", "set", "zip", "compression_mode", "sometimes"][..],
            "none, passive, aggressive, force",
        ),
        (
            &["pool", "set", "zip", "compression_algorithm", "gzip"],
            "lz4, zstd, snappy",
        ),
        (
            &["pool", "set", "zip", "compression_required_ratio", "2"],
            "(0, 1]",
        ),
        (
            &["pool", "set", "zip", "compression_max_blob_size", "100"],
            "4096",
        ),
        (
            &["pool", "set", "zip", "compression_level", "3"],
            "unknown compression setting",
        ),
        (
            &["pool", "application", "enable", "zip", "r b d"],
            "letters, digits",
        ),
        (
            &["pool", "set", "nope", "compression_mode", "force"],
            "does not exist",
        ),
    ] {
        let err = cluster.fails(args);
        assert!(err.contains(words), "cairn {args:?}: {err}");
    }
    cluster.ok(&["pool", "set", "zip", "compression_mode", "force"]);
    cluster.ok(&["pool", "set", "zip", "compression_algorithm", "zstd"]);
    let zip: Value =
        serde_json::from_str(&cluster.ok(&["--json", "pool", "get", "zip"])).expect("get");
    assert_eq!(zip["compression_mode"], "force", "{zip}");
    assert_eq!(zip["compression_algorithm"], "zstd", "{zip}");
    assert!(
        zip["compression_required_ratio"].is_null(),
        "unset: the OSDs' own: {zip}"
    );
    let rbd: Value =
        serde_json::from_str(&cluster.ok(&["--json", "pool", "get", "rbd"])).expect("get");
    assert!(rbd["compression_mode"].is_null(), "{rbd}");

    // The same compressible data into each pool: compressed only in `zip`.
    let data = compressible(4 << 20);
    let client = cluster.client().await;
    let write = |pool: &'static str| {
        let (client, data) = (client.clone(), data.clone());
        async move {
            let image = within("open", Image::open(&client, pool, "d"))
                .await
                .expect("open");
            within("write", image.write(0, Bytes::from(data)))
                .await
                .expect("write");
            within("close", image.close()).await.expect("close");
        }
    };
    cluster.ok(&["image", "create", "rbd/d", "--size", "8M"]);
    cluster.ok(&["image", "create", "zip/d", "--size", "8M"]);
    let (before, backend) = perf_sum(&cluster, "compressed_blobs");
    write("rbd").await;
    let (after_rbd, _) = perf_sum(&cluster, "compressed_blobs");
    write("zip").await;
    let (after_zip, _) = perf_sum(&cluster, "compressed_blobs");
    if backend == "bluestore" {
        assert_eq!(after_rbd, before, "pool rbd has no compression");
        assert!(
            after_zip > after_rbd,
            "pool zip compresses: {after_rbd} -> {after_zip}"
        );
        let (raw, _) = perf_sum(&cluster, "compressed_raw_bytes");
        let (stored, _) = perf_sum(&cluster, "compressed_stored_bytes");
        assert!(
            stored * 4 < raw,
            "zstd on a repeated phrase: {stored} of {raw} bytes"
        );
    }
    for pool in ["rbd", "zip"] {
        let image = within("open", Image::open(&client, pool, "d"))
            .await
            .expect("open");
        let back = within("read", image.read(0, data.len() as u64))
            .await
            .expect("read");
        assert!(back[..] == data[..], "{pool}/d reads back what was written");
        within("close", image.close()).await.expect("close");
    }

    // Back to the OSDs' own setting.
    cluster.ok(&["pool", "set", "zip", "compression_mode", "default"]);
    let zip: Value =
        serde_json::from_str(&cluster.ok(&["--json", "pool", "get", "zip"])).expect("get");
    assert!(zip["compression_mode"].is_null(), "{zip}");

    // Application tags.
    cluster.ok(&["pool", "application", "enable", "zip", "rbd"]);
    cluster.ok(&["pool", "application", "enable", "zip", "backup"]);
    let apps: Value =
        serde_json::from_str(&cluster.ok(&["--json", "pool", "get", "zip", "application"]))
            .expect("get");
    assert_eq!(
        apps["application"],
        serde_json::json!(["backup", "rbd"]),
        "{apps}"
    );
    assert_eq!(
        cluster.ok(&["pool", "get", "zip", "application"]).trim(),
        "application: backup rbd"
    );
    cluster.ok(&["pool", "application", "disable", "zip", "backup"]);
    let apps: Value =
        serde_json::from_str(&cluster.ok(&["--json", "pool", "get", "zip", "application"]))
            .expect("get");
    assert_eq!(apps["application"], serde_json::json!(["rbd"]), "{apps}");
}
