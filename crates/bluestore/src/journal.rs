//! The commit journal: a ring of records in a region of the data device
//! reserved at mkfs, written with O_DIRECT.
//!
//! A commit group's whole key-value batch is appended here as one record,
//! written durably (`write_durable`: one `pwritev2(RWF_DSYNC)` on a file);
//! once it is, the batch also goes to the key-value store *unsynced*. So
//! an acknowledged commit costs one aligned durable write, not a synced
//! RocksDB write (whose WAL grows its file, so every sync also commits
//! file-system metadata). A background thread syncs the key-value store
//! now and then.
//!
//! The record also carries the group's deferred writes (`D` records: small
//! overwrites with their data); the key-value store never sees them. They
//! stay in the journal until the deferred thread has applied them to the
//! device: the oldest record holding deferred writes not applied yet is the
//! journal's *tail*, and every batch records where it is (`Sjdef`).
//!
//! Every batch also sets `Sjnext` (where the journal continues after its
//! record, and the next record's sequence number), so after a crash the
//! key-value store itself says where replay starts: mount scans records
//! from the earlier of the two positions, in sequence, writes the batches
//! of those from `Sjnext` on again, and applies the deferred writes of
//! those from the tail on (the last tail a replayed batch recorded). A
//! record's space is reused only once a key-value sync made durable both
//! its batch and a tail past it, so replay always finds the records it
//! needs.
//!
//! Record layout (little endian), at a multiple of 4 KiB, zero-padded to the
//! next one; a record that would cross the region's end goes to its start:
//!
//! | bytes | field                                                  |
//! |-------|--------------------------------------------------------|
//! | 0..4  | magic `CRBJ`                                           |
//! | 4..8  | payload length                                         |
//! | 8..16 | sequence number (consecutive, never reused)            |
//! | 16..20| crc32c of the header (this field zero) and the payload |
//! | 20..28| the store's id (low 64 bits): a record of a store made  |
//! |       | before on the same device (mkfs --force) never passes  |
//! | 28..32| zero                                                   |
//! | 32..  | payload: the encoded batch                             |
//!
//! The journal lays records out (`place_record`); the record threads
//! (`record`) write them, so the commit thread can go on to the next
//! group. A batch goes to the key-value store only once its record is
//! durable: a sync or a memtable flush could otherwise make durable a batch
//! whose deferred data (in the record only) never landed.
//!
//! Fault model: a record is durable once its write returns; a crash may
//! leave a torn record at the head, which fails its
//! crc and ends the journal. A record whose sequence number is not the one
//! expected is old (the ring overwrote around it) and also ends it.

use std::collections::VecDeque;

use cairn_device::{block_on, AlignedBuf, BlockDevice};

use crate::onode::BLOCK;

const MAGIC: u32 = 0x4a42_5243; // "CRBJ"
const HEADER: usize = 32;

/// A position in the journal: byte offset within the region and the
/// sequence number of the record expected there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    pub offset: u64,
    pub seq: u64,
}

impl Position {
    pub fn encode(self) -> Vec<u8> {
        let mut v = self.offset.to_be_bytes().to_vec();
        v.extend_from_slice(&self.seq.to_be_bytes());
        v
    }

    pub fn decode(bytes: &[u8]) -> Option<Position> {
        let offset = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
        let seq = u64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
        Some(Position { offset, seq })
    }
}

/// Records unacknowledged (maybe not durable) at once, at most: each takes
/// one record thread (see `record`).
pub(crate) const WRITERS: usize = 2;

/// A record laid out in the journal, to be written durably by the caller.
pub(crate) struct Record {
    /// Its device offset.
    pub offset: u64,
    pub bytes: AlignedBuf,
}

impl Record {
    /// Write the record durably.
    pub fn write(self, device: &dyn BlockDevice) -> Result<(), String> {
        device
            .write_durable(self.offset, self.bytes)
            .map_err(|e| format!("journal write failed: {e}"))
    }
}

/// The journal as the commit thread writes it.
pub(crate) struct Journal {
    /// The store's id, in every record.
    id: u64,
    /// The region on the device.
    start: u64,
    len: u64,
    /// Where the next record goes.
    head: Position,
    /// Live records, oldest first: (sequence number, bytes they hold,
    /// including a skipped tail of the region before them).
    live: VecDeque<(u64, u64)>,
    used: u64,
}

/// Bytes a record of `payload` bytes takes.
fn record_len(payload: usize) -> u64 {
    ((HEADER + payload) as u64).div_ceil(BLOCK) * BLOCK
}

impl Journal {
    /// A journal over `[start, start + len)` continuing at `head`, with no
    /// live records (everything before `head` is durable elsewhere).
    pub fn new(id: u64, (start, len): (u64, u64), head: Position) -> Self {
        assert!(
            head.offset < len && head.offset % BLOCK == 0,
            "bad journal head"
        );
        Self {
            id,
            start,
            len,
            head,
            live: VecDeque::new(),
            used: 0,
        }
    }

