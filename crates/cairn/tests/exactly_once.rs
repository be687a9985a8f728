//! A request resent with the same request id is applied once: after a
//! reconnect to the same primary, and after the primary is killed (`kill -9`)
//! and another OSD of the acting set takes over with the PG log it was sent.
//!
//! Ops whose second application would be visible are used: an exclusive
//! create (a second one fails with `Exists`) and a remove (a second one fails
//! with `NotFound`). The requests are sent on raw connections so the test,
//! not the client library, decides what is resent.

mod common;

use std::time::{Duration, Instant};

use cairn_client::Cluster;
use cairn_map::ClusterMap;
use cairn_types::{Entity, OsdId, ReqId};
use cairn_wire::{connect, Message, ObjOp, OpError, OpOutput, OsdOp};
use common::TestCluster;

const WAIT: Duration = Duration::from_secs(60);
const OBJECT: &str = "exactly-once";

/// A raw client identity: the same `client` in every request id.
struct Raw {
    client: u64,
    next_tid: u64,
}

impl Raw {
    /// Send `ops` as request `reqid_tid` to the object's primary in `map`, on
    /// a new connection, and return the result. `Retry` / `WrongPrimary`
    /// replies (the PG is peering or moved) are resent after a pause, as the
    /// client library does.
    async fn send(
        &mut self,
        client: &Cluster,
        reqid_tid: u64,
        ops: Vec<ObjOp>,
    ) -> Result<Vec<OpOutput>, OpError> {
        let start = Instant::now();
        loop {
            assert!(start.elapsed() < WAIT, "request {reqid_tid} not served");
            let map = client.map();
            let (primary, addr, op) = self.op(&map, reqid_tid, ops.clone());
            let hello = Message::Hello {
                entity: Entity::Client(self.client),
                fsid: None,
            };
            let Ok(mut conn) = connect(&addr, hello).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let tid = op.tid;
            conn.sender.send(Message::OsdOp(op));
            let reply = tokio::time::timeout(Duration::from_secs(20), async {
                loop {
                    match conn.reader.read().await {
                        Ok(Message::OsdOpReply(r)) if r.tid == tid => return Some(r.result),
                        Ok(_) => continue,
                        Err(_) => return None,
                    }
                }
            })
            .await
            .ok()
            .flatten();
            match reply {
                Some(Err(OpError::Retry { .. } | OpError::WrongPrimary { .. })) | None => {
                    eprintln!("request {reqid_tid} to osd.{primary}: resending");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Some(result) => return result,
            }
        }
    }

    fn op(&mut self, map: &ClusterMap, reqid_tid: u64, ops: Vec<ObjOp>) -> (OsdId, String, OsdOp) {
        let pool = map.pool_by_name("rbd").expect("pool rbd");
        let pg = map.object_pg(pool, OBJECT);
        let primary = map.acting(pg).primary().expect("a primary");
        let addr = map.osd_addr(primary).expect("primary address").to_string();
        self.next_tid += 1;
        let op = OsdOp {
            tid: self.next_tid,
            reqid: ReqId {
                client: self.client,
                tid: reqid_tid,
            },
            epoch: map.epoch,
            pg,
            oid: OBJECT.to_string(),
            ops,
            ignore_overlay: false,
        };
        (primary, addr, op)
    }
}

fn create() -> Vec<ObjOp> {
    vec![ObjOp::Create { exclusive: true }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resent_requests_apply_once_across_reconnects_and_a_new_primary() {
    let cluster = TestCluster::up(3);
    let client = cluster.client().await;
    let mut raw = Raw {
        client: rand::random::<u64>() | 1,
        next_tid: 0,
    };

    // Request 1 creates the object; its resend (new connection, same
    // request id) gets the original success, not `Exists`.
    assert_eq!(
        raw.send(&client, 1, create()).await,
        Ok(vec![OpOutput::None])
    );
    assert_eq!(
        raw.send(&client, 1, create()).await,
        Ok(vec![OpOutput::None]),
        "a resent exclusive create was applied twice"
    );
    // A new request id is a new request: the object exists now.
    assert_eq!(raw.send(&client, 2, create()).await, Err(OpError::Exists));

    // Request 3 removes it; resending it must not fail with `NotFound`.
    assert_eq!(
        raw.send(&client, 3, vec![ObjOp::Remove]).await,
        Ok(vec![OpOutput::None])
    );
    assert_eq!(
        raw.send(&client, 3, vec![ObjOp::Remove]).await,
        Ok(vec![OpOutput::None]),
        "a resent remove was applied twice"
    );
    // Request 4 creates it again (so the object exists when request 1 and
    // 3 are resent to the next primary: a re-applied create would fail).
    assert_eq!(
        raw.send(&client, 4, create()).await,
        Ok(vec![OpOutput::None])
    );

    // Kill the primary; the next member of the acting set takes over with
    // the PG log it was sent, which remembers the request ids.
    let map = client.map();
    let pool = map.pool_by_name("rbd").expect("pool rbd");
    let old_primary = map
        .acting(map.object_pg(pool, OBJECT))
        .primary()
        .expect("primary");
    cluster.kill9(&format!("osd.{old_primary}"));
    let start = Instant::now();
    while client.map().is_up(old_primary) {
        assert!(
            start.elapsed() < WAIT,
            "osd.{old_primary} never marked down"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let new_map = client.map();
    let new_primary = new_map
        .acting(new_map.object_pg(pool, OBJECT))
        .primary()
        .expect("a new primary");
    assert_ne!(new_primary, old_primary);

    assert_eq!(
        raw.send(&client, 4, create()).await,
        Ok(vec![OpOutput::None]),
        "the new primary re-applied a create it had in its PG log"
    );
    assert_eq!(
        raw.send(&client, 2, create()).await,
        Err(OpError::Exists),
        "request 2 failed with Exists before; resent, it must fail the same way"
    );
    // The object is there, and an unrelated new request still sees it.
    assert_eq!(raw.send(&client, 5, create()).await, Err(OpError::Exists));
}
