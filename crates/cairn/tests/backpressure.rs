//! Back-pressure on clients: a client that sends far more ops than the
//! OSD lets one connection have in flight (`osd.client_message_cap`) is
//! slowed, not refused: the OSD stops reading its connection until it
//! answered one, every op is answered with success, and everything written
//! reads back. `cairn osd perf` shows the connection waited and never had
//! more than the cap in flight.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_past_the_cap_is_slowed_and_loses_nothing() {
    let cap = format!("osd.client_message_cap={CAP}");
    let cluster = TestCluster::up_with(3, &["--pg-num", "16", "--set", &cap]);
    let client = cluster.client().await;
    let map = client.map();
    let pool = map.pool_by_name("rbd").expect("pool rbd");
    let pg = map.object_pg(pool, OBJECT);
    let primary = map.acting(pg).primary().expect("a primary");
    let addr = map.osd_addr(primary).expect("primary address").to_string();
    let before = perf(&cluster, primary);

    let id = rand::random::<u64>() | 1;
    let hello = Message::Hello {
        entity: Entity::Client(id),
        fsid: None,
    };
    let mut conn = connect(&addr, hello).await.expect("connect to the primary");
    // Every op at once, without reading a reply: op i writes block i.
    for tid in 1..=OPS {
        let offset = (tid - 1) * BLOCK as u64;
        let op = OsdOp {
            tid,
            reqid: ReqId { client: id, tid },
            epoch: map.epoch,
            pg,
            oid: OBJECT.to_string(),
            ops: vec![ObjOp::Write {
                offset,
                data: Bytes::from(pattern(tid, BLOCK)),
            }],
        };
        assert!(conn.sender.send(Message::OsdOp(op)), "connection closed");
    }
    let mut results = BTreeMap::new();
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        while (results.len() as u64) < OPS {
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
        "only {} of {OPS} ops answered",
        results.len()
    );
    for (tid, result) in &results {
        assert_eq!(
            result,
            &Ok(vec![OpOutput::None]),
            "op {tid} was not applied"
        );
    }

    let after = perf(&cluster, primary);
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

    // Everything written reads back, in order.
    let read = ObjOp::Read {
        offset: 0,
        len: OPS * BLOCK as u64,
    };
    let outputs = client
        .op(pool.id, OBJECT, vec![read])
        .await
        .expect("read the object back");
    let Some(OpOutput::Data(image)) = outputs.first() else {
        panic!("a read answered {outputs:?}");
    };
    assert_eq!(image.len(), OPS as usize * BLOCK);
    for tid in 1..=OPS {
        let at = (tid - 1) as usize * BLOCK;
        assert!(
            image[at..at + BLOCK] == pattern(tid, BLOCK)[..],
            "block {} does not read back what op {tid} wrote",
            tid - 1
        );
    }
}
