use bytes::Bytes;
use cairn_store::filestore::{FileStore, FileStoreOptions};
use cairn_store::{ObjectId, ObjectStore, PgId, Transaction};
use std::sync::Arc;
use std::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn perf_probe() {
    let t00 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<FileStore> = FileStore::open(
        dir.path(),
        FileStoreOptions {
            journal_max_bytes: 64 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    println!("open {:?}", t00.elapsed());
    let data = Bytes::from(vec![7u8; 4096]);
    for depth in [1usize, 16, 256] {
        let n = if depth == 1 { 500 } else { 20_000 };
        let t0 = Instant::now();
        let mut q = std::collections::VecDeque::new();
        for i in 0..n {
            let mut t = Transaction::new();
            let oid = ObjectId::new(PgId::new(1, (i % 64) as u32), format!("obj{}", i % 1000));
            t.write(&oid, ((i * 7) % 1024) as u64 * 4096, data.clone());
            t.log_append(
                oid.coll,
                cairn_store::Version::new(1, i as u64),
                Bytes::from_static(b"entry-entry-entry"),
            );
            q.push_back(store.submit(t).unwrap());
            if q.len() >= depth {
                q.pop_front().unwrap().await.unwrap();
            }
        }
        for c in q {
            c.await.unwrap();
        }
        let dt = t0.elapsed();
        println!(
            "depth {depth}: {n} txns in {dt:?} = {:.0} txn/s, {:?}",
            n as f64 / dt.as_secs_f64(),
            store.stats()
        );
    }
    let t0 = Instant::now();
    let mut total = 0;
    for i in 0..20_000 {
        let oid = ObjectId::new(PgId::new(1, (i % 64) as u32), format!("obj{}", i % 1000));
        total += store
            .read(&oid, ((i * 7) % 1024) as u64 * 4096, 4096)
            .await
            .map(|v| v.len())
            .unwrap_or(0);
    }
    println!("reads: 20000 in {:?} ({total} bytes)", t0.elapsed());
    let t0 = Instant::now();
    drop(store);
    println!("drop {:?}", t0.elapsed());
    let t0 = Instant::now();
    drop(dir);
    println!("rmdir {:?}", t0.elapsed());
}
