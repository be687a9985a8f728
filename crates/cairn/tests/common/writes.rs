//! Writers with an exact model of what they wrote, for tests that break
//! things under load and then read everything back.
//!
//! Writers keep a model of every block: the last acknowledged write, plus
//! writes that failed since (whose content may or may not have landed). Each
//! 4 KiB block written carries its write's key and block number in its first
//! 16 bytes and a pattern derived from the key after that, so a read tells
//! exactly which write a block holds, or that it holds neither.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::{Cluster, Image};
use cairn_volume::Volume;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{pattern, TestCluster};

pub const BLOCK: u64 = 4096;
pub const OBJ: u64 = 64 << 10;
pub const BLOCKS_PER_OBJ: u64 = OBJ / BLOCK;
/// Bound on writes resuming after a failure.
pub const RESUME: Duration = Duration::from_secs(30);
/// Bound on any other single wait.
pub const WAIT: Duration = Duration::from_secs(60);

// ----- helpers ---------------------------------------------------------------

pub async fn within<T>(what: &str, limit: Duration, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done after {limit:?} (hang)"))
}

/// Run blocking harness work (CLI calls, kills, restarts) off the runtime's
/// workers, so the writers keep running meanwhile.
pub async fn blocking<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    match within(
        what,
        Duration::from_secs(150),
        tokio::task::spawn_blocking(f),
    )
    .await
    {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

pub async fn kill9(cluster: &Arc<TestCluster>, name: &str) {
    let c = cluster.clone();
    let n = name.to_string();
    blocking("kill -9", move || c.kill9(&n)).await;
    eprintln!("killed {name} with SIGKILL");
}

pub async fn restart_missing(cluster: &Arc<TestCluster>) {
    let c = cluster.clone();
    let start = Instant::now();
    blocking("restart_missing", move || c.restart_missing()).await;
    eprintln!("restarted missing daemons in {:?}", start.elapsed());
}

pub async fn status(cluster: &Arc<TestCluster>) -> serde_json::Value {
    let c = cluster.clone();
    blocking("cairn status", move || c.status()).await
}

/// Wait until `cairn status` shows every OSD up and every PG active+clean.
pub async fn wait_all_clean(cluster: &Arc<TestCluster>) {
    let start = Instant::now();
    loop {
        let st = status(cluster).await;
        let pgs = &st["pgs"];
        let total = pgs["total"].as_u64().unwrap_or(0);
        if total > 0
            && pgs["clean"].as_u64() == Some(total)
            && st["osds"]["up"].as_u64() == Some(cluster.osds as u64)
        {
            eprintln!("all {total} PGs active+clean after {:?}", start.elapsed());
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "PGs not all active+clean after {WAIT:?}: {st}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Wait until the client's map shows `osd` up (or down).
pub async fn wait_osd_state(client: &Cluster, osd: u32, up: bool) {
    within(&format!("osd.{osd} up={up} in the map"), WAIT, async {
        while client.map().is_up(osd) != up {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

pub fn is_alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.contains(") Z ")
}

/// The acting primary of object `n` of `image` in the client's current map.
pub fn object_primary(client: &Cluster, image: &Image, n: u64) -> Option<u32> {
    let map = client.map();
    let pool = map.pool_by_name("rbd").expect("pool rbd");
    let info = image.info_now();
    let oid = format!("rbd_data.{}.{n:016x}", info.id);
    map.acting(map.object_pg(pool, &oid)).primary()
}

pub async fn create_image(
    cluster: &Arc<TestCluster>,
    client: &Arc<Cluster>,
    name: &str,
    size: u64,
) -> Arc<Image> {
    let c = cluster.clone();
    let spec = format!("rbd/{name}");
    blocking("image create", move || {
        c.ok(&[
            "image",
            "create",
            &spec,
            "--size",
            &size.to_string(),
            "--object-size",
            &OBJ.to_string(),
        ])
    })
    .await;
    within("open", WAIT, Image::open(client, "rbd", name))
        .await
        .expect("open image")
}

// ----- the model and the writers --------------------------------------------

/// The content of block `block` as written by write key `key` (never 0).
pub fn block_data(key: u64, block: u64) -> Vec<u8> {
    let mut data = pattern(key, BLOCK as usize);
    data[..8].copy_from_slice(&key.to_le_bytes());
    data[8..16].copy_from_slice(&block.to_le_bytes());
    data
}

#[derive(Clone, Debug, Default)]
pub struct BlockState {
    /// Key of the last acknowledged write; 0: never written (zeros).
    pub acked: u64,
    /// Writes that failed after it: each may or may not have landed.
    pub uncertain: Vec<u64>,
    /// The write in flight now, if any.
    pub inflight: Option<u64>,
}

pub struct Model {
    pub blocks: Mutex<Vec<BlockState>>,
    pub next_key: AtomicU64,
}

impl Model {
    pub fn new(blocks: u64) -> Arc<Self> {
        Arc::new(Model {
            blocks: Mutex::new(vec![BlockState::default(); blocks as usize]),
            next_key: AtomicU64::new(1),
        })
    }

    /// Blocks in `range` with a write in flight now.
    pub fn inflight(&self, range: std::ops::Range<u64>) -> usize {
        let blocks = self.blocks.lock().unwrap();
        range
            .filter(|&b| blocks[b as usize].inflight.is_some())
            .count()
    }
}

#[derive(Default)]
pub struct Stats {
    pub acks: AtomicU64,
    pub errors: Mutex<Vec<String>>,
}

impl Stats {
    pub fn acks(&self) -> u64 {
        self.acks.load(Ordering::SeqCst)
    }

    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }
}

/// Writers running in the background; each owns a disjoint block range, so
/// the model of each block is exact.
pub struct Load {
    pub stop: Arc<AtomicBool>,
    pub tasks: tokio::task::JoinSet<()>,
}

impl Load {
    pub fn new() -> Self {
        Load {
            stop: Arc::new(AtomicBool::new(false)),
            tasks: tokio::task::JoinSet::new(),
        }
    }

    /// `writers` writers splitting `blocks` evenly; each write covers 1 to
    /// `max_run` consecutive blocks.
    pub fn spawn(
        &mut self,
        image: &Arc<Image>,
        model: &Arc<Model>,
        stats: &Arc<Stats>,
        blocks: std::ops::Range<u64>,
        writers: u64,
        max_run: u64,
    ) {
        let first = blocks.start;
        let per = (blocks.end - blocks.start) / writers;
        assert!(per > 0);
        for w in 0..writers {
            let (image, model, stats, stop) = (
                image.clone(),
                model.clone(),
                stats.clone(),
                self.stop.clone(),
            );
            let start = first + w * per;
            let seed: u64 = rand::random();
            self.tasks.spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed);
                while !stop.load(Ordering::SeqCst) {
                    let block = start + rng.gen_range(0..per);
                    let run = rng.gen_range(1..=max_run.min(start + per - block));
                    let key = model.next_key.fetch_add(run, Ordering::SeqCst);
                    let mut data = Vec::with_capacity((run * BLOCK) as usize);
                    {
                        let mut blocks = model.blocks.lock().unwrap();
                        for i in 0..run {
                            data.extend_from_slice(&block_data(key + i, block + i));
                            blocks[(block + i) as usize].inflight = Some(key + i);
                        }
                    }
                    let result = image.write(block * BLOCK, Bytes::from(data)).await;
                    {
                        let mut blocks = model.blocks.lock().unwrap();
                        for i in 0..run {
                            let st = &mut blocks[(block + i) as usize];
                            st.inflight = None;
                            if result.is_ok() {
                                st.acked = key + i;
                                st.uncertain.clear();
                            } else {
                                st.uncertain.push(key + i);
                            }
                        }
                    }
                    match result {
                        Ok(()) => {
                            stats.acks.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => {
                            {
                                let mut errors = stats.errors.lock().unwrap();
                                if errors.len() < 20 {
                                    errors.push(format!("write of blocks {block}+{run}: {e}"));
                                }
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            });
        }
    }

    /// Stop the writers and wait for their last writes to finish.
    pub async fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        within("writers finishing their last writes", WAIT, async {
            while let Some(r) = self.tasks.join_next().await {
                r.expect("writer task panicked");
            }
        })
        .await;
    }
}

/// Wait until `stats` counts `n` acknowledged writes more than `from`.
pub async fn wait_acks(stats: &Stats, from: u64, n: u64, what: &str) -> Duration {
    let start = Instant::now();
    loop {
        let got = stats.acks() - from;
        if got >= n {
            return start.elapsed();
        }
        // Without an op timeout a write never fails: any error is a bug.
        let errors = stats.errors();
        assert!(
            errors.is_empty(),
            "{what}: writes failed ({got} acknowledged meanwhile): {errors:?}"
        );
        assert!(
            start.elapsed() < RESUME,
            "{what}: only {got} writes acknowledged in {RESUME:?} (need {n}); errors: {:?}",
            stats.errors()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Read the whole image and check every block against the model; panics
/// listing the blocks that hold anything but an allowed write.
pub async fn verify(image: &Image, model: &Model, what: &str) {
    let size = image.size();
    let data = within(what, WAIT, image.read(0, size))
        .await
        .unwrap_or_else(|e| panic!("{what}: reading the image failed: {e}"));
    let blocks = model.blocks.lock().unwrap().clone();
    assert_eq!(size / BLOCK, blocks.len() as u64);
    let mut problems = Vec::new();
    let mut written = 0;
    for (b, st) in blocks.iter().enumerate() {
        assert!(st.inflight.is_none(), "verify with writes in flight");
        let got = &data[b * BLOCK as usize..(b + 1) * BLOCK as usize];
        let found = if got.iter().all(|&x| x == 0) {
            Some(0)
        } else {
            let key = u64::from_le_bytes(got[..8].try_into().unwrap());
            (key != 0 && got == &block_data(key, b as u64)[..]).then_some(key)
        };
        if st.acked != 0 {
            written += 1;
        }
        let ok = found.is_some_and(|k| k == st.acked || st.uncertain.contains(&k));
        if !ok {
            let holds = match found {
                Some(0) => "zeros".to_string(),
                Some(k) if k < st.acked => format!("older write #{k}"),
                Some(k) => format!("write #{k}"),
                None => format!("garbage (first bytes {:02x?})", &got[..16.min(got.len())]),
            };
            problems.push(format!(
                "block {b} (object {}, offset {}): holds {holds}, expected acked write #{} \
                 (or failed writes {:?})",
                b as u64 / BLOCKS_PER_OBJ,
                (b as u64 % BLOCKS_PER_OBJ) * BLOCK,
                st.acked,
                st.uncertain
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{what}: {} of {} blocks wrong ({written} written); first ones:\n{}",
        problems.len(),
        blocks.len(),
        problems
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "{what}: all {} blocks match ({written} written)",
        blocks.len()
    );
}
