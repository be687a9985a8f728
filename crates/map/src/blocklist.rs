//! The blocklist: clients fenced off the cluster. An OSD at an epoch whose
//! blocklist names a client refuses every op of that client, so a client
//! that lost an image's exclusive lock to another can never write after the
//! new owner started (Ceph's OSD blocklist). Entries expire (the monitor
//! removes them in a new epoch); by then the fenced client has long seen
//! its ops refused and given the image up.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Most clients blocklisted at once; beyond it the monitor refuses more
/// (each one is in every map every daemon holds).
pub const BLOCKLIST_MAX: usize = 65_536;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlocklistEntry {
    /// Wall clock of the monitor when added, seconds since the Unix epoch.
    pub added_s: u64,
    /// Removed by the monitor once its clock passes this.
    pub expires_s: u64,
    /// Why, for `cairn osd blocklist ls` (e.g. which image's lock was broken).
    pub reason: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocklist {
    entries: BTreeMap<u64, BlocklistEntry>,
}

impl Blocklist {
    pub fn contains(&self, client: u64) -> bool {
        self.entries.contains_key(&client)
    }

    pub fn entries(&self) -> impl Iterator<Item = (u64, &BlocklistEntry)> {
        self.entries.iter().map(|(c, e)| (*c, e))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Add or extend `client`'s entry. Returns false if the list is full.
    pub fn add(&mut self, client: u64, entry: BlocklistEntry) -> bool {
        if self.entries.len() >= BLOCKLIST_MAX && !self.entries.contains_key(&client) {
            return false;
        }
        self.entries.insert(client, entry);
        true
    }

    pub fn remove(&mut self, client: u64) -> bool {
        self.entries.remove(&client).is_some()
    }

    /// Drop the entries expired at `now_s`; returns how many.
    pub fn expire(&mut self, now_s: u64) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, e| e.expires_s > now_s);
        before - self.entries.len()
    }

    /// Whether some entry has expired at `now_s`.
    pub fn any_expired(&self, now_s: u64) -> bool {
        self.entries.values().any(|e| e.expires_s <= now_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(expires_s: u64) -> BlocklistEntry {
        BlocklistEntry {
            added_s: 0,
            expires_s,
            reason: "test".into(),
        }
    }

    #[test]
    fn entries_expire_at_their_time() {
        let mut b = Blocklist::default();
        assert!(b.add(7, entry(100)));
        assert!(b.add(9, entry(200)));
        assert!(b.contains(7) && b.contains(9) && !b.contains(8));
        assert!(!b.any_expired(99));
        assert_eq!(b.expire(99), 0);
        assert!(b.any_expired(100));
        assert_eq!(b.expire(100), 1);
        assert!(!b.contains(7) && b.contains(9));
        assert!(b.remove(9));
        assert!(!b.remove(9));
        assert!(b.is_empty());
    }
}
