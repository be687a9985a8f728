//! PG split on real processes: `cairn pool set rbd pg_num N` while fio
//! writes with verification through NBD. Every write fio was acknowledged
//! reads back right after the split, from the child PGs, and again with
//! one OSD gone (so the children's other copies are checked too).

mod common;

use std::time::{Duration, Instant};

use common::nbd::{assert_reads_verify, spawn_verified_writes, Gateway, Listen};
use common::TestCluster;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(120);

fn json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&cluster.ok(&all)).expect("json")
}

/// Wait until `total` PGs exist and all are clean.
fn wait_clean(cluster: &TestCluster, total: u64) -> Value {
    let start = Instant::now();
    loop {
        let st = cluster.status();
        let pgs = &st["pgs"];
        if pgs["total"].as_u64() == Some(total) && pgs["clean"] == pgs["total"] {
            return st;
        }
        if start.elapsed() > WAIT {
            cluster.dump_logs();
            panic!("not {total} clean PGs after {WAIT:?}: {st}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn pg_num_grows_under_fio_verify_load() {
    let cluster = TestCluster::up_with(4, &["--pg-num", "8"]);
    cluster.ok(&[
        "image",
        "create",
        "rbd/disk",
        "--size",
        "64M",
        "--object-size",
        "1M",
    ]);
    let socket = cluster.path().join("nbd.sock");
    let gateway = Gateway::start(&cluster, "disk", Listen::Unix(socket), &[]);
    let uri = gateway.uri.clone();
    wait_clean(&cluster, 8);
    // 4 KiB random writes over all 64 objects, each block once, verified
    // by fio at the end; the pool splits twice meanwhile.
    let load = spawn_verified_writes(&uri, "64M");
    std::thread::sleep(Duration::from_secs(2));
    let out = cluster.ok(&["pool", "set", "rbd", "pg_num", "16"]);
    assert!(out.contains("pg_num"), "{out}");
    std::thread::sleep(Duration::from_secs(2));
    let reply = json(&cluster, &["pool", "set", "rbd", "pg_num", "32"]);
    assert_eq!(reply["pg_num"], 32, "{reply}");
    let (ok, text) = load.join().expect("fio thread");
    assert!(
        ok && !text.contains("verify:"),
        "fio failed across the split:\n{text}"
    );
    wait_clean(&cluster, 32);
    let pools = json(&cluster, &["pool", "ls"]);
    assert_eq!(pools[0]["pg_num"], 32, "{pools}");
    // The objects really spread over the children: every child PG of the
    // first split holds some of the image's 64 objects.
    let pgs = json(&cluster, &["pg", "ls"]);
    let with_objects = pgs
        .as_array()
        .expect("pg ls is a list")
        .iter()
        .filter(|pg| pg["objects"].as_u64().unwrap_or(0) > 0)
        .count();
    assert!(
        with_objects > 16,
        "only {with_objects} of 32 PGs hold objects: {pgs}"
    );
    assert_reads_verify(&uri, "after-split", "64M");
    // Without osd.0 the other copies of every child serve it all.
    cluster.kill9("osd.0");
    cluster.ok(&["osd", "down", "0"]);
    cluster.ok(&["osd", "out", "0"]);
    wait_clean(&cluster, 32);
    assert_reads_verify(&uri, "without-osd0", "64M");
}
