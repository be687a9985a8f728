//! An in-memory [`Kv`] for tests.
//!
//! Fault model: a power loss keeps the batches written up to the last
//! `sync` write (a sync write makes every earlier batch durable, as a
//! write-ahead log does) and loses every later one. [`MemKv::crash_image`]
//! returns that state as a new store; [`MemKv::crash_image_keeping`] also
//! keeps some of the later batches, in order, as RocksDB does when it
//! flushes a full memtable on its own.

use std::collections::BTreeMap;
use std::ops::Bound;

use parking_lot::RwLock;

use crate::{Batch, Entries, Kv, Op, Result};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Default)]
struct State {
    /// Everything written: what reads see.
    live: Map,
    /// Batches written without sync since the last sync.
    unsynced: Vec<Batch>,
    /// What a power loss would leave.
    durable: Map,
}

/// A sorted map in memory. See the module docs for its crash behaviour.
#[derive(Default)]
pub struct MemKv {
    state: RwLock<State>,
}

impl MemKv {
    pub fn new() -> Self {
        Self::default()
    }

    /// The store as a power loss now would leave it.
    pub fn crash_image(&self) -> MemKv {
        let st = self.state.read();
        MemKv {
            state: RwLock::new(State {
                live: st.durable.clone(),
                unsynced: Vec::new(),
                durable: st.durable.clone(),
            }),
        }
    }

    /// The store as a power loss now would leave it had the first `n`
    /// batches written since the last sync (or all, if fewer) become
    /// durable on their own.
    pub fn crash_image_keeping(&self, n: usize) -> MemKv {
        let st = self.state.read();
        let mut durable = st.durable.clone();
        for b in st.unsynced.iter().take(n) {
            apply(&mut durable, b);
        }
        MemKv {
            state: RwLock::new(State {
                live: durable.clone(),
                unsynced: Vec::new(),
                durable,
            }),
        }
    }

    /// Batches written since the last sync.
    pub fn unsynced_batches(&self) -> usize {
        self.state.read().unsynced.len()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.state.read().live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn apply(map: &mut Map, batch: &Batch) {
    for op in batch.ops() {
        match op {
            Op::Put(k, v) => {
                map.insert(k.clone(), v.clone());
            }
            Op::Delete(k) => {
                map.remove(k);
            }
            Op::DeleteRange(start, end) => {
                if start < end {
                    let doomed: Vec<Vec<u8>> = map
                        .range::<[u8], _>((Bound::Included(&start[..]), Bound::Excluded(&end[..])))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in doomed {
                        map.remove(&k);
                    }
                }
            }
        }
    }
}

impl Kv for MemKv {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.state.read().live.get(key).cloned())
    }

    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if start >= end {
            return Ok(Vec::new());
        }
        let st = self.state.read();
        Ok(st
            .live
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn get_in_memory(&self, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        self.get(key).map(Some)
    }

    fn scan_in_memory(&self, start: &[u8], end: &[u8], limit: usize) -> Result<Option<Entries>> {
        self.scan(start, end, limit).map(Some)
    }

    fn sync(&self) -> Result<()> {
        let mut st = self.state.write();
        let pending = std::mem::take(&mut st.unsynced);
        for b in &pending {
            apply(&mut st.durable, b);
        }
        Ok(())
    }

    fn write(&self, batch: Batch, sync: bool) -> Result<()> {
        let mut st = self.state.write();
        apply(&mut st.live, &batch);
        if sync {
            let pending = std::mem::take(&mut st.unsynced);
            for b in pending.iter().chain(std::iter::once(&batch)) {
                apply(&mut st.durable, b);
            }
        } else {
            st.unsynced.push(batch);
        }
        Ok(())
    }

    fn try_write(&self, batch: &mut Batch) -> Result<bool> {
        // Never stalls.
        self.write(std::mem::take(batch), false).map(|()| true)
    }
}
