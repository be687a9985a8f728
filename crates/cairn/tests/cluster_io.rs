//! Data-path tests on a real cluster (a monitor and three OSD processes):
//! concurrent random writes against an in-memory model, resize, discard and
//! write_zeroes, image removal, and isolation between images. Every check
//! compares bytes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_client::{Cluster, Image};
use cairn_volume::Volume;
use cairn_wire::{ObjOp, OpError};
use common::{pattern, TestCluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const K: u64 = 1 << 10;
/// Small objects so that object boundaries are frequent.
const OBJ: u64 = 64 * K;
/// Bound on any single wait, so a hang fails instead of stalling CI.
const WAIT: Duration = Duration::from_secs(60);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in {WAIT:?} (hang)"))
}

/// Create `rbd/<name>` through the CLI and open it.
async fn create_image(
    cluster: &TestCluster,
    client: &Arc<Cluster>,
    name: &str,
    size: u64,
) -> Arc<Image> {
    cluster.ok(&[
        "image",
        "create",
        &format!("rbd/{name}"),
        "--size",
        &size.to_string(),
        "--object-size",
        &OBJ.to_string(),
    ]);
    within("open", Image::open(client, "rbd", name))
        .await
        .expect("open image")
}

/// Read the whole image and compare it with `model`, reporting the first
/// differing byte.
async fn assert_image_eq(image: &Image, model: &[u8], what: &str) {
    assert_eq!(image.size(), model.len() as u64, "{what}: size");
    let back = within("read", image.read(0, model.len() as u64))
        .await
        .unwrap_or_else(|e| panic!("{what}: read failed: {e}"));
    assert_eq!(back.len(), model.len(), "{what}: read length");
    if let Some(i) = back.iter().zip(model).position(|(a, b)| a != b) {
        panic!(
            "{what}: byte {i} (object {}, offset {} in it) is {:#04x}, expected {:#04x}",
            i as u64 / OBJ,
            i as u64 % OBJ,
            back[i],
            model[i]
        );
    }
}

fn assert_zeros(data: &[u8], what: &str) {
    if let Some(i) = data.iter().position(|&b| b != 0) {
        panic!("{what}: byte {i} is {:#04x}, expected zero", data[i]);
    }
}

