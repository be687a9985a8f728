//! The write-ahead journal: two files of batch records used in turn
//! ("ping-pong"), each rewritten in place from its start.
//!
//! Record layout (little endian), one record per group commit, starting at a
//! multiple of [`ALIGN`] and zero-padded to the next one:
//!
//! ```text
//! magic u32 | count u32 | len u64 | first_seq u64 | nonce u64 | crc u32 | pad u32
//! payload: `count` bincode-encoded transactions, `len` bytes
//! ```
//!
//! `crc` is crc32c over the header (with `crc` zeroed) and the payload. The
//! transactions of a record have sequence numbers `first_seq..first_seq+count`.
//!
//! `nonce` names the journal generation. Generations are numbered
//! consecutively (from a random start) and alternate between the two files,
//! [`FILES`]`[0]` and [`FILES`]`[1]`. The metadata snapshot names the
//! generation `n` (and its file) that continues after its sequence number;
//! the live records are those of generation `n` in that file followed by
//! those of `n + 1` in the other one. Everything else in the files is dead,
//! so a generation starts by overwriting its file in place, without
//! truncating it: once a file has reached its working size, an `fdatasync`
//! flushes data only, with no file-size change to commit. Alignment keeps a
//! record from sharing a page with an earlier, already acknowledged record.
//! A generation number is never used twice (the committer only moves
//! forward), so a dead record can never pass for a live one.
//!
//! Fault model: a record is durable once the `fdatasync` after its write
//! returns. A crash can leave at most one torn record (the batch being
//! written), because the next batch is written only after the previous sync,
//! and the committer moves to the next generation only between batches.
//! So on scan, an invalid record with no valid record of the generation
//! after it ends that generation (a torn batch or dead older records); an
//! invalid record followed by a valid one is corruption, and so is a gap in
//! the sequence numbers, within a file or from one generation to the next.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::FaultInjection;
use crate::{StoreError, Transaction};

const MAGIC: u32 = 0x4a4e_5243; // "CRNJ"
const HEADER: usize = 40;
/// Records start at multiples of this.
pub(super) const ALIGN: u64 = 4096;
/// Number of journal files.
pub(super) const JOURNALS: usize = 2;
/// The journal files' names in the store directory, by slot.
pub(super) const FILES: [&str; JOURNALS] = ["journal", "journal.1"];

/// The generation after `nonce`.
pub(super) fn next_nonce(nonce: u64) -> u64 {
    nonce.wrapping_add(1)
}

fn padded(len: u64) -> u64 {
    len.div_ceil(ALIGN) * ALIGN
}

/// A batch encoded as one record, ready to append.
pub(super) struct Record {
    pub buf: Vec<u8>,
    pub first_seq: u64,
    pub count: u32,
}

/// Start a record; add transactions with [`Record::push`], then [`Record::seal`].
pub(super) fn begin(first_seq: u64, capacity: usize) -> Record {
    let mut buf = Vec::with_capacity(padded((HEADER + capacity) as u64) as usize);
    buf.resize(HEADER, 0);
    Record {
        buf,
        first_seq,
        count: 0,
    }
}

impl Record {
    /// Add a transaction; on failure the record is left unchanged.
    pub fn push(&mut self, txn: &Transaction) -> Result<(), StoreError> {
        let before = self.buf.len();
        bincode::serialize_into(&mut self.buf, txn).map_err(|e| {
            self.buf.truncate(before);
            StoreError::Invalid(format!("cannot encode transaction: {e}"))
        })?;
        self.count += 1;
        Ok(())
    }

    /// Fill in the header and pad to [`ALIGN`].
    pub fn seal(&mut self, nonce: u64) {
        let len = (self.buf.len() - HEADER) as u64;
        let h = &mut self.buf[..HEADER];
        h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        h[4..8].copy_from_slice(&self.count.to_le_bytes());
        h[8..16].copy_from_slice(&len.to_le_bytes());
        h[16..24].copy_from_slice(&self.first_seq.to_le_bytes());
        h[24..32].copy_from_slice(&nonce.to_le_bytes());
        h[32..40].fill(0);
        let crc = crc32c::crc32c(&self.buf);
        self.buf[32..36].copy_from_slice(&crc.to_le_bytes());
        self.buf.resize(padded(self.buf.len() as u64) as usize, 0);
    }
}

/// A valid record found by [`scan`].
pub(super) struct Found {
    pub first_seq: u64,
    pub txns: Vec<Transaction>,
}

/// The outcome of scanning a journal file.
pub(super) struct Scan {
    pub records: Vec<Found>,
    /// Offset just past the last valid record: where appends continue.
    pub end: u64,
    /// The file's length.
    pub file_len: u64,
}

struct Header {
    count: u32,
    len: u64,
    first_seq: u64,
}

