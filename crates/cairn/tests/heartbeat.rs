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
