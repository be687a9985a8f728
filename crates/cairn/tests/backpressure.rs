//! Back-pressure on clients: a client that sends far more ops than the
//! OSD lets one connection have in flight (`osd.client_message_cap`) is
//! slowed, not refused: the OSD stops reading its connection until it
//! answered one, every op is answered with success, and everything written
//! reads back. `cairn osd perf` shows the connection waited and never had
//! more than the cap in flight, and where the writes spent their time. The
//! same for several connections at once
//! against the OSD's own cap (`osd.client_ops_max`). Held back, writes
//! are never reordered: many pipelined writes to one block leave the last
//! one sent, on every member.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use cairn_types::{Entity, ReqId};
use cairn_wire::{connect, Message, ObjOp, OpOutput, OsdOp};
use common::{pattern, TestCluster};

const CAP: u64 = 4;
const OPS: u64 = 400;
const OBJECT: &str = "backpressure";
const BLOCK: usize = 4096;

fn perf(cluster: &TestCluster, osd: u32) -> serde_json::Value {
    let out = cluster.ok(&["--json", "osd", "perf", &osd.to_string()]);
    serde_json::from_str(&out).expect("osd perf prints JSON")
}

fn counter(perf: &serde_json::Value, name: &str) -> u64 {
    perf[name]
        .as_u64()
        .unwrap_or_else(|| panic!("osd perf has no {name}: {perf}"))
}

/// Open a client connection to `addr` and send ops writing blocks
/// `first..first + count` of the object at once, without reading a reply
/// (the block's pattern is its index); then collect every answer.
async fn pipeline(
    addr: &str,
    epoch: cairn_types::Epoch,
    pg: cairn_types::PgId,
    first: u64,
    count: u64,
) -> BTreeMap<u64, Result<Vec<OpOutput>, cairn_wire::OpError>> {
    pipeline_with(addr, epoch, pg, count, |tid| {
        let block = first + tid - 1;
        (block, block + 1)
    })
    .await
}

/// As [`pipeline`], op `tid` (from 1) writing `pattern(seed)` to `block`,
/// where `(block, seed) = write(tid)`.
async fn pipeline_with(
    addr: &str,
    epoch: cairn_types::Epoch,
    pg: cairn_types::PgId,
    count: u64,
    write: impl Fn(u64) -> (u64, u64),
) -> BTreeMap<u64, Result<Vec<OpOutput>, cairn_wire::OpError>> {
    let id = rand::random::<u64>() | 1;
    let hello = Message::Hello {
        entity: Entity::Client(id),
        fsid: None,
    };
    let mut conn = connect(addr, hello).await.expect("connect to the primary");
    for tid in 1..=count {
        let (block, seed) = write(tid);
        let op = OsdOp {
            tid,
            reqid: ReqId { client: id, tid },
            epoch,
            pg,
            oid: OBJECT.to_string(),
            ops: vec![ObjOp::Write {
                offset: block * BLOCK as u64,
                data: Bytes::from(pattern(seed, BLOCK)),
            }],
            ignore_overlay: false,
        };
        assert!(conn.sender.send(Message::OsdOp(op)), "connection closed");
    }
    let mut results = BTreeMap::new();
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        while (results.len() as u64) < count {
            match conn.reader.read().await {
                Ok(Message::OsdOpReply(r)) => {
                    assert!(
                        results.insert(r.tid, r.result).is_none(),
                        "op {} answered twice",
                        r.tid
                    );
                }
                Ok(_) => continue,
                Err(e) => panic!("connection failed: {e}"),
            }
        }
    })
    .await;
    assert!(
        answered.is_ok(),
        "only {} of {count} ops answered",
        results.len()
    );
    for (tid, result) in &results {
        assert_eq!(
            result,
            &Ok(vec![OpOutput::None]),
            "op {tid} was not applied"
        );
    }
    results
}

/// Every block written reads back, in order.
async fn check_blocks(client: &cairn_client::Cluster, pool: cairn_types::PoolId, blocks: u64) {
    let read = ObjOp::Read {
        offset: 0,
        len: blocks * BLOCK as u64,
    };
    let outputs = client
        .op(pool, OBJECT, vec![read])
        .await
        .expect("read the object back");
    let Some(OpOutput::Data(image)) = outputs.first() else {
        panic!("a read answered {outputs:?}");
    };
    assert_eq!(image.len(), blocks as usize * BLOCK);
    for block in 0..blocks {
        let at = block as usize * BLOCK;
        assert!(
            image[at..at + BLOCK] == pattern(block + 1, BLOCK)[..],
            "block {block} does not read back what was written to it"
        );
    }
}

/// A 3-OSD cluster with one option set, and the primary of the test
/// object's PG.
struct Target {
    cluster: TestCluster,
    client: std::sync::Arc<cairn_client::Cluster>,
    pool: cairn_types::PoolId,
    pg: cairn_types::PgId,
    epoch: cairn_types::Epoch,
    primary: u32,
    addr: String,
}

