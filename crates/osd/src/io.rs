//! The narrow interface through which the OSD's logic ([`crate::OsdCore`]
//! and its PGs) reaches the world: the object store, peers, clients, the
//! monitor and the clock. The daemon implements it with tokio and sockets
//! (`crate::daemon`); the simulation (`cairn-sim`) with a seeded event
//! queue. The logic never blocks on it: whatever takes time (a commit, a
//! read) is started here and its result comes back later as a call on
//! [`crate::OsdCore`] carrying the [`Done`] it was started with.

use std::time::Duration;

use bytes::Bytes;
use cairn_store::{ObjectId, ObjectStore, StoreError, Transaction};
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::{ObjOp, ObjectCopy, OpError, OpOutput, OsdOpReply, PgMessage};

use crate::pg::persist::{self, VERSION_ATTR};

/// A client connection, as the OSD numbers them.
pub type ClientId = u64;

/// What a started operation reports back to: the PG and the PG's own
/// number for the wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Done {
    pub pg: PgId,
    pub id: u64,
}

/// Why a client read failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadFailure {
    /// The copy here cannot be read back (its data failed its checksum,
    /// or the device returned a media error): it is repaired from a member.
    Damaged(String),
    Op(OpError),
}

pub type ReadResult = Result<Vec<OpOutput>, ReadFailure>;

/// Why a whole-object copy (for recovery, backfill or a pull) failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    /// This OSD's copy cannot be read back: count it missing and fetch it.
    #[error("{0}")]
    Damaged(String),
    #[error("{0}")]
    Failed(String),
}

impl From<String> for CopyError {
    fn from(why: String) -> Self {
        CopyError::Failed(why)
    }
}

pub type CopyResult = Result<Option<ObjectCopy>, CopyError>;

/// A stored copy that cannot be read back, as opposed to a failed request:
/// a checksum mismatch or a device read error.
pub fn is_damage(e: &StoreError) -> bool {
    matches!(e, StoreError::Checksum { .. } | StoreError::Io(_))
}

pub trait OsdIo {
    fn store(&self) -> &dyn ObjectStore;
    /// Time since an arbitrary origin; never goes back.
    fn now(&self) -> Duration;
    /// Wall-clock seconds since the Unix epoch, for what is stored (scrub
    /// stamps).
    fn wall_secs(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }
    /// Queue `txn` (the order of calls is the order of application); its
    /// durability comes back through [`crate::OsdCore::committed`].
    fn submit(&mut self, txn: Transaction, done: Done) -> Result<(), StoreError>;
    /// Run the read sub-ops of a client request on one object; the result
    /// comes back through [`crate::OsdCore::read_done`].
    fn read(&mut self, oid: ObjectId, ops: Vec<ObjOp>, done: Done);
    /// Copy a whole object (data, attributes, omap) for recovery; the
    /// result comes back through [`crate::OsdCore::object_read`].
    fn read_object(&mut self, oid: ObjectId, done: Done);

    /// Run `ops` on object `oid` of pool `pool` as a client would, ignoring
    /// the pool's overlay (a cache tier reaching its base pool); the
    /// answer comes back as [`crate::OsdCore::tier_done`].
    /// `reqid`: the client request it is passed on for (then the base
    /// pool applies a resend of it once), or `None` for the cache's own.
    fn tier_op(
        &mut self,
        pool: cairn_types::PoolId,
        oid: String,
        ops: Vec<ObjOp>,
        reqid: Option<cairn_types::ReqId>,
        done: Done,
    );
    /// Send to a peer OSD. Messages to one peer arrive in order or not at
    /// all; a lost connection is reported through
    /// [`crate::OsdCore::peer_reset`].
    fn send(&mut self, to: OsdId, msg: PgMessage);
    /// Answer a peer's request on the connection it came on: a peer still
    /// down in the map (catching up before it boots) has no address in it
    /// that reaches its new process.
    fn answer(&mut self, to: OsdId, msg: PgMessage) {
        self.send(to, msg);
    }
    fn reply(&mut self, client: ClientId, reply: OsdOpReply);
    /// Ask the monitor to record this OSD alive through `epoch`.
    fn request_up_thru(&mut self, epoch: Epoch);
    /// Ask the monitor for a PG's acting set (empty: the up set).
    fn request_pg_temp(&mut self, pg: PgId, osds: Vec<OsdId>);
}

