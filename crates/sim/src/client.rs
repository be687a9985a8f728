//! A simulated client: an objecter (route by its map to the acting
//! primary, resend with the same request id on a map change, a lost
//! connection or a retry reply) over objects it alone writes, and the model
//! of what was acknowledged. At most one operation per object is in flight,
//! so every completed read must return exactly the last acknowledged
//! content; anything else is a violation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_map::ClusterMap;
use cairn_types::{Epoch, OsdId, PgId, ReqId};
use cairn_wire::{ObjOp, OpError, OpOutput, OsdOp, OsdOpReply};
use rand::rngs::SmallRng;
use rand::Rng;

#[derive(Clone, Debug)]
pub enum Kind {
    Write(Vec<u8>),
    Remove,
    Read,
    /// A write sent again under the request id of this client's earlier
    /// operation `key` (see [`SimClient::next_key`]), as an objecter does
    /// when it never saw the reply. That operation was acknowledged, so
    /// this one must not apply again: the model keeps the content last
    /// acknowledged, and a later read returning `data` is a violation.
    Resend {
        key: u64,
        data: Vec<u8>,
    },
}

impl Kind {
    /// What the operation is, in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Write(_) => "write",
            Kind::Resend { .. } => "resent write",
            Kind::Remove => "remove",
            Kind::Read => "read",
        }
    }
}

#[derive(Clone, Debug)]
struct Pending {
    obj: usize,
    reqid: ReqId,
    kind: Kind,
    /// Where the latest send went, and its tid.
    sent: Option<(OsdId, u64)>,
    /// The PG the latest send named.
    sent_pg: Option<PgId>,
    retry_at: Option<Duration>,
    /// Resend once the map reaches this epoch.
    wait_epoch: Option<Epoch>,
    started: Duration,
}

#[derive(Clone, Debug, Default)]
pub struct Object {
    pub name: String,
    /// The content last acknowledged (`None`: absent).
    pub acked: Option<Vec<u8>>,
    pub busy: bool,
    /// Content seen by reads that must never be read again (overwritten by
    /// an acknowledged write), for the stale-read scenarios.
    pub writes: u64,
}

/// What the world must send for a client.
pub struct Send {
    pub to: OsdId,
    pub op: OsdOp,
}

pub struct SimClient {
    pub id: usize,
    pub map: Arc<ClusterMap>,
    pub objects: Vec<Object>,
    pending: BTreeMap<u64, Pending>,
    tids: BTreeMap<u64, u64>,
    next_tid: u64,
    next_key: u64,
    /// Start new operations on their own (random runs).
    pub active: bool,
    pub acked_writes: u64,
    /// Writes refused with `NoSpace` (not applied: the model keeps the
    /// content acknowledged before), and the longest such refusal took.
    pub nospace_writes: u64,
    pub nospace_latency: Duration,
    pub reads_checked: u64,
    pub violations: Vec<String>,
    /// Completed reads, with what they returned, for scripted checks.
    pub reads: Vec<(usize, Option<Vec<u8>>)>,
}

impl SimClient {
    pub fn new(id: usize, objects: usize, map: Arc<ClusterMap>) -> Self {
        SimClient {
            id,
            map,
            objects: (0..objects)
                .map(|k| Object {
                    name: format!("c{id}.obj{k:03}"),
                    ..Object::default()
                })
                .collect(),
            pending: BTreeMap::new(),
            tids: BTreeMap::new(),
            next_tid: 1,
            next_key: 1,
            active: false,
            acked_writes: 0,
            nospace_writes: 0,
            nospace_latency: Duration::ZERO,
            reads_checked: 0,
            violations: Vec::new(),
            reads: Vec::new(),
        }
    }

    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// The operations in flight, a line each, for failure reports.
    pub fn describe_pending(&self) -> Vec<String> {
        self.pending
            .values()
            .map(|p| {
                format!(
                    "client {} {} of {} (started {:?}): sent {:?} pg {:?}, retry at {:?}, waits for epoch {:?}",
                    self.id,
                    p.kind.name(),
                    self.objects[p.obj].name,
                    p.started,
                    p.sent,
                    p.sent_pg,
                    p.retry_at,
                    p.wait_epoch
                )
            })
            .collect()
    }

