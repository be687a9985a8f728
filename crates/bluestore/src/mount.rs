//! Making a store (mkfs) and bringing one up (mount).
//!
//! mkfs writes the label to device block 0 and the superblock, an empty
//! free list covering the data space, and the object-id reservation to the
//! key-value store. It refuses a device that is too small, carries a
//! label (a Cairn store, or anything else) unless forced, or cannot be
//! read; a refused mkfs changes nothing.
//!
//! Mount checks that label and database belong to the same store, replays
//! the commit journal and the deferred writes a crash left pending, loads
//! and checks the free list (aligned, inside the device, disjoint), and
//! finds the collections.

use std::collections::BTreeSet;

use cairn_device::{block_on, AlignedBuf, BlockDevice};
use cairn_kv::{scan_all, Batch, Kv};
use cairn_store::{Collection, StoreError};

use crate::allocator::load_freelist;
use crate::journal::{self, Position};
use crate::keys;
use crate::label::{decode_label, encode_label, Label, Superblock, VERSION};
use crate::onode::{decode, encode, BLOCK};
use crate::options::MkfsOptions;
use crate::rangeset::RangeSet;
use crate::state::{device_error, kv_error};

/// Smallest device mkfs accepts.
pub const MIN_DEVICE_BYTES: u64 = 16 << 20;

fn invalid(msg: String) -> StoreError {
    StoreError::Invalid(msg)
}

/// What block 0 of `device` holds.
pub fn read_label(device: &dyn BlockDevice) -> Result<Label, StoreError> {
    let block = block_on(device.read(0, BLOCK)).map_err(device_error)?;
    decode_label(&block).map_err(StoreError::Corrupt)
}

/// Format `device` with `kv` (which must be empty unless forced).
pub fn mkfs(
    device: &dyn BlockDevice,
    kv: &dyn Kv,
    opts: &MkfsOptions,
) -> Result<Superblock, StoreError> {
    let au = opts.min_alloc_size;
    if au < BLOCK || !au.is_power_of_two() {
        return Err(invalid(format!(
            "min_alloc_size {au} must be a power of two of at least {BLOCK}"
        )));
    }
    if opts.shard_size < au || opts.shard_size % au != 0 || opts.shard_size > (64 << 20) {
        return Err(invalid(format!(
            "shard size {} must be a multiple of min_alloc_size {au}, at most 64 MiB",
            opts.shard_size
        )));
    }
    let size = device.size();
    if size < MIN_DEVICE_BYTES.max(4 * au) {
        return Err(invalid(format!(
            "device of {size} bytes is too small (at least {MIN_DEVICE_BYTES} bytes)"
        )));
    }
    let label = read_label(device);
    if !opts.force {
        match label {
            Ok(Label::Blank) => {}
            Ok(Label::Store(sb)) => {
                return Err(invalid(format!(
                    "device already holds Cairn store {} (use --force to overwrite)",
                    sb.id()
                )))
            }
            Ok(Label::Foreign) => {
                return Err(invalid(
                    "device holds data that is not a Cairn store (use --force to overwrite)".into(),
                ))
            }
            Err(e) => return Err(e),
        }
        if !kv.scan(b"", &[0xff], 1).map_err(kv_error)?.is_empty() {
            return Err(invalid(
                "the metadata database is not empty (use --force to overwrite)".into(),
            ));
        }
    }
    let journal_start = au.max(BLOCK);
    let journal_len = opts.journal_size.min(size / 8) / au * au;
    if journal_len < (1 << 20).max(au) {
        return Err(invalid(format!(
            "journal of {} bytes is too small (at least 1 MiB)",
            opts.journal_size
        )));
    }
    let data_start = journal_start + journal_len;
    let data_end = size / au * au;
    let sb = Superblock {
        version: VERSION,
        uuid: rand::random(),
        device_size: size,
        min_alloc_size: au,
        shard_size: opts.shard_size,
        journal_start,
        journal_len,
        data_start,
    };
    let mut batch = Batch::new();
    batch.delete_range(vec![0u8], vec![0xffu8; 2]);
    batch.put(keys::SUPER_KEY.to_vec(), encode(&sb));
    batch.put(keys::NID_KEY.to_vec(), 1u64.to_be_bytes().to_vec());
    let start = Position { offset: 0, seq: 1 };
    batch.put(keys::JOURNAL_KEY.to_vec(), start.encode());
    batch.put(keys::JDEF_KEY.to_vec(), start.encode());
    batch.put(
        keys::free(data_start),
        (data_end - data_start).to_be_bytes().to_vec(),
    );
    // Write the journal region once: a file's preallocated blocks are
    // "unwritten" until first written, and converting them costs a
    // file-system metadata commit on every flush; a device's old data is
    // wiped with it.
    let chunk = (1u64 << 20).min(journal_len);
    let mut at = 0;
    while at < journal_len {
        let n = chunk.min(journal_len - at);
        let zeros = AlignedBuf::zeroed(n as usize);
        block_on(device.write(journal_start + at, zeros)).map_err(device_error)?;
        at += n;
    }
    kv.write(batch, true).map_err(kv_error)?;
    let block = AlignedBuf::from_slice(&encode_label(&sb));
    block_on(device.write(0, block)).map_err(device_error)?;
    block_on(device.flush()).map_err(device_error)?;
    Ok(sb)
}

