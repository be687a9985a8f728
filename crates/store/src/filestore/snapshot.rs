//! The metadata snapshot: every object's size, attributes and omap, and every
//! collection's log and attributes, as of journal sequence `seq`.
//!
//! File `DIR/meta`, replaced atomically (write `meta.tmp`, fsync, rename,
//! fsync the directory), so a crash leaves either the old or the new snapshot.
//! Layout (little endian): `magic u64 | seq u64 | nonce u64 | len u64 | crc
//! u32 | slot u32 | payload`, where the payload is the bincode-encoded metadata
//! and `crc` is crc32c over the header (crc zeroed) and payload. `nonce` is
//! the generation of the journal that continues after `seq` and `slot` the
//! journal file that holds it (0 in snapshots written before there were two
//! journal files, whose one journal was slot 0's file). The generation after
//! it, `nonce + 1`, lives in the other file (see `journal`).
//!
//! Fault model: a snapshot that fails its checks cannot be a torn write (the
//! rename is atomic), so it is reported as corruption.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::meta::Meta;
use crate::{Result, StoreError};

use super::journal::JOURNALS;
use super::objects::sync_dir;

const MAGIC: u64 = 0x3150_414e_5345_5243; // "CRESNAP1"
const HEADER: usize = 40;
pub(super) const FILE: &str = "meta";
const TMP: &str = "meta.tmp";

/// A loaded snapshot.
pub(super) struct Snapshot {
    pub seq: u64,
    pub nonce: u64,
    pub slot: usize,
    pub meta: Meta,
}

/// Encode `meta`, the metadata as of sequence `seq`, as a snapshot image
/// naming generation `nonce` in journal file `slot` as the continuation.
pub(super) fn encode(meta: &Meta, seq: u64, nonce: u64, slot: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; HEADER];
    bincode::serialize_into(&mut buf, meta)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode metadata: {e}")))?;
    let len = (buf.len() - HEADER) as u64;
    buf[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    buf[16..24].copy_from_slice(&nonce.to_le_bytes());
    buf[24..32].copy_from_slice(&len.to_le_bytes());
    buf[36..40].copy_from_slice(&(slot as u32).to_le_bytes());
    let crc = crc32c::crc32c(&buf);
    buf[32..36].copy_from_slice(&crc.to_le_bytes());
    Ok(buf)
}

/// Durably replace the snapshot in `dir` with `image`.
pub(super) fn write(dir: &Path, image: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(TMP);
    let mut file = File::create(&tmp)?;
    file.write_all(image)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, dir.join(FILE))?;
    sync_dir(dir)
}

/// Load the snapshot of `dir`; `Ok(None)` if there is none.
pub(super) fn load(dir: &Path) -> Result<Option<Snapshot>> {
    let _ = std::fs::remove_file(dir.join(TMP));
    let mut buf = match std::fs::read(dir.join(FILE)) {
        Ok(buf) => buf,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let corrupt = |what: &str| StoreError::Corrupt(format!("metadata snapshot: {what}"));
    if buf.len() < HEADER {
        return Err(corrupt("too short"));
    }
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let (magic, seq, nonce, len) = (word(0), word(8), word(16), word(24));
    let crc = u32::from_le_bytes([buf[32], buf[33], buf[34], buf[35]]);
    let slot = u32::from_le_bytes([buf[36], buf[37], buf[38], buf[39]]) as usize;
    if magic != MAGIC {
        return Err(corrupt("bad magic"));
    }
    if len != (buf.len() - HEADER) as u64 {
        return Err(corrupt("wrong length"));
    }
    buf[32..36].fill(0);
    if crc32c::crc32c(&buf) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    let mut meta: Meta = bincode::deserialize(&buf[HEADER..])
        .map_err(|e| corrupt(&format!("does not decode: {e}")))?;
    if slot >= JOURNALS {
        return Err(corrupt("bad journal slot"));
    }
    meta.recount();
    Ok(Some(Snapshot {
        seq,
        nonce,
        slot,
        meta,
    }))
}