    /// The key the next started operation gets (its request id's tid).
    pub fn next_key(&self) -> u64 {
        self.next_key
    }

    /// Start an operation on object `obj` if it is idle.
    pub fn start(&mut self, obj: usize, kind: Kind, now: Duration) -> Vec<Send> {
        if self.objects[obj].busy {
            return Vec::new();
        }
        self.objects[obj].busy = true;
        let key = self.next_key;
        self.next_key += 1;
        let tid = match &kind {
            Kind::Resend { key: earlier, .. } => *earlier,
            _ => key,
        };
        let reqid = ReqId {
            client: self.id as u64 + 1,
            tid,
        };
        self.pending.insert(
            key,
            Pending {
                obj,
                reqid,
                kind,
                sent: None,
                sent_pg: None,
                retry_at: None,
                wait_epoch: None,
                started: now,
            },
        );
        self.send(key).into_iter().collect()
    }

    /// Pick and start random operations (at most `max_inflight`).
    pub fn random_ops(
        &mut self,
        rng: &mut SmallRng,
        now: Duration,
        max_inflight: usize,
    ) -> Vec<Send> {
        let mut out = Vec::new();
        while self.pending.len() < max_inflight {
            let obj = rng.gen_range(0..self.objects.len());
            if self.objects[obj].busy {
                break;
            }
            let kind = match rng.gen_range(0..10) {
                0..=5 => Kind::Write(self.content(obj, rng)),
                6 if self.objects[obj].acked.is_some() => Kind::Remove,
                _ => Kind::Read,
            };
            out.extend(self.start(obj, kind, now));
        }
        out
    }

    fn content(&mut self, obj: usize, rng: &mut SmallRng) -> Vec<u8> {
        self.objects[obj].writes += 1;
        let mut data =
            format!("{}#{}|", self.objects[obj].name, self.objects[obj].writes).into_bytes();
        let extra = rng.gen_range(0..200);
        data.extend((0..extra).map(|i| (i as u8).wrapping_mul(31).wrapping_add(obj as u8)));
        data
    }

    fn ops(kind: &Kind) -> Vec<ObjOp> {
        match kind {
            Kind::Write(data) | Kind::Resend { data, .. } => vec![
                ObjOp::Truncate { size: 0 },
                ObjOp::Write {
                    offset: 0,
                    data: Bytes::from(data.clone()),
                },
            ],
            Kind::Remove => vec![ObjOp::Remove],
            Kind::Read => vec![ObjOp::Read {
                offset: 0,
                len: 1 << 16,
            }],
        }
    }

    /// (Re)send pending op `key` to its PG's primary under the client's map.
    fn send(&mut self, key: u64) -> Option<Send> {
        let p = self.pending.get_mut(&key)?;
        p.retry_at = None;
        p.wait_epoch = None;
        let oid = &self.objects[p.obj].name;
        let pool = self.map.pool_by_name("rbd")?;
        let pg = self.map.object_pg(pool, oid);
        let Some(primary) = self.map.acting(pg).primary() else {
            p.sent = None; // no OSD up: wait for a map
            p.wait_epoch = Some(self.map.epoch + 1);
            return None;
        };
        let tid = self.next_tid;
        self.next_tid += 1;
        if let Some((_, old)) = p.sent {
            self.tids.remove(&old);
        }
        p.sent = Some((primary, tid));
        p.sent_pg = Some(pg);
        self.tids.insert(tid, key);
        Some(Send {
            to: primary,
            op: OsdOp {
                tid,
                reqid: p.reqid,
                epoch: self.map.epoch,
                pg,
                oid: oid.clone(),
                ops: Self::ops(&p.kind),
                ignore_overlay: false,
            },
        })
    }