/// The record at `pos` if it is whole, of generation `nonce`, and its crc
/// matches: its header and payload.
fn record_at(
    file: &File,
    pos: u64,
    file_len: u64,
    nonce: u64,
) -> io::Result<Option<(Header, Vec<u8>)>> {
    if pos + HEADER as u64 > file_len {
        return Ok(None);
    }
    let mut h = [0u8; HEADER];
    file.read_exact_at(&mut h, pos)?;
    let word = |i: usize| {
        u64::from_le_bytes([
            h[i],
            h[i + 1],
            h[i + 2],
            h[i + 3],
            h[i + 4],
            h[i + 5],
            h[i + 6],
            h[i + 7],
        ])
    };
    let half = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let header = Header {
        count: half(4),
        len: word(8),
        first_seq: word(16),
    };
    if half(0) != MAGIC || word(24) != nonce || header.len > file_len - pos - HEADER as u64 {
        return Ok(None);
    }
    let mut payload = vec![0u8; header.len as usize];
    file.read_exact_at(&mut payload, pos + HEADER as u64)?;
    let stored_crc = half(32);
    h[32..40].fill(0);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&h), &payload);
    Ok((crc == stored_crc).then_some((header, payload)))
}

/// Read and check the journal of generation `nonce`.
pub(super) fn scan(file: &File, nonce: u64) -> Result<Scan, StoreError> {
    let file_len = file.metadata()?.len();
    let mut pos = 0u64;
    let mut records = Vec::new();
    let mut next_seq: Option<u64> = None;
    loop {
        let Some((header, payload)) = record_at(file, pos, file_len, nonce)? else {
            // The end, unless a valid record of this generation follows.
            let mut at = pos + ALIGN;
            while at < file_len {
                if record_at(file, at, file_len, nonce)?.is_some() {
                    return Err(StoreError::Corrupt(format!(
                        "journal record at offset {pos} is damaged but a valid record follows at {at}"
                    )));
                }
                at += ALIGN;
            }
            break;
        };
        if next_seq.is_some_and(|expected| header.first_seq != expected) {
            return Err(StoreError::Corrupt(format!(
                "journal sequence jumps to {} at offset {pos}",
                header.first_seq
            )));
        }
        let mut reader = &payload[..];
        let mut txns = Vec::with_capacity(header.count as usize);
        for _ in 0..header.count {
            let txn: Transaction = bincode::deserialize_from(&mut reader).map_err(|e| {
                StoreError::Corrupt(format!(
                    "journal record at offset {pos} does not decode: {e}"
                ))
            })?;
            txns.push(txn);
        }
        if !reader.is_empty() {
            return Err(StoreError::Corrupt(format!(
                "journal record at offset {pos} has trailing bytes"
            )));
        }
        next_seq = Some(header.first_seq + u64::from(header.count));
        records.push(Found {
            first_seq: header.first_seq,
            txns,
        });
        pos += padded(HEADER as u64 + header.len);
    }
    Ok(Scan {
        records,
        end: pos,
        file_len,
    })
}

/// One journal file, owned by the committer thread.
pub(super) struct Journal {
    pub file: File,
    /// Which of the [`FILES`] this is.
    pub slot: usize,
    /// End of the valid records of this generation; appends go here.
    pub len: u64,
    /// The file's length (records of dead generations may lie past `len`).
    pub file_len: u64,
    pub nonce: u64,
    pub faults: Option<Arc<FaultInjection>>,
}

impl Journal {
    /// Write a sealed record and make it durable. If the write fails, a file
    /// extension it made is cut back so the journal stays a clean sequence
    /// of records; the error says whether that worked.
    pub fn append(&mut self, record: &[u8]) -> Result<(), AppendError> {
        let faults = self.faults.as_deref();
        let written = if faults.is_some_and(FaultInjection::take_journal_enospc) {
            // Simulate a full filesystem: half the record lands, then ENOSPC.
            self.file
                .write_all_at(&record[..record.len() / 2], self.len)
                .and(Err(io::Error::from_raw_os_error(libc::ENOSPC)))
        } else {
            self.file.write_all_at(record, self.len)
        };
        if let Err(e) = written {
            return Err(match self.file.set_len(self.file_len) {
                Ok(()) => AppendError::Write(e),
                Err(cut) => AppendError::Sync(io::Error::other(format!(
                    "{e}; then cutting the journal back failed: {cut}"
                ))),
            });
        }
        if faults.is_some_and(FaultInjection::take_sync_failure) {
            return Err(AppendError::Sync(io::Error::from_raw_os_error(libc::EIO)));
        }
        self.file.sync_data().map_err(AppendError::Sync)?;
        self.len += record.len() as u64;
        self.file_len = self.file_len.max(self.len);
        Ok(())
    }

