//! The write-ahead journal: one append-only file of batch records.
//!
//! Record layout (little endian), one record per group commit:
//!
//! ```text
//! magic u32 | count u32 | len u64 | first_seq u64 | nonce u64 | crc u32 | pad u32
//! payload: `count` bincode-encoded transactions, `len` bytes
//! ```
//!
//! `crc` is crc32c over the header (with `crc` zeroed) and the payload. The
//! transactions of a record have sequence numbers `first_seq..first_seq+count`.
//! `nonce` names the journal generation: it is chosen at every reset and
//! recorded in the metadata snapshot, so records of an older generation (a
//! reset that did not reach the disk) or copies of records inside object data
//! never count as valid.
//!
//! Fault model: a record is durable once the `fdatasync` after its write
//! returns. A crash can leave at most one torn record at the tail (the batch
//! being written), since the next batch is written only after the previous
//! sync. So on scan, an invalid record with no valid record after it is a torn
//! tail, cut off; an invalid record followed by a valid one is corruption.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::FaultInjection;
use crate::{StoreError, Transaction};

const MAGIC: u32 = 0x4a4e_5243; // "CRNJ"
pub(super) const HEADER: usize = 40;

/// A batch encoded as one record, ready to append.
pub(super) struct Record {
    pub buf: Vec<u8>,
    pub first_seq: u64,
    pub count: u32,
}

/// Start a record; add transactions with [`Record::push`], then [`Record::seal`].
pub(super) fn begin(first_seq: u64, capacity: usize) -> Record {
    let mut buf = Vec::with_capacity(HEADER + capacity);
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
    /// Offset just past the last valid record; bytes after it are a torn tail.
    pub good_end: u64,
}

struct Header {
    count: u32,
    len: u64,
    first_seq: u64,
    nonce: u64,
    crc: u32,
}

fn parse_header(h: &[u8]) -> Option<Header> {
    let u32_at = |i: usize| {
        h.get(i..i + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |i: usize| {
        h.get(i..i + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if u32_at(0)? != MAGIC {
        return None;
    }
    Some(Header {
        count: u32_at(4)?,
        len: u64_at(8)?,
        first_seq: u64_at(16)?,
        nonce: u64_at(24)?,
        crc: u32_at(32)?,
    })
}

/// The record at `pos` if it is whole, of generation `nonce`, and its crc matches.
fn valid_at(data: &[u8], pos: usize, nonce: u64) -> Option<(Header, &[u8])> {
    let header = parse_header(data.get(pos..pos + HEADER)?)?;
    if header.nonce != nonce {
        return None;
    }
    let end = pos
        .checked_add(HEADER)?
        .checked_add(usize::try_from(header.len).ok()?)?;
    let record = data.get(pos..end)?;
    let mut crc = crc32c::crc32c(&record[..32]);
    crc = crc32c::crc32c_append(crc, &[0u8; 8]);
    crc = crc32c::crc32c_append(crc, &record[HEADER..]);
    (crc == header.crc).then_some((header, &record[HEADER..]))
}

/// Read and check the whole journal of generation `nonce`.
pub(super) fn scan(file: &File, nonce: u64) -> Result<Scan, StoreError> {
    let size = file.metadata()?.len();
    let mut data =
        vec![0u8; usize::try_from(size).map_err(|_| io::Error::other("journal too big"))?];
    file.read_exact_at(&mut data, 0)?;
    let mut pos = 0usize;
    let mut records = Vec::new();
    let mut next_seq: Option<u64> = None;
    while pos < data.len() {
        let Some((header, payload)) = valid_at(&data, pos, nonce) else {
            // Torn tail, unless a valid record follows somewhere after it.
            if let Some(at) = (pos + 1..data.len()).find(|&p| valid_at(&data, p, nonce).is_some()) {
                return Err(StoreError::Corrupt(format!(
                    "journal record at offset {pos} is damaged but a valid record follows at {at}"
                )));
            }
            break;
        };
        if let Some(expected) = next_seq {
            if header.first_seq != expected {
                return Err(StoreError::Corrupt(format!(
                    "journal sequence jumps from {expected} to {} at offset {pos}",
                    header.first_seq
                )));
            }
        }
        let mut reader = payload;
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
        pos += HEADER + payload.len();
    }
    Ok(Scan {
        records,
        good_end: pos as u64,
    })
}

/// The journal file being appended to, owned by the committer thread.
pub(super) struct Journal {
    pub file: File,
    /// Bytes of valid records; appends go here.
    pub len: u64,
    pub nonce: u64,
    pub faults: Option<Arc<FaultInjection>>,
}

impl Journal {
    /// Append a sealed record and make it durable. On a write error the file
    /// is cut back to its previous length so the journal stays a clean
    /// sequence of records; the error says whether that worked.
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
            return Err(match self.file.set_len(self.len) {
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
        Ok(())
    }

    /// Empty the journal and start generation `nonce`. Call only once a
    /// snapshot that names `nonce` is durable.
    pub fn reset(&mut self, nonce: u64) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.sync_all()?;
        self.len = 0;
        self.nonce = nonce;
        Ok(())
    }
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

    fn journal_with(records: &[(u64, u8)]) -> (tempfile::TempDir, File) {
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
            len: 0,
            nonce: 7,
            faults: None,
        };
        for (seq, i) in records {
            let mut r = begin(*seq, 0);
            r.push(&txn(*i)).unwrap_or_else(|e| panic!("{e}"));
            r.seal(7);
            j.append(&r.buf).unwrap_or_else(|e| panic!("{e:?}"));
        }
        (dir, j.file)
    }

    #[test]
    fn torn_tail_is_cut_but_damage_before_a_good_record_is_corruption() {
        let (_dir, file) = journal_with(&[(1, 1), (2, 2), (3, 3)]);
        let scan = scan(&file, 7).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(scan.records.len(), 3);
        let full = scan.good_end;
        // Torn tail: cut the last record short.
        file.set_len(full - 10).unwrap_or_else(|e| panic!("{e}"));
        let s = super::scan(&file, 7).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.records.len(), 2);
        assert!(s.good_end < full - 10);
        // Wrong generation: nothing valid, nothing corrupt.
        assert_eq!(super::scan(&file, 8).map(|s| s.records.len()).ok(), Some(0));
        // Damage in the first record with good ones after it.
        let (_dir, file) = journal_with(&[(1, 1), (2, 2), (3, 3)]);
        file.write_all_at(&[0xff], 50)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(super::scan(&file, 7), Err(StoreError::Corrupt(_))));
        // A sequence gap is corruption too.
        let (_dir, file) = journal_with(&[(1, 1), (3, 3)]);
        assert!(matches!(super::scan(&file, 7), Err(StoreError::Corrupt(_))));
    }
}
