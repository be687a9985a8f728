//! Full ratios on real processes: three BlueStore OSDs on small devices,
//! with ratios low enough to reach in seconds. Filling an image until
//! writes fail must end in a no-space error within a bounded time (never
//! a hang); health then names the full OSDs; reads of everything
//! acknowledged, removes and discards (through NBD too) still work while
//! writes through the client library, `cairn nbd` (ENOSPC, as qemu-io
//! sees it), `cairn image create` and `cairn bench` fail with a clear
//! error; removing an image brings the OSDs below the ratios and writes
//! work again. Every acknowledged byte is read back at the end.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::{Cluster, Image};
use cairn_volume::{Volume, VolumeError};
use common::{pattern, TestCluster, CAIRN};

const MIB: u64 = 1 << 20;
/// The image kept throughout, written before the cluster fills.
const KEEP_BYTES: u64 = 16 * MIB;
/// The image that fills the cluster: larger than the space below `full`.
const FILLER_BYTES: u64 = 256 * MIB;
/// Writes of this size, one whole object each.
const CHUNK: u64 = MIB;
/// Bound on any single operation: only a hang gets near it.
const OP_WAIT: Duration = Duration::from_secs(30);
/// Bound on filling the cluster until writes fail.
const FILL_WAIT: Duration = Duration::from_secs(120);
/// Bound on the monitor noticing a change of fullness.
const STATE_WAIT: Duration = Duration::from_secs(30);

/// A cluster whose OSDs are full at 35% of a 96 MiB device with an 8 MiB
/// journal (about 31 MiB of data), reporting every 200 ms.
fn small_cluster() -> TestCluster {
    TestCluster::up_with(
        3,
        &[
            "--pg-num",
            "8",
            "--store",
            "bluestore",
            "--set",
            "osd.bluestore_block_size=100663296",
            "--set",
            "osd.bluestore_journal_size=8388608",
            "--set",
            "osd.heartbeat_interval_ms=200",
            "--set",
            "mon.osd_nearfull_ratio=0.25",
            "--set",
            "mon.osd_backfillfull_ratio=0.3",
            "--set",
            "mon.osd_full_ratio=0.35",
        ],
    )
}

async fn within<T>(what: &str, limit: Duration, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in {limit:?} (hang)"))
}

/// Without the exclusive lock: the library handle and the NBD gateways
/// write `keep` in turn while all are open.
fn create_image(cluster: &TestCluster, name: &str, size: u64) {
    cluster.ok(&[
        "image",
        "create",
        &format!("rbd/{name}"),
        "--size",
        &size.to_string(),
        "--object-size",
        &CHUNK.to_string(),
        "--image-feature",
        "none",
    ]);
}

