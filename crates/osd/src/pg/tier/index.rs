//! The cache PG primary's index of its objects: dirty or clean, whiteout,
//! since when dirty, size (as writes leave it), and last access. Loaded
//! from the store once the PG holds all its objects, then kept by every
//! write; the counts in `pool stats`, the checks before a tier is removed
//! and the agent's choices all come from it. In memory only: a new
//! primary loads it again (last accesses start at the load).

use std::collections::HashMap;

use cairn_store::{ObjectId, ObjectStore, StoreError};
use cairn_types::PgId;

use super::meta::{self, ObjMeta};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub dirty: bool,
    pub whiteout: bool,
    pub dirty_since: u64,
    pub size: u64,
    /// Seconds since the Unix epoch.
    pub last_access: u64,
}

#[derive(Debug, Default)]
pub struct Index {
    entries: HashMap<String, Entry>,
    /// Sums over `entries`, kept with every change: read on every client
    /// op (is the PG full?) and every agent round, never recounted.
    totals: Totals,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Totals {
    bytes: u64,
    dirty: u64,
    dirty_bytes: u64,
    whiteouts: u64,
}

impl Totals {
    fn add(&mut self, e: &Entry) {
        self.bytes += e.size;
        self.dirty += u64::from(e.dirty);
        self.dirty_bytes += if e.dirty { e.size } else { 0 };
        self.whiteouts += u64::from(e.whiteout);
    }

    fn remove(&mut self, e: &Entry) {
        self.bytes -= e.size;
        self.dirty -= u64::from(e.dirty);
        self.dirty_bytes -= if e.dirty { e.size } else { 0 };
        self.whiteouts -= u64::from(e.whiteout);
    }
}

impl Index {
    /// Every object's cache state in `pg`, read from the store.
    pub fn load(store: &dyn ObjectStore, pg: PgId, now: u64) -> Result<Index, String> {
        let names = store
            .list_objects(pg)
            .map_err(|e| format!("pg {pg}: cannot list objects: {e}"))?;
        let mut entries = HashMap::with_capacity(names.len());
        for name in names {
            if crate::pg::persist::is_internal(&name) {
                continue;
            }
            let oid = ObjectId::new(pg, name.clone());
            let state = meta::read_state(store, &oid)?;
            let Some(m) = state.meta() else { continue };
            let size = match store.stat(&oid) {
                Ok(st) => st.size,
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(format!("cannot stat {oid}: {e}")),
            };
            entries.insert(
                name,
                Entry {
                    dirty: m.dirty,
                    whiteout: m.whiteout,
                    dirty_since: m.dirty_since,
                    size,
                    last_access: now,
                },
            );
        }
        let mut totals = Totals::default();
        entries.values().for_each(|e| totals.add(e));
        Ok(Index { entries, totals })
    }

    /// A write left `oid` with `meta` (`None` with `exists` false: gone)
    /// and, if known, `size`.
    pub fn note_write(
        &mut self,
        oid: &str,
        meta: Option<&ObjMeta>,
        exists: bool,
        size: Option<(u64, bool)>,
        now: u64,
    ) {
        if !exists {
            if let Some(e) = self.entries.remove(oid) {
                self.totals.remove(&e);
            }
            return;
        }
        let known = self.entries.contains_key(oid);
        let e = self.entries.entry(oid.to_string()).or_insert(Entry {
            dirty: true,
            last_access: now,
            ..Entry::default()
        });
        if known {
            self.totals.remove(e);
        }
        if let Some(m) = meta {
            e.dirty = m.dirty;
            e.whiteout = m.whiteout;
            e.dirty_since = m.dirty_since;
        }
        match size {
            _ if e.whiteout => e.size = 0,
            Some((s, true)) => e.size = s,
            Some((s, false)) => e.size = e.size.max(s),
            None => {}
        }
        self.totals.add(e);
    }

    /// A flush of `oid` sent a version it no longer has: count its
    /// flush age from now (in memory only).
    pub fn flushed_stale(&mut self, oid: &str, now: u64) {
        if let Some(e) = self.entries.get_mut(oid) {
            e.dirty_since = now;
        }
    }

