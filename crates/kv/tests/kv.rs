//! The behaviour every [`Kv`] must show, run against `MemKv` and `RocksKv`,
//! plus RocksDB's options handling and `MemKv`'s crash image.

use std::path::Path;

use cairn_kv::{scan_all, Batch, BufferedKv, Kv, KvError, MemKv, RocksKv, RocksKvOptions};
use rand::{Rng, SeedableRng};

fn rocks(dir: &Path, options: &str) -> RocksKv {
    let opts = RocksKvOptions {
        options: options.to_string(),
        create: true,
        ..Default::default()
    };
    RocksKv::open(dir, &opts).unwrap_or_else(|e| panic!("{e}"))
}

fn put(kv: &dyn Kv, k: &[u8], v: &[u8]) {
    let mut b = Batch::new();
    b.put(k.to_vec(), v.to_vec());
    kv.write(b, false).unwrap();
}

fn basic_ops(kv: &dyn Kv) {
    assert_eq!(kv.get(b"a").unwrap(), None);
    put(kv, b"a", b"1");
    put(kv, b"b", b"2");
    put(kv, b"c", b"3");
    assert_eq!(kv.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    let mut b = Batch::new();
    b.delete(b"b".to_vec());
    b.put(b"d".to_vec(), b"4".to_vec());
    kv.write(b, true).unwrap();
    let all = kv.scan(b"", b"\xff", 100).unwrap();
    let keys: Vec<&[u8]> = all.iter().map(|(k, _)| &k[..]).collect();
    assert_eq!(keys, [&b"a"[..], b"c", b"d"]);
    // Bounds: start inclusive, end exclusive; limit.
    let some = kv.scan(b"b", b"d", 100).unwrap();
    assert_eq!(some, vec![(b"c".to_vec(), b"3".to_vec())]);
    assert_eq!(kv.scan(b"a", b"z", 2).unwrap().len(), 2);
    assert!(kv.scan(b"z", b"a", 10).unwrap().is_empty());
}

fn ops_apply_in_batch_order(kv: &dyn Kv) {
    let mut b = Batch::new();
    b.put(b"k".to_vec(), b"first".to_vec());
    b.delete(b"k".to_vec());
    b.put(b"k".to_vec(), b"last".to_vec());
    b.put(b"r1".to_vec(), b"x".to_vec());
    b.put(b"r2".to_vec(), b"x".to_vec());
    b.delete_range(b"r".to_vec(), b"r2".to_vec());
    kv.write(b, true).unwrap();
    assert_eq!(kv.get(b"k").unwrap().as_deref(), Some(&b"last"[..]));
    assert_eq!(kv.get(b"r1").unwrap(), None);
    assert_eq!(kv.get(b"r2").unwrap().as_deref(), Some(&b"x"[..]));
}

/// Random batches against a model, then a full scan in chunks.
fn random_against_model(kv: &dyn Kv) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut model = std::collections::BTreeMap::new();
    for _ in 0..300 {
        let mut b = Batch::new();
        for _ in 0..rng.gen_range(1..20) {
            let k = format!("key{:05}", rng.gen_range(0..2000)).into_bytes();
            match rng.gen_range(0..10) {
                0 => {
                    let other = format!("key{:05}", rng.gen_range(0..2000)).into_bytes();
                    let (k, end) = if other < k { (other, k) } else { (k, other) };
                    let doomed: Vec<_> = model
                        .range(k.clone()..end.clone())
                        .map(|(k, _): (&Vec<u8>, _)| k.clone())
                        .collect();
                    for d in doomed {
                        model.remove(&d);
                    }
                    b.delete_range(k, end);
                }
                1..=2 => {
                    model.remove(&k);
                    b.delete(k);
                }
                _ => {
                    let v = vec![rng.gen::<u8>(); rng.gen_range(0..300)];
                    model.insert(k.clone(), v.clone());
                    b.put(k, v);
                }
            }
        }
        match rng.gen_range(0..3) {
            0 => kv.write(b, true).unwrap(),
            1 => kv.write(b, false).unwrap(),
            // A non-blocking write may refuse (a full write-back buffer);
            // the batch it leaves must then be the whole batch.
            _ => {
                if !kv.try_write(&mut b).unwrap() {
                    kv.write(b, false).unwrap();
                }
            }
        }
    }
    let all = scan_all(kv, b"key", b"kez").unwrap();
    let expect: Vec<_> = model.into_iter().collect();
    assert_eq!(all.len(), expect.len());
    assert!(all == expect, "scan differs from the model");
}

macro_rules! suite {
    ($name:ident, $make:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn basic() {
                let (_guard, kv) = $make;
                basic_ops(&kv);
            }
            #[test]
            fn batch_order() {
                let (_guard, kv) = $make;
                ops_apply_in_batch_order(&kv);
            }
            #[test]
            fn model() {
                let (_guard, kv) = $make;
                random_against_model(&kv);
            }
        }
    };
}