    /// A newer map: resend whatever its primary changed for.
    pub fn take_map(&mut self, map: Arc<ClusterMap>) -> Vec<Send> {
        if map.epoch <= self.map.epoch {
            return Vec::new();
        }
        self.map = map;
        let Some(pool) = self.map.pool_by_name("rbd").cloned() else {
            return Vec::new();
        };
        let mut resend = Vec::new();
        for (&key, p) in &self.pending {
            let pg = self.map.object_pg(&pool, &self.objects[p.obj].name);
            let primary = self.map.acting(pg).primary();
            let waiting = p.wait_epoch.is_some_and(|e| e <= self.map.epoch);
            if waiting || p.sent.map(|(o, _)| o) != primary || p.sent_pg != Some(pg) {
                resend.push(key);
            }
        }
        resend.into_iter().filter_map(|k| self.send(k)).collect()
    }

    /// The connection to `osd` was lost: resend what went there shortly
    /// (or at once on a map that moves it), as the objecter does.
    pub fn reset(&mut self, osd: OsdId, now: Duration) {
        for p in self.pending.values_mut() {
            if p.sent.is_some_and(|(o, _)| o == osd) {
                p.sent = None;
                p.retry_at = Some(now + Duration::from_millis(100));
            }
        }
    }

    /// Ops due for a resend.
    pub fn due(&mut self, now: Duration) -> Vec<Send> {
        let keys: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.retry_at.is_some_and(|t| now >= t))
            .map(|(&k, _)| k)
            .collect();
        keys.into_iter().filter_map(|k| self.send(k)).collect()
    }

    /// A reply from an OSD.
    pub fn reply(&mut self, reply: OsdOpReply, now: Duration) {
        let Some(key) = self.tids.remove(&reply.tid) else {
            return; // a reply to an abandoned send
        };
        let Some(p) = self.pending.get_mut(&key) else {
            return;
        };
        match reply.result {
            Err(OpError::WrongPrimary { epoch } | OpError::Retry { epoch }) => {
                p.sent = None;
                if epoch > self.map.epoch {
                    p.wait_epoch = Some(epoch);
                } else {
                    p.retry_at = Some(now + Duration::from_millis(30));
                }
            }
            result => {
                let Some(p) = self.pending.remove(&key) else {
                    return;
                };
                self.complete(p, result, now);
            }
        }
    }

    fn complete(&mut self, p: Pending, result: Result<Vec<OpOutput>, OpError>, now: Duration) {
        let obj = &mut self.objects[p.obj];
        obj.busy = false;
        let name = obj.name.clone();
        let took = now.saturating_sub(p.started);
        match (&p.kind, result) {
            (Kind::Write(data), Ok(_)) => {
                obj.acked = Some(data.clone());
                self.acked_writes += 1;
            }
            // Applied once already: the content acknowledged since stands.
            (Kind::Resend { .. }, Ok(_)) => {}
            (Kind::Write(_), Err(OpError::NoSpace)) => {
                // Refused: nothing applied, the acknowledged content stands
                // (the final read-back checks exactly that).
                self.nospace_writes += 1;
                self.nospace_latency = self.nospace_latency.max(took);
            }
            (Kind::Remove, Ok(_)) | (Kind::Remove, Err(OpError::NotFound)) => {
                // NotFound: applied earlier, its reply lost, and the request
                // id since trimmed from the log.
                obj.acked = None;
            }
            (Kind::Read, Ok(outputs)) => {
                let got = match outputs.first() {
                    Some(OpOutput::Data(d)) => Some(d.to_vec()),
                    other => {
                        self.violations
                            .push(format!("{name}: read returned {other:?}"));
                        return;
                    }
                };
                self.check_read(p.obj, got, took);
            }
            (Kind::Read, Err(OpError::NotFound)) => self.check_read(p.obj, None, took),
            (kind, Err(e)) => self
                .violations
                .push(format!("{name}: {:?} failed: {e}", kind.name())),
        }
    }

    fn check_read(&mut self, obj: usize, got: Option<Vec<u8>>, took: Duration) {
        self.reads_checked += 1;
        let o = &self.objects[obj];
        if got != o.acked {
            let show = |v: &Option<Vec<u8>>| match v {
                None => "absent".to_string(),
                Some(d) => String::from_utf8_lossy(&d[..d.len().min(40)]).into_owned(),
            };
            self.violations.push(format!(
                "{}: read returned {} but the last acknowledged write holds {} (read took {took:?})",
                o.name,
                show(&got),
                show(&o.acked)
            ));
        }
        self.reads.push((obj, got));
    }
}
