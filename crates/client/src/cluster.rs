//! A client's handle on the cluster: the objecter, over the map that the
//! monitor session ([`crate::mon_session`]) keeps current.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_map::ClusterMap;
use cairn_types::{Epoch, OsdId, PgId, PoolId, ReqId};
use cairn_wire::{MonCommand, ObjOp, OpError, OpOutput, OsdOp};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::mon_session::MonSession;
use crate::osd_conn::OsdConn;
use crate::ClientError;

/// Client behaviour, from the `[client]` section of the configuration.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub mon_addr: String,
    /// Fail an operation not done in this time; `None` waits as a disk does.
    pub op_timeout: Option<Duration>,
    /// Log an operation slower than this, with its attempts (`None`: never).
    pub op_complaint_time: Option<Duration>,
    /// An open image's watch lapses if not renewed within this time.
    pub watch_timeout: Duration,
    /// How long connecting (to the first map) and a monitor command may
    /// take, including waiting for a lost monitor session to come back.
    pub command_timeout: Duration,
    /// Recomputes these options when the map's configuration database
    /// changes (`cairn config set client ...`); `None`: never.
    pub reconfigure: Option<Reconfigure>,
}

/// The options a client runs with for a configuration database: given by
/// whoever knows the option schema (the `cairn` binary).
#[derive(Clone)]
pub struct Reconfigure(pub Arc<dyn Fn(&cairn_map::ConfigDb) -> ClientOptions + Send + Sync>);

impl std::fmt::Debug for Reconfigure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reconfigure")
    }
}

pub struct Cluster {
    /// The running options (changed by the configuration database).
    opts: parking_lot::RwLock<ClientOptions>,
    client_id: u64,
    next_tid: AtomicU64,
    map_rx: watch::Receiver<Arc<ClusterMap>>,
    mon: Arc<MonSession>,
    osds: Mutex<HashMap<OsdId, Arc<OsdConn>>>,
    /// One connection attempt at a time per OSD (one per OSD of the map at
    /// most), so an OSD that does not answer holds up only its own ops.
    connecting: Mutex<HashMap<OsdId, Arc<tokio::sync::Mutex<()>>>>,
}

impl Cluster {
    /// Connect to the monitor and wait for the first map. The monitor
    /// session is kept up in the background from then on.
    pub async fn connect(opts: ClientOptions) -> Result<Arc<Self>, ClientError> {
        let client_id = rand::random::<u64>() | 1;
        let (mon, conn, first) =
            MonSession::open(&opts.mon_addr, client_id, opts.command_timeout).await?;
        let first = Arc::new(first);
        let (map_tx, map_rx) = watch::channel(first.clone());
        let reconfigure = opts.reconfigure.clone();
        let opts = match &reconfigure {
            Some(r) => ClientOptions {
                mon_addr: opts.mon_addr.clone(),
                ..(r.0)(&first.config)
            },
            None => opts,
        };
        let cluster = Arc::new(Self {
            opts: parking_lot::RwLock::new(opts),
            client_id,
            next_tid: AtomicU64::new(1),
            map_rx,
            mon: mon.clone(),
            osds: Mutex::new(HashMap::new()),
            connecting: Mutex::new(HashMap::new()),
        });
        tokio::spawn(mon.run(Arc::downgrade(&cluster), conn, map_tx));
        if let Some(r) = reconfigure {
            let applied = first.config.clone();
            tokio::spawn(follow_config(Arc::downgrade(&cluster), r, applied));
        }
        Ok(cluster)
    }

    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    pub fn map(&self) -> Arc<ClusterMap> {
        self.map_rx.borrow().clone()
    }

    /// The options the client runs with now.
    pub fn options(&self) -> ClientOptions {
        self.opts.read().clone()
    }

    /// Wait until the map is at least `epoch`.
    pub async fn wait_for_epoch(&self, epoch: u32) -> Result<Arc<ClusterMap>, ClientError> {
        let mut rx = self.map_rx.clone();
        loop {
            let map = rx.borrow_and_update().clone();
            if map.epoch >= epoch {
                return Ok(map);
            }
            rx.changed().await.map_err(|_| ClientError::MonLost)?;
        }
    }