suite!(mem, ((), MemKv::new()));
suite!(rocksdb, {
    let dir = tempfile::tempdir().unwrap();
    let kv = rocks(dir.path(), "");
    (dir, kv)
});
// RocksDB behind the write-back buffer, as the OSD runs it, with a limit
// small enough that the suite spills often.
suite!(buffered_rocksdb, {
    let dir = tempfile::tempdir().unwrap();
    let kv = BufferedKv::new(rocks(dir.path(), ""), 4096);
    (dir, kv)
});

#[test]
fn mem_crash_image_keeps_only_synced_batches() {
    let kv = MemKv::new();
    put(&kv, b"a", b"unsynced-then-synced");
    let mut b = Batch::new();
    b.put(b"b".to_vec(), b"synced".to_vec());
    kv.write(b, true).unwrap();
    put(&kv, b"c", b"lost");
    let crashed = kv.crash_image();
    assert!(
        crashed.get(b"a").unwrap().is_some(),
        "a sync makes earlier batches durable"
    );
    assert!(crashed.get(b"b").unwrap().is_some());
    assert_eq!(crashed.get(b"c").unwrap(), None);
    assert!(
        kv.get(b"c").unwrap().is_some(),
        "the live store still has it"
    );
}

/// The exact `bluestore_rocksdb_options` line of the source documents.
const CEPH_LINE: &str = "compression=kNoCompression,max_write_buffer_number=32,\
    min_write_buffer_number_to_merge=2,recycle_log_file_num=32,\
    compaction_style=kCompactionStyleLevel,write_buffer_size=67108864,\
    target_file_size_base=67108864,max_background_compactions=31,\
    level0_file_num_compaction_trigger=8,level0_slowdown_writes_trigger=32,\
    level0_stop_writes_trigger=64,max_bytes_for_level_base=536870912,\
    compaction_threads=32,max_bytes_for_level_multiplier=8,flusher_threads=8,\
    compaction_readahead_size=2MB";

#[test]
fn rocksdb_accepts_the_ceph_options_line_and_applies_it() {
    let dir = tempfile::tempdir().unwrap();
    let kv = rocks(dir.path(), CEPH_LINE);
    basic_ops(&kv);
    drop(kv);
    // RocksDB's own OPTIONS file records the values. (Not
    // recycle_log_file_num: RocksDB turns log recycling off under its
    // default point-in-time WAL recovery, which Cairn keeps.)
    let options = options_in_use(dir.path());
    for line in [
        "max_write_buffer_number=32",
        "min_write_buffer_number_to_merge=2",
        "max_bytes_for_level_base=536870912",
        "write_buffer_size=67108864",
        "level0_stop_writes_trigger=64",
        "compaction_readahead_size=2097152",
        "compression=kNoCompression",
    ] {
        assert!(options.contains(line), "OPTIONS lacks {line}:\n{options}");
    }
}

/// The options the database was last opened with: RocksDB writes an
/// `OPTIONS-<number>` file at every open, the newest with the highest
/// number (`RocksKv::open` writes one of its own first, then opens).
fn options_in_use(dir: &Path) -> String {
    let newest = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n: u64 = name.strip_prefix("OPTIONS-")?.parse().ok()?;
            Some((n, e.path()))
        })
        .max()
        .expect("an OPTIONS file");
    std::fs::read_to_string(newest.1).unwrap()
}

#[test]
fn rocksdb_runs_with_its_column_family_options_not_the_defaults() {
    // A memtable size no default has, and Cairn's own choice of no
    // compression: both column-family options, lost once when the open
    // took the database-wide options only.
    let dir = tempfile::tempdir().unwrap();
    let kv = rocks(dir.path(), "write_buffer_size=3145728");
    basic_ops(&kv);
    drop(kv);
    let options = options_in_use(dir.path());
    for line in ["write_buffer_size=3145728", "compression=kNoCompression"] {
        assert!(
            options.lines().any(|l| l.trim() == line),
            "the open used other options: no {line} in\n{options}"
        );
    }
    // And again after a reopen with the defaults (Cairn's memtable size).
    let kv = RocksKv::open(dir.path(), &RocksKvOptions::default()).unwrap();
    drop(kv);
    let options = options_in_use(dir.path());
    let want = format!(
        "write_buffer_size={}",
        RocksKvOptions::default().memtable_bytes
    );
    assert!(
        options.lines().any(|l| l.trim() == want),
        "reopened with other options: no {want} in\n{options}"
    );
}

#[test]
fn rocksdb_rejects_an_unknown_option_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let opts = RocksKvOptions {
        options: "write_buffer_size=1048576,no_such_option=3".into(),
        create: true,
        ..Default::default()
    };
    let err = RocksKv::open(dir.path(), &opts).err().expect("must fail");
    assert!(matches!(err, KvError::Options(_)), "{err}");
    assert!(err.to_string().contains("no_such_option"), "{err}");
    let opts = RocksKvOptions {
        options: "write_buffer_size=lots".into(),
        create: true,
        ..Default::default()
    };
    let err = RocksKv::open(dir.path(), &opts).err().expect("must fail");
    assert!(err.to_string().contains("write_buffer_size"), "{err}");
}

#[test]
fn rocksdb_missing_database_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = RocksKv::open(&dir.path().join("nope"), &RocksKvOptions::default())
        .err()
        .expect("must fail");
    assert!(matches!(err, KvError::Open { .. }), "{err}");
}

