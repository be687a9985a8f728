//! How a member keeps its copy of a PG's state in the object store, and
//! reads it back strictly.
//!
//! | where                                   | what                                  |
//! |-----------------------------------------|---------------------------------------|
//! | collection attribute `info`             | the bincode [`PgInfo`]                |
//! | the collection's log, keyed by version  | one bincode [`LogEntry`] per entry    |
//! | omap of object [`PGMETA`], key `m/NAME` | the version object `NAME` is missing at |
//! | object attribute `_v`                   | the object's version (bincode)        |
//!
//! Everything is decoded with no fallback: a missing, short, over-long or
//! inconsistent record is a [`LoadError`] naming the PG and what failed,
//! and the OSD then treats its copy as blank so it is rebuilt from peers.
//! Every change goes into the same store transaction as the data it
//! describes.

use bincode::Options;
use bytes::Bytes;
use cairn_store::{ObjectId, ObjectStore, StoreError, Transaction, TxOp};
use cairn_types::{PgId, Version};
use cairn_wire::{LogEntry, PgInfo};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::log::{Missing, PgLog};

/// Collection attribute holding the [`PgInfo`].
pub const INFO_ATTR: &str = "info";
/// Object attribute holding an object's [`Version`].
pub const VERSION_ATTR: &str = "_v";
/// The PG's metadata object (its omap holds the missing set). Its name
/// starts with a control character, which client object names may not.
pub const PGMETA: &str = "\u{1}pgmeta";
const MISSING_PREFIX: &str = "m/";

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("pg {pg}: cannot read {what}: {source}")]
    Store {
        pg: PgId,
        what: &'static str,
        source: StoreError,
    },
    #[error("pg {pg}: {what} is undecodable: {reason}")]
    Decode {
        pg: PgId,
        what: String,
        reason: String,
    },
    #[error("pg {pg}: {0}", .reason)]
    Inconsistent { pg: PgId, reason: String },
}

/// A member's persistent state of one PG.
#[derive(Debug)]
pub struct Loaded {
    pub info: PgInfo,
    pub log: PgLog,
    pub missing: Missing,
}

fn options() -> impl Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .reject_trailing_bytes()
}

/// Decode `bytes` exactly (no trailing bytes, no defaults).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    options().deserialize(bytes).map_err(|e| e.to_string())
}

/// A log entry as stores written before folded entries existed hold it.
#[derive(serde::Deserialize)]
struct LogEntryV1 {
    version: cairn_types::Version,
    prior_version: cairn_types::Version,
    reqid: Option<cairn_types::ReqId>,
    oid: String,
    op: cairn_wire::LogOp,
}

/// Decode a stored log entry: the current layout, or exactly the one
/// before it (no folded entries), which an upgraded OSD still reads so
/// that upgrading every OSD loses no PG's log. Anything else is an error.
fn decode_entry(bytes: &[u8]) -> Result<LogEntry, String> {
    decode::<LogEntry>(bytes).or_else(|current| {
        let v1: LogEntryV1 = decode(bytes).map_err(|_| current)?;
        Ok(LogEntry {
            version: v1.version,
            prior_version: v1.prior_version,
            reqid: v1.reqid,
            oid: v1.oid,
            op: v1.op,
            superseded: Vec::new(),
        })
    })
}

pub fn encode<T: Serialize>(value: &T) -> Bytes {
    // Encoding plain data into a Vec cannot fail.
    Bytes::from(options().serialize(value).unwrap_or_else(|e| {
        unreachable!("encoding PG state failed: {e}");
    }))
}