/// Execute the read sub-ops of a client request against `store`.
pub async fn execute_reads(store: &dyn ObjectStore, oid: &ObjectId, ops: &[ObjOp]) -> ReadResult {
    let mut outputs = Vec::with_capacity(ops.len());
    for op in ops {
        let output = match op {
            ObjOp::Read { offset, len } => {
                if *len > (64 << 20) {
                    return Err(ReadFailure::Op(OpError::Invalid(
                        "read longer than 64 MiB".into(),
                    )));
                }
                OpOutput::Data(store.read(oid, *offset, *len).await.map_err(read_failure)?)
            }
            ObjOp::Stat => OpOutput::Stat {
                size: store.stat(oid).map_err(read_failure)?.size,
            },
            ObjOp::GetAttr { key } => OpOutput::Attr(
                store
                    .get_attr(oid, key)
                    .map_err(read_failure)?
                    .map(Bytes::from),
            ),
            ObjOp::OmapGet { keys } => {
                let found = store.omap_get(oid, keys).map_err(read_failure)?;
                OpOutput::Omap(
                    found
                        .into_iter()
                        .map(|(k, v)| (k, Bytes::from(v)))
                        .collect(),
                )
            }
            ObjOp::OmapCmp { key, value } => {
                omap_cmp(store, oid, key, value.as_deref()).map_err(ReadFailure::Op)?;
                OpOutput::None
            }
            ObjOp::CopyGet => {
                // The copy recovery makes, without the OSD's own attributes.
                let copy = match copy_object(store, oid).await {
                    Ok(Some(copy)) => copy,
                    Ok(None) => return Err(ReadFailure::Op(OpError::NotFound)),
                    Err(CopyError::Damaged(why)) => return Err(ReadFailure::Damaged(why)),
                    Err(CopyError::Failed(why)) => return Err(ReadFailure::Op(OpError::Io(why))),
                };
                let Some(data) = copy.data else {
                    let why = format!("the copy of {oid} holds no data");
                    return Err(ReadFailure::Op(OpError::Io(why)));
                };
                OpOutput::Copy(cairn_wire::ObjectData {
                    data,
                    attrs: copy
                        .attrs
                        .into_iter()
                        .filter(|(k, _)| !k.starts_with('_'))
                        .collect(),
                    omap: copy.omap,
                })
            }
            ObjOp::OmapList { start_after, max } => {
                let list = store
                    .omap_list(oid, start_after.as_deref(), (*max).min(65536) as usize)
                    .map_err(read_failure)?;
                OpOutput::Omap(list.into_iter().map(|(k, v)| (k, Bytes::from(v))).collect())
            }
            _ => {
                return Err(ReadFailure::Op(OpError::Invalid(
                    "mutation in a read request".into(),
                )))
            }
        };
        outputs.push(output);
    }
    Ok(outputs)
}

/// Check an [`ObjOp::OmapCmp`] guard against the stored object.
pub fn omap_cmp(
    store: &dyn ObjectStore,
    oid: &ObjectId,
    key: &str,
    want: Option<&[u8]>,
) -> Result<(), OpError> {
    let found = match store.omap_get(oid, &[key.to_string()]) {
        Ok(found) => found.into_iter().next().map(|(_, v)| v),
        Err(StoreError::NotFound(_)) => None,
        Err(e) => return Err(store_error(e)),
    };
    if found.as_deref() == want {
        return Ok(());
    }
    let what = |v: Option<&[u8]>| match v {
        None => "absent".to_string(),
        Some(v) => format!("{} bytes", v.len()),
    };
    Err(OpError::Mismatch(format!(
        "omap key {key:?} of {oid}: expected {}, found {}",
        what(want),
        what(found.as_deref())
    )))
}

fn read_failure(e: StoreError) -> ReadFailure {
    if is_damage(&e) {
        ReadFailure::Damaged(e.to_string())
    } else {
        ReadFailure::Op(store_error(e))
    }
}

/// A store error as a client sees it.
pub fn store_error(e: StoreError) -> OpError {
    match e {
        StoreError::NotFound(_) => OpError::NotFound,
        StoreError::NoSpace => OpError::NoSpace,
        StoreError::Invalid(m) => OpError::Invalid(m),
        other => OpError::Io(other.to_string()),
    }
}

/// Copy a whole object with its version: `None` if it does not exist.
pub async fn copy_object(store: &dyn ObjectStore, oid: &ObjectId) -> CopyResult {
    let size = match store.stat(oid) {
        Ok(stat) => stat.size,
        Err(StoreError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(CopyError::Failed(e.to_string())),
    };
    let version = persist::object_version(store, oid)?
        .ok_or_else(|| format!("object {oid} vanished while being copied"))?;
    let data = store.read(oid, 0, size).await.map_err(|e| {
        if is_damage(&e) {
            CopyError::Damaged(e.to_string())
        } else {
            CopyError::Failed(e.to_string())
        }
    })?;
    let attrs = store
        .get_attrs(oid)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|(k, _)| k != VERSION_ATTR)
        .map(|(k, v)| (k, Bytes::from(v)))
        .collect();
    let omap = store
        .omap_list(oid, None, usize::MAX)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(k, v)| (k, Bytes::from(v)))
        .collect();
    Ok(Some(ObjectCopy {
        name: oid.name.clone(),
        version,
        data: Some(data),
        attrs,
        omap,
    }))
}
