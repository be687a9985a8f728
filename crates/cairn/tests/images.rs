//! Images in use: watches, and the admin operations (remove, shrink) they
//! hold back. Real `cairn` processes, real NBD clients (qemu-io, nbdinfo).

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::{ClientError, Image};
use cairn_volume::Volume;
use cairn_wire::{ObjOp, OpError, OpOutput};
use common::nbd::*;
use common::{pattern, TestCluster};

const MIB: u64 = 1 << 20;
/// Longest wait for a watch to lapse or a renewal to be seen.
const LAPSE_WAIT: Duration = Duration::from_secs(20);
const WAIT: Duration = Duration::from_secs(60);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in {WAIT:?} (hang)"))
}

/// Three OSDs; clients' watches lapse after 2 s.
fn cluster() -> TestCluster {
    TestCluster::up_with(
        3,
        &["--pg-num", "16", "--set", "client.watch_timeout_ms=2000"],
    )
}

fn status(cluster: &TestCluster, image: &str) -> serde_json::Value {
    let text = cluster.ok(&["--json", "image", "status", image]);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("status json {e}: {text}"))
}

fn header_of(cluster: &TestCluster, image: &str) -> String {
    let text = cluster.ok(&["--json", "image", "info", image]);
    let info: serde_json::Value = serde_json::from_str(&text).expect("info json");
    format!("rbd_header.{}", info["id"].as_str().expect("id"))
}

#[test]
fn an_exported_image_cannot_be_removed_or_shrunk_until_the_export_stops() {
    // The default 30 s watch timeout: the export's watch is live throughout.
    let cluster = TestCluster::up(3);
    cluster.ok(&["image", "create", "rbd/vol", "--size", "64M"]);
    let socket = Listen::Unix(cluster.path().join("vol.sock"));
    let mut gateway = Gateway::start(&cluster, "vol", socket, &[]);
    qemu_io(&gateway.uri, &["write -P 0xee 40M 1M"]);

    // The export is a watcher, named in text and JSON.
    let text = cluster.ok(&["image", "status", "rbd/vol"]);
    assert!(
        text.contains("client.") && text.contains("nbd"),
        "status: {text}"
    );
    let st = status(&cluster, "rbd/vol");
    let watchers = st["watchers"].as_array().expect("watchers");
    assert_eq!(watchers.len(), 1, "{st}");
    assert_eq!(watchers[0]["expired"], false, "{st}");

    // Removal and shrinking are refused, saying who holds the image.
    let err = cluster.fails(&["image", "rm", "rbd/vol"]);
    assert!(
        err.contains("is open by client."),
        "rm of an exported image: {err}"
    );
    let err = cluster.fails(&["image", "rm", "rbd/vol", "--force"]);
    assert!(
        err.contains("is open by client."),
        "--force never evicts a live watch: {err}"
    );
    let err = cluster.fails(&["image", "resize", "rbd/vol", "--size", "32M"]);
    assert!(
        err.contains("--allow-shrink"),
        "shrink without the flag: {err}"
    );
    let err = cluster.fails(&[
        "image",
        "resize",
        "rbd/vol",
        "--size",
        "32M",
        "--allow-shrink",
    ]);
    assert!(
        err.contains("is open by client."),
        "shrink of an exported image: {err}"
    );
    // Nothing changed: size, data, and the export still serves.
    assert_eq!(
        NBDINFO.ok(&["--size", gateway.uri.as_str()]).trim(),
        (64 * MIB).to_string()
    );
    qemu_io(&gateway.uri, &["read -P 0xee 40M 1M"]);
    let st = status(&cluster, "rbd/vol");
    assert!(
        st["admin_op"].is_null(),
        "a refused operation leaves no record: {st}"
    );

    // Once the export stops (SIGTERM), its watch is gone at once.
    gateway.stop();
    let st = status(&cluster, "rbd/vol");
    assert_eq!(st["watchers"].as_array().map(Vec::len), Some(0), "{st}");

    // Shrink past the written range, grow back: zeros, not the old bytes.
    cluster.ok(&[
        "image",
        "resize",
        "rbd/vol",
        "--size",
        "32M",
        "--allow-shrink",
    ]);
    cluster.ok(&["image", "resize", "rbd/vol", "--size", "64M"]);
    let socket = Listen::Unix(cluster.path().join("vol2.sock"));
    let mut gateway = Gateway::start(&cluster, "vol", socket, &[]);
    qemu_io(&gateway.uri, &["read -P 0 32M 32M"]);
    gateway.stop();

    cluster.ok(&["image", "rm", "rbd/vol"]);
    assert_eq!(cluster.ok(&["image", "ls"]).trim(), "");
}