    /// Run an admin command on the monitor; the reply is JSON.
    pub async fn mon_command(&self, cmd: MonCommand) -> Result<serde_json::Value, ClientError> {
        let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
        let timeout = self.opts.read().command_timeout;
        let text = self.mon.command(tid, cmd, timeout).await?;
        serde_json::from_str(&text).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Resolve a pool name in the current map.
    pub fn pool_id(&self, name: &str) -> Result<PoolId, ClientError> {
        self.map()
            .pool_by_name(name)
            .map(|p| p.id)
            .ok_or_else(|| ClientError::NoSuchPool(name.to_string()))
    }

    async fn osd_conn(&self, osd: OsdId, map: &ClusterMap) -> Option<Arc<OsdConn>> {
        let addr = map.osd_addr(osd)?;
        if let Some(conn) = self.osds.lock().get(&osd) {
            if conn.addr == addr && conn.is_alive() {
                return Some(conn.clone());
            }
        }
        let gate = self.connecting.lock().entry(osd).or_default().clone();
        let _one_at_a_time = gate.lock().await;
        if let Some(conn) = self.osds.lock().get(&osd) {
            if conn.addr == addr && conn.is_alive() {
                return Some(conn.clone());
            }
        }
        match OsdConn::open(osd, addr, self.client_id).await {
            Ok(conn) => {
                self.osds.lock().insert(osd, conn.clone());
                Some(conn)
            }
            Err(e) => {
                tracing::debug!("cannot connect to osd.{osd} at {addr}: {e}");
                None
            }
        }
    }

    /// Run `ops` on object `oid` of pool `pool`, resending as needed until
    /// it completes (or the op timeout passes). Mutations apply exactly once.
    pub async fn op(
        &self,
        pool: PoolId,
        oid: &str,
        ops: Vec<ObjOp>,
    ) -> Result<Vec<OpOutput>, ClientError> {
        self.op_routed(pool, oid, ops, false, None).await
    }

    /// Run `ops` on pool `pool` itself even if its map sends its ops to a
    /// cache pool (the overlay): how a cache pool's OSDs reach its base.
    pub async fn op_ignoring_overlay(
        &self,
        pool: PoolId,
        oid: &str,
        ops: Vec<ObjOp>,
    ) -> Result<Vec<OpOutput>, ClientError> {
        self.op_routed(pool, oid, ops, true, None).await
    }

    /// [`Self::op_ignoring_overlay`] on behalf of another client's request
    /// `reqid`: a cache tier passing a client's op to the base pool, where
    /// a resend of it is then applied once.
    pub async fn op_on_behalf(
        &self,
        pool: PoolId,
        oid: &str,
        ops: Vec<ObjOp>,
        reqid: ReqId,
    ) -> Result<Vec<OpOutput>, ClientError> {
        self.op_routed(pool, oid, ops, true, Some(reqid)).await
    }

    async fn op_routed(
        &self,
        pool: PoolId,
        oid: &str,
        ops: Vec<ObjOp>,
        ignore_overlay: bool,
        reqid: Option<ReqId>,
    ) -> Result<Vec<OpOutput>, ClientError> {
        let op_timeout = self.opts.read().op_timeout;
        let run = self.op_inner(pool, oid, ops, ignore_overlay, reqid);
        match op_timeout {
            None => run.await,
            Some(limit) => match tokio::time::timeout(limit, run).await {
                Ok(done) => done,
                Err(_) => {
                    let target = if ignore_overlay {
                        pool
                    } else {
                        self.map().op_target(pool)
                    };
                    Err(ClientError::Timeout(self.unanswered(target, oid, limit)))
                }
            },
        }
    }

    /// Who should have answered an op on `oid` that timed out.
    fn unanswered(&self, pool_id: PoolId, oid: &str, limit: Duration) -> String {
        let map = self.map();
        let whom = match map.pool(pool_id) {
            Some(pool) => {
                let pg = map.object_pg(pool, oid);
                match map.acting(pg).primary() {
                    Some(osd) => format!("pg {pg}, primary osd.{osd}"),
                    None => format!("pg {pg}, no OSD of it up"),
                }
            }
            None => format!("pool {pool_id} gone"),
        };
        format!(
            "no answer within {:.1} s for an op on object {oid:?} ({whom}, map epoch {})",
            limit.as_secs_f64(),
            map.epoch
        )
    }

    async fn op_inner(
        &self,
        asked_pool: PoolId,
        oid: &str,
        ops: Vec<ObjOp>,
        ignore_overlay: bool,
        reqid: Option<ReqId>,
    ) -> Result<Vec<OpOutput>, ClientError> {
        let reqid = reqid.unwrap_or_else(|| ReqId {
            client: self.client_id,
            tid: self.next_tid.fetch_add(1, Ordering::Relaxed),
        });
        let mut map_rx = self.map_rx.clone();
        let complaint = self.opts.read().op_complaint_time;
        let mut trail = Trail::new(oid, complaint);
        loop {
            let map = map_rx.borrow_and_update().clone();
            // A pool with a cache over it: its ops go to the cache.
            let pool_id = if ignore_overlay {
                asked_pool
            } else {
                map.op_target(asked_pool)
            };
            let pool = map
                .pool(pool_id)
                .ok_or_else(|| ClientError::NoSuchPool(format!("id {pool_id}")))?;
            let pg = map.object_pg(pool, oid);
            let acting = map.acting(pg);
            let Some(primary) = acting.primary() else {
                // No member up: hold the op until the map changes.
                map_rx.changed().await.map_err(|_| ClientError::MonLost)?;
                continue;
            };
            // A primary that does not answer may be marked down while
            // this waits to connect: then route again under the new map.
            let conn = tokio::select! {
                conn = self.osd_conn(primary, &map) => conn,
                changed = map_rx.changed() => {
                    changed.map_err(|_| ClientError::MonLost)?;
                    continue;
                }
            };
            let Some(conn) = conn else {
                wait_change_or(&mut map_rx, Duration::from_millis(200)).await;
                continue;
            };
            let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
            let op = OsdOp {
                tid,
                reqid,
                epoch: map.epoch,
                pg,
                oid: oid.to_string(),
                ops: ops.clone(),
                ignore_overlay,
            };
            trail.note(Attempt::Sent {
                epoch: map.epoch,
                pg,
                osd: primary,
            });
            let Some(mut rx) = conn.send(op) else {
                wait_change_or(&mut map_rx, Duration::from_millis(100)).await;
                continue;
            };
            loop {
                tokio::select! {
                    reply = &mut rx => {
                        match reply.map(|r| r.result) {
                            Ok(Ok(outputs)) => {
                                trail.done();
                                return Ok(outputs);
                            }
                            Ok(Err(OpError::WrongPrimary { epoch } | OpError::Retry { epoch })) => {
                                trail.note(Attempt::Retry { epoch });
                                if epoch > map.epoch {
                                    let _ = tokio::time::timeout(
                                        Duration::from_secs(5),
                                        self.wait_for_epoch(epoch),
                                    ).await;
                                } else {
                                    wait_change_or(&mut map_rx, Duration::from_millis(50)).await;
                                }
                            }
                            Ok(Err(e)) => {
                                trail.done();
                                return Err(ClientError::Op(e));
                            }
                            Err(_) => {
                                trail.note(Attempt::ConnectionLost);
                                // Connection lost: the OSD died or restarted.
                                wait_change_or(&mut map_rx, Duration::from_millis(100)).await;
                            }
                        }
                        break;
                    }
                    changed = map_rx.changed() => {
                        if changed.is_err() {
                            return Err(ClientError::MonLost);
                        }
                        let new_map = map_rx.borrow().clone();
                        // Resend if the PG moved, or the object is in another PG now (a split).
                        let target = if ignore_overlay { asked_pool } else { new_map.op_target(asked_pool) };
                        let moved = new_map.pool(target).map(|p| (new_map.object_pg(p, oid), new_map.acting(pg)))
                            != Some((pg, acting.clone()));
                        if moved {
                            trail.note(Attempt::Moved { epoch: new_map.epoch });
                            conn.forget(tid);
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// How the report names an op that ended without a reply.
const ABANDONED: &str = "op ended without a reply (timed out, dropped or failed)";

/// Attempts of one op kept for its slow-op report, at most.
const MAX_TRAIL: usize = 16;

/// What happened to one attempt of an op.
#[derive(Clone, Copy, Debug)]
enum Attempt {
    Sent {
        epoch: Epoch,
        pg: PgId,
        osd: OsdId,
    },
    /// The OSD answered that the op must go again (a newer map, or the
    /// PG was not serving).
    Retry {
        epoch: Epoch,
    },
    /// A new map moved the op's PG: sent again.
    Moved {
        epoch: Epoch,
    },
    ConnectionLost,
}

/// An op's attempts with their times, logged if it completes after the
/// complaint time, or if it is abandoned after it (the op timeout passed,
/// or its caller dropped it). Costs a clock read per attempt; the first
/// attempt (most ops' only one) is kept inline, so only retried ops
/// allocate.
struct Trail<'a> {
    oid: &'a str,
    start: Instant,
    finished: bool,
    limit: Option<Duration>,
    first: Option<(Duration, Attempt)>,
    more: Vec<(Duration, Attempt)>,
}

impl<'a> Trail<'a> {
    fn new(oid: &'a str, limit: Option<Duration>) -> Self {
        Trail {
            oid,
            start: Instant::now(),
            finished: false,
            limit,
            first: None,
            more: Vec::new(),
        }
    }

    fn note(&mut self, attempt: Attempt) {
        if self.limit.is_none() || self.len() >= MAX_TRAIL {
            return;
        }
        let step = (self.start.elapsed(), attempt);
        match self.first {
            None => self.first = Some(step),
            Some(_) => self.more.push(step),
        }
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.len()
    }

    /// The op completed (with a result or an error): log it if it was slow.
    fn done(&mut self) {
        self.finished = true;
        if let Some(report) = self.report("slow op", self.start.elapsed()) {
            tracing::warn!("{report}");
        }
    }

    /// What to log of an op that ended (`what`) after `took`, if that is
    /// slow.
    fn report(&self, what: &str, took: Duration) -> Option<String> {
        if took < self.limit? {
            return None;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let steps: Vec<String> = self
            .first
            .iter()
            .chain(&self.more)
            .map(|(at, a)| {
                let step = match a {
                    Attempt::Sent { epoch, pg, osd } => {
                        format!("sent to osd.{osd} (pg {pg}, epoch {epoch})")
                    }
                    Attempt::Retry { epoch } => format!("retry (epoch {epoch})"),
                    Attempt::Moved { epoch } => format!("pg moved (epoch {epoch})"),
                    Attempt::ConnectionLost => "connection lost".to_string(),
                };
                format!("{:.0} ms: {step}", ms(*at))
            })
            .collect();
        Some(format!(
            "{what} on {:?}: {:.0} ms; {}",
            self.oid,
            ms(took),
            steps.join("; ")
        ))
    }
}

impl Drop for Trail<'_> {
    /// An op that ends without a reply (its timeout passed, its caller
    /// dropped it, or the map was lost) is the slowest kind: report it too.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Some(report) = self.report(ABANDONED, self.start.elapsed()) {
            tracing::warn!("{report}");
        }
    }
}

/// Wait for a map change or `limit`, whichever is first.
async fn wait_change_or(rx: &mut watch::Receiver<Arc<ClusterMap>>, limit: Duration) {
    let _ = tokio::time::timeout(limit, rx.changed()).await;
}

/// Apply the configuration database of every new map that changes it,
/// for as long as the client lives.
async fn follow_config(
    cluster: std::sync::Weak<Cluster>,
    reconfigure: Reconfigure,
    mut applied: cairn_map::ConfigDb,
) {
    let Some(mut rx) = cluster.upgrade().map(|c| c.map_rx.clone()) else {
        return;
    };
    loop {
        let db = rx.borrow_and_update().config.clone();
        if db != applied {
            // Not held across the wait below: the client may be dropped.
            let Some(cluster) = cluster.upgrade() else {
                return;
            };
            let mut opts = cluster.opts.write();
            *opts = ClientOptions {
                mon_addr: opts.mon_addr.clone(),
                ..(reconfigure.0)(&db)
            };
            tracing::info!("client options changed by the configuration database: {opts:?}");
            applied = db;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_op_is_reported_with_its_attempts() {
        let pg = PgId::new(1, 0xf);
        let mut trail = Trail::new("obj", Some(Duration::from_millis(100)));
        trail.note(Attempt::Sent {
            epoch: 12,
            pg,
            osd: 0,
        });
        trail.note(Attempt::Moved { epoch: 13 });
        trail.note(Attempt::Sent {
            epoch: 13,
            pg,
            osd: 2,
        });
        assert_eq!(trail.report("slow op", Duration::from_millis(99)), None);
        let report = trail.report("slow op", Duration::from_millis(206)).unwrap();
        assert!(
            report.starts_with("slow op on \"obj\": 206 ms; "),
            "{report}"
        );
        for part in [
            "sent to osd.0 (pg 1.f, epoch 12)",
            "pg moved (epoch 13)",
            "sent to osd.2 (pg 1.f, epoch 13)",
        ] {
            assert!(report.contains(part), "{report} lacks {part}");
        }
        let gave_up = trail.report(ABANDONED, Duration::from_secs(5)).unwrap();
        assert!(gave_up.starts_with("op ended without a reply"), "{gave_up}");
        trail.done();
        assert!(
            trail.finished,
            "done() marks the op finished, so dropping it reports nothing more"
        );
        // Without a complaint time nothing is kept or reported.
        let mut quiet = Trail::new("obj", None);
        quiet.note(Attempt::ConnectionLost);
        assert_eq!(quiet.len(), 0);
        assert_eq!(quiet.report("slow op", Duration::from_secs(60)), None);
        // At most MAX_TRAIL attempts are kept.
        for _ in 0..2 * MAX_TRAIL {
            trail.note(Attempt::Retry { epoch: 14 });
        }
        assert_eq!(trail.len(), MAX_TRAIL);
    }
}
