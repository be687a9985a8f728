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