#[test]
fn a_killed_gateway_holds_its_image_until_the_watch_lapses_then_force_evicts_it() {
    let cluster = cluster();
    cluster.ok(&["image", "create", "rbd/held", "--size", "16M"]);
    let socket = Listen::Unix(cluster.path().join("held.sock"));
    let mut gateway = Gateway::start(&cluster, "held", socket, &[]);
    qemu_io(&gateway.uri, &["write -P 0x5a 0 1M"]);
    gateway.kill(); // SIGKILL: no chance to drop the watch

    // Until the lease runs out, the dead gateway looks alive.
    let deadline = Instant::now() + LAPSE_WAIT;
    loop {
        let st = status(&cluster, "rbd/held");
        let watchers = st["watchers"].as_array().expect("watchers").clone();
        assert_eq!(watchers.len(), 1, "the killed gateway's watch stays: {st}");
        if watchers[0]["expired"] == true {
            break;
        }
        // (Not `--force` here: the watch may lapse between the look and the rm.)
        let err = cluster.fails(&["image", "rm", "rbd/held"]);
        assert!(
            err.contains("is open by") || err.contains("--force"),
            "rm with the killed gateway's watch: {err}"
        );
        assert!(Instant::now() < deadline, "the watch never lapsed: {st}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = cluster.ok(&["image", "status", "rbd/held"]);
    assert!(text.contains("EXPIRED"), "status: {text}");

    // Expired: still refused without --force, which then evicts it.
    let err = cluster.fails(&["image", "rm", "rbd/held"]);
    assert!(
        err.contains("--force"),
        "rm of an image with a dead watcher: {err}"
    );
    cluster.ok(&["image", "rm", "rbd/held", "--force"]);
    assert_eq!(cluster.ok(&["image", "ls"]).trim(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_watch_is_evicted_does_no_more_io() {
    let cluster = cluster();
    cluster.ok(&["image", "create", "rbd/ev", "--size", "8M"]);
    let client = cluster.client().await;
    let image = within("open", Image::open(&client, "rbd", "ev"))
        .await
        .expect("open");
    let first = pattern(1, MIB as usize);
    within("write", image.write(0, Bytes::from(first.clone())))
        .await
        .expect("write while watched");

    // An admin takes the watch away (as `rm --force` does to a lapsed one).
    let header = header_of(&cluster, "rbd/ev");
    let st = status(&cluster, "rbd/ev");
    let key = st["watchers"][0]["key"].as_str().expect("key").to_string();
    let pool = client.pool_id("rbd").expect("pool");
    let rm = vec![ObjOp::OmapRm { keys: vec![key] }];
    within("evict", client.op(pool, &header, rm))
        .await
        .expect("evict");

    // At its next renewal the handle learns it, and refuses I/O from then on.
    let deadline = Instant::now() + LAPSE_WAIT;
    let err = loop {
        match within("write", image.write(MIB, Bytes::from(vec![7u8; 4096]))).await {
            Err(e) => break e.to_string(),
            Ok(()) => {
                assert!(Instant::now() < deadline, "I/O went on after eviction");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(err.contains("watch"), "error names the lost watch: {err}");
    let late = within("write", image.write(0, Bytes::from(vec![9u8; 4096]))).await;
    assert!(late.is_err(), "a lost handle stays lost");
    let read = within("read", image.read(0, 4096)).await;
    assert!(read.is_err(), "reads fail too");

    // The data is what was written before, untouched by the refused write.
    let other = within("reopen", Image::open(&client, "rbd", "ev"))
        .await
        .expect("reopen");
    let back = within("read", other.read(0, MIB)).await.expect("read");
    assert_eq!(&back[..], &first[..]);
}

/// The raw value of omap key `key` on `header`.
async fn omap_value(
    client: &cairn_client::Cluster,
    pool: cairn_types::PoolId,
    header: &str,
    key: &str,
) -> Option<Bytes> {
    let get = vec![ObjOp::OmapGet {
        keys: vec![key.to_string()],
    }];
    let out = within("omap get", client.op(pool, header, get))
        .await
        .expect("omap get");
    out.into_iter().find_map(|o| match o {
        OpOutput::Omap(entries) => entries.into_iter().find(|(k, _)| k == key).map(|(_, v)| v),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_gone_back_to_an_older_renewal_is_kept_not_lost() {
    let cluster = cluster();
    cluster.ok(&["image", "create", "rbd/back", "--size", "8M"]);
    let client = cluster.client().await;
    let image = within("open", Image::open(&client, "rbd", "back"))
        .await
        .expect("open");
    let header = header_of(&cluster, "rbd/back");
    let st = status(&cluster, "rbd/back");
    let key = st["watchers"][0]["key"].as_str().expect("key").to_string();
    let pool = client.pool_id("rbd").expect("pool");
    let older = omap_value(&client, pool, &header, &key)
        .await
        .expect("watch entry");

    // Wait for a renewal, then put the older entry back: what the header
    // holds after its PG went back to an older copy (`osd lost`).
    let deadline = Instant::now() + LAPSE_WAIT;
    while omap_value(&client, pool, &header, &key).await.as_ref() == Some(&older) {
        assert!(Instant::now() < deadline, "the watch was never renewed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let set = vec![ObjOp::OmapSet {
        entries: vec![(key.clone(), older.clone())],
    }];
    within("roll back", client.op(pool, &header, set))
        .await
        .expect("roll back");

    // The handle renews the entry it finds and goes on serving I/O through
    // several renewals (one every 2/3 s).
    let data = pattern(2, 4096);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        within("write", image.write(0, Bytes::from(data.clone())))
            .await
            .expect("a rolled-back watch is still this handle's");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let now = omap_value(&client, pool, &header, &key)
        .await
        .expect("watch entry kept");
    assert_ne!(now, older, "the rolled-back entry was renewed");
    let back = within("read", image.read(0, 4096)).await.expect("read");
    assert_eq!(&back[..], &data[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grow_reaches_open_handles_and_exposes_zeros() {
    let cluster = cluster();
    cluster.ok(&["image", "create", "rbd/g", "--size", "4M"]);
    let client = cluster.client().await;
    let image = within("open", Image::open(&client, "rbd", "g"))
        .await
        .expect("open");
    let data = pattern(3, (4 * MIB) as usize);
    within("fill", image.write(0, Bytes::from(data.clone())))
        .await
        .expect("fill");
    assert!(within(
        "past end",
        image.write(4 * MIB, Bytes::from(vec![1u8; 512]))
    )
    .await
    .is_err());

    cluster.ok(&["image", "resize", "rbd/g", "--size", "8M"]);
    let deadline = Instant::now() + LAPSE_WAIT;
    while image.size() != 8 * MIB {
        assert!(
            Instant::now() < deadline,
            "the open handle never saw the grow"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let grown = within("read", image.read(4 * MIB, 4 * MIB))
        .await
        .expect("read");
    assert!(
        grown.iter().all(|&b| b == 0),
        "the grown part reads as zeros"
    );
    let tail = pattern(4, MIB as usize);
    within("write", image.write(7 * MIB, Bytes::from(tail.clone())))
        .await
        .expect("write in the grown part");
    let back = within("read", image.read(0, 8 * MIB)).await.expect("read");
    assert_eq!(&back[..4 * MIB as usize], &data[..]);
    assert_eq!(&back[7 * MIB as usize..], &tail[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_removal_keeps_the_image_closed_until_it_is_run_again() {
    let cluster = cluster();
    cluster.ok(&["image", "create", "rbd/half", "--size", "8M"]);
    let client = cluster.client().await;
    let header = header_of(&cluster, "rbd/half");
    let pool = client.pool_id("rbd").expect("pool");
    // What `image rm` records first, left behind as if it had been killed.
    let record = r#"{"op":"remove","by":"cairn image (pid 1, host h)","started_ms":0}"#;
    let set = vec![ObjOp::OmapSet {
        entries: vec![("admin_op".into(), Bytes::from_static(record.as_bytes()))],
    }];
    within("record", client.op(pool, &header, set))
        .await
        .expect("record");

    match within("open", Image::open(&client, "rbd", "half")).await {
        Err(ClientError::Busy(why)) => assert!(why.contains("remove"), "{why}"),
        Err(e) => panic!("open during a removal: wrong error {e}"),
        Ok(_) => panic!("an image being removed must not open"),
    }
    let text = cluster.ok(&["image", "status", "rbd/half"]);
    assert!(text.contains("admin operation: remove"), "status: {text}");

    cluster.ok(&["image", "rm", "rbd/half"]);
    assert_eq!(cluster.ok(&["image", "ls"]).trim(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omap_guards_apply_a_request_whole_or_not_at_all() {
    let cluster = TestCluster::up(3);
    let client = cluster.client().await;
    let pool = client.pool_id("rbd").expect("pool");
    let set = |k: &str, v: &'static str| ObjOp::OmapSet {
        entries: vec![(k.into(), Bytes::from_static(v.as_bytes()))],
    };
    let cmp = |k: &str, v: Option<&'static str>| ObjOp::OmapCmp {
        key: k.into(),
        value: v.map(|v| Bytes::from_static(v.as_bytes())),
    };
    let get = |k: &str| ObjOp::OmapGet {
        keys: vec![k.into()],
    };
    let value_of = |out: Vec<OpOutput>| match out.into_iter().last() {
        Some(OpOutput::Omap(e)) => e.first().map(|(_, v)| v.clone()),
        other => panic!("no omap output: {other:?}"),
    };

    // On a missing object a guard expecting absence holds.
    within(
        "create",
        client.op(pool, "g", vec![cmp("k", None), set("k", "a")]),
    )
    .await
    .expect("guarded create");
    // A failed guard applies nothing of its request.
    let r = within(
        "cas",
        client.op(pool, "g", vec![cmp("k", Some("x")), set("k", "b")]),
    )
    .await;
    assert!(
        matches!(r, Err(ClientError::Op(OpError::Mismatch(_)))),
        "{r:?}"
    );
    let out = within("get", client.op(pool, "g", vec![get("k")]))
        .await
        .expect("get");
    assert_eq!(value_of(out).as_deref(), Some(&b"a"[..]));
    // A guard that holds lets it through.
    within(
        "cas",
        client.op(pool, "g", vec![cmp("k", Some("a")), set("k", "b")]),
    )
    .await
    .expect("cas");
    // Guards in a read request.
    let out = within(
        "read",
        client.op(pool, "g", vec![cmp("k", Some("b")), get("k")]),
    )
    .await
    .expect("guarded read");
    assert_eq!(value_of(out).as_deref(), Some(&b"b"[..]));
    let r = within("read", client.op(pool, "g", vec![cmp("k", None), get("k")])).await;
    assert!(
        matches!(r, Err(ClientError::Op(OpError::Mismatch(_)))),
        "{r:?}"
    );
}

#[test]
fn nbd_io_that_cannot_be_served_within_the_op_timeout_fails_with_eio() {
    let cluster =
        TestCluster::up_with(3, &["--pg-num", "16", "--set", "client.op_timeout_ms=2000"]);
    cluster.ok(&["image", "create", "rbd/slow", "--size", "16M"]);
    let socket = Listen::Unix(cluster.path().join("slow.sock"));
    let mut gateway = Gateway::start(&cluster, "slow", socket, &[]);
    qemu_io(&gateway.uri, &["write -P 0x31 0 64k"]);

    // Every OSD stopped: the write cannot be served, and fails in bounded time.
    let osds: Vec<u32> = (0..3).map(|i| cluster.pid(&format!("osd.{i}"))).collect();
    let signal = |sig: &str| {
        for pid in &osds {
            let ok = std::process::Command::new("kill")
                .args([sig, &pid.to_string()])
                .status()
                .expect("kill");
            assert!(ok.success());
        }
    };
    signal("-STOP");
    let started = Instant::now();
    let out = QEMU_IO.run(&[
        "-f",
        "raw",
        gateway.uri.as_str(),
        "-c",
        "write -P 0x32 0 64k",
    ]);
    let took = started.elapsed();
    signal("-CONT");
    let text = both(&out);
    assert!(
        text.contains("Input/output error"),
        "qemu-io with the OSDs stopped: {text}"
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");

    // The gateway keeps serving once the OSDs are back; the failed write
    // may or may not have landed, the next one does.
    gateway.assert_running();
    qemu_io(&gateway.uri, &["write -P 0x33 0 64k", "read -P 0x33 0 64k"]);
}