    /// The largest payload a record can carry.
    pub fn max_payload(&self) -> usize {
        (self.len / 4) as usize - HEADER
    }

    /// Whether a record of `payload` bytes fits now without dropping live
    /// records, and how full the journal would then be (0 to 1).
    pub fn room(&self, payload: usize) -> (bool, f64) {
        let n = record_len(payload);
        let skip = if self.head.offset + n > self.len {
            self.len - self.head.offset
        } else {
            0
        };
        let after = self.used + skip + n;
        (after <= self.len, after as f64 / self.len as f64)
    }

    /// Where the next record goes.
    pub fn head(&self) -> Position {
        self.head
    }

    /// The sequence number the next record gets.
    pub fn next_seq(&self) -> u64 {
        self.head.seq
    }

    /// Write one record to `device`, durably (the caller's earlier writes
    /// are not made durable by it), and return the position after it.
    #[cfg(test)]
    pub fn append(&mut self, device: &dyn BlockDevice, payload: &[u8]) -> Result<Position, String> {
        let (after, record) = self.place_record(payload);
        record.write(device)?;
        Ok(after)
    }

    /// Lay out the next record, to be written by the caller, and return
    /// the position after it. Up to `WRITERS` records may be written at
    /// once; the caller must keep no more than that unacknowledged (see
    /// `mount::replay_journal`).
    pub fn place_record(&mut self, payload: &[u8]) -> (Position, Record) {
        let (offset, bytes) = self.place(payload);
        (self.head, Record { offset, bytes })
    }

    /// Lay out the next record: its device offset and bytes. The journal
    /// counts it as written from here on.
    fn place(&mut self, payload: &[u8]) -> (u64, AlignedBuf) {
        let n = record_len(payload.len());
        assert!(self.room(payload.len()).0, "journal record does not fit");
        let mut skip = 0;
        if self.head.offset + n > self.len {
            skip = self.len - self.head.offset;
            self.head.offset = 0;
        }
        let mut header = [0u8; HEADER];
        header[..4].copy_from_slice(&MAGIC.to_le_bytes());
        header[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        header[8..16].copy_from_slice(&self.head.seq.to_le_bytes());
        header[20..28].copy_from_slice(&self.id.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&header), payload);
        header[16..20].copy_from_slice(&crc.to_le_bytes());
        let buf = AlignedBuf::concat(&[&header, payload]);
        assert_eq!(buf.len() as u64, n, "journal record length");
        let offset = self.start + self.head.offset;
        self.live.push_back((self.head.seq, skip + n));
        self.used += skip + n;
        self.head = Position {
            offset: (self.head.offset + n) % self.len,
            seq: self.head.seq + 1,
        };
        (offset, buf)
    }

    /// Records up to `seq` are durable in the key-value store: drop them.
    pub fn retire(&mut self, seq: u64) {
        while let Some(&(s, bytes)) = self.live.front() {
            if s > seq {
                break;
            }
            self.live.pop_front();
            self.used -= bytes;
        }
    }
}

/// Records read back: each payload with the position after it.
pub(crate) type Records = Vec<(Vec<u8>, Position)>;

/// Read the records from `from` on, in sequence, until one is missing.
/// Returns each payload with the position after it, and where the journal
/// ends.
pub(crate) fn scan(
    device: &dyn BlockDevice,
    id: u64,
    (start, len): (u64, u64),
    from: Position,
) -> Result<(Records, Position), String> {
    let mut at = from;
    let mut out = Vec::new();
    loop {
        let found = read_record(device, id, (start, len), at)?.or(if at.offset != 0 {
            read_record(device, id, (start, len), Position { offset: 0, ..at })?
        } else {
            None
        });
        let Some((payload, next)) = found else {
            return Ok((out, at));
        };
        out.push((payload, next));
        at = next;
        if out.len() as u64 > len / BLOCK {
            return Err("journal does not end".into());
        }
    }
}

