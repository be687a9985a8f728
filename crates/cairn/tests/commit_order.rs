//! A primary killed with `kill -9` after its replicas committed a write but
//! before it did, and the reverse, on real processes: the write that was in
//! flight is acknowledged once (through the surviving members), reads back,
//! and the killed OSD, restarted, serves it as primary again. One OSD's
//! commits are held back with `osd.debug_commit_delay_ms`, so its store lags
//! its peers' by a known time; the same sequences run by the thousand in
//! the simulation (`crates/sim/tests/commit_order.rs`).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::{Cluster, Image};
use cairn_volume::Volume;
use common::writes::*;
use common::{pattern, TestCluster};

/// How long the slow OSDs hold each commit.
const DELAY_MS: u64 = 1500;

fn slow(osds: &[u32]) -> Vec<String> {
    let mut args = vec!["--pg-num".to_string(), "16".to_string()];
    for id in osds {
        args.push("--set".into());
        args.push(format!("osd.{id}.debug_commit_delay_ms={DELAY_MS}"));
    }
    args
}

/// The first object of `image` whose primary is `osd`: its offset.
fn object_with_primary(client: &Cluster, image: &Image, osd: u32) -> u64 {
    (0..image.info_now().objects())
        .find(|n| object_primary(client, image, *n) == Some(osd))
        .map(|n| n * OBJ)
        .unwrap_or_else(|| panic!("no object of the image has osd.{osd} as primary"))
}

async fn read_block(image: &Image, offset: u64) -> Vec<u8> {
    within("a read", WAIT, image.read(offset, BLOCK))
        .await
        .expect("read")
        .to_vec()
}

/// Write `old` to the probe block and wait for it; start writing `new`;
/// after `settle`, check it is not acknowledged yet and kill `victim`; the
/// write must then be acknowledged through the survivors and read back.
async fn kill_during_commit(
    cluster: &Arc<TestCluster>,
    image: &Arc<Image>,
    offset: u64,
    victim: u32,
    settle: Duration,
) {
    let old = pattern(1, BLOCK as usize);
    let new = pattern(2, BLOCK as usize);
    within(
        "the first write",
        WAIT,
        image.write(offset, Bytes::from(old.clone())),
    )
    .await
    .expect("first write");
    assert_eq!(read_block(image, offset).await, old);

    let started = Instant::now();
    let write = {
        let (image, data) = (image.clone(), Bytes::from(new.clone()));
        tokio::spawn(async move { image.write(offset, data).await })
    };
    tokio::time::sleep(settle).await;
    assert!(
        !write.is_finished(),
        "the write was acknowledged after {:?}, before every member committed it",
        started.elapsed()
    );
    kill9(cluster, &format!("osd.{victim}")).await;
    eprintln!("osd.{victim} killed {:?} into the write", started.elapsed());
    within("the write in flight at the kill", WAIT, write)
        .await
        .expect("write task")
        .expect("the write in flight at the kill");
    eprintln!("acknowledged {:?} after it was sent", started.elapsed());
    assert_eq!(
        read_block(image, offset).await,
        new,
        "read after the kill (osd.{victim} down)"
    );
}

/// Restart the killed OSD, wait for every PG clean and for it to be the
/// probe's primary again, and read the probe from it.
async fn restart_and_read(
    cluster: &Arc<TestCluster>,
    client: &Arc<Cluster>,
    image: &Arc<Image>,
    offset: u64,
    victim: u32,
    primary: u32,
) {
    restart_missing(cluster).await;
    wait_osd_state(client, victim, true).await;
    wait_all_clean(cluster).await;
    within("the probe's primary to be back", WAIT, async {
        while object_primary(client, image, offset / OBJ) != Some(primary) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(
        read_block(image, offset).await,
        pattern(2, BLOCK as usize),
        "read from osd.{primary} after osd.{victim} came back"
    );
}

/// The primary (osd.2, slow) has not committed; both replicas have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_killed_after_its_replicas_committed() {
    let args = slow(&[2]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cluster = Arc::new(TestCluster::up_with(3, &args));
    let client = cluster.client().await;
    let image = create_image(&cluster, &client, "probe", 32 * OBJ).await;
    let offset = object_with_primary(&client, &image, 2);
    // The replicas commit in milliseconds; the primary after DELAY_MS.
    kill_during_commit(&cluster, &image, offset, 2, Duration::from_millis(600)).await;
    restart_and_read(&cluster, &client, &image, offset, 2, 2).await;
}

/// The primary (osd.0) has committed; neither replica (slow) has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_killed_before_its_replicas_committed() {
    let args = slow(&[1, 2]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cluster = Arc::new(TestCluster::up_with(3, &args));
    let client = cluster.client().await;
    let image = create_image(&cluster, &client, "probe", 32 * OBJ).await;
    let offset = object_with_primary(&client, &image, 0);
    kill_during_commit(&cluster, &image, offset, 0, Duration::from_millis(300)).await;
    restart_and_read(&cluster, &client, &image, offset, 0, 0).await;
}