/// Read the PG's state from the store: `None` if this OSD holds nothing of
/// it (no collection).
pub fn load(store: &dyn ObjectStore, pg: PgId) -> Result<Option<Loaded>, LoadError> {
    let err = |what, source| LoadError::Store { pg, what, source };
    let Some(raw) = store
        .coll_get_attr(pg, INFO_ATTR)
        .map_err(|e| err("info", e))?
    else {
        let objects = store.list_objects(pg).map_err(|e| err("objects", e))?;
        let log = store.read_log(pg).map_err(|e| err("log", e))?;
        if objects.is_empty() && log.is_empty() {
            return Ok(None);
        }
        return Err(LoadError::Inconsistent {
            pg,
            reason: format!(
                "holds {} objects and {} log entries but no info",
                objects.len(),
                log.len()
            ),
        });
    };
    let mut info: PgInfo = decode(&raw).map_err(|reason| LoadError::Decode {
        pg,
        what: "info".into(),
        reason,
    })?;
    let inconsistent = |reason: String| LoadError::Inconsistent { pg, reason };
    if info.pg != pg {
        return Err(inconsistent(format!("info names pg {}", info.pg)));
    }
    let mut entries = Vec::new();
    for (version, bytes) in store.read_log(pg).map_err(|e| err("log", e))? {
        let entry = decode_entry(&bytes).map_err(|reason| LoadError::Decode {
            pg,
            what: format!("log entry {version}"),
            reason,
        })?;
        if entry.version != version || version <= info.log_tail {
            return Err(inconsistent(format!(
                "log entry stored at {version} holds {} (log tail {})",
                entry.version, info.log_tail
            )));
        }
        entries.push(entry);
    }
    // Folded versions ascend within each entry and appear once.
    if let Err(e) =
        super::log::check_order(&entries).and_then(|()| super::log::check_unique(&entries))
    {
        return Err(inconsistent(format!("log: {e}")));
    }
    // Entries are appended without rewriting the info ("fast info", see
    // `Pg::prepare_append`): the newest entry is the PG's last update when
    // it is newer than the info's. A split PG's log may also end before
    // last_update (the parent's later entries were for its other objects).
    if let Some(newest) = entries.last() {
        info.last_update = info.last_update.max(newest.version);
    }
    if info.last_update < info.log_tail {
        return Err(inconsistent(format!(
            "info says last_update {} before its log tail {}",
            info.last_update, info.log_tail
        )));
    }
    let log = PgLog::with_head(info.log_tail, info.last_update, entries);
    let meta = ObjectId::new(pg, PGMETA);
    let mut missing = Missing::new();
    let omap = match store.omap_list(&meta, None, usize::MAX) {
        Ok(omap) => omap,
        Err(StoreError::NotFound(_)) => Vec::new(),
        Err(e) => return Err(err("missing set", e)),
    };
    for (key, value) in omap {
        let Some(name) = key.strip_prefix(MISSING_PREFIX) else {
            return Err(inconsistent(format!("unknown pgmeta key {key:?}")));
        };
        let version: Version = decode(&value).map_err(|reason| LoadError::Decode {
            pg,
            what: format!("missing entry {name:?}"),
            reason,
        })?;
        missing.insert(name.to_string(), version);
    }
    Ok(Some(Loaded { info, log, missing }))
}

/// An object's version in the store: `None` if it does not exist.
pub fn object_version(store: &dyn ObjectStore, oid: &ObjectId) -> Result<Option<Version>, String> {
    match store.get_attr(oid, VERSION_ATTR) {
        Ok(Some(bytes)) => decode(&bytes)
            .map(Some)
            .map_err(|e| format!("object {oid}: version attribute: {e}")),
        Ok(None) => Err(format!("object {oid} has no version attribute")),
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(format!("object {oid}: {e}")),
    }
}

pub fn save_info(txn: &mut Transaction, info: &PgInfo) {
    txn.coll_set_attr(info.pg, INFO_ATTR, encode(info));
}

pub fn log_append(txn: &mut Transaction, pg: PgId, entry: &LogEntry) {
    txn.push(TxOp::LogAppend {
        coll: pg,
        version: entry.version,
        entry: encode(entry),
    });
}

/// Replace the stored log with `log`.
pub fn log_rewrite(txn: &mut Transaction, pg: PgId, log: &PgLog) {
    txn.log_trim(pg, Version::new(u32::MAX, u64::MAX));
    for entry in log.entries() {
        log_append(txn, pg, entry);
    }
}

fn missing_key(name: &str) -> String {
    format!("{MISSING_PREFIX}{name}")
}

pub fn missing_add(txn: &mut Transaction, pg: PgId, name: &str, version: Version) {
    txn.omap_set(
        &ObjectId::new(pg, PGMETA),
        vec![(missing_key(name), encode(&version))],
    );
}

pub fn missing_remove(txn: &mut Transaction, pg: PgId, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let keys = names.iter().map(|n| missing_key(n)).collect();
    txn.omap_rm(&ObjectId::new(pg, PGMETA), keys);
}

/// Replace the stored missing set with `missing`.
pub fn missing_rewrite(txn: &mut Transaction, pg: PgId, missing: &Missing) {
    let meta = ObjectId::new(pg, PGMETA);
    txn.omap_clear(&meta);
    if !missing.is_empty() {
        let entries = missing
            .iter()
            .map(|(name, v)| (missing_key(name), encode(v)))
            .collect();
        txn.omap_set(&meta, entries);
    }
}

