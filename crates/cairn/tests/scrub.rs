//! Scrub and repair on real processes with BlueStore: bytes flipped in the
//! block file under a replica's copy and under a primary's copy are found
//! by deep scrub and rewritten by repair; a client read of a damaged
//! primary copy is served from a replica and repaired; an object whose
//! every copy is damaged fails reads with EIO, and an overwrite works.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::Image;
use cairn_volume::{Volume, VolumeError};
use common::{pattern, TestCluster};
use serde_json::Value;

const OBJ: u64 = 1 << 20;
const OBJECTS: u64 = 8;
const BLOCK: usize = 4096;

fn content(obj: u64) -> Vec<u8> {
    pattern(7000 + obj, OBJ as usize)
}

fn json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&cluster.ok(&all)).expect("json")
}

fn pg_of(cluster: &TestCluster, image_id: &str, obj: u64) -> String {
    let name = format!("rbd_data.{image_id}.{obj:016x}");
    let pg_num = json(cluster, &["pool", "ls"])[0]["pg_num"]
        .as_u64()
        .expect("pg_num") as u32;
    format!("1.{:x}", cairn_placement::pg_seed(&name, pg_num))
}

fn acting(cluster: &TestCluster, pg: &str) -> Vec<u32> {
    json(cluster, &["pg", "query", pg])["acting"]
        .as_array()
        .expect("acting")
        .iter()
        .filter_map(|v| v.as_u64().map(|o| o as u32))
        .collect()
}

/// Flip bytes in every 4 KiB block of `block_file` that holds the first
/// block of `data` (BlueStore keeps object data block-aligned and, without
/// compression, as written). Returns how many blocks were damaged.
fn damage(block_file: &Path, data: &[u8]) -> usize {
    let needle = &data[..BLOCK];
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(block_file)
        .expect("block file");
    let mut chunk = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    let mut hits = Vec::new();
    loop {
        let n = file.read(&mut chunk).expect("read block file");
        if n == 0 {
            break;
        }
        for (i, block) in chunk[..n].chunks(BLOCK).enumerate() {
            if block == needle {
                hits.push(offset + (i * BLOCK) as u64);
            }
        }
        offset += n as u64;
    }
    for &at in &hits {
        file.seek(SeekFrom::Start(at + 100)).expect("seek");
        let flipped: Vec<u8> = needle[100..240].iter().map(|b| !b).collect();
        file.write_all(&flipped).expect("flip");
    }
    file.sync_all().expect("sync");
    hits.len()
}

/// Stop `osd`, damage its copy of `data`, start it again.
fn damage_copy(cluster: &TestCluster, osd: u32, data: &[u8]) {
    cluster.kill9(&format!("osd.{osd}"));
    let hits = damage(&cluster.path().join(format!("osd.{osd}/block")), data);
    assert!(
        hits > 0,
        "osd.{osd}: the object's data was not found in its block file"
    );
    cluster.restart_missing();
}