    /// Start generation `nonce` at the beginning of the file. Call only once
    /// the records in this file are dead: a durable snapshot names `nonce`
    /// or the generation before it (in the other file). A file grown far
    /// past `keep` is shortened.
    pub fn reset(&mut self, nonce: u64, keep: u64) -> io::Result<()> {
        self.len = 0;
        self.nonce = nonce;
        if self.file_len > keep.saturating_mul(2) {
            self.file.set_len(0)?;
            self.file_len = 0;
        }
        Ok(())
    }
}

/// The journals of a store as found by [`open`].
pub(super) struct Opened {
    /// The generation the snapshot names, positioned after its last record.
    pub active: Journal,
    /// The other file.
    pub spare: Journal,
    /// The live records in sequence order: the snapshot's generation, then
    /// the next one.
    pub records: Vec<Found>,
    /// How many of the two generations have records.
    pub live: u64,
}

/// Open (creating if need be) and scan both journal files of the store in
/// `dir`, whose snapshot names generation `nonce` in file `slot`.
pub(super) fn open(
    dir: &Path,
    nonce: u64,
    slot: usize,
    faults: Option<Arc<FaultInjection>>,
) -> Result<Opened, StoreError> {
    let load = |slot: usize, nonce: u64| -> Result<(Journal, Vec<Found>), StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(FILES[slot]))?;
        let scan = scan(&file, nonce)?;
        tracing::debug!(
            dir = %dir.display(),
            file = FILES[slot],
            records = scan.records.len(),
            end = scan.end,
            file_len = scan.file_len,
            "scanned a journal"
        );
        let journal = Journal {
            file,
            slot,
            len: scan.end,
            file_len: scan.file_len,
            nonce,
            faults: faults.clone(),
        };
        Ok((journal, scan.records))
    };
    let (active, mut records) = load(slot, nonce)?;
    let (spare, next) = load(1 - slot, next_nonce(nonce))?;
    let live = u64::from(!records.is_empty()) + u64::from(!next.is_empty());
    records.extend(next);
    Ok(Opened {
        active,
        spare,
        records,
        live,
    })
}

/// Why an append failed.
#[derive(Debug)]
pub(super) enum AppendError {
    /// The write failed and the journal was cut back: nothing was appended.
    Write(io::Error),
    /// The sync (or the cut-back) failed: the journal's state is unknown.
    Sync(io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ObjectId, PgId};
    use bytes::Bytes;

    fn txn(i: u8) -> Transaction {
        let mut t = Transaction::new();
        t.write(
            &ObjectId::new(PgId::new(1, 0), "o"),
            0,
            Bytes::from(vec![i; 100]),
        );
        t
    }

    fn append(j: &mut Journal, seq: u64, nonce: u64) {
        let mut r = begin(seq, 0);
        r.push(&txn(seq as u8)).unwrap_or_else(|e| panic!("{e}"));
        r.seal(nonce);
        j.append(&r.buf).unwrap_or_else(|e| panic!("{e:?}"));
    }

    fn journal_with(seqs: &[u64]) -> (tempfile::TempDir, Journal) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("j"))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut j = Journal {
            file,
            slot: 0,
            len: 0,
            file_len: 0,
            nonce: 7,
            faults: None,
        };
        for seq in seqs {
            append(&mut j, *seq, 7);
        }
        (dir, j)
    }

    fn scan_ok(j: &Journal, nonce: u64) -> Scan {
        scan(&j.file, nonce).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn torn_tail_ends_the_journal_but_damage_before_a_good_record_is_corruption() {
        let (_dir, j) = journal_with(&[1, 2, 3]);
        let s = scan_ok(&j, 7);
        assert_eq!((s.records.len(), s.end), (3, 3 * ALIGN));
        // Torn tail: the last record loses most of its payload.
        j.file
            .set_len(2 * ALIGN + 60)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(scan_ok(&j, 7).records.len(), 2);
        assert_eq!(scan_ok(&j, 7).end, 2 * ALIGN);
        // Another generation: nothing valid, nothing corrupt.
        assert_eq!(scan_ok(&j, 8).records.len(), 0);
        // Damage in the first record with good ones after it.
        let (_dir, j) = journal_with(&[1, 2, 3]);
        j.file
            .write_all_at(&[0xff], 50)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(scan(&j.file, 7), Err(StoreError::Corrupt(_))));
        // A sequence gap is corruption too.
        let (_dir, j) = journal_with(&[1, 3]);
        assert!(matches!(scan(&j.file, 7), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn a_reset_journal_overwrites_dead_records_in_place() {
        let (_dir, mut j) = journal_with(&[1, 2, 3, 4]);
        j.reset(9, 1 << 20).unwrap_or_else(|e| panic!("{e}"));
        append(&mut j, 5, 9);
        assert_eq!(j.file_len, 4 * ALIGN, "file kept its size");
        let s = scan_ok(&j, 9);
        assert_eq!(s.records.len(), 1);
        assert_eq!(s.records[0].first_seq, 5);
        assert_eq!(s.end, ALIGN);
        j.reset(10, 100).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(j.file_len, 0, "oversized file shortened");
    }
}