/// Is `name` one of the PG's own metadata objects rather than a client's?
pub fn is_internal(name: &str) -> bool {
    name.starts_with('\u{1}')
}

#[cfg(test)]
mod tests {
    use cairn_types::{ReqId, Version};
    use cairn_wire::{LogEntry, LogOp, Superseded};

    use super::*;

    #[derive(Serialize)]
    struct V1 {
        version: Version,
        prior_version: Version,
        reqid: Option<ReqId>,
        oid: String,
        op: LogOp,
    }

    #[test]
    fn log_entries_of_the_layout_before_folding_still_load() {
        let reqid = Some(ReqId { client: 3, tid: 9 });
        let old = V1 {
            version: Version::new(2, 7),
            prior_version: Version::new(1, 4),
            reqid,
            oid: "obj".into(),
            op: LogOp::Modify,
        };
        let entry = decode_entry(&encode(&old)).expect("the older layout loads");
        assert_eq!(entry.version, Version::new(2, 7));
        assert_eq!(entry.prior_version, Version::new(1, 4));
        assert_eq!((entry.reqid, entry.oid.as_str()), (reqid, "obj"));
        assert!(entry.superseded.is_empty());
        // The current layout round-trips, folded entries included.
        let now = LogEntry {
            superseded: vec![Superseded {
                version: Version::new(2, 5),
                reqid: None,
                op: LogOp::Delete,
            }],
            ..entry
        };
        assert_eq!(decode_entry(&encode(&now)), Ok(now));
        // Neither layout with a byte too many or too few.
        let mut long = encode(&old).to_vec();
        long.push(0);
        assert!(decode_entry(&long).is_err());
        let short = encode(&old);
        assert!(decode_entry(&short[..short.len() - 1]).is_err());
    }

    fn entry(version: Version) -> LogEntry {
        LogEntry {
            version,
            prior_version: Version::ZERO,
            reqid: Some(ReqId {
                client: 1,
                tid: version.counter,
            }),
            oid: format!("obj{}", version.counter),
            op: LogOp::Modify,
            superseded: Vec::new(),
        }
    }

    fn load_now(store: &cairn_store::memstore::MemStore, pg: PgId) -> Loaded {
        load(store, pg).expect("load").expect("the PG is there")
    }

    /// Entries appended after the info was last saved ("fast info") make
    /// the loaded last_update; an info ahead of a sparse log (a split
    /// child's) is kept; an info behind its own tail is refused.
    #[tokio::test]
    async fn last_update_is_the_newest_of_the_info_and_the_log() {
        let store = cairn_store::memstore::MemStore::new();
        let pg = PgId::new(1, 0);
        let mut info = PgInfo::empty(pg, 8);
        info.last_update = Version::new(1, 2);
        let mut txn = Transaction::new();
        save_info(&mut txn, &info);
        for n in 1..=2 {
            log_append(&mut txn, pg, &entry(Version::new(1, n)));
        }
        store.submit(txn).expect("submit").await.expect("commit");
        assert_eq!(load_now(&store, pg).info.last_update, Version::new(1, 2));

        let mut txn = Transaction::new();
        for n in 3..=5 {
            log_append(&mut txn, pg, &entry(Version::new(1, n)));
        }
        store.submit(txn).expect("submit").await.expect("commit");
        let loaded = load_now(&store, pg);
        assert_eq!(loaded.info.last_update, Version::new(1, 5));
        assert_eq!(loaded.log.head(), Version::new(1, 5));
        assert_eq!(loaded.log.len(), 5);

        // A sparse log ending before the info's last_update.
        info.last_update = Version::new(2, 9);
        let mut txn = Transaction::new();
        save_info(&mut txn, &info);
        store.submit(txn).expect("submit").await.expect("commit");
        assert_eq!(load_now(&store, pg).info.last_update, Version::new(2, 9));

        // An info whose last_update is before its log tail.
        info.last_update = Version::new(1, 1);
        info.log_tail = Version::new(3, 0);
        let mut txn = Transaction::new();
        txn.log_trim(pg, Version::new(u32::MAX, u64::MAX));
        save_info(&mut txn, &info);
        store.submit(txn).expect("submit").await.expect("commit");
        assert!(matches!(
            load(&store, pg),
            Err(LoadError::Inconsistent { .. })
        ));
    }
}