/// The record at `at` if it is valid and carries `at.seq`.
fn read_record(
    device: &dyn BlockDevice,
    id: u64,
    (start, len): (u64, u64),
    at: Position,
) -> Result<Option<(Vec<u8>, Position)>, String> {
    let read = |offset: u64, n: u64| {
        block_on(device.read(start + offset, n)).map_err(|e| format!("journal read failed: {e}"))
    };
    let first = read(at.offset, BLOCK)?;
    let word = |i: usize| u32::from_le_bytes([first[i], first[i + 1], first[i + 2], first[i + 3]]);
    let seq = u64::from_le_bytes(first[8..16].try_into().unwrap_or_default());
    let owner = u64::from_le_bytes(first[20..28].try_into().unwrap_or_default());
    if word(0) != MAGIC || seq != at.seq || owner != id {
        return Ok(None);
    }
    let payload_len = word(4) as usize;
    let n = record_len(payload_len);
    if at.offset + n > len {
        return Ok(None);
    }
    let whole = if n > BLOCK {
        read(at.offset, n)?
    } else {
        first
    };
    let mut header = whole[..HEADER].to_vec();
    let crc = u32::from_le_bytes([header[16], header[17], header[18], header[19]]);
    header[16..20].fill(0);
    let payload = &whole[HEADER..HEADER + payload_len];
    let mut hasher = crc32c::crc32c(&header);
    hasher = crc32c::crc32c_append(hasher, payload);
    if hasher != crc {
        return Ok(None);
    }
    let next = Position {
        offset: (at.offset + n) % len,
        seq: at.seq + 1,
    };
    Ok(Some((payload.to_vec(), next)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_device::MemDevice;
    use std::sync::Arc;

    const LEN: u64 = 64 * BLOCK;

    fn journal() -> (Arc<MemDevice>, Journal) {
        let dev = Arc::new(MemDevice::new(LEN + 8 * BLOCK));
        let j = Journal::new(7, (4 * BLOCK, LEN), Position { offset: 0, seq: 1 });
        (dev, j)
    }

    #[test]
    fn records_scan_back_in_order_across_the_wrap() {
        let (dev, mut j) = journal();
        let mut expected = Vec::new();
        let mut from = Position { offset: 0, seq: 1 };
        for i in 0..40u64 {
            let payload = vec![i as u8; (i as usize * 997) % 9000 + 1];
            if !j.room(payload.len()).0 {
                j.retire(j.next_seq() - 1);
                from = Position {
                    offset: j.head.offset,
                    seq: j.head.seq,
                };
                expected.clear();
            }
            j.append(dev.as_ref(), &payload).unwrap();
            expected.push(payload);
        }
        let (got, end) = scan(dev.as_ref(), 7, (4 * BLOCK, LEN), from).unwrap();
        let got: Vec<Vec<u8>> = got.into_iter().map(|(p, _)| p).collect();
        assert_eq!(got, expected);
        assert_eq!(end, j.head);
    }

    #[test]
    fn a_torn_or_stale_record_ends_the_journal() {
        let (dev, mut j) = journal();
        for i in 0..3u8 {
            j.append(dev.as_ref(), &[i; 100]).unwrap();
        }
        // Tear the third record: its crc fails.
        let third = 4 * BLOCK + 2 * BLOCK;
        let mut block = dev.read_sync(third, BLOCK).unwrap().to_vec();
        block[HEADER + 10] ^= 0xff;
        dev.write_sync(third, &block).unwrap();
        let (got, end) = scan(
            dev.as_ref(),
            7,
            (4 * BLOCK, LEN),
            Position { offset: 0, seq: 1 },
        )
        .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(end.seq, 3);
        // Scanning from a later sequence finds nothing (stale records).
        let (got, _) = scan(
            dev.as_ref(),
            7,
            (4 * BLOCK, LEN),
            Position { offset: 0, seq: 9 },
        )
        .unwrap();
        assert!(got.is_empty());
        // Another store's records (same place, same sequence) never pass.
        let (got, _) = scan(
            dev.as_ref(),
            8,
            (4 * BLOCK, LEN),
            Position { offset: 0, seq: 1 },
        )
        .unwrap();
        assert!(got.is_empty());
    }

    /// Records are written `WRITERS` at a time, so a crash can leave a
    /// later record landed after a missing one. Continuing with the missing
    /// one's sequence number would let a later scan take the stale record
    /// for the new one's successor; continuing `WRITERS` numbers on (as
    /// mount does) never can.
    #[test]
    fn a_record_landed_after_a_missing_one_is_never_replayed() {
        let (dev, mut j) = journal();
        let from = Position { offset: 0, seq: 1 };
        for i in 1..=3u8 {
            j.append(dev.as_ref(), &[i; 100]).unwrap();
        }
        // Record 2 never landed (zeroed); record 3 did.
        dev.write_sync(4 * BLOCK + BLOCK, &vec![0u8; BLOCK as usize])
            .unwrap();
        let (got, end) = scan(dev.as_ref(), 7, (4 * BLOCK, LEN), from).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            end,
            Position {
                offset: BLOCK,
                seq: 2
            }
        );

        for (skip, stale_replayed) in [(0, true), (WRITERS as u64, false)] {
            let head = Position {
                seq: end.seq + skip,
                ..end
            };
            let mut again = Journal::new(7, (4 * BLOCK, LEN), head);
            // A new record the same size as the lost one.
            again.append(dev.as_ref(), &[9; 100]).unwrap();
            let (got, _) = scan(dev.as_ref(), 7, (4 * BLOCK, LEN), head).unwrap();
            let payloads: Vec<u8> = got.iter().map(|(p, _)| p[0]).collect();
            if stale_replayed {
                assert_eq!(payloads, vec![9, 3], "the hazard the skip avoids");
            } else {
                assert_eq!(payloads, vec![9], "the stale record is not replayed");
            }
        }
    }
}
