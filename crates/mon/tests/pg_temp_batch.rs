//! The monitor publishes pg_temp requests that arrive together in one map
//! epoch, and drops those whose sender is no longer the PG's primary or
//! no longer up by the time the batch is published.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_map::crush::{DeviceReport, Location};
use cairn_mon::{MonOptions, Monitor};
use cairn_types::{Entity, OsdId, PgId};
use cairn_wire::{connect, Connection, Message, MonCommand};

const OSDS: u32 = 3;
const PG_NUM: u32 = 16;

struct Harness {
    mon: Arc<Monitor>,
    addr: String,
    _dir: tempfile::TempDir,
}

async fn start(batch: Duration) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = MonOptions {
        pg_temp_batch: batch,
        ..MonOptions::default()
    };
    let mon = Monitor::open(dir.path(), opts).expect("open monitor");
    let listener = Monitor::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr").to_string();
    tokio::spawn(mon.clone().serve(listener));
    Harness {
        mon,
        addr,
        _dir: dir,
    }
}

impl Harness {
    /// A session booted as `osd.id` on host `h{id}`.
    async fn boot(&self, id: OsdId) -> Connection {
        let fsid = self.mon.map().fsid.clone();
        let hello = Message::Hello {
            entity: Entity::Osd(id),
            fsid: Some(fsid.clone()),
        };
        let conn = connect(&self.addr, hello).await.expect("connect");
        let mut crush = DeviceReport::unlocated(0x10000);
        crush.location = Location::parse(&format!("host=h{id}")).expect("location");
        conn.sender.send(Message::OsdBoot {
            id,
            addr: format!("127.0.0.1:{}", 7000 + id),
            cluster_addr: format!("127.0.0.1:{}", 8000 + id),
            fsid,
            crush,
        });
        self.wait("the OSD to boot", |m| m.is_up(id)).await;
        conn
    }

    async fn create_pool(&self) {
        let hello = Message::Hello {
            entity: Entity::Client(1),
            fsid: None,
        };
        let mut conn = connect(&self.addr, hello).await.expect("connect");
        conn.sender.send(Message::MonCommand {
            tid: 1,
            cmd: MonCommand::PoolCreate {
                name: "rbd".into(),
                pg_num: Some(PG_NUM),
                size: Some(3),
                min_size: Some(2),
                rule: None,
            },
        });
        match conn.reader.read().await.expect("reply") {
            Message::MonReply { result, .. } => {
                result.expect("pool create");
            }
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    async fn wait(&self, what: &str, done: impl Fn(&cairn_map::ClusterMap) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done(&self.mon.map()) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A monitor with `OSDS` booted OSDs (their sessions) and pool `rbd`.
async fn ready(batch: Duration) -> (Harness, Vec<Connection>) {
    let h = start(batch).await;
    let mut sessions = Vec::new();
    for id in 0..OSDS {
        sessions.push(h.boot(id).await);
    }
    h.create_pool().await;
    (h, sessions)
}

/// Every PG of the pool with its acting set; the wanted pg_temp puts the
/// second member first.
fn wants(map: &cairn_map::ClusterMap) -> Vec<(PgId, Vec<OsdId>, Vec<OsdId>)> {
    map.all_pgs()
        .map(|pg| {
            let acting = map.acting(pg).osds;
            assert_eq!(acting.len(), 3, "{pg}: {acting:?}");
            let want = vec![acting[1], acting[0], acting[2]];
            (pg, acting, want)
        })
        .collect()
}

#[tokio::test]
async fn requests_arriving_together_make_one_epoch() {
    let (h, sessions) = ready(Duration::from_millis(300)).await;
    let before = h.mon.map();
    let wants = wants(&before);
    // Each primary asks for its PGs; one non-primary asks as well.
    for (pg, acting, want) in &wants {
        sessions[acting[0] as usize].sender.send(Message::PgTemp {
            id: acting[0],
            pg: *pg,
            osds: want.clone(),
        });
    }
    let (pg, acting, _) = &wants[0];
    sessions[acting[2] as usize].sender.send(Message::PgTemp {
        id: acting[2],
        pg: *pg,
        osds: vec![acting[2], acting[0], acting[1]],
    });
    h.wait("the pg_temp batch", |m| m.pg_temp.len() == wants.len())
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = h.mon.map();
    assert_eq!(
        after.epoch,
        before.epoch + 1,
        "{} requests took {} epochs",
        wants.len(),
        after.epoch - before.epoch
    );
    for (pg, _, want) in &wants {
        assert_eq!(after.pg_temp.get(pg), Some(want), "{pg}");
    }
}

#[tokio::test]
async fn a_request_whose_sender_went_down_is_dropped() {
    let (h, mut sessions) = ready(Duration::from_millis(300)).await;
    let map = h.mon.map();
    let wants = wants(&map);
    let gone = wants[0].1[0];
    let mine: Vec<_> = wants.iter().filter(|(_, a, _)| a[0] == gone).collect();
    for (pg, _, want) in &mine {
        sessions[gone as usize].sender.send(Message::PgTemp {
            id: gone,
            pg: *pg,
            osds: want.clone(),
        });
    }
    // The session closes before the batch is published: the OSD is down.
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(sessions.remove(gone as usize));
    h.wait("the OSD to be marked down", |m| !m.is_up(gone))
        .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after = h.mon.map();
    for (pg, _, _) in &mine {
        assert!(
            !after.pg_temp.contains_key(pg),
            "{pg}: pg_temp {:?} from osd.{gone}, which went down before it was published",
            after.pg_temp.get(pg)
        );
    }
}

#[tokio::test]
async fn without_a_window_each_request_is_its_own_epoch() {
    let (h, sessions) = ready(Duration::ZERO).await;
    let before = h.mon.map();
    let wants = wants(&before);
    for (pg, acting, want) in wants.iter().take(4) {
        sessions[acting[0] as usize].sender.send(Message::PgTemp {
            id: acting[0],
            pg: *pg,
            osds: want.clone(),
        });
    }
    h.wait("four pg_temps", |m| m.pg_temp.len() == 4).await;
    assert_eq!(h.mon.map().epoch, before.epoch + 4);
}
