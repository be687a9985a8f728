//! Recovery on real processes: a host's OSDs killed under fio's verified
//! load through NBD (I/O goes on; on return only the objects written
//! meanwhile are recovered, from the log), a blank replaced disk refilled
//! by backfill, and an OSD marked out and in again with every PG served by
//! at least min_size complete copies throughout.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::Image;
use cairn_volume::Volume;
use common::nbd::{assert_fio_ok, assert_reads_verify, spawn_verified_writes, Gateway, Listen};
use common::{pattern, TestCluster};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(120);

fn json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&cluster.ok(&all)).expect("json")
}

fn wait_clean(cluster: &TestCluster) -> Value {
    let start = Instant::now();
    loop {
        let st = cluster.status();
        let pgs = &st["pgs"];
        if pgs["total"].as_u64() > Some(0) && pgs["clean"] == pgs["total"] {
            return st;
        }
        assert!(start.elapsed() < WAIT, "not clean after {WAIT:?}: {st}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn counter(status: &Value, name: &str) -> u64 {
    status["recovery"][name].as_u64().unwrap_or(0)
}

#[test]
fn a_host_killed_under_fio_load_recovers_only_what_was_written_meanwhile() {
    let cluster = TestCluster::up_with(
        6,
        &[
            "--hosts",
            "3",
            "--osds-per-host",
            "2",
            "--pg-num",
            "32",
            "--set",
            "osd.pg_log_max_entries=100000",
        ],
    );
    cluster.ok(&[
        "image",
        "create",
        "rbd/disk",
        "--size",
        "256M",
        "--object-size",
        "4M",
    ]);
    let socket = cluster.path().join("nbd.sock");
    let gateway = Gateway::start(&cluster, "disk", Listen::Unix(socket), &[]);
    let uri = gateway.uri.clone();
    // Every object written first: 64 objects of 4 MiB.
    assert_fio_ok(
        &uri,
        "fill",
        &["--rw=write", "--bs=1M", "--iodepth=4", "--size=256M"],
    );
    let before = wait_clean(&cluster);
    // 4 KiB random writes over the first 64 MiB (16 objects), each block
    // once, verified at the end; host h2 (osd.2 and osd.3) dies meanwhile.
    let load = spawn_verified_writes(&uri, "64M");
    std::thread::sleep(Duration::from_secs(2));
    cluster.kill9("osd.2");
    cluster.kill9("osd.3");
    let (ok, text) = load.join().expect("fio thread");
    assert!(
        ok && !text.contains("verify:"),
        "fio failed with host h2 down:\n{text}"
    );
    let degraded = cluster.status();
    assert!(degraded["osds"]["up"] == 4, "{degraded}");
    // h2 returns: log recovery brings only the objects written meanwhile.
    // Counted from here: right after the kill, the survivors may already
    // have recovered copies among themselves (a write h2's OSD had sent to
    // one replica but not the other when it died), which are not h2's.
    cluster.restart_missing();
    let after = wait_clean(&cluster);
    let since = |name| counter(&after, name).saturating_sub(counter(&degraded, name));
    let recovered = since("recovered_objects");
    eprintln!(
        "copies recovered: {} while h2 was down, {recovered} after it returned",
        counter(&degraded, "recovered_objects")
            .saturating_sub(counter(&before, "recovered_objects"))
    );
    let backfilled = counter(&after, "backfilled_objects") - counter(&before, "backfilled_objects");
    assert!(recovered > 0, "nothing recovered: {after}");
    // 16 data objects, and the image's header, which the gateway's watch
    // renewals write every few seconds.
    assert!(
        recovered <= 17,
        "{recovered} copies recovered, but only 16 data objects and the header (one copy each \
         on h2) were written while h2 was down"
    );
    assert_eq!(
        backfilled, 0,
        "the log covered the outage: no backfill expected"
    );
    // Each returning OSD took the writes it missed from its PGs' primaries
    // before it booted (`osd.boot_catch_up_ms`), not in the peering its
    // clients waited for.
    for osd in ["osd.2", "osd.3"] {
        let log =
            std::fs::read_to_string(cluster.path().join(format!("{osd}.log"))).unwrap_or_default();
        let caught = log
            .lines()
            .rev()
            .filter_map(|l| l.split(": caught up ").nth(1))
            .find_map(|rest| rest.split(' ').next()?.parse::<u32>().ok());
        assert!(
            caught.is_some_and(|pgs| pgs > 0),
            "{osd} caught up no PG before it booted:\n{}",
            log.lines()
                .filter(|l| l.contains("catch"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // Everything fio wrote reads back and verifies, through a new connection.
    assert_reads_verify(&uri, "reread", "64M");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn a_blank_replaced_disk_refills_by_backfill() {
    let cluster = TestCluster::up_with(3, &["--pg-num", "16"]);
    cluster.ok(&[
        "image",
        "create",
        "rbd/disk",
        "--size",
        "32M",
        "--object-size",
        "1M",
    ]);
    let rt = runtime();
    let client = rt.block_on(cluster.client());
    let image = rt
        .block_on(Image::open(&client, "rbd", "disk"))
        .expect("open");
    let content = |obj: u64| pattern(500 + obj, 1 << 20);
    rt.block_on(async {
        for obj in 0..32 {
            image
                .write(obj << 20, Bytes::from(content(obj)))
                .await
                .expect("write");
        }
    });
    let before = wait_clean(&cluster);
    // osd.1's disk is replaced by a blank one.
    cluster.kill9("osd.1");
    std::fs::remove_dir_all(cluster.path().join("osd.1")).expect("wipe osd.1");
    cluster.restart_missing();
    let after = wait_clean(&cluster);
    let backfilled = counter(&after, "backfilled_objects") - counter(&before, "backfilled_objects");
    assert!(
        backfilled >= 32,
        "only {backfilled} objects backfilled onto the blank disk: {after}"
    );
    // Every copy is good: osd.1 alone could serve now.
    cluster.kill9("osd.0");
    cluster.kill9("osd.2");
    cluster.ok(&["osd", "down", "0"]);
    cluster.ok(&["osd", "down", "2"]);
    cluster.restart_missing();
    wait_clean(&cluster);
    let image = rt
        .block_on(Image::open(&client, "rbd", "disk"))
        .expect("open");
    rt.block_on(async {
        for obj in 0..32 {
            let got = image.read(obj << 20, 1 << 20).await.expect("read");
            assert!(
                got.to_vec() == content(obj),
                "object {obj} reads back wrong"
            );
        }
    });
}

#[test]
fn out_and_in_move_data_by_backfill_with_every_pg_served_throughout() {
    let cluster = TestCluster::up_with(4, &["--pg-num", "16"]);
    cluster.ok(&[
        "image",
        "create",
        "rbd/disk",
        "--size",
        "64M",
        "--object-size",
        "1M",
    ]);
    let rt = runtime();
    let client = rt.block_on(cluster.client());
    let image = rt
        .block_on(Image::open(&client, "rbd", "disk"))
        .expect("open");
    // A writer keeps rewriting whole objects; the model holds the last
    // acknowledged content of each.
    let model: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (image, model, stop) = (image.clone(), model.clone(), stop.clone());
        rt.spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let obj = n % 64;
                let data = Bytes::from(pattern(n * 1000 + obj, 1 << 20));
                tokio::time::timeout(WAIT, image.write(obj << 20, data))
                    .await
                    .expect("a write hangs during rebalancing")
                    .expect("write");
                model.lock().unwrap().insert(obj, n);
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let before = cluster.status();
    for (change, osd) in [("out", "3"), ("in", "3")] {
        cluster.ok(&["osd", change, osd]);
        let start = Instant::now();
        loop {
            // Never fewer than min_size (2) complete copies serving a PG.
            for pg in json(&cluster, &["pg", "ls"]).as_array().expect("pgs") {
                let acting = pg["acting"].as_array().map_or(0, Vec::len);
                assert!(acting >= 2, "osd {change} {osd}: {pg}");
                let state = pg["state"].as_str().unwrap_or("");
                assert!(
                    !state.contains("down")
                        && !state.contains("incomplete")
                        && !state.contains("peered"),
                    "osd {change} {osd}: {pg}"
                );
            }
            let st = cluster.status();
            if st["pgs"]["clean"] == st["pgs"]["total"] && start.elapsed() > Duration::from_secs(1)
            {
                break;
            }
            assert!(
                start.elapsed() < WAIT,
                "osd {change} {osd}: not clean: {st}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let after = cluster.status();
    let backfilled = counter(&after, "backfilled_objects") - counter(&before, "backfilled_objects");
    assert!(backfilled > 0, "nothing moved by backfill: {after}");
    stop.store(true, Ordering::SeqCst);
    rt.block_on(writer).expect("writer");
    let model = model.lock().unwrap().clone();
    assert!(
        model.len() > 16,
        "too few writes acknowledged during rebalancing"
    );
    rt.block_on(async {
        for (obj, n) in model {
            let got = image.read(obj << 20, 1 << 20).await.expect("read");
            assert!(
                got.to_vec() == pattern(n * 1000 + obj, 1 << 20),
                "object {obj} reads back wrong"
            );
        }
    });
}