fn image_info_json(cluster: &TestCluster, spec: &str) -> serde_json::Value {
    let out = cluster.ok(&["--json", "image", "info", spec]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("image info json: {e}: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_random_writes_match_the_model() {
    let cluster = TestCluster::up(3);
    let client = cluster.client().await;
    let size = 4 << 20; // 64 objects of 64K
    let image = create_image(&cluster, &client, "random", size).await;
    let mut model = vec![0u8; size as usize];

    let seed: u64 = rand::random();
    eprintln!("random seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut writes = 0;
    for round in 0..12 {
        // Up to 24 non-overlapping writes in flight at once; their order of
        // completion does not matter to the model.
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut attempts = 0;
        while ranges.len() < 24 && attempts < 200 {
            attempts += 1;
            let len = match rng.gen_range(0..4) {
                0 => rng.gen_range(1..512),             // tiny, unaligned
                1 => rng.gen_range(512..OBJ),           // within or across one boundary
                2 => rng.gen_range(OBJ..3 * OBJ + 777), // spans several objects
                _ => 4 * K,
            };
            let offset = if rng.gen_bool(0.3) {
                // Straddle an object boundary on purpose.
                let boundary = rng.gen_range(1..size / OBJ) * OBJ;
                boundary.saturating_sub(rng.gen_range(1..=len.min(OBJ)))
            } else {
                rng.gen_range(0..size - len)
            };
            let len = len.min(size - offset);
            if ranges
                .iter()
                .all(|&(o, l)| offset + len <= o || o + l <= offset)
            {
                ranges.push((offset, len));
            }
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (i, &(offset, len)) in ranges.iter().enumerate() {
            let data = pattern(seed ^ (round * 1000 + i as u64 + 1), len as usize);
            model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
            let image = image.clone();
            tasks.spawn(async move {
                image
                    .write(offset, Bytes::from(data))
                    .await
                    .map_err(|e| format!("write {offset}+{len}: {e}"))
            });
        }
        writes += ranges.len();
        within("concurrent writes", async {
            while let Some(r) = tasks.join_next().await {
                r.expect("writer task").expect("write");
            }
        })
        .await;
    }
    eprintln!("{writes} writes done");

    // Whole image, then random unaligned sub-ranges read concurrently.
    assert_image_eq(&image, &model, "after random writes").await;
    let mut reads = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let len = rng.gen_range(1..3 * OBJ);
        let offset = rng.gen_range(0..size - len);
        let image = image.clone();
        reads.spawn(async move { (offset, len, image.read(offset, len).await) });
    }
    within("concurrent reads", async {
        while let Some(r) = reads.join_next().await {
            let (offset, len, data) = r.expect("reader task");
            let data = data.unwrap_or_else(|e| panic!("read {offset}+{len}: {e}"));
            assert_eq!(
                &data[..],
                &model[offset as usize..(offset + len) as usize],
                "read {offset}+{len}"
            );
        }
    })
    .await;

    // A fresh client (no state shared with the writer) sees the same bytes.
    let other = cluster.client().await;
    let reopened = Image::open(&other, "rbd", "random").await.expect("reopen");
    assert_image_eq(&reopened, &model, "from a second client").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_grows_with_zeros_and_shrink_discards_the_tail() {
    let cluster = TestCluster::up(3);
    let client = cluster.client().await;
    let size: u64 = 1 << 20; // 16 objects
    let image = create_image(&cluster, &client, "rs", size).await;
    let data = pattern(11, size as usize);
    within("fill", image.write(0, Bytes::from(data.clone())))
        .await
        .expect("fill");
    assert_image_eq(&image, &data, "filled").await;

    // Reads and writes past the end fail.
    assert!(
        within("read", image.read(size - 512, 1024)).await.is_err(),
        "read across the end must fail"
    );
    assert!(within("read", image.read(size, 1)).await.is_err());
    assert!(
        within("write", image.write(size, Bytes::from(vec![1u8; 512])))
            .await
            .is_err()
    );

    // Grow: the new range reads as zeros, the old data is intact.
    let grown: u64 = 2 << 20;
    cluster.ok(&["image", "resize", "rbd/rs", "--size", "2M"]);
    let info = image_info_json(&cluster, "rbd/rs");
    assert_eq!(
        info["size"].as_u64(),
        Some(grown),
        "info after grow: {info}"
    );
    let text = cluster.ok(&["image", "info", "rbd/rs"]);
    assert!(text.contains(&format!("{grown} bytes")), "info: {text}");
    within("close", image.close()).await.expect("close");
    let image = Image::open(&client, "rbd", "rs").await.expect("reopen");
    let mut model = data.clone();
    model.resize(grown as usize, 0);
    assert_image_eq(&image, &model, "after grow").await;

    // Write into the grown part, then shrink to an end inside an object.
    let tail = pattern(12, (grown - size) as usize);
    within("write tail", image.write(size, Bytes::from(tail.clone())))
        .await
        .expect("write tail");
    model[size as usize..].copy_from_slice(&tail);
    assert_image_eq(&image, &model, "grown part written").await;

    let shrunk: u64 = 10 * OBJ + 3 * 512; // 10 whole objects and part of the 11th
    let err = cluster.fails(&["image", "resize", "rbd/rs", "--size", &shrunk.to_string()]);
    assert!(
        err.contains("--allow-shrink"),
        "shrink without the flag: {err}"
    );
    let shrink = [
        "image",
        "resize",
        "rbd/rs",
        "--size",
        &shrunk.to_string(),
        "--allow-shrink",
    ];
    let err = cluster.fails(&shrink);
    assert!(
        err.contains("is open by client."),
        "shrink of an open image: {err}"
    );
    within("close", image.close()).await.expect("close");
    cluster.ok(&shrink);
    let info = image_info_json(&cluster, "rbd/rs");
    assert_eq!(
        info["size"].as_u64(),
        Some(shrunk),
        "info after shrink: {info}"
    );
    let image = Image::open(&client, "rbd", "rs").await.expect("reopen");
    assert_image_eq(&image, &model[..shrunk as usize], "after shrink").await;
    assert!(
        within("read", image.read(shrunk - 512, 1024))
            .await
            .is_err(),
        "read across the new end must fail"
    );
    assert!(within("read", image.read(shrunk, 512)).await.is_err());
    assert!(within("read", image.read(size, 512)).await.is_err());

    // Grow back: everything past the shrunk end reads as zeros, including
    // the rest of the partial object and the objects that held data.
    cluster.ok(&["image", "resize", "rbd/rs", "--size", "2M"]);
    let image = Image::open(&client, "rbd", "rs").await.expect("reopen");
    let mut model = model[..shrunk as usize].to_vec();
    model.resize(grown as usize, 0);
    assert_image_eq(&image, &model, "grown back after shrink").await;
    let info = image_info_json(&cluster, "rbd/rs");
    assert_eq!(info["size"].as_u64(), Some(grown));

    // The removed objects are gone from the cluster, not just hidden.
    let id = info["id"].as_str().expect("id").to_string();
    let pool = client.pool_id("rbd").expect("pool");
    for object_no in 11..32u64 {
        let oid = format!("rbd_data.{id}.{object_no:016x}");
        let r = within("stat", client.op(pool, &oid, vec![ObjOp::Stat])).await;
        assert!(
            matches!(r, Err(cairn_client::ClientError::Op(OpError::NotFound))),
            "{oid} should not exist after the shrink: {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_and_write_zeroes_read_as_zeros_and_spare_neighbours() {
    let cluster = TestCluster::up(3);
    let client = cluster.client().await;
    let size: u64 = 1 << 20; // 16 objects
    let image = create_image(&cluster, &client, "dz", size).await;
    let mut model = pattern(21, size as usize);
    within("fill", image.write(0, Bytes::from(model.clone())))
        .await
        .expect("fill");

    // (offset, len, discard?)
    let cases: [(u64, u64, bool); 8] = [
        (2 * OBJ, 2 * OBJ, true),                 // two whole objects
        (5 * OBJ, OBJ, false),                    // one whole object, write_zeroes
        (6 * OBJ + 1000, 3000, true),             // inside one object, unaligned
        (7 * OBJ + 4096, 8192, false),            // inside one object, aligned
        (8 * OBJ - 777, 2 * OBJ + 1555, false),   // partial, whole, partial
        (11 * OBJ - 100, 200, true),              // across one boundary
        (12 * OBJ + 30_000, OBJ - 30_000, false), // to the end of an object
        (size - 5000, 5000, true),                // to the end of the image
    ];
    for (offset, len, discard) in cases {
        let r = if discard {
            within("discard", image.discard(offset, len)).await
        } else {
            within("write_zeroes", image.write_zeroes(offset, len)).await
        };
        r.unwrap_or_else(|e| panic!("zero {offset}+{len} (discard {discard}): {e}"));
        model[offset as usize..(offset + len) as usize].fill(0);
        let back = within("read", image.read(offset, len)).await.expect("read");
        assert_zeros(&back, &format!("range {offset}+{len} after zeroing"));
    }
    assert_image_eq(&image, &model, "after discard/write_zeroes").await;

    // Zeroing what is already zero, or never written, is fine.
    within("discard again", image.discard(2 * OBJ, 2 * OBJ))
        .await
        .expect("discard again");
    within("zero again", image.write_zeroes(5 * OBJ, OBJ))
        .await
        .expect("zero again");
    assert_image_eq(&image, &model, "after zeroing zeros").await;

    // A partial write into a discarded object: the rest stays zero.
    let data = pattern(22, 5000);
    within(
        "write",
        image.write(2 * OBJ + 10_000, Bytes::from(data.clone())),
    )
    .await
    .expect("write into a discarded object");
    model[(2 * OBJ + 10_000) as usize..(2 * OBJ + 15_000) as usize].copy_from_slice(&data);
    assert_image_eq(&image, &model, "after writing into a discarded object").await;

    // Zeroing past the end fails and changes nothing.
    assert!(within("discard", image.discard(size - 512, 1024))
        .await
        .is_err());
    assert!(within("zero", image.write_zeroes(size, 512)).await.is_err());
    assert_image_eq(&image, &model, "after rejected zeroing").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_image_is_gone_and_its_name_reusable() {
    let cluster = TestCluster::up(3);
    let client = cluster.client().await;
    let size: u64 = 1 << 20;
    let image = create_image(&cluster, &client, "gone", size).await;
    let keep = create_image(&cluster, &client, "keep", size).await;
    let data = pattern(31, size as usize);
    within("fill", image.write(0, Bytes::from(data.clone())))
        .await
        .expect("fill");
    let kept = pattern(32, size as usize);
    within("fill", keep.write(0, Bytes::from(kept.clone())))
        .await
        .expect("fill keep");
    let old_id = image.info_now().id;

    within("close", image.close()).await.expect("close");
    cluster.ok(&["image", "rm", "rbd/gone"]);
    let ls: Vec<String> =
        serde_json::from_str(&cluster.ok(&["--json", "image", "ls"])).expect("ls json");
    assert_eq!(ls, vec!["keep".to_string()]);
    assert!(!cluster.ok(&["image", "ls"]).lines().any(|l| l == "gone"));
    let err = cluster.fails(&["image", "info", "rbd/gone"]);
    assert!(
        err.contains("does not exist"),
        "info of a removed image: {err}"
    );
    assert!(Image::open(&client, "rbd", "gone").await.is_err());

    // Its data objects are gone from the cluster.
    let pool = client.pool_id("rbd").expect("pool");
    for object_no in 0..size / OBJ {
        let oid = format!("rbd_data.{old_id}.{object_no:016x}");
        let r = within("stat", client.op(pool, &oid, vec![ObjOp::Stat])).await;
        assert!(
            matches!(r, Err(cairn_client::ClientError::Op(OpError::NotFound))),
            "{oid} should be removed: {r:?}"
        );
    }

    // Same name again: a new, empty image.
    let again = create_image(&cluster, &client, "gone", size).await;
    assert_ne!(again.info_now().id, old_id, "a new image gets a new id");
    assert_image_eq(&again, &vec![0u8; size as usize], "re-created image").await;
    assert_image_eq(&keep, &kept, "other image after remove").await;
    let ls: Vec<String> =
        serde_json::from_str(&cluster.ok(&["--json", "image", "ls"])).expect("ls json");
    assert_eq!(ls, vec!["gone".to_string(), "keep".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_images_do_not_interfere() {
    let cluster = TestCluster::up(3);
    let client = cluster.client().await;
    let size: u64 = 1 << 20;
    let a = create_image(&cluster, &client, "a", size).await;
    let b = create_image(&cluster, &client, "b", size).await;
    assert_ne!(a.info_now().id, b.info_now().id);
    let mut model_a = vec![0u8; size as usize];
    let mut model_b = vec![0u8; size as usize];

    // The same ranges, written concurrently with different bytes.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8u64 {
        let offset = i * 3 * OBJ / 2 + 123;
        let len = OBJ + 1000;
        let da = pattern(100 + i, len as usize);
        let db = pattern(200 + i, len as usize);
        model_a[offset as usize..(offset + len) as usize].copy_from_slice(&da);
        model_b[offset as usize..(offset + len) as usize].copy_from_slice(&db);
        let (a, b) = (a.clone(), b.clone());
        tasks.spawn(async move { a.write(offset, Bytes::from(da)).await });
        tasks.spawn(async move { b.write(offset, Bytes::from(db)).await });
    }
    within("writes", async {
        while let Some(r) = tasks.join_next().await {
            r.expect("task").expect("write");
        }
    })
    .await;
    assert_image_eq(&a, &model_a, "image a").await;
    assert_image_eq(&b, &model_b, "image b").await;

    // Zeroing, resizing and removing one leaves the other alone.
    within("discard", a.discard(0, size))
        .await
        .expect("discard a");
    model_a.fill(0);
    assert_image_eq(&a, &model_a, "image a after discard").await;
    assert_image_eq(&b, &model_b, "image b after discarding a").await;
    within("close", a.close()).await.expect("close a");
    cluster.ok(&[
        "image",
        "resize",
        "rbd/a",
        "--size",
        "64K",
        "--allow-shrink",
    ]);
    cluster.ok(&["image", "rm", "rbd/a"]);
    assert_image_eq(&b, &model_b, "image b after removing a").await;
    let info = image_info_json(&cluster, "rbd/b");
    assert_eq!(info["size"].as_u64(), Some(size));
}
