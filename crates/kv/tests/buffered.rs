//! `BufferedKv` against a plain `MemKv` as the model: every read through
//! the buffer answers what the unbuffered store answers, whatever was
//! spilled, synced or still buffered; a sync makes everything durable; and a
//! scan never sees half of a batch while spills run beside it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cairn_kv::{Batch, BufferedKv, Kv, MemKv};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn key(rng: &mut StdRng) -> Vec<u8> {
    // Few keys, of two lengths, so that puts, deletes and ranges collide.
    let n: u8 = rng.gen_range(0..40);
    if n % 3 == 0 {
        vec![b'k', n]
    } else {
        vec![b'k', n, b'x']
    }
}

fn random_batch(rng: &mut StdRng) -> Batch {
    let mut batch = Batch::new();
    for _ in 0..rng.gen_range(1..5) {
        match rng.gen_range(0..10) {
            0..=5 => {
                let len = rng.gen_range(0..40);
                batch.put(key(rng), vec![rng.gen::<u8>(); len]);
            }
            6..=8 => batch.delete(key(rng)),
            _ => {
                let (a, b) = (key(rng), key(rng));
                batch.delete_range(a.clone().min(b.clone()), a.max(b));
            }
        }
    }
    batch
}

fn check_same(buffered: &dyn Kv, model: &dyn Kv, rng: &mut StdRng, step: usize) {
    for n in 0..40u8 {
        for k in [vec![b'k', n], vec![b'k', n, b'x']] {
            assert_eq!(
                buffered.get(&k).unwrap(),
                model.get(&k).unwrap(),
                "get {k:?} at step {step}"
            );
        }
    }
    for _ in 0..4 {
        let (a, b) = (key(rng), key(rng));
        let (start, end) = (a.clone().min(b.clone()), a.max(b));
        let limit = rng.gen_range(1..12);
        assert_eq!(
            buffered.scan(&start, &end, limit).unwrap(),
            model.scan(&start, &end, limit).unwrap(),
            "scan {start:?}..{end:?} limit {limit} at step {step}"
        );
    }
    assert_eq!(
        buffered.scan(b"k", b"l", usize::MAX).unwrap(),
        model.scan(b"k", b"l", usize::MAX).unwrap(),
        "full scan at step {step}"
    );
}

#[test]
fn reads_through_the_buffer_match_the_store_without_it() {
    for seed in 0..20u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        // A small limit: spills every few batches.
        let buffered = BufferedKv::new(MemKv::new(), rng.gen_range(0..600));
        let model = MemKv::new();
        for step in 0..300 {
            let batch = random_batch(&mut rng);
            let mut copy = batch.clone();
            match rng.gen_range(0..10) {
                0 => buffered.sync().unwrap(),
                1 => buffered.spill().unwrap(),
                2 => {
                    if !buffered.try_write(&mut copy).unwrap() {
                        assert_eq!(copy, batch, "a refused batch is left as it was");
                        buffered.write(batch.clone(), false).unwrap();
                    }
                    model.write(batch, false).unwrap();
                    check_same(&buffered, &model, &mut rng, step);
                    continue;
                }
                _ => {}
            }
            buffered.write(batch.clone(), false).unwrap();
            model.write(batch, false).unwrap();
            check_same(&buffered, &model, &mut rng, step);
        }
    }
}

/// Spilled or not, what `sync` returned for survives a crash of the inner
/// store, and so does what a drop left.
#[test]
fn sync_and_drop_make_the_buffer_durable() {
    let mut rng = StdRng::seed_from_u64(7);
    let buffered = BufferedKv::new(MemKv::new(), 1 << 20);
    let model = MemKv::new();
    for _ in 0..50 {
        let batch = random_batch(&mut rng);
        buffered.write(batch.clone(), false).unwrap();
        model.write(batch, false).unwrap();
    }
    assert!(buffered.buffered_bytes() > 0);
    // Nothing reached the inner store yet, so a crash now keeps nothing.
    assert!(buffered
        .inner()
        .crash_image()
        .scan(b"", b"\xff", 10)
        .unwrap()
        .is_empty());
    buffered.sync().unwrap();
    assert_eq!(buffered.buffered_bytes(), 0);
    let all = |kv: &dyn Kv| kv.scan(b"", b"\xff", usize::MAX).unwrap();
    assert_eq!(all(&buffered.inner().crash_image()), all(&model));

    // A synced write makes the unsynced ones before it durable too.
    let mut batch = Batch::new();
    batch.put(b"k\x01".to_vec(), b"late".to_vec());
    buffered.write(batch.clone(), false).unwrap();
    model.write(batch, false).unwrap();
    let mut synced = Batch::new();
    synced.put(b"k\x02".to_vec(), b"synced".to_vec());
    buffered.write(synced.clone(), true).unwrap();
    model.write(synced, false).unwrap();
    assert_eq!(all(&buffered.inner().crash_image()), all(&model));
}