/// Poll `status` until `done` holds for it (bounded).
fn wait_status(cluster: &TestCluster, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + STATE_WAIT;
    loop {
        let status = cluster.status();
        if done(&status) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {STATE_WAIT:?}; status: {status:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn full_osds(status: &serde_json::Value) -> usize {
    status["full"]["full"].as_array().map_or(0, Vec::len)
}

/// Write `keep` whole; returns the model of its content.
async fn write_keep(image: &Image, seed: u64) -> Vec<u8> {
    let data = pattern(seed, KEEP_BYTES as usize);
    within(
        "write keep",
        OP_WAIT,
        image.write(0, Bytes::from(data.clone())),
    )
    .await
    .expect("write keep");
    data
}

async fn assert_reads_back(image: &Image, offset: u64, model: &[u8], what: &str) {
    let back = within(what, OP_WAIT, image.read(offset, model.len() as u64))
        .await
        .unwrap_or_else(|e| panic!("{what}: read failed: {e}"));
    if let Some(i) = back.iter().zip(model).position(|(a, b)| a != b) {
        panic!("{what}: byte {} differs", offset + i as u64);
    }
}

/// Write `filler` in whole chunks, four at a time, until writes fail.
/// Returns the chunks acknowledged and the error that stopped it.
async fn fill(image: &Arc<Image>) -> (Vec<u64>, VolumeError) {
    let started = Instant::now();
    let mut acked = Vec::new();
    let chunks: Vec<u64> = (0..FILLER_BYTES / CHUNK).collect();
    for group in chunks.chunks(4) {
        assert!(
            started.elapsed() < FILL_WAIT,
            "still writing after {FILL_WAIT:?}: the cluster never refused a write"
        );
        let mut writes = tokio::task::JoinSet::new();
        for &chunk in group {
            let image = image.clone();
            writes.spawn(async move {
                let data = Bytes::from(pattern(1000 + chunk, CHUNK as usize));
                let result = within("fill write", OP_WAIT, image.write(chunk * CHUNK, data)).await;
                (chunk, result)
            });
        }
        let mut failed = None;
        while let Some(done) = writes.join_next().await {
            match done.expect("write task") {
                (chunk, Ok(())) => acked.push(chunk),
                (_, Err(e)) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            return (acked, e);
        }
    }
    panic!("the whole {FILLER_BYTES}-byte image was written: the cluster never filled up");
}

/// `cairn nbd` serving `rbd/NAME` on a Unix socket; killed on drop.
struct Gateway {
    child: Child,
    uri: String,
}

impl Gateway {
    fn start(cluster: &TestCluster, name: &str) -> Gateway {
        let socket = cluster.path().join(format!("{name}.sock"));
        let log = std::fs::File::create(cluster.path().join("nbd-gateway.log")).expect("log");
        let child = Command::new(CAIRN)
            .arg("--conf")
            .arg(cluster.conf())
            .args(["nbd", "--image", &format!("rbd/{name}"), "--socket"])
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn cairn nbd");
        let mut gateway = Gateway {
            child,
            uri: format!("nbd+unix:///{name}?socket={}", socket.display()),
        };
        gateway.wait_serving(&socket);
        gateway
    }

    fn wait_serving(&mut self, socket: &Path) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("cairn nbd exited ({status}) before serving");
            }
            assert!(Instant::now() < deadline, "cairn nbd never served");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run qemu-io (bounded) with `commands`; returns its output.
fn qemu_io(uri: &str, commands: &[&str]) -> String {
    let mut command = Command::new("qemu-io");
    command.args(["-f", "raw", uri]);
    for c in commands {
        command.args(["-c", c]);
    }
    let mut child = command
        .env(
            "PATH",
            format!(
                "/usr/bin:/bin:{}",
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("qemu-io is needed: apt-get install qemu-utils");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("qemu-io {commands:?} hung");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("qemu-io output");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn nbd_io_ok(uri: &str, commands: &[&str]) {
    let text = qemu_io(uri, commands);
    assert!(
        !text.contains("failed") && !text.contains("error"),
        "qemu-io {commands:?}: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fill_to_full_then_remove_data_and_write_again() {
    let cluster = small_cluster();
    let client: Arc<Cluster> = cluster.client().await;
    create_image(&cluster, "keep", KEEP_BYTES);
    create_image(&cluster, "filler", FILLER_BYTES);
    let keep = within("open keep", OP_WAIT, Image::open(&client, "rbd", "keep"))
        .await
        .expect("open keep");
    let filler = within(
        "open filler",
        OP_WAIT,
        Image::open(&client, "rbd", "filler"),
    )
    .await
    .expect("open filler");
    let mut model = write_keep(&keep, 1).await;

    // Fill until a write fails: with a no-space error, in bounded time.
    let started = Instant::now();
    let (acked, error) = fill(&filler).await;
    assert_eq!(error, VolumeError::NoSpace, "the write that failed");
    assert!(!acked.is_empty(), "nothing fitted before full");
    eprintln!(
        "full after {} MiB of filler in {:?}",
        acked.len(),
        started.elapsed()
    );

    // Health names the full OSDs; `osd ls` shows them.
    wait_status(&cluster, "health shows full OSDs", |s| {
        full_osds(s) > 0
            && s["health"].as_str().is_some_and(|h| {
                h.starts_with("HEALTH_ERR") && h.contains("osds full (writes to their PGs fail)")
            })
    });
    let detail = cluster.ok(&["--json", "health", "detail"]);
    assert!(detail.contains("OSD_FULL"), "{detail}");
    let osds = cluster.ok(&["osd", "ls"]);
    assert!(osds.contains(" full"), "{osds}");

    // Writes fail at once, again and again; reads of everything
    // acknowledged work.
    for attempt in 0..3 {
        let t = Instant::now();
        let result = within(
            "write at full",
            OP_WAIT,
            keep.write(0, Bytes::from(vec![7u8; 4096])),
        )
        .await;
        assert_eq!(result, Err(VolumeError::NoSpace), "attempt {attempt}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "refusal took {:?}",
            t.elapsed()
        );
    }
    assert_reads_back(&keep, 0, &model, "keep at full").await;
    for &chunk in &acked {
        let want = pattern(1000 + chunk, CHUNK as usize);
        assert_reads_back(&filler, chunk * CHUNK, &want, "filler at full").await;
    }

    // The CLI says why, in one line.
    let err = cluster.fails(&["image", "create", "rbd/more", "--size", "1M"]);
    assert!(err.contains("no space left"), "{err}");
    let err = cluster.fails(&[
        "bench",
        "--image",
        "rbd/keep",
        "--rw",
        "write",
        "--bs",
        "4k",
        "--iodepth",
        "1",
        "--runtime",
        "2",
        "--ramp",
        "0",
    ]);
    assert!(
        err.contains("no space left") && err.contains("full"),
        "{err}"
    );

    // Through NBD: a write fails with ENOSPC, reads and discards work
    // (last: the discard frees space).
    {
        let gateway = Gateway::start(&cluster, "keep");
        let text = qemu_io(&gateway.uri, &["write -P 0x5a 0 64k"]);
        assert!(
            text.contains("No space left on device"),
            "qemu-io write at full: {text}"
        );
        nbd_io_ok(&gateway.uri, &["read 0 64k"]);
        nbd_io_ok(&gateway.uri, &["discard 1M 1M"]);
        model[MIB as usize..2 * MIB as usize].fill(0);
        nbd_io_ok(&gateway.uri, &["read -P 0 1M 1M"]);
    }
    assert_reads_back(&keep, 0, &model, "keep after an NBD discard").await;

    // Removing an image works at full and brings the OSDs below the ratios
    // (closing it, which drops its watch, too).
    within("close filler", OP_WAIT, filler.close())
        .await
        .expect("close filler");
    cluster.ok(&["image", "rm", "rbd/filler"]);
    wait_status(&cluster, "no OSD full after the removal", |s| {
        full_osds(s) == 0 && !s["health"].as_str().unwrap_or("").contains("full")
    });

    // Writes work again, through the library and NBD.
    let again = pattern(2, 4 * MIB as usize);
    within(
        "write after",
        OP_WAIT,
        keep.write(4 * MIB, Bytes::from(again.clone())),
    )
    .await
    .expect("write after removing data");
    model[4 * MIB as usize..8 * MIB as usize].copy_from_slice(&again);
    {
        let gateway = Gateway::start(&cluster, "keep");
        nbd_io_ok(&gateway.uri, &["write -P 0x5a 0 64k", "read -P 0x5a 0 64k"]);
        model[..64 << 10].fill(0x5a);
    }
    let images = cluster.ok(&["image", "ls"]);
    assert_eq!(images.trim(), "keep");

    // Everything acknowledged reads back.
    let keep = within("reopen keep", OP_WAIT, Image::open(&client, "rbd", "keep"))
        .await
        .expect("reopen keep");
    assert_reads_back(&keep, 0, &model, "keep at the end").await;
}