/// What mount learns from the device and the key-value store.
pub(crate) struct Mounted {
    pub sb: Superblock,
    /// Where the commit journal continues (all of it is in the key-value
    /// store, synced, after replay).
    pub journal: Position,
    pub free: RangeSet,
    pub nid_limit: u64,
    pub next_seq: u64,
    pub colls: BTreeSet<Collection>,
    pub objects: u64,
    pub replayed: u64,
}

/// Check and load a store; replays leftover deferred writes.
pub(crate) fn mount(device: &dyn BlockDevice, kv: &dyn Kv) -> Result<Mounted, StoreError> {
    let sb = match read_label(device)? {
        Label::Store(sb) => sb,
        Label::Blank => {
            return Err(StoreError::Corrupt(
                "device is not formatted (run mkfs)".into(),
            ))
        }
        Label::Foreign => {
            return Err(StoreError::Corrupt(
                "device does not hold a Cairn BlueStore label".into(),
            ))
        }
    };
    let db_sb: Superblock = match kv.get(keys::SUPER_KEY).map_err(kv_error)? {
        Some(v) => decode(&v).map_err(|e| StoreError::Corrupt(format!("superblock: {e}")))?,
        None => {
            return Err(StoreError::Corrupt(
                "metadata database has no superblock".into(),
            ))
        }
    };
    if db_sb != sb {
        return Err(StoreError::Corrupt(format!(
            "device belongs to store {} but the metadata database to store {}",
            sb.id(),
            db_sb.id()
        )));
    }
    if device.size() < sb.device_size {
        return Err(StoreError::Corrupt(format!(
            "device shrank from {} to {} bytes",
            sb.device_size,
            device.size()
        )));
    }
    let replay = replay_journal(device, kv, &sb)?;
    let journal = replay.end;
    let (start, end) = keys::range_of(&[keys::FREE]);
    let entries = scan_all(kv, &start, &end).map_err(kv_error)?;
    let free = load_freelist(&entries, sb.min_alloc_size, sb.data_start, sb.device_size)
        .map_err(|e| StoreError::Corrupt(format!("free list: {e}")))?;
    let nid_limit = match kv.get(keys::NID_KEY).map_err(kv_error)? {
        Some(v) => v
            .as_slice()
            .try_into()
            .map(u64::from_be_bytes)
            .map_err(|_| StoreError::Corrupt("bad object id reservation".into()))?,
        None => return Err(StoreError::Corrupt("no object id reservation".into())),
    };
    let (replayed, next_seq) = replay_deferred(device, kv, replay)?;
    let (colls, objects) = scan_collections(kv)?;
    Ok(Mounted {
        sb,
        journal,
        free,
        nid_limit,
        next_seq,
        colls,
        objects,
        replayed,
    })
}

/// A transaction's deferred writes: its sequence number and
/// `(device offset, block)` pairs.
pub(crate) type DeferredWrites = (u64, Vec<(u64, Vec<u8>)>);

/// What the journal replay leaves for the deferred replay.
struct JournalReplay {
    /// Where the journal continues.
    end: Position,
    /// The deferred records of the records from the tail on.
    deferred: Vec<DeferredWrites>,
}