impl Target {
    async fn up(set: &str) -> Target {
        let cluster = TestCluster::up_with(3, &["--pg-num", "16", "--set", set]);
        let client = cluster.client().await;
        let map = client.map();
        let pool = map.pool_by_name("rbd").expect("pool rbd");
        let pg = map.object_pg(pool, OBJECT);
        let primary = map.acting(pg).primary().expect("a primary");
        let addr = map.osd_addr(primary).expect("primary address").to_string();
        let (pool, epoch) = (pool.id, map.epoch);
        Target {
            cluster,
            client,
            pool,
            pg,
            epoch,
            primary,
            addr,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_past_the_cap_is_slowed_and_loses_nothing() {
    let at = Target::up(&format!("osd.client_message_cap={CAP}")).await;
    let (cluster, primary) = (&at.cluster, at.primary);
    let before = perf(cluster, primary);

    pipeline(&at.addr, at.epoch, at.pg, 0, OPS).await;

    let after = perf(cluster, primary);
    let peak = counter(&after, "client_ops_peak_per_connection");
    assert!(
        (1..=CAP).contains(&peak),
        "a connection had {peak} ops in flight with a cap of {CAP}"
    );
    assert!(
        counter(&after, "client_throttle_waits") > counter(&before, "client_throttle_waits"),
        "{OPS} pipelined ops never waited for room: {after}"
    );
    assert_eq!(counter(&after, "client_ops_in_flight"), 0, "{after}");
    // Where the writes' time went, as primary: every write counted, and
    // its stages add up to no more than its whole.
    let delta = |name| counter(&after, name) - counter(&before, name);
    assert!(delta("primary_writes") >= OPS, "{after}");
    let (total, held, local) = (
        delta("primary_write_total_us"),
        delta("primary_write_held_us"),
        delta("primary_write_local_commit_us"),
    );
    assert!(local > 0 && total >= held + local, "{after}");
    assert!(
        total >= held + delta("primary_write_last_member_us"),
        "{after}"
    );
    check_blocks(&at.client, at.pool, OPS).await;
}

/// `osd.client_ops_max` bounds the ops in flight over every connection:
/// two clients, each far under its own connection's cap, pipelining at
/// once, never have more than it at the OSD together; both are slowed,
/// neither refused, and everything reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_together_are_held_to_the_osd_cap() {
    let at = Target::up(&format!("osd.client_ops_max={CAP}")).await;
    let (cluster, primary) = (&at.cluster, at.primary);

    let half = OPS / 2;
    tokio::join!(
        pipeline(&at.addr, at.epoch, at.pg, 0, half),
        pipeline(&at.addr, at.epoch, at.pg, half, half),
    );

    let after = perf(cluster, primary);
    let peak = counter(&after, "client_ops_peak");
    assert!(
        (1..=CAP).contains(&peak),
        "{peak} client ops in flight at the OSD with a cap of {CAP}: {after}"
    );
    assert!(counter(&after, "client_throttle_waits") > 0, "{after}");
    assert_eq!(counter(&after, "client_ops_in_flight"), 0, "{after}");
    check_blocks(&at.client, at.pool, OPS).await;
}

/// Pipelined writes held back by the connection's cap keep their order:
/// every op overwrites the same two blocks (op `tid` writes pattern `tid`
/// to block `tid % 2`), far more of them than the cap lets in at once, and
/// afterwards each block holds the last pattern sent to it, on the primary
/// and, once the primary is stopped, on the member that takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_back_writes_to_one_block_keep_their_order() {
    let at = Target::up(&format!("osd.client_message_cap={CAP}")).await;
    let ops = OPS / 2;
    pipeline_with(&at.addr, at.epoch, at.pg, ops, |tid| (tid % 2, tid)).await;
    assert!(
        counter(&perf(&at.cluster, at.primary), "client_throttle_waits") > 0,
        "{ops} pipelined ops never waited for room"
    );
    let last = |block: u64| {
        (1..=ops)
            .rev()
            .find(|t| t % 2 == block)
            .expect("an op per block")
    };
    let check = |image: &[u8], who: &str| {
        for block in 0..2u64 {
            let at = block as usize * BLOCK;
            assert!(
                image[at..at + BLOCK] == pattern(last(block), BLOCK)[..],
                "{who}: block {block} is not the last write sent to it (op {})",
                last(block)
            );
        }
    };
    let read = || ObjOp::Read {
        offset: 0,
        len: 2 * BLOCK as u64,
    };
    let outputs = at.client.op(at.pool, OBJECT, vec![read()]).await;
    let Ok([OpOutput::Data(image)]) = outputs.as_deref() else {
        panic!("a read answered {outputs:?}");
    };
    check(image, "the primary");

    // The replicas applied the same order: with the primary stopped, the
    // member that takes over serves the same blocks.
    at.cluster.kill9(&format!("osd.{}", at.primary));
    let _ = at.cluster.cairn(&["osd", "down", &at.primary.to_string()]);
    let outputs = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match at.client.op(at.pool, OBJECT, vec![read()]).await {
                Ok(out) => break out,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    })
    .await
    .expect("the object is served again without its old primary");
    let [OpOutput::Data(image)] = outputs.as_slice() else {
        panic!("a read answered {outputs:?}");
    };
    check(image, "the new primary");
}
