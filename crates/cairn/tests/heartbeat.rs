//! A hung OSD (SIGSTOP: its connections stay open, it just stops answering)
//! is marked down by the monitor after the heartbeat grace, I/O goes on
//! without it, and when it wakes up it notices it was marked down, boots
//! again and catches up before serving.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::Image;
use cairn_volume::Volume;
use common::{pattern, TestCluster};

fn osd_up(cluster: &TestCluster, id: u64) -> bool {
    let osds: serde_json::Value =
        serde_json::from_str(&cluster.ok(&["--json", "osd", "ls"])).expect("json");
    osds.as_array()
        .expect("array")
        .iter()
        .any(|o| o["id"].as_u64() == Some(id) && o["up"].as_bool() == Some(true))
}

fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_osd_is_marked_down_and_rejoins_after_waking() {
    let cluster = TestCluster::up(3);
    cluster.ok(&[
        "image",
        "create",
        "rbd/hb",
        "--size",
        "32M",
        "--object-size",
        "1M",
    ]);
    let client = cluster.client().await;
    let image = Image::open(&client, "rbd", "hb").await.expect("open");
    let before = pattern(1, 1 << 20);
    image
        .write(0, Bytes::from(before.clone()))
        .await
        .expect("write");

    let pid = cluster.pid("osd.2") as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // The grace is 6 s by default; allow for a slow machine.
    let c = &cluster;
    tokio::task::block_in_place(|| {
        wait_until("osd.2 to be marked down", Duration::from_secs(30), || {
            !osd_up(c, 2)
        })
    });
    // I/O continues on the two remaining OSDs (min_size 2).
    let during = pattern(2, 4 << 20);
    let write = image.write(8 << 20, Bytes::from(during.clone()));
    tokio::time::timeout(Duration::from_secs(30), write)
        .await
        .expect("write while osd.2 is hung must complete")
        .expect("write");

    unsafe { libc::kill(pid, libc::SIGCONT) };
    tokio::task::block_in_place(|| {
        wait_until("osd.2 to boot again", Duration::from_secs(30), || {
            osd_up(c, 2)
        });
        wait_until("all PGs active+clean", Duration::from_secs(60), || {
            let s = c.status();
            s["pgs"]["clean"] == s["pgs"]["total"]
        });
    });
    // Everything reads back, now with osd.2 serving as a primary again.
    let back = image.read(0, 1 << 20).await.expect("read");
    assert_eq!(&back[..], &before[..]);
    let back = image.read(8 << 20, 4 << 20).await.expect("read");
    assert_eq!(&back[..], &during[..]);
    let hole = image.read(20 << 20, 4096).await.expect("read hole");
    assert!(hole.iter().all(|&b| b == 0));
}

/// A write held up by a member that hangs for a moment (below the
/// heartbeat grace, so it stays up) is acknowledged once it wakes, and
/// the primary logs it as slow, naming the member it waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_held_up_by_a_hung_member_is_reported_slow() {
    let cluster = TestCluster::up_with(3, &["--set", "osd.op_complaint_time_ms=500"]);
    cluster.ok(&[
        "image",
        "create",
        "rbd/slow",
        "--size",
        "4M",
        "--object-size",
        "1M",
    ]);
    let client = cluster.client().await;
    let image = Image::open(&client, "rbd", "slow").await.expect("open");
    let first = pattern(1, 4096);
    image.write(0, Bytes::from(first)).await.expect("write");
    let oid = format!("rbd_data.{}.{:016x}", image.info_now().id, 0);
    let map = client.map();
    let pool = map.pool_by_name("rbd").expect("pool rbd");
    let pg = map.object_pg(pool, &oid);
    let acting = map.acting(pg).osds.clone();
    let primary = acting[0];
    let member = acting[1];

    let pid = cluster.pid(&format!("osd.{member}")) as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let data = pattern(2, 4096);
    let write = tokio::spawn({
        let image = image.clone();
        let data = data.clone();
        async move { image.write(0, Bytes::from(data)).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !write.is_finished(),
        "acknowledged before osd.{member} woke"
    );
    unsafe { libc::kill(pid, libc::SIGCONT) };
    tokio::time::timeout(Duration::from_secs(30), write)
        .await
        .expect("the write completes once the member wakes")
        .expect("task")
        .expect("write");
    assert_eq!(image.read(0, 4096).await.expect("read").to_vec(), data);

    let log = cluster.path().join(format!("osd.{primary}.log"));
    let text = std::fs::read_to_string(&log).expect("primary's log");
    let line = text
        .lines()
        .find(|l| l.contains("slow write to") && l.contains(&oid))
        .unwrap_or_else(|| panic!("no slow write of {oid} in {}:\n{text}", log.display()));
    assert!(
        line.contains(&format!("osd.{member} committed last")),
        "{line}"
    );
}