#[test]
fn rocksdb_reopens_with_a_separate_wal_dir() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let wal = dir.path().join("wal");
    let opts = RocksKvOptions {
        wal_dir: Some(wal.clone()),
        create: true,
        ..Default::default()
    };
    let kv = RocksKv::open(&db, &opts).unwrap();
    let mut b = Batch::new();
    b.put(b"kept".to_vec(), b"yes".to_vec());
    kv.write(b, true).unwrap();
    drop(kv);
    let has_log = std::fs::read_dir(&wal)
        .unwrap()
        .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log")));
    assert!(has_log, "the WAL is in {}", wal.display());
    let reopen = RocksKvOptions {
        create: false,
        ..opts
    };
    let kv = RocksKv::open(&db, &reopen).unwrap();
    assert_eq!(kv.get(b"kept").unwrap().as_deref(), Some(&b"yes"[..]));
    assert!(!kv.stats().is_empty());
}

#[test]
fn rocksdb_paces_its_flushes_at_the_background_write_rate() {
    // 2 MiB of WAL-less writes, flushed by `sync` at 1 MiB/s, take more
    // than a second. A rate limiter only ever slows: a lower bound that
    // a slow machine cannot break.
    let dir = tempfile::tempdir().unwrap();
    let opts = RocksKvOptions {
        create: true,
        background_write_rate: 1 << 20,
        ..Default::default()
    };
    let kv = RocksKv::open(dir.path(), &opts).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut b = Batch::new();
    for i in 0..512u32 {
        let value: Vec<u8> = (0..4096).map(|_| rng.gen()).collect();
        b.put(i.to_be_bytes().to_vec(), value);
    }
    kv.write(b, false).unwrap();
    let start = std::time::Instant::now();
    kv.sync().unwrap();
    let took = start.elapsed();
    assert!(
        took >= std::time::Duration::from_millis(1000),
        "2 MiB flushed in {took:?} at 1 MiB/s"
    );
    drop(kv);
    let kv = RocksKv::open(
        dir.path(),
        &RocksKvOptions {
            create: false,
            ..opts
        },
    )
    .unwrap();
    assert_eq!(
        kv.get(&511u32.to_be_bytes()).unwrap().map(|v| v.len()),
        Some(4096)
    );
}

/// Reads from memory only: RocksDB answers from its memtables and block
/// cache and says "not in memory" (`None`) where it would read a table
/// file; a buffer in front answers what it holds; `MemKv` always answers.
#[test]
fn reads_from_memory_only_answer_what_memory_holds() {
    let dir = tempfile::tempdir().unwrap();
    {
        let kv = rocks(dir.path(), "");
        put(&kv, b"a1", b"x");
        put(&kv, b"a2", b"y");
        // In the memtable.
        assert_eq!(kv.get_in_memory(b"a1").unwrap(), Some(Some(b"x".to_vec())));
        assert_eq!(kv.get_in_memory(b"zz").unwrap(), Some(None));
        kv.sync().unwrap(); // to a table file
    }
    let kv = rocks(dir.path(), "");
    // A cold block cache: the table file would have to be read.
    assert_eq!(kv.get_in_memory(b"a1").unwrap(), None);
    assert_eq!(kv.scan_in_memory(b"a", b"b", 10).unwrap(), None);
    // A read that may block brings the block into the cache.
    assert_eq!(kv.get(b"a1").unwrap().as_deref(), Some(&b"x"[..]));
    assert_eq!(kv.get_in_memory(b"a2").unwrap(), Some(Some(b"y".to_vec())));
    let want = vec![
        (b"a1".to_vec(), b"x".to_vec()),
        (b"a2".to_vec(), b"y".to_vec()),
    ];
    assert_eq!(
        kv.scan_in_memory(b"a", b"b", 10).unwrap(),
        Some(want.clone())
    );
    drop(kv);

    // Behind a buffer: what the buffer holds is answered even when the
    // store under it is cold; the rest is up to that store.
    let buffered = BufferedKv::new(rocks(dir.path(), ""), 1 << 20);
    put(&buffered, b"a3", b"z");
    assert_eq!(
        buffered.get_in_memory(b"a3").unwrap(),
        Some(Some(b"z".to_vec()))
    );
    assert_eq!(buffered.get_in_memory(b"a1").unwrap(), None);
    assert_eq!(buffered.scan_in_memory(b"a", b"b", 10).unwrap(), None);
    assert_eq!(buffered.get(b"a1").unwrap().as_deref(), Some(&b"x"[..]));
    let mut all = want;
    all.push((b"a3".to_vec(), b"z".to_vec()));
    assert_eq!(buffered.scan_in_memory(b"a", b"b", 10).unwrap(), Some(all));

    let mem = MemKv::new();
    put(&mem, b"k", b"v");
    assert_eq!(mem.get_in_memory(b"k").unwrap(), Some(Some(b"v".to_vec())));
    assert_eq!(
        mem.scan_in_memory(b"", b"\xff", 10)
            .unwrap()
            .map(|v| v.len()),
        Some(1)
    );
}