/// Batches that each set two keys to the same value, spilled after every
/// one while another thread scans: a scan never sees the keys disagree.
#[test]
fn a_scan_never_sees_half_a_batch_across_spills() {
    let kv = Arc::new(BufferedKv::new(SlowScans(MemKv::new()), 1 << 20));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (kv, stop) = (kv.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seen = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let got = kv.scan(b"a", b"c", 10).unwrap();
                match got.as_slice() {
                    [] => {}
                    [(ka, va), (kb, vb)] => {
                        assert_eq!((ka.as_slice(), kb.as_slice()), (&b"a"[..], &b"b"[..]));
                        assert_eq!(va, vb, "a scan saw half of a batch");
                        seen += 1;
                    }
                    other => panic!("unexpected scan {other:?}"),
                }
            }
            seen
        })
    };
    for i in 0..20_000u32 {
        let mut batch = Batch::new();
        batch.put(b"a".to_vec(), i.to_be_bytes().to_vec());
        batch.put(b"b".to_vec(), i.to_be_bytes().to_vec());
        kv.write(batch, false).unwrap();
        kv.spill().unwrap();
        // `a` rewritten alone (same value): buffered while `b` is only in
        // the inner store, so the next spill changes a key a reader's
        // overlay lacks.
        let mut again = Batch::new();
        again.put(b"a".to_vec(), i.to_be_bytes().to_vec());
        kv.write(again, false).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let seen = reader.join().unwrap();
    assert!(seen > 0, "the reader never saw the keys");
    assert_eq!(
        kv.get(b"a").unwrap(),
        Some(19_999u32.to_be_bytes().to_vec())
    );
}

/// A store whose scans take a while, so that spills land during them.
struct SlowScans(MemKv);

impl Kv for SlowScans {
    fn get(&self, key: &[u8]) -> cairn_kv::Result<Option<Vec<u8>>> {
        self.0.get(key)
    }
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> cairn_kv::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        std::thread::sleep(std::time::Duration::from_micros(50));
        self.0.scan(start, end, limit)
    }
    fn write(&self, batch: Batch, sync: bool) -> cairn_kv::Result<()> {
        self.0.write(batch, sync)
    }
    fn sync(&self) -> cairn_kv::Result<()> {
        self.0.sync()
    }
}

/// A log appended and trimmed between two spills never reaches the inner
/// store; only the range delete does.
#[test]
fn keys_put_and_deleted_between_spills_never_reach_the_inner_store() {
    let kv = BufferedKv::new(MemKv::new(), 1 << 20);
    for i in 0..100u32 {
        let mut batch = Batch::new();
        batch.put(b"onode".to_vec(), i.to_be_bytes().to_vec());
        batch.put([b"L".as_slice(), &i.to_be_bytes()].concat(), vec![1; 50]);
        if i % 10 == 9 {
            batch.delete_range(
                b"L".to_vec(),
                [b"L".as_slice(), &(i - 2).to_be_bytes()].concat(),
            );
        }
        kv.write(batch, false).unwrap();
    }
    kv.spill().unwrap();
    let inner = kv.inner().scan(b"", b"\xff", usize::MAX).unwrap();
    // The onode once, and the log entries after the last trim point (97).
    assert_eq!(inner.len(), 1 + 3);
    assert_eq!(
        kv.get(b"onode").unwrap(),
        Some(99u32.to_be_bytes().to_vec())
    );
    assert_eq!(
        kv.scan(b"L", b"M", usize::MAX).unwrap(),
        inner[..3].to_vec()
    );
}
