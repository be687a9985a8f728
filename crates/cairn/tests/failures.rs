//! Failures on a real cluster (pool `rbd`: size 3, min_size 2): OSDs killed
//! with SIGKILL under load, the primary killed mid-write and restarted, I/O
//! below min_size, and malformed bytes sent to the daemons. The writers and
//! their model of every block are in `common::writes`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::Image;
use cairn_types::Entity;
use cairn_volume::Volume;
use cairn_wire::{
    encode_frame, FrameReader, Message, MonCommand, FRAME_HEADER_LEN, MAX_FRAME_LEN, WIRE_VERSION,
};
use common::writes::*;
use common::{pattern, TestCluster};
use tokio::io::AsyncWriteExt;

// ----- tests -----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_one_osd_under_load_loses_no_acknowledged_write() {
    let cluster = Arc::new(TestCluster::up(3));
    let client = cluster.client().await;
    let size: u64 = 16 << 20; // 256 objects over 16 PGs: every OSD holds data
    let image = create_image(&cluster, &client, "load", size).await;
    let model = Model::new(size / BLOCK);
    let stats = Arc::new(Stats::default());

    let mut load = Load::new();
    load.spawn(&image, &model, &stats, 0..size / BLOCK, 8, 4);
    wait_acks(&stats, 0, 100, "before the kill").await;

    let at_kill = stats.acks();
    kill9(&cluster, "osd.1").await;
    let took = wait_acks(&stats, at_kill, 100, "after kill -9 of osd.1").await;
    eprintln!("100 writes acknowledged within {took:?} after the kill");
    wait_osd_state(&client, 1, false).await;
    // Keep writing degraded for a while, so osd.1 misses many writes.
    let degraded = stats.acks();
    wait_acks(&stats, degraded, 200, "degraded").await;
    load.stop().await;
    assert!(
        stats.errors().is_empty(),
        "writes failed: {:?}",
        stats.errors()
    );
    verify(&image, &model, "degraded, after kill -9 of osd.1").await;

    restart_missing(&cluster).await;
    wait_osd_state(&client, 1, true).await;
    verify(&image, &model, "after osd.1 restarted").await;

    // Writes go on with osd.1 back (it is primary of some PGs again).
    let mut load = Load::new();
    load.spawn(&image, &model, &stats, 0..size / BLOCK, 8, 4);
    let after = stats.acks();
    wait_acks(&stats, after, 100, "after the restart").await;
    load.stop().await;
    assert!(
        stats.errors().is_empty(),
        "writes failed: {:?}",
        stats.errors()
    );
    wait_all_clean(&cluster).await;
    verify(&image, &model, "after recovery, all clean").await;

    // The recovered osd.1 serves what it missed: with osd.0 gone it is the
    // primary of more PGs.
    kill9(&cluster, "osd.0").await;
    wait_osd_state(&client, 0, false).await;
    verify(&image, &model, "served by osd.1 and osd.2 after osd.0 died").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_primary_mid_write_then_restart_keeps_acknowledged_writes() {
    let cluster = Arc::new(TestCluster::up(3));
    let client = cluster.client().await;
    let size: u64 = 4 << 20; // 64 objects
    let image = create_image(&cluster, &client, "prim", size).await;
    let model = Model::new(size / BLOCK);

    // The primary of object 0.
    let oid = format!("rbd_data.{}.{:016x}", image.info_now().id, 0);
    let map = client.map();
    let pool = map.pool_by_name("rbd").expect("pool rbd");
    let pg = map.object_pg(pool, &oid);
    let primary = map.acting(pg).primary().expect("object 0 has a primary");
    eprintln!(
        "{oid} is in pg {pg}, primary osd.{primary}, acting {:?}",
        map.acting(pg).osds
    );

    // Object 0's 16 blocks: 8 writers of one block at a time. The rest of the
    // image: background writers spanning objects.
    let hot = Arc::new(Stats::default());
    let background = Arc::new(Stats::default());
    let mut load = Load::new();
    load.spawn(&image, &model, &hot, 0..BLOCKS_PER_OBJ, 8, 1);
    load.spawn(
        &image,
        &model,
        &background,
        BLOCKS_PER_OBJ..size / BLOCK,
        4,
        6,
    );
    wait_acks(&hot, 0, 100, "object 0 before the kill").await;

    let at_kill = hot.acks();
    let inflight = model.inflight(0..BLOCKS_PER_OBJ);
    kill9(&cluster, &format!("osd.{primary}")).await;
    eprintln!("{inflight} writes to object 0 were in flight at the kill");
    let took = wait_acks(&hot, at_kill, 50, "object 0 after killing its primary").await;
    eprintln!("object 0 writes resumed within {took:?}");
    let map = client.map();
    let new_primary = map.acting(pg).primary();
    assert_ne!(
        new_primary,
        Some(primary),
        "the map still names the dead primary"
    );
    eprintln!("new primary of {pg}: {new_primary:?}");

    // Restart the old primary while the writes go on; it becomes primary
    // again and must take them over.
    let before_restart = hot.acks();
    restart_missing(&cluster).await;
    wait_osd_state(&client, primary, true).await;
    within("the old primary to be primary again", WAIT, async {
        while client.map().acting(pg).primary() != Some(primary) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let after_restart = hot.acks();
    wait_acks(
        &hot,
        after_restart,
        50,
        "object 0 after the old primary restarted",
    )
    .await;
    eprintln!(
        "object 0: {} writes during the restart, more after",
        after_restart - before_restart
    );
    load.stop().await;

    verify(
        &image,
        &model,
        "after kill -9 of the primary and its restart",
    )
    .await;
    let errors: Vec<String> = hot
        .errors()
        .into_iter()
        .chain(background.errors())
        .collect();
    assert!(
        errors.is_empty(),
        "writes failed (they must complete on the new primary): {errors:?}"
    );
    wait_all_clean(&cluster).await;
    verify(&image, &model, "all clean").await;
    // A fresh client sees the same.
    let other = cluster.client().await;
    let image2 = Image::open(&other, "rbd", "prim").await.expect("open");
    verify(&image2, &model, "from a second client").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_min_size_writes_wait_and_complete_after_restart() {
    let cluster = Arc::new(TestCluster::up(3));
    let client = cluster.client().await;
    let size: u64 = 1 << 20;
    let image = create_image(&cluster, &client, "minsize", size).await;
    let before = pattern(41, (2 * OBJ) as usize);
    within(
        "first write",
        WAIT,
        image.write(0, Bytes::from(before.clone())),
    )
    .await
    .expect("write before the kills");

    kill9(&cluster, "osd.1").await;
    kill9(&cluster, "osd.2").await;
    wait_osd_state(&client, 1, false).await;
    wait_osd_state(&client, 2, false).await;

    // One copy left of every PG: a write must wait, neither completing nor
    // failing.
    let data = pattern(42, (OBJ + 8192) as usize);
    let offset = OBJ - 4096; // spans objects 0 and 1
    let writer = {
        let image = image.clone();
        let data = Bytes::from(data.clone());
        tokio::spawn(async move { image.write(offset, data).await })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !writer.is_finished(),
        "a write below min_size finished: {:?}",
        writer.await
    );

    restart_missing(&cluster).await;
    let result = within("the held write after the restart", WAIT, writer)
        .await
        .expect("writer task");
    result.expect("the held write must succeed once min_size is met");
    let mut model = before.clone();
    model.resize(size as usize, 0);
    model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
    let back = within("read", WAIT, image.read(0, size))
        .await
        .expect("read");
    assert!(
        back[..] == model[..],
        "image content differs after the held write"
    );
    wait_all_clean(&cluster).await;
    let back = within("read", WAIT, image.read(0, size))
        .await
        .expect("read");
    assert!(back[..] == model[..], "image content differs once clean");
}

/// Frames for the malformed-message test.
fn frame(msg: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(msg, &mut out).expect("encode");
    out
}

/// A frame of this build's version whose front is `payload` (the header
/// claims `len` bytes of front) and whose data segment is empty.
fn raw_frame(len: u32, crc: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    out.extend_from_slice(b"CRN");
    out.push(WIRE_VERSION);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// (what, bytes, close our side after sending, must the daemon close?)
fn malformed_inputs(entity: Entity) -> Vec<(String, Vec<u8>, bool, bool)> {
    let hello = frame(&Message::Hello { entity, fsid: None });
    let with_hello = |rest: Vec<u8>| [hello.clone(), rest].concat();
    let mut cases = vec![
        (
            "random bytes, no hello".to_string(),
            pattern(51, 4096),
            false,
            true,
        ),
        (
            "bad magic after hello".into(),
            with_hello(pattern(52, 64)),
            false,
            true,
        ),
        (
            "bad crc".into(),
            with_hello(raw_frame(100, 0x1234_5678, &pattern(53, 100))),
            false,
            true,
        ),
        (
            "over-long frame".into(),
            with_hello(raw_frame(MAX_FRAME_LEN as u32 + 1, 0, &[])),
            false,
            true,
        ),
        (
            "length u32::MAX".into(),
            with_hello(raw_frame(u32::MAX, 0, &[])),
            false,
            true,
        ),
        (
            "truncated frame then EOF".into(),
            with_hello(raw_frame(1 << 20, 0, &pattern(54, 10))),
            true,
            true,
        ),
        (
            "garbage as the first frame".into(),
            raw_frame(32, crc32c_of(&[0xff; 32]), &[0xff; 32]),
            false,
            true,
        ),
    ];
    // Valid crc, every message variant tag, then bytes that decode as huge
    // lengths and bad values. Some tags take the bytes as a valid message
    // (a ping with nonce 0xff..ff): the daemon may then keep the connection.
    for tag in 0u32..24 {
        let mut payload = tag.to_le_bytes().to_vec();
        payload.extend_from_slice(&[0xff; 60]);
        cases.push((
            format!("valid crc, variant {tag}, garbage body"),
            with_hello(raw_frame(
                payload.len() as u32,
                crc32c_of(&payload),
                &payload,
            )),
            false,
            false,
        ));
    }
    // A real message cut short, with a crc matching the cut payload.
    let op = frame(&Message::MonCommand {
        tid: 1,
        cmd: MonCommand::PoolCreate {
            name: "never-created".into(),
            pg_num: Some(8),
            size: None,
            min_size: None,
            rule: None,
        },
    });
    let payload = &op[FRAME_HEADER_LEN..op.len() - 6];
    cases.push((
        "truncated pool create".into(),
        with_hello(raw_frame(payload.len() as u32, crc32c_of(payload), payload)),
        false,
        true,
    ));
    cases
}

/// crc32c (Castagnoli), bitwise: the frame checksum.
fn crc32c_of(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Send `bytes` on a new connection to `addr`, then a ping (unless
/// `half_close`: then our side closes). Returns true if the daemon closed
/// the connection, false if it answered the ping (it took the bytes as a
/// valid message); panics if it did neither within 20 s.
async fn send_malformed(addr: &str, what: &str, bytes: &[u8], half_close: bool) -> bool {
    let stream = within("connect", WAIT, tokio::net::TcpStream::connect(addr))
        .await
        .unwrap_or_else(|e| panic!("{what}: cannot connect to {addr}: {e}"));
    let (r, mut w) = stream.into_split();
    // The daemon may close before reading everything: ignore write errors.
    let _ = w.write_all(bytes).await;
    if half_close {
        let _ = w.shutdown().await;
    } else {
        let _ = w.write_all(&frame(&Message::Ping { nonce: 0x5eed })).await;
    }
    let mut reader = FrameReader::new(r);
    let outcome = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match reader.read().await {
                Ok(Message::Pong { nonce: 0x5eed }) => return false,
                Ok(_) => continue,
                Err(_) => return true,
            }
        }
    })
    .await;
    outcome.unwrap_or_else(|_| {
        panic!("{what}: {addr} neither closed the connection nor answered within 20 s")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_drop_only_that_connection() {
    let cluster = Arc::new(TestCluster::up(3));
    let client = cluster.client().await;
    let image = create_image(&cluster, &client, "garbage", 1 << 20).await;
    let first = pattern(61, (3 * OBJ) as usize);
    within("write", WAIT, image.write(0, Bytes::from(first.clone())))
        .await
        .expect("write");

    // Sanity: the crc used to build frames is the wire's.
    let ping = frame(&Message::Ping { nonce: 7 });
    assert_eq!(
        u32::from_le_bytes(ping[12..16].try_into().unwrap()),
        crc32c_of(&ping[FRAME_HEADER_LEN..])
    );

    let mon_addr = cairn_config::Config::load(&cluster.conf())
        .expect("config")
        .global
        .mon_addr;
    let c = cluster.clone();
    let osds: serde_json::Value =
        serde_json::from_str(&blocking("osd ls", move || c.ok(&["--json", "osd", "ls"])).await)
            .expect("osd ls json");
    let osd0 = osds[0]["addr"].as_str().expect("osd.0 addr").to_string();
    let osd0_cluster = client
        .map()
        .osd_cluster_addr(0)
        .expect("osd.0 is up")
        .to_string();
    let epoch_before = client
        .mon_command(MonCommand::Status)
        .await
        .expect("status")["epoch"]
        .clone();
    let mon_pid = cluster.pid("mon");
    let osd_pid = cluster.pid("osd.0");

    let mut round = 0u64;
    // On the cluster address, the garbage follows a peer's hello (osd.2's:
    // it reaches the code that serves peers, which then treats osd.2's
    // session as reset, as after any broken connection).
    let client_hello = Entity::Client(0xbad);
    for (target, addr, hello) in [
        ("monitor", &mon_addr, client_hello),
        ("osd.0", &osd0, client_hello),
        ("osd.0's cluster address", &osd0_cluster, Entity::Osd(2)),
    ] {
        let mut kept = Vec::new();
        for (what, bytes, half_close, must_close) in malformed_inputs(hello) {
            let what = format!("{what} to the {target}");
            let closed = send_malformed(addr, &what, &bytes, half_close).await;
            assert!(closed || !must_close, "{what}: the connection stayed open");
            if !closed {
                kept.push(what);
            }
        }
        eprintln!("{target}: connection kept (bytes decoded as a message) for {kept:?}");
        assert!(
            is_alive(mon_pid),
            "the monitor died after garbage to the {target}"
        );
        assert!(
            is_alive(osd_pid),
            "osd.0 died after garbage to the {target}"
        );

        // The client's existing sessions still work: I/O on every object,
        // monitor commands, and a new client too.
        round += 1;
        let data = pattern(61 + round, (3 * OBJ) as usize);
        within(
            "write",
            WAIT,
            image.write(OBJ / 2, Bytes::from(data.clone())),
        )
        .await
        .unwrap_or_else(|e| panic!("write after garbage to the {target}: {e}"));
        let back = within("read", WAIT, image.read(OBJ / 2, data.len() as u64))
            .await
            .expect("read");
        assert!(
            back[..] == data[..],
            "data differs after garbage to the {target}"
        );
        let st = within("status", WAIT, client.mon_command(MonCommand::Status))
            .await
            .unwrap_or_else(|e| panic!("mon command after garbage to the {target}: {e}"));
        assert_eq!(st["osds"]["up"].as_u64(), Some(3), "{st}");
        assert_eq!(
            st["epoch"], epoch_before,
            "the map changed (an OSD session dropped?) after garbage to the {target}: {st}"
        );
        let other = cluster.client().await;
        let image2 = Image::open(&other, "rbd", "garbage").await.expect("open");
        let back = within("read", WAIT, image2.read(OBJ / 2, data.len() as u64))
            .await
            .expect("read from a new client");
        assert!(back[..] == data[..]);
    }
    // The truncated pool create did nothing.
    let c = cluster.clone();
    let pools = blocking("pool ls", move || c.ok(&["--json", "pool", "ls"])).await;
    assert!(!pools.contains("never-created"), "{pools}");
    let c = cluster.clone();
    blocking("cairn status", move || c.ok(&["status"])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn map_churn_under_load_loses_no_acknowledged_write() {
    let cluster = Arc::new(TestCluster::up(3));
    let client = cluster.client().await;
    let size: u64 = 8 << 20;
    let image = create_image(&cluster, &client, "churn", size).await;
    let model = Model::new(size / BLOCK);
    let stats = Arc::new(Stats::default());
    let mut load = Load::new();
    load.spawn(&image, &model, &stats, 0..size / BLOCK, 12, 3);
    wait_acks(&stats, 0, 100, "before the churn").await;

    // Live OSDs marked down (each boots again at once) and out/in: every
    // change moves primaries while the old ones are alive and may still
    // hold the old map.
    let start = Instant::now();
    let mut cycles = 0;
    while start.elapsed() < Duration::from_secs(20) {
        let osd = (cycles % 3).to_string();
        let args: Vec<String> = match cycles % 4 {
            3 => vec!["osd".into(), "out".into(), osd.clone()],
            _ => vec!["osd".into(), "down".into(), osd.clone()],
        };
        let c = cluster.clone();
        blocking("osd down/out", move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            c.ok(&a)
        })
        .await;
        tokio::time::sleep(Duration::from_millis(700)).await;
        if cycles % 4 == 3 {
            let c = cluster.clone();
            blocking("osd in", move || c.ok(&["osd", "in", &osd])).await;
        }
        let from = stats.acks();
        wait_acks(&stats, from, 20, &format!("churn cycle {cycles}")).await;
        cycles += 1;
    }
    load.stop().await;
    eprintln!(
        "{cycles} churn cycles, {} writes acknowledged",
        stats.acks()
    );
    assert!(
        stats.errors().is_empty(),
        "writes failed: {:?}",
        stats.errors()
    );
    verify(&image, &model, "after map churn").await;
    wait_all_clean(&cluster).await;
    verify(&image, &model, "after map churn, all clean").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_every_osd_then_restart_keeps_acknowledged_writes() {
    let cluster = Arc::new(TestCluster::up(3));
    let client = cluster.client().await;
    let size: u64 = 8 << 20;
    let image = create_image(&cluster, &client, "allkill", size).await;
    let model = Model::new(size / BLOCK);
    let stats = Arc::new(Stats::default());
    let mut load = Load::new();
    load.spawn(&image, &model, &stats, 0..size / BLOCK, 8, 4);
    wait_acks(&stats, 0, 300, "before the kills").await;

    // Every OSD dies at once: the writes in flight wait (no copy is up) and
    // every acknowledged write must survive in the OSDs' stores.
    let inflight = model.inflight(0..size / BLOCK);
    for osd in ["osd.0", "osd.1", "osd.2"] {
        kill9(&cluster, osd).await;
    }
    eprintln!("{inflight} blocks had a write in flight at the kills");
    let at_kill = stats.acks();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = stats.acks() - at_kill;
    assert!(
        during <= 8,
        "{during} writes acknowledged with every OSD dead (at most the 8 in flight may finish)"
    );
    restart_missing(&cluster).await;
    let from = stats.acks();
    wait_acks(&stats, from, 100, "after restarting every OSD").await;
    load.stop().await;
    assert!(
        stats.errors().is_empty(),
        "writes failed: {:?}",
        stats.errors()
    );
    verify(&image, &model, "after kill -9 of every OSD and restart").await;
    wait_all_clean(&cluster).await;
    verify(&image, &model, "all clean").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_restart_does_not_strand_clients() {
    let cluster = Arc::new(TestCluster::up(3));
    let client = cluster.client().await;
    let size: u64 = 4 << 20;
    let image = create_image(&cluster, &client, "monrestart", size).await;
    let model = Model::new(size / BLOCK);
    let stats = Arc::new(Stats::default());
    let mut load = Load::new();
    load.spawn(&image, &model, &stats, 0..size / BLOCK, 6, 2);
    wait_acks(&stats, 0, 100, "before the monitor restart").await;

    kill9(&cluster, "mon").await;
    restart_missing(&cluster).await;
    let from = stats.acks();
    wait_acks(&stats, from, 100, "after the monitor restart").await;
    // The client must follow maps made by the new monitor: an OSD failure
    // after the restart must not strand its writes.
    let epoch = status(&cluster).await["epoch"].as_u64().expect("epoch") as u32;
    within(
        "the client to see the restarted monitor's maps",
        RESUME,
        client.wait_for_epoch(epoch),
    )
    .await
    .expect("client map");
    kill9(&cluster, "osd.2").await;
    let from = stats.acks();
    wait_acks(
        &stats,
        from,
        100,
        "after kill -9 of osd.2 following the monitor restart",
    )
    .await;
    load.stop().await;
    assert!(
        stats.errors().is_empty(),
        "writes failed: {:?}",
        stats.errors()
    );
    verify(&image, &model, "after the monitor restart and an OSD kill").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_goes_on_while_the_monitor_is_down() {
    let cluster = Arc::new(TestCluster::up(3));
    let client = cluster.client().await;
    let size: u64 = 4 << 20;
    let image = create_image(&cluster, &client, "nomon", size).await;
    let model = Model::new(size / BLOCK);
    let stats = Arc::new(Stats::default());
    let mut load = Load::new();
    load.spawn(&image, &model, &stats, 0..size / BLOCK, 6, 2);
    wait_acks(&stats, 0, 100, "before the monitor dies").await;

    // No OSD changes: the map the client has stays right, and writes must
    // neither fail nor stop (the client has no op timeout: it waits as a
    // disk does).
    kill9(&cluster, "mon").await;
    let from = stats.acks();
    wait_acks(&stats, from, 200, "with the monitor down").await;
    assert!(
        stats.errors().is_empty(),
        "writes failed while the monitor was down: {:?}",
        stats.errors()
    );
    restart_missing(&cluster).await;
    let from = stats.acks();
    wait_acks(&stats, from, 100, "after the monitor restarted").await;
    load.stop().await;
    assert!(
        stats.errors().is_empty(),
        "writes failed: {:?}",
        stats.errors()
    );
    verify(&image, &model, "after the monitor outage").await;
}