    /// A client touched `oid`.
    pub fn touch(&mut self, oid: &str, now: u64) {
        if let Some(e) = self.entries.get_mut(oid) {
            e.last_access = now;
        }
    }

    pub fn objects(&self) -> u64 {
        self.entries.len() as u64
    }

    pub fn dirty(&self) -> u64 {
        self.totals.dirty
    }

    pub fn whiteouts(&self) -> u64 {
        self.totals.whiteouts
    }

    pub fn bytes(&self) -> u64 {
        self.totals.bytes
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.totals.dirty_bytes
    }

    /// Up to `max` dirty objects dirty for at least `min_age` seconds,
    /// the longest dirty first.
    pub fn flush_candidates(
        &self,
        now: u64,
        min_age: u64,
        max: usize,
        skip: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        self.oldest(
            max,
            skip,
            |e| e.dirty.then_some(e.dirty_since),
            now,
            min_age,
        )
    }

    /// Up to `max` clean objects not accessed for `min_age` seconds, the
    /// least recently accessed first.
    pub fn evict_candidates(
        &self,
        now: u64,
        min_age: u64,
        max: usize,
        skip: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        self.oldest(
            max,
            skip,
            |e| (!e.dirty).then_some(e.last_access),
            now,
            min_age,
        )
    }

    /// Up to `max` objects whose `stamp` (when given) is at least `min_age`
    /// seconds old, oldest first.
    fn oldest(
        &self,
        max: usize,
        skip: impl Fn(&str) -> bool,
        stamp: impl Fn(&Entry) -> Option<u64>,
        now: u64,
        min_age: u64,
    ) -> Vec<String> {
        if max == 0 {
            return Vec::new();
        }
        let mut c: Vec<(u64, &String)> = self
            .entries
            .iter()
            .filter_map(|(n, e)| stamp(e).map(|t| (t, n)))
            .filter(|(t, n)| now.saturating_sub(*t) >= min_age && !skip(n))
            .collect();
        c.sort_unstable();
        c.into_iter().take(max).map(|(_, n)| n.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(dirty: bool, since: u64) -> ObjMeta {
        ObjMeta {
            dirty,
            whiteout: false,
            partial: None,
            dirty_since: since,
        }
    }

    #[test]
    fn candidates_honour_ages_and_order() {
        let mut ix = Index::default();
        ix.note_write("a", Some(&meta(true, 100)), true, Some((10, true)), 100);
        ix.note_write("b", Some(&meta(true, 50)), true, Some((20, true)), 100);
        ix.note_write("c", Some(&meta(false, 0)), true, Some((30, true)), 100);
        ix.note_write("d", Some(&meta(false, 0)), true, Some((40, false)), 90);
        assert_eq!(
            (ix.objects(), ix.dirty(), ix.bytes(), ix.dirty_bytes()),
            (4, 2, 100, 30)
        );
        assert_eq!(
            ix.flush_candidates(120, 30, 10, |_| false),
            vec!["b".to_string()]
        );
        assert_eq!(
            ix.flush_candidates(200, 30, 10, |_| false),
            vec!["b".to_string(), "a".into()]
        );
        assert_eq!(
            ix.flush_candidates(200, 30, 10, |n| n == "b"),
            vec!["a".to_string()]
        );
        ix.touch("d", 150);
        assert_eq!(
            ix.evict_candidates(160, 5, 10, |_| false),
            vec!["c".to_string(), "d".into()]
        );
        assert_eq!(
            ix.evict_candidates(152, 5, 10, |_| false),
            vec!["c".to_string()]
        );
        ix.note_write("c", None, false, None, 160);
        assert_eq!(ix.objects(), 3);
        // The kept sums equal a recount after every kind of change.
        ix.note_write("a", Some(&meta(false, 0)), true, Some((5, false)), 170);
        ix.note_write("e", Some(&meta(true, 170)), true, Some((7, false)), 170);
        let mut recount = Totals::default();
        ix.entries.values().for_each(|e| recount.add(e));
        assert_eq!(ix.totals, recount);
        assert_eq!((ix.dirty(), ix.bytes(), ix.dirty_bytes()), (2, 77, 27));
    }
}