/// A journal position stored under `key`.
fn position(kv: &dyn Kv, key: &[u8], sb: &Superblock) -> Result<Option<Position>, StoreError> {
    let corrupt = |e: String| StoreError::Corrupt(format!("journal: {e}"));
    let Some(v) = kv.get(key).map_err(kv_error)? else {
        return Ok(None);
    };
    let at = Position::decode(&v).ok_or_else(|| corrupt("bad position".into()))?;
    if at.offset >= sb.journal_len || at.offset % BLOCK != 0 {
        return Err(corrupt(format!(
            "position {} outside the journal",
            at.offset
        )));
    }
    Ok(Some(at))
}

/// Split a record's batch into its key-value changes and its deferred
/// records (which never go to the key-value store from a record).
fn split_record(batch: Batch) -> Result<(Batch, Vec<DeferredWrites>), String> {
    let mut kv_part = Batch::new();
    let mut deferred = Vec::new();
    for op in batch.into_ops() {
        match op {
            cairn_kv::Op::Put(k, v) if k.first() == Some(&keys::DEFERRED) => {
                let seq = keys::decode_u64_key(&k).ok_or("bad deferred record key")?;
                let writes = crate::pipeline::decode_deferred(&v)
                    .map_err(|e| format!("deferred record {seq}: {e}"))?;
                deferred.push((seq, writes));
            }
            op => kv_part.push(op),
        }
    }
    Ok((kv_part, deferred))
}

/// The store's journal records from `from` on (see [`journal::scan`]).
fn scan_journal(
    device: &dyn BlockDevice,
    sb: &Superblock,
    from: Position,
) -> Result<(journal::Records, Position), String> {
    journal::scan(
        device,
        sb.journal_id(),
        (sb.journal_start, sb.journal_len),
        from,
    )
}

/// The deferred records of the journal records from the durable tail on:
/// what a remount would apply. For fsck, on a quiet store.
pub(crate) fn journal_deferred(
    device: &dyn BlockDevice,
    kv: &dyn Kv,
    sb: &Superblock,
) -> Result<Vec<DeferredWrites>, StoreError> {
    let corrupt = |e: String| StoreError::Corrupt(format!("journal: {e}"));
    let Some(tail) = position(kv, keys::JDEF_KEY, sb)? else {
        return Ok(Vec::new());
    };
    let (records, _) = scan_journal(device, sb, tail).map_err(corrupt)?;
    let mut out = Vec::new();
    for (payload, after) in records {
        let batch = Batch::decode(&payload)
            .map_err(|e| corrupt(format!("record {}: {e}", after.seq - 1)))?;
        out.extend(split_record(batch).map_err(corrupt)?.1);
    }
    Ok(out)
}

/// Write the batches of the journal records the key-value store lacks
/// (those from its `Sjnext` on) into it, in order, and collect the
/// deferred records of those from the journal's tail (`Sjdef`, as the last
/// replayed batch recorded it) on. Returns where the journal continues.
///
/// The journal continues where the scan ended, but `WRITERS` sequence
/// numbers later: records after the first missing one may have been in
/// flight at the crash and landed (never acknowledged), and a new record
/// must never carry one of their numbers, or a later replay could take such
/// a stale record for the new one's successor. The skip is made durable
/// (with the deferred replay) before any new record is written.
fn replay_journal(
    device: &dyn BlockDevice,
    kv: &dyn Kv,
    sb: &Superblock,
) -> Result<JournalReplay, StoreError> {
    let corrupt = |e: String| StoreError::Corrupt(format!("journal: {e}"));
    let Some(next) = position(kv, keys::JOURNAL_KEY, sb)? else {
        return Err(corrupt(
            "the metadata database has no journal position".into(),
        ));
    };
    let mut tail = position(kv, keys::JDEF_KEY, sb)?.unwrap_or(next);
    let from = if tail.seq < next.seq { tail } else { next };
    let (records, end) = scan_journal(device, sb, from).map_err(corrupt)?;
    if end.seq < next.seq {
        // Every record before `Sjnext` was durable before its batch went
        // to the key-value store, and none from the tail on is reused.
        return Err(corrupt(format!(
            "records {} to {} are missing",
            end.seq,
            next.seq - 1
        )));
    }
    let mut deferred = Vec::new();
    let mut replayed = 0;
    for (payload, after) in &records {
        let seq = after.seq - 1;
        let batch = Batch::decode(payload).map_err(|e| corrupt(format!("record {seq}: {e}")))?;
        let (mut batch, writes) = split_record(batch).map_err(corrupt)?;
        deferred.push((seq, writes));
        if seq < next.seq {
            continue; // its batch is in the key-value store
        }
        for op in batch.ops() {
            if let cairn_kv::Op::Put(k, v) = op {
                if k.as_slice() == keys::JDEF_KEY {
                    let at = Position::decode(v)
                        .ok_or_else(|| corrupt(format!("record {seq}: bad tail")))?;
                    if at.seq > tail.seq {
                        tail = at;
                    }
                }
            }
        }
        batch.put(keys::JOURNAL_KEY.to_vec(), after.encode());
        kv.write(batch, false).map_err(kv_error)?;
        replayed += 1;
    }
    if replayed > 0 {
        tracing::info!(records = replayed, "replayed the commit journal");
    }
    let end = Position {
        seq: end.seq + journal::WRITERS as u64,
        ..end
    };
    Ok(JournalReplay {
        end,
        deferred: deferred
            .into_iter()
            .filter(|(record, _)| *record >= tail.seq)
            .flat_map(|(_, writes)| writes)
            .collect(),
    })
}

