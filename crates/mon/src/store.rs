//! The monitor's durable store: an append-only log of cluster maps.
//!
//! | field   | size | meaning                               |
//! |---------|------|---------------------------------------|
//! | length  | 4    | payload bytes, little-endian          |
//! | crc     | 4    | crc32c of the payload                 |
//! | payload | n    | one whole [`ClusterMap`] in bincode   |
//!
//! Each record is fsynced before the map it holds is published, so no daemon
//! ever sees an epoch the monitor could forget. At open, a torn tail (short or
//! bad-crc last record, from a crash mid-append) is cut off; the last good
//! record is the current map. When the log grows past a bound it is rewritten
//! holding only the current map (temp file, fsync, rename, fsync directory).
//! A later Raft-replicated store replaces this file, not the map model.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use cairn_map::ClusterMap;

const LOG_NAME: &str = "maps.log";
const COMPACT_BYTES: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum MonStoreError {
    #[error("monitor store {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("monitor store {path}: corrupt record at byte {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

pub struct MapStore {
    dir: PathBuf,
    file: File,
    len: u64,
}

impl MapStore {
    /// Open (creating if needed) the store in `dir`; returns the newest map, if any.
    pub fn open(dir: &Path) -> Result<(Self, Option<ClusterMap>), MonStoreError> {
        let path = dir.join(LOG_NAME);
        let io = |source| MonStoreError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let (latest, good_len) = scan(&bytes, &path)?;
        if good_len < bytes.len() as u64 {
            tracing::warn!(
                "{}: dropping {} bytes of torn tail",
                path.display(),
                bytes.len() as u64 - good_len
            );
            file.set_len(good_len).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        Ok((
            Self {
                dir: dir.to_path_buf(),
                file,
                len: good_len,
            },
            latest,
        ))
    }

    /// Durably record `map` as the newest.
    pub fn append(&mut self, map: &ClusterMap) -> Result<(), MonStoreError> {
        let path = self.dir.join(LOG_NAME);
        let io = |source| MonStoreError::Io {
            path: path.clone(),
            source,
        };
        if self.len > COMPACT_BYTES {
            return self.rewrite(map);
        }
        let record = encode_record(map);
        self.file.write_all(&record).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.len += record.len() as u64;
        Ok(())
    }

    fn rewrite(&mut self, map: &ClusterMap) -> Result<(), MonStoreError> {
        let path = self.dir.join(LOG_NAME);
        let tmp = self.dir.join(format!("{LOG_NAME}.tmp"));
        let io = |source| MonStoreError::Io {
            path: path.clone(),
            source,
        };
        let record = encode_record(map);
        let mut f = File::create(&tmp).map_err(io)?;
        f.write_all(&record).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        self.file = OpenOptions::new().append(true).open(&path).map_err(io)?;
        self.len = record.len() as u64;
        Ok(())
    }
}

fn encode_record(map: &ClusterMap) -> Vec<u8> {
    let payload = bincode::serialize(map).unwrap_or_default();
    let mut record = Vec::with_capacity(payload.len() + 8);
    record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    record.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    record.extend_from_slice(&payload);
    record
}

/// The newest good map and the length of the good prefix. A bad record that is
/// followed by more data is corruption, not a torn tail.
fn scan(bytes: &[u8], path: &Path) -> Result<(Option<ClusterMap>, u64), MonStoreError> {
    let mut offset = 0usize;
    let mut latest = None;
    while offset + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap_or([0; 4]));
        let crc = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap_or([0; 4]));
        let end = offset + 8 + len as usize;
        if end > bytes.len() {
            break; // torn tail
        }
        let payload = &bytes[offset + 8..end];
        let corrupt = |reason: String| MonStoreError::Corrupt {
            path: path.to_path_buf(),
            offset: offset as u64,
            reason,
        };
        if crc32c::crc32c(payload) != crc {
            if end == bytes.len() {
                break; // torn tail
            }
            return Err(corrupt("checksum mismatch".into()));
        }
        let map: ClusterMap = bincode::deserialize(payload).map_err(|e| corrupt(e.to_string()))?;
        latest = Some(map);
        offset = end;
    }
    Ok((latest, offset as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_survive_reopen_and_torn_tails_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = ClusterMap::new("fsid".into());
        {
            let (mut store, latest) = MapStore::open(dir.path()).unwrap();
            assert!(latest.is_none());
            for _ in 0..5 {
                map.epoch += 1;
                store.append(&map).unwrap();
            }
        }
        // A torn append: half a record at the end.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(LOG_NAME))
            .unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let (mut store, latest) = MapStore::open(dir.path()).unwrap();
        assert_eq!(latest.unwrap().epoch, map.epoch);
        map.epoch += 1;
        store.append(&map).unwrap();
        store.rewrite(&map).unwrap();
        let (_, latest) = MapStore::open(dir.path()).unwrap();
        assert_eq!(latest.unwrap().epoch, map.epoch);
    }

    #[test]
    fn corruption_in_the_middle_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut map = ClusterMap::new("fsid".into());
        {
            let (mut store, _) = MapStore::open(dir.path()).unwrap();
            store.append(&map).unwrap();
            map.epoch += 1;
            store.append(&map).unwrap();
        }
        let path = dir.path().join(LOG_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[10] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(
            MapStore::open(dir.path()),
            Err(MonStoreError::Corrupt { .. })
        ));
    }
}
