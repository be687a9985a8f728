//! The exclusive lock: one writer per image; a second writer waits for a
//! live holder, and takes over from a dead one (or on `image lock break`)
//! only after fencing it, so the fenced writer's later writes are refused
//! by the OSDs and never applied.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::Image;
use cairn_volume::Volume;
use cairn_wire::MonCommand;
use common::nbd::*;
use common::{pattern, TestCluster};

const MIB: u64 = 1 << 20;
const WAIT: Duration = Duration::from_secs(60);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in {WAIT:?} (hang)"))
}

/// Three OSDs; clients' watches lapse after `ms`.
fn cluster(ms: u32) -> TestCluster {
    let watch = format!("client.watch_timeout_ms={ms}");
    TestCluster::up_with(3, &["--pg-num", "16", "--set", &watch])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_waits_for_a_live_holder_and_lock_break_fences_it() {
    // A long lapse: A's watch must stay live through B's wait, even on a
    // loaded machine.
    let cluster = cluster(20_000);
    cluster.ok(&["image", "create", "rbd/x", "--size", "8M"]);
    let info = cluster.ok(&["image", "info", "rbd/x"]);
    assert!(info.contains("features:    exclusive-lock"), "{info}");
    let a_client = cluster.client().await;
    let b_client = cluster.client().await;
    let a = within("open a", Image::open(&a_client, "rbd", "x"))
        .await
        .expect("open a");
    let b = within("open b", Image::open(&b_client, "rbd", "x"))
        .await
        .expect("open b");
    let first = pattern(1, MIB as usize);
    within("a writes", a.write(0, Bytes::from(first.clone())))
        .await
        .expect("a writes");
    let locker = cluster.ok(&["image", "lock", "ls", "rbd/x"]);
    let a_name = format!("client.{:016x}", a_client.client_id());
    assert!(locker.contains(&a_name), "lock ls: {locker}");

    // B may read, but its write waits while A is alive and holds the lock.
    let read = within("b reads", b.read(0, MIB)).await.expect("b reads");
    assert_eq!(&read[..], &first[..]);
    let second = pattern(2, MIB as usize);
    let b2 = b.clone();
    let data = Bytes::from(second.clone());
    let mut pending = tokio::spawn(async move { b2.write(0, data).await });
    let waited = tokio::time::timeout(Duration::from_secs(4), &mut pending).await;
    assert!(waited.is_err(), "B wrote while A held the lock: {waited:?}");

    // An admin breaks the lock: A is fenced, B's write goes through.
    let broke = cluster.ok(&["image", "lock", "break", "rbd/x"]);
    assert!(broke.contains(&a_name), "lock break: {broke}");
    within("b's write", &mut pending)
        .await
        .expect("join")
        .expect("b's write after the break");
    let locker = cluster.ok(&["image", "lock", "ls", "rbd/x"]);
    let b_name = format!("client.{:016x}", b_client.client_id());
    assert!(
        locker.contains(&b_name),
        "lock ls after the break: {locker}"
    );

    // A's later writes are refused by the OSDs, never applied.
    let late = within(
        "a's late write",
        a.write(0, Bytes::from(vec![0xa5u8; 4096])),
    )
    .await;
    let err = late.expect_err("a fenced writer's write must fail");
    assert!(err.to_string().contains("blocklisted"), "{err}");
    let again = within("a again", a.write(4 * MIB, Bytes::from(vec![0xa5u8; 4096]))).await;
    assert!(again.is_err(), "a fenced handle stays fenced");
    let list = within("blocklist", a_client.mon_command(MonCommand::BlocklistLs))
        .await
        .expect("blocklist ls");
    assert!(list.to_string().contains(&a_name), "{list}");
    let text = cluster.ok(&["osd", "blocklist", "ls"]);
    assert!(
        text.contains(&a_name) && text.contains("broken by an admin"),
        "{text}"
    );

    // The image holds B's bytes, and nothing of A's late writes.
    let back = within("read", b.read(0, 8 * MIB)).await.expect("read");
    assert_eq!(&back[..MIB as usize], &second[..]);
    assert!(back[4 * MIB as usize..].iter().all(|&x| x == 0));

    // An admin can let the client back in (its handle stays lost).
    let err = cluster.fails(&["osd", "blocklist", "rm", "client.zz"]);
    assert!(err.contains("invalid client"), "{err}");
    cluster.ok(&["osd", "blocklist", "rm", &a_name]);
    let text = cluster.ok(&["osd", "blocklist", "ls"]);
    assert!(text.contains("no client is blocklisted"), "{text}");
    let err = cluster.fails(&["osd", "blocklist", "rm", &a_name]);
    assert!(err.contains("not blocklisted"), "{err}");
}

#[test]
fn a_killed_writer_is_fenced_before_another_gateway_takes_its_lock() {
    let cluster = cluster(2000);
    cluster.ok(&["image", "create", "rbd/g", "--size", "16M"]);
    let socket = Listen::Unix(cluster.path().join("g1.sock"));
    let mut first = Gateway::start(&cluster, "g", socket, &[]);
    QEMU_IO.ok(&["-f", "raw", first.uri.as_str(), "-c", "write -P 0x11 0 1M"]);
    let holder = cluster.ok(&["image", "lock", "ls", "rbd/g"]);
    first.kill(); // SIGKILL: its watch and lock stay behind

    // A new gateway's write waits out the dead holder's watch, fences it,
    // takes the lock over and lands.
    let socket = Listen::Unix(cluster.path().join("g2.sock"));
    let mut second = Gateway::start(&cluster, "g", socket, &[]);
    let started = Instant::now();
    QEMU_IO.ok(&["-f", "raw", second.uri.as_str(), "-c", "write -P 0x22 0 1M"]);
    let took = started.elapsed();
    let text = QEMU_IO.ok(&["-f", "raw", second.uri.as_str(), "-c", "read -P 0x22 0 1M"]);
    assert!(!text.contains("verification failed"), "{text}");
    let now = cluster.ok(&["image", "lock", "ls", "rbd/g"]);
    assert_ne!(now, holder, "the lock changed hands");
    let log = second.log_text();
    assert!(
        log.contains("fenced client.") && log.contains("exclusive lock taken"),
        "the new gateway fenced the old one before taking the lock ({took:?}):\n{log}"
    );
    second.stop();
    // Stopped cleanly: the lock is given back.
    assert_eq!(
        cluster.ok(&["image", "lock", "ls", "rbd/g"]).trim(),
        "not locked"
    );
}