/// Apply the deferred writes a crash left (those of the journal's records
/// from its tail on, and those in the key-value store), in transaction
/// order, then move both journal positions to where the journal continues,
/// synced. Returns how many deferred records there were and the
/// transaction sequence number to continue from.
fn replay_deferred(
    device: &dyn BlockDevice,
    kv: &dyn Kv,
    replay: JournalReplay,
) -> Result<(u64, u64), StoreError> {
    let (start, end) = keys::range_of(&[keys::DEFERRED]);
    let stored = scan_all(kv, &start, &end).map_err(kv_error)?;
    let mut records = replay.deferred;
    let mut batch = Batch::new();
    for (key, value) in &stored {
        let seq = keys::decode_u64_key(key)
            .ok_or_else(|| StoreError::Corrupt("bad deferred record key".into()))?;
        let writes = crate::pipeline::decode_deferred(value)
            .map_err(|e| StoreError::Corrupt(format!("deferred record {seq}: {e}")))?;
        records.push((seq, writes));
        batch.delete(key.clone());
    }
    // The latest write of each block wins.
    records.sort_by_key(|(seq, _)| *seq);
    let mut latest = std::collections::BTreeMap::new();
    let mut next_seq = 1;
    for (seq, writes) in &records {
        next_seq = next_seq.max(seq + 1);
        for (phys, data) in writes {
            latest.insert(*phys, data);
        }
    }
    if !latest.is_empty() {
        let bufs = latest
            .into_iter()
            .map(|(phys, data)| (phys, AlignedBuf::from_slice(data)))
            .collect();
        block_on(device.write_many(bufs)).map_err(device_error)?;
        block_on(device.flush()).map_err(device_error)?;
        tracing::info!(records = records.len(), "replayed deferred writes");
    }
    batch.put(keys::JOURNAL_KEY.to_vec(), replay.end.encode());
    batch.put(keys::JDEF_KEY.to_vec(), replay.end.encode());
    kv.write(batch, true).map_err(kv_error)?;
    Ok((records.len() as u64, next_seq))
}

/// The collections holding anything, and the number of objects.
fn scan_collections(kv: &dyn Kv) -> Result<(BTreeSet<Collection>, u64), StoreError> {
    let mut colls = BTreeSet::new();
    let mut objects = 0u64;
    let (start, end) = keys::range_of(&[keys::ONODE]);
    let mut from = start;
    loop {
        let part = kv.scan(&from, &end, 4096).map_err(kv_error)?;
        for (key, _) in &part {
            if let Some(coll) = keys::decode_coll(&key[1..]) {
                colls.insert(coll);
            }
            objects += 1;
        }
        match part.last() {
            Some((last, _)) if part.len() == 4096 => from = cairn_kv::successor(last),
            _ => break,
        }
    }
    for prefix in [keys::LOG, keys::COLL_ATTR] {
        let (mut from, end) = keys::range_of(&[prefix]);
        // One seek per collection: jump past each one found.
        while let Some((key, _)) = kv.scan(&from, &end, 1).map_err(kv_error)?.pop() {
            let Some(coll) = keys::decode_coll(&key[1..]) else {
                break;
            };
            colls.insert(coll);
            let mut next = keys::coll_prefix(prefix, coll);
            next = cairn_kv::prefix_end(&next).unwrap_or(end.clone());
            from = next;
        }
    }
    Ok((colls, objects))
}