fn wait_clean(cluster: &TestCluster) {
    let start = Instant::now();
    loop {
        let st = json(cluster, &["status"]);
        let pgs = &st["pgs"];
        if pgs["total"].as_u64() > Some(0) && pgs["clean"] == pgs["total"] {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "not clean: {st}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn deep_scrub_finds_flipped_bytes_and_repair_rewrites_them() {
    let cluster = TestCluster::up_with(3, &["--pg-num", "8", "--store", "bluestore"]);
    cluster.ok(&[
        "image",
        "create",
        "rbd/disk",
        "--size",
        "8M",
        "--object-size",
        "1M",
    ]);
    let image_id = json(&cluster, &["image", "info", "rbd/disk"])["id"]
        .as_str()
        .expect("id")
        .to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let client = rt.block_on(cluster.client());
    let image: Arc<Image> = rt
        .block_on(Image::open(&client, "rbd", "disk"))
        .expect("open");
    rt.block_on(async {
        for obj in 0..OBJECTS {
            image
                .write(obj * OBJ, Bytes::from(content(obj)))
                .await
                .expect("write");
        }
    });
    // Object 0: a replica's copy rots. Deep scrub finds it, repair fixes it.
    let pg0 = pg_of(&cluster, &image_id, 0);
    let members = acting(&cluster, &pg0);
    damage_copy(&cluster, members[1], &content(0));
    wait_clean(&cluster);
    cluster.ok(&["pg", "scrub", &pg0, "--wait", "60"]);
    assert_eq!(
        json(&cluster, &["pg", "inconsistent"]),
        serde_json::json!([]),
        "light scrub reads no data"
    );
    cluster.ok(&["pg", "deep-scrub", &pg0, "--wait", "60"]);
    let found = json(&cluster, &["pg", "inconsistent"]);
    let objects = found[0]["objects"]
        .as_array()
        .expect("inconsistent objects");
    assert_eq!(objects.len(), 1, "{found}");
    assert_eq!(
        objects[0]["bad"][0][0].as_u64(),
        Some(members[1] as u64),
        "{found}"
    );
    assert!(
        objects[0]["bad"][0][1]
            .as_str()
            .unwrap_or("")
            .contains("checksum"),
        "{found}"
    );
    let detail = cluster.ok(&["health", "detail"]);
    assert!(
        detail.contains("PG_INCONSISTENT") && detail.contains(&format!("pg {pg0}")),
        "{detail}"
    );
    cluster.ok(&["pg", "repair", &pg0, "--wait", "60"]);
    cluster.ok(&["pg", "deep-scrub", &pg0, "--wait", "60"]);
    assert_eq!(
        json(&cluster, &["pg", "inconsistent"]),
        serde_json::json!([])
    );
    let repaired = json(&cluster, &["pg", "query", &pg0])["repaired_objects"].as_u64();
    assert!(repaired >= Some(1), "repairs not counted");

    // Another object: the primary's copy rots; a client read is served from
    // a replica and the primary's copy is rewritten (counted).
    let obj = (1..OBJECTS)
        .find(|&o| pg_of(&cluster, &image_id, o) != pg0)
        .unwrap_or(1);
    let pg = pg_of(&cluster, &image_id, obj);
    let primary = acting(&cluster, &pg)[0];
    damage_copy(&cluster, primary, &content(obj));
    wait_clean(&cluster);
    let before = json(&cluster, &["pg", "query", &pg])["repaired_objects"]
        .as_u64()
        .unwrap_or(0);
    let image2 = rt
        .block_on(Image::open(&client, "rbd", "disk"))
        .expect("open");
    let data = rt
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(60), image2.read(obj * OBJ, OBJ)).await
        })
        .expect("read of a damaged primary copy hangs")
        .expect("read of a damaged primary copy failed");
    assert!(
        data.to_vec() == content(obj),
        "wrong data after read repair"
    );
    std::thread::sleep(Duration::from_secs(2));
    let after = json(&cluster, &["pg", "query", &pg])["repaired_objects"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        after > before,
        "read repair not counted ({before} → {after})"
    );
    cluster.ok(&["pg", "deep-scrub", &pg, "--wait", "60"]);
    assert_eq!(
        json(&cluster, &["pg", "inconsistent"]),
        serde_json::json!([]),
        "the primary's copy is still bad"
    );

    // Every copy of a third object rots: a clean EIO, then an overwrite works.
    let obj3 = (0..OBJECTS)
        .rev()
        .find(|&o| o != obj && o != 0)
        .expect("a third object");
    let pg3 = pg_of(&cluster, &image_id, obj3);
    for osd in acting(&cluster, &pg3) {
        damage_copy(&cluster, osd, &content(obj3));
    }
    wait_clean(&cluster);
    let image3 = rt
        .block_on(Image::open(&client, "rbd", "disk"))
        .expect("open");
    let read = rt
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(60), image3.read(obj3 * OBJ, OBJ)).await
        })
        .expect("read of an object with every copy damaged hangs");
    match read {
        Err(VolumeError::Io(why)) => assert!(why.contains("damaged"), "{why}"),
        other => panic!("expected an I/O error, got {:?}", other.map(|d| d.len())),
    }
    let fresh = pattern(99, OBJ as usize);
    rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(60),
            image3.write(obj3 * OBJ, Bytes::from(fresh.clone())),
        )
        .await
        .expect("overwrite hangs")
        .expect("overwrite")
    });
    // Everything reads back: the overwrite, and every other object.
    rt.block_on(async {
        for o in 0..OBJECTS {
            let want = if o == obj3 { fresh.clone() } else { content(o) };
            let got = image3.read(o * OBJ, OBJ).await.expect("read back");
            assert!(got.to_vec() == want, "object {o} reads back wrong");
        }
    });
}
