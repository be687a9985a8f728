//! Scrub: compare every object's copies across the acting set, a chunk of
//! objects at a time, and repair the bad ones from a good one.
//!
//! A light scrub compares what the metadata says (presence, size, version,
//! attributes); a deep scrub also reads every byte (a copy that fails its
//! checksum is bad) and compares data and omap digests. For each chunk the
//! primary holds writes to its objects (and waits for those in flight), so
//! that every member describes the same state. The authoritative copy is
//! the one whose version the PG log says the object has (absent if the log
//! says it was removed); when the log no longer covers the object, the
//! largest group of identical copies, the primary's on ties. Repair marks
//! each bad copy missing on its member and lets log recovery rewrite it
//! (the primary's own first, pulled from a good member); a copy that should
//! not exist is removed. An object with no good copy is reported
//! unrepairable: reads of it fail with an I/O error, and an overwrite is
//! accepted.
//!
//! Scrubs start on request (`cairn pg scrub|deep-scrub|repair`) or when
//! `osd_scrub_interval` / `osd_deep_scrub_interval` have passed since the
//! last, only on a PG that is active with every acting member complete, and
//! at most `osd_max_scrubs` at once per OSD.

use std::collections::{BTreeMap, BTreeSet};

use cairn_store::{ObjectId, Transaction};
use cairn_types::{OsdId, Version};
use cairn_wire::{ActId, Inconsistent, LogOp, ObjectCopy, PgBody, ScrubEntry};

use super::persist::{self, VERSION_ATTR};
use super::replica::scan;
use super::{CopyPurpose, Ctx, Pg, Phase, Role, Wait};
use crate::io::{CopyResult, Done};

/// Objects compared per chunk.
pub const SCRUB_CHUNK: usize = 32;

/// What repair must do: the object, its authoritative version (`None`: it
/// must not exist), and the members whose copies are bad.
pub(crate) type Repair = (String, Option<Version>, Vec<OsdId>);

#[derive(Debug)]
pub(crate) struct Scrub {
    pub act: ActId,
    pub deep: bool,
    pub repair: bool,
    /// Objects named up to here are done.
    pub after: Option<String>,
    pub chunk: Option<Chunk>,
    pub found: Vec<Inconsistent>,
    pub repairs: Vec<Repair>,
}

#[derive(Debug)]
pub(crate) struct Chunk {
    /// The chunk is `(after, upto]`; `None`: to the end.
    pub upto: Option<String>,
    pub tid: u64,
    /// Requests sent (writes to the range have drained).
    pub sent: bool,
    pub maps: BTreeMap<OsdId, Vec<ScrubEntry>>,
    pub waiting: BTreeSet<OsdId>,
}

/// A scrub map being built on this OSD: for a primary's request, or for
/// the primary itself (`reply_to: None`).
#[derive(Debug)]
pub(crate) struct MapBuild {
    pub reply_to: Option<(OsdId, ActId, u64)>,
    pub entries: Vec<ScrubEntry>,
    pub pending: usize,
}

impl Scrub {
    /// Does the chunk in progress hold writes to `name`?
    pub fn blocks(&self, name: &str) -> bool {
        let Some(chunk) = &self.chunk else {
            return false;
        };
        self.after.as_deref().is_none_or(|a| name > a)
            && chunk.upto.as_deref().is_none_or(|u| name <= u)
    }
}

fn digest<'a>(pairs: impl Iterator<Item = (&'a str, &'a [u8])>) -> u32 {
    let mut crc = 0;
    for (k, v) in pairs {
        crc = crc32c::crc32c_append(crc, k.as_bytes());
        crc = crc32c::crc32c_append(crc, &(v.len() as u64).to_le_bytes());
        crc = crc32c::crc32c_append(crc, v);
    }
    crc
}

/// A light entry from metadata only.
fn light_entry(store: &dyn cairn_store::ObjectStore, oid: &ObjectId) -> ScrubEntry {
    let mut entry = ScrubEntry {
        name: oid.name.clone(),
        size: 0,
        version: None,
        attrs_digest: 0,
        data_digest: None,
        omap_digest: None,
        error: None,
    };
    match store.stat(oid) {
        Ok(stat) => entry.size = stat.size,
        Err(e) => entry.error = Some(e.to_string()),
    }
    match persist::object_version(store, oid) {
        Ok(v) => entry.version = v,
        Err(e) => entry.error = Some(e),
    }
    match store.get_attrs(oid) {
        Ok(attrs) => {
            let pairs = attrs.iter().filter(|(k, _)| k.as_str() != VERSION_ATTR);
            entry.attrs_digest = digest(pairs.map(|(k, v)| (k.as_str(), v.as_slice())));
        }
        Err(e) => entry.error = Some(e.to_string()),
    }
    entry
}

/// A deep entry from a whole copy.
fn deep_entry(name: &str, copy: &ObjectCopy) -> ScrubEntry {
    let data = copy.data.as_deref().unwrap_or_default();
    let attrs = copy.attrs.iter().map(|(k, v)| (k.as_str(), v.as_ref()));
    let omap = copy.omap.iter().map(|(k, v)| (k.as_str(), v.as_ref()));
    ScrubEntry {
        name: name.to_string(),
        size: data.len() as u64,
        version: Some(copy.version),
        attrs_digest: digest(attrs),
        data_digest: Some(crc32c::crc32c(data)),
        omap_digest: Some(digest(omap)),
        error: None,
    }
}

impl Pg {
    /// Scrub this PG (as its primary) as soon as it can be.
    pub(crate) fn request_scrub(
        &mut self,
        ctx: &mut Ctx<'_>,
        deep: bool,
        repair: bool,
    ) -> Result<(), String> {
        if self.role != Role::Primary {
            return Err(format!(
                "osd.{} is not the primary of pg {}",
                ctx.me, self.id
            ));
        }
        let (was_deep, was_repair) = self.scrub_requested.unwrap_or((false, false));
        self.scrub_requested = Some((deep || was_deep, repair || was_repair));
        self.maybe_scrub(ctx);
        Ok(())
    }

    /// Can a scrub run now: active, serving, every acting member complete?
    fn scrubbable(&self) -> bool {
        matches!(self.phase, Phase::Active)
            && self.mapping.acting.osds.len() as u32 >= self.mapping.min_size
            && self.recovered()
            && self
                .primary
                .as_ref()
                .is_some_and(|p| p.backfill.values().all(|b| b.complete))
    }

    /// Start a requested or due scrub, or move the running one on.
    pub(crate) fn maybe_scrub(&mut self, ctx: &mut Ctx<'_>) {
        if self.scrub.is_some() {
            return self.scrub_step(ctx);
        }
        if !self.scrubbable() {
            return;
        }
        let now = ctx.io.wall_secs();
        let due_deep = ctx.opts.deep_scrub_interval.as_secs() > 0
            && now >= self.info.last_deep_scrub + ctx.opts.deep_scrub_interval.as_secs();
        let due = ctx.opts.scrub_interval.as_secs() > 0
            && now >= self.info.last_scrub + ctx.opts.scrub_interval.as_secs();
        let (deep, repair) = match self.scrub_requested {
            Some(asked) => asked,
            None if due_deep => (true, false),
            None if due => (false, false),
            None => return,
        };
        if !ctx.slots.take_scrub(self.id) {
            return;
        }
        self.scrub_requested = None;
        let Some(act) = self.primary.as_ref().map(|p| p.act) else {
            return;
        };
        tracing::info!(
            "pg {}: {} scrub starts",
            self.id,
            if deep { "deep" } else { "light" }
        );
        self.scrub = Some(Box::new(Scrub {
            act,
            deep,
            repair,
            after: None,
            chunk: None,
            found: Vec::new(),
            repairs: Vec::new(),
        }));
        self.scrub_step(ctx);
    }

    /// End a scrub that cannot go on (peering started, a member failed).
    pub(crate) fn abort_scrub(&mut self, ctx: &mut Ctx<'_>) {
        if self.scrub.take().is_some() {
            ctx.slots.release_scrub(self.id);
            tracing::info!("pg {}: scrub stopped", self.id);
        }
    }

    fn scrub_step(&mut self, ctx: &mut Ctx<'_>) {
        let store = ctx.io.store();
        let Some(scrub) = self.scrub.as_mut() else {
            return;
        };
        if scrub.chunk.is_none() {
            let (names, done) = match scan(store, self.id, scrub.after.as_deref(), SCRUB_CHUNK) {
                Ok(listed) => listed,
                Err(e) => return self.abort_scrub_with(ctx, &e),
            };
            let upto = if done {
                None
            } else {
                names.last().map(|(n, _)| n.clone())
            };
            scrub.chunk = Some(Chunk {
                upto,
                tid: ctx.id(),
                sent: false,
                maps: BTreeMap::new(),
                waiting: BTreeSet::new(),
            });
        }
        let Some(chunk) = scrub.chunk.as_ref() else {
            return;
        };
        if chunk.sent {
            return;
        }
        // Every member must describe the same state: writes to the chunk
        // wait (see `admit`), and those in flight finish first.
        let busy = self.primary.as_ref().is_some_and(|p| {
            p.objects
                .iter()
                .any(|(name, o)| o.pending_writes > 0 && scrub.blocks(name))
        });
        if busy {
            return;
        }
        let (act, deep, tid) = (scrub.act, scrub.deep, chunk.tid);
        let (after, upto) = (scrub.after.clone(), chunk.upto.clone());
        let members: Vec<OsdId> = self.mapping.acting.osds.clone();
        let me = ctx.me;
        for &member in members.iter().filter(|&&m| m != me) {
            ctx.send(
                member,
                self.id,
                PgBody::ScrubRequest {
                    act,
                    tid,
                    after: after.clone(),
                    upto: upto.clone(),
                    deep,
                },
            );
        }
        if let Some(chunk) = self.scrub.as_mut().and_then(|s| s.chunk.as_mut()) {
            chunk.sent = true;
            chunk.waiting = members.into_iter().collect();
        }
        self.build_map(ctx, None, after, upto, deep);
    }

    fn abort_scrub_with(&mut self, ctx: &mut Ctx<'_>, why: &str) {
        tracing::warn!("pg {}: scrub failed: {why}", self.id);
        self.abort_scrub(ctx);
    }

    /// Describe this OSD's objects in `(after, upto]`, for `reply_to` (or
    /// for this primary's own chunk).
    fn build_map(
        &mut self,
        ctx: &mut Ctx<'_>,
        reply_to: Option<(OsdId, ActId, u64)>,
        after: Option<String>,
        upto: Option<String>,
        deep: bool,
    ) {
        let store = ctx.io.store();
        let names: Vec<String> = match store.list_objects(self.id) {
            Ok(names) => names
                .into_iter()
                .filter(|n| !persist::is_internal(n))
                .filter(|n| after.as_deref().is_none_or(|a| n.as_str() > a))
                .filter(|n| upto.as_deref().is_none_or(|u| n.as_str() <= u))
                .collect(),
            Err(e) => return self.map_built(ctx, reply_to, Err(e.to_string())),
        };
        if !deep {
            let entries = names
                .iter()
                .map(|n| light_entry(store, &ObjectId::new(self.id, n.clone())))
                .collect();
            return self.map_built(ctx, reply_to, Ok(entries));
        }
        if names.is_empty() {
            return self.map_built(ctx, reply_to, Ok(Vec::new()));
        }
        let key = ctx.id();
        let act = reply_to.map_or_else(|| self.scrub.as_ref().map(|s| s.act), |(_, a, _)| Some(a));
        let Some(act) = act else {
            return;
        };
        for (index, name) in names.iter().enumerate() {
            let id = ctx.id();
            let purpose = CopyPurpose::Scrub { key, index };
            self.waits.insert(
                id,
                Wait::Copy {
                    act,
                    oid: name.clone(),
                    purpose,
                },
            );
            ctx.io.read_object(
                ObjectId::new(self.id, name.clone()),
                Done { pg: self.id, id },
            );
        }
        let entries = names
            .iter()
            .map(|n| ScrubEntry {
                name: n.clone(),
                size: 0,
                version: None,
                attrs_digest: 0,
                data_digest: None,
                omap_digest: None,
                error: None,
            })
            .collect();
        let pending = names.len();
        self.scrub_builds.insert(
            key,
            MapBuild {
                reply_to,
                entries,
                pending,
            },
        );
    }

    /// A copy read for a deep scrub map is in.
    pub(crate) fn scrub_copy_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        key: u64,
        index: usize,
        result: CopyResult,
    ) {
        let Some(build) = self.scrub_builds.get_mut(&key) else {
            return;
        };
        let name = build.entries[index].name.clone();
        build.entries[index] = match result {
            Ok(Some(copy)) => deep_entry(&name, &copy),
            Ok(None) => ScrubEntry {
                error: Some("vanished during the scrub".into()),
                ..build.entries[index].clone()
            },
            Err(e) => ScrubEntry {
                error: Some(e.to_string()),
                ..build.entries[index].clone()
            },
        };
        build.pending -= 1;
        if build.pending > 0 {
            return;
        }
        if let Some(build) = self.scrub_builds.remove(&key) {
            self.map_built(ctx, build.reply_to, Ok(build.entries));
        }
    }

    fn map_built(
        &mut self,
        ctx: &mut Ctx<'_>,
        reply_to: Option<(OsdId, ActId, u64)>,
        result: Result<Vec<ScrubEntry>, String>,
    ) {
        match reply_to {
            Some((to, act, tid)) => ctx.send(to, self.id, PgBody::ScrubMap { act, tid, result }),
            None => {
                let me = ctx.me;
                let Some((act, tid)) = self
                    .scrub
                    .as_ref()
                    .and_then(|s| Some((s.act, s.chunk.as_ref()?.tid)))
                else {
                    return;
                };
                self.got_scrub_map(ctx, me, act, tid, result);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn answer_scrub_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        tid: u64,
        after: Option<String>,
        upto: Option<String>,
        deep: bool,
    ) {
        if self.replica_act != Some((from, act)) {
            let result = Err(format!("not active for osd.{from} as {act}"));
            return ctx.send(from, self.id, PgBody::ScrubMap { act, tid, result });
        }
        self.build_map(ctx, Some((from, act, tid)), after, upto, deep);
    }

    pub(crate) fn got_scrub_map(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        tid: u64,
        result: Result<Vec<ScrubEntry>, String>,
    ) {
        let Some(scrub) = self.scrub.as_mut().filter(|s| s.act == act) else {
            return;
        };
        let Some(chunk) = scrub.chunk.as_mut().filter(|c| c.tid == tid) else {
            return;
        };
        match result {
            Ok(entries) => {
                chunk.maps.insert(from, entries);
                chunk.waiting.remove(&from);
            }
            Err(e) => return self.abort_scrub_with(ctx, &format!("osd.{from}: {e}")),
        }
        if !chunk.waiting.is_empty() {
            return;
        }
        let Some(chunk) = scrub.chunk.take() else {
            return;
        };
        let (found, repairs) = compare(&chunk.maps, ctx.me, |name| self.log_verdict(name));
        let scrub = self.scrub.as_mut().expect("checked above");
        scrub.found.extend(found);
        scrub.repairs.extend(repairs);
        scrub.after = chunk.upto.clone();
        // Writes held for this chunk may go.
        let held: Vec<String> = self
            .primary
            .as_ref()
            .map(|p| {
                p.objects
                    .iter()
                    .filter(|(_, o)| !o.waiting.is_empty())
                    .map(|(n, _)| n.clone())
                    .collect()
            })
            .unwrap_or_default();
        for oid in held {
            self.wake_object(ctx, &oid);
        }
        if chunk.upto.is_none() {
            self.finish_scrub(ctx);
        } else {
            self.scrub_step(ctx);
        }
    }

    /// What the log says object `name` must be: `Some(Some(v))` at
    /// version v, `Some(None)` absent, `None` if the log does not say.
    fn log_verdict(&self, name: &str) -> Option<Option<Version>> {
        self.log
            .entries()
            .rev()
            .find(|e| e.oid == name)
            .map(|e| (e.op == LogOp::Modify).then_some(e.version))
    }

    fn finish_scrub(&mut self, ctx: &mut Ctx<'_>) {
        let Some(scrub) = self.scrub.take() else {
            return;
        };
        ctx.slots.release_scrub(self.id);
        // Stamps have a resolution of a second; each scrub moves its stamp
        // forward even when it ends in the second the last one did (or the PG
        // was created in), so `pg scrub --wait` can tell it happened.
        let now = ctx.io.wall_secs();
        self.info.last_scrub = now.max(self.info.last_scrub + 1);
        if scrub.deep {
            self.info.last_deep_scrub = now.max(self.info.last_deep_scrub + 1);
        }
        let mut txn = Transaction::new();
        persist::save_info(&mut txn, &self.info);
        if let Err(e) = self.submit(ctx, txn, Wait::Quiet) {
            tracing::error!("pg {}: cannot record the scrub: {e}", self.id);
        }
        tracing::info!(
            "pg {}: {} scrub done: {} inconsistent objects",
            self.id,
            if scrub.deep { "deep" } else { "light" },
            scrub.found.len()
        );
        for inc in &scrub.found {
            tracing::warn!("pg {}: {:?} inconsistent: {:?}", self.id, inc.name, inc.bad);
        }
        self.inconsistent = scrub.found;
        if scrub.repair {
            self.repair(ctx, scrub.repairs);
        }
    }

    /// Rewrite bad copies through log recovery (the primary's own first).
    fn repair(&mut self, ctx: &mut Ctx<'_>, repairs: Vec<Repair>) {
        let me = ctx.me;
        let mut txn = Transaction::new();
        let mut repaired = 0;
        for (name, version, bad) in repairs {
            let Some(primary) = self.primary.as_mut() else {
                return;
            };
            for &osd in bad.iter().filter(|&&o| o != me) {
                if let Some(peer) = primary.peers.get_mut(&osd) {
                    peer.missing
                        .insert(name.clone(), version.unwrap_or(Version::ZERO));
                    repaired += 1;
                }
            }
            if bad.contains(&me) {
                match version {
                    Some(v) => {
                        self.missing.insert(name.clone(), v);
                        persist::missing_add(&mut txn, self.id, &name, v);
                    }
                    None => {
                        txn.remove(&ObjectId::new(self.id, name.clone()));
                    }
                }
                repaired += 1;
            }
            self.inconsistent.retain(|i| i.name != name);
        }
        self.counters.repaired_objects += repaired;
        if !txn.is_empty() {
            if let Err(e) = self.submit(ctx, txn, Wait::Quiet) {
                tracing::error!("pg {}: cannot start the repair: {e}", self.id);
            }
        }
        tracing::info!("pg {}: repairing {repaired} copies", self.id);
        self.kick_recovery(ctx);
    }
}

/// Compare the members' maps of one chunk: the inconsistent objects, and
/// the repairs that fix those with a good copy. `verdict(name)` is what
/// the PG log says of the object (see [`Pg::log_verdict`]).
fn compare(
    maps: &BTreeMap<OsdId, Vec<ScrubEntry>>,
    primary: OsdId,
    verdict: impl Fn(&str) -> Option<Option<Version>>,
) -> (Vec<Inconsistent>, Vec<Repair>) {
    type Key = Option<(u64, Option<Version>, u32, Option<u32>, Option<u32>)>;
    let by_member: BTreeMap<OsdId, BTreeMap<&str, &ScrubEntry>> = maps
        .iter()
        .map(|(&o, entries)| (o, entries.iter().map(|e| (e.name.as_str(), e)).collect()))
        .collect();
    let names: BTreeSet<&str> = by_member.values().flat_map(|m| m.keys().copied()).collect();
    let mut found = Vec::new();
    let mut repairs = Vec::new();
    for name in names {
        let mut groups: BTreeMap<Key, Vec<OsdId>> = BTreeMap::new();
        let mut errors: Vec<(OsdId, String)> = Vec::new();
        for (&osd, entries) in &by_member {
            match entries.get(name) {
                Some(e) if e.error.is_some() => {
                    errors.push((osd, e.error.clone().unwrap_or_default()));
                }
                Some(e) => groups
                    .entry(Some((
                        e.size,
                        e.version,
                        e.attrs_digest,
                        e.data_digest,
                        e.omap_digest,
                    )))
                    .or_default()
                    .push(osd),
                None => groups.entry(None).or_default().push(osd),
            }
        }
        let expected = verdict(name);
        let fits = |key: &Key| match expected {
            Some(Some(v)) => key.as_ref().is_some_and(|k| k.1 == Some(v)),
            Some(None) => key.is_none(),
            None => true,
        };
        let auth = groups
            .iter()
            .filter(|(k, _)| fits(k))
            .max_by_key(|(_, members)| (members.len(), members.contains(&primary)))
            .map(|(k, members)| (*k, members.clone()));
        let Some((auth_key, good)) = auth else {
            let mut bad = errors;
            for (key, members) in &groups {
                let why = if key.is_none() {
                    "missing"
                } else {
                    "stale copy"
                };
                bad.extend(members.iter().map(|&o| (o, why.to_string())));
            }
            found.push(Inconsistent {
                name: name.to_string(),
                bad,
                repairable: false,
            });
            continue;
        };
        let mut bad = errors;
        for (key, members) in &groups {
            if *key == auth_key {
                continue;
            }
            let why = describe(key, &auth_key);
            bad.extend(members.iter().map(|&o| (o, why.clone())));
        }
        if bad.is_empty() {
            continue;
        }
        debug_assert!(!good.is_empty());
        let version = auth_key.and_then(|k| k.1);
        repairs.push((
            name.to_string(),
            version,
            bad.iter().map(|(o, _)| *o).collect(),
        ));
        found.push(Inconsistent {
            name: name.to_string(),
            bad,
            repairable: true,
        });
    }
    (found, repairs)
}

type Described = Option<(u64, Option<Version>, u32, Option<u32>, Option<u32>)>;

fn describe(bad: &Described, good: &Described) -> String {
    match (bad, good) {
        (None, _) => "missing".into(),
        (Some(_), None) => "should not exist".into(),
        (Some(b), Some(g)) if b.1 != g.1 => format!("version {:?}, not {:?}", b.1, g.1),
        (Some(b), Some(g)) if b.0 != g.0 => format!("size {}, not {}", b.0, g.0),
        (Some(b), Some(g)) if b.3 != g.3 => "data differs".into(),
        (Some(b), Some(g)) if b.4 != g.4 => "omap differs".into(),
        _ => "attributes differ".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, version: u64, data: u32) -> ScrubEntry {
        ScrubEntry {
            name: name.into(),
            size: 10,
            version: Some(Version::new(1, version)),
            attrs_digest: 0,
            data_digest: Some(data),
            omap_digest: Some(0),
            error: None,
        }
    }

    #[test]
    fn the_odd_copy_out_is_bad_and_the_log_breaks_ties() {
        let mut maps = BTreeMap::new();
        maps.insert(0, vec![entry("a", 5, 1), entry("b", 6, 7)]);
        maps.insert(1, vec![entry("a", 5, 1), entry("b", 6, 7)]);
        maps.insert(2, vec![entry("a", 5, 9)]); // a rotted; b missing
        let (found, repairs) = compare(&maps, 0, |_| None);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].bad, vec![(2, "data differs".to_string())]);
        assert_eq!(found[1].bad, vec![(2, "missing".to_string())]);
        assert_eq!(repairs[0], ("a".into(), Some(Version::new(1, 5)), vec![2]));
        // Two copies that differ: the one at the logged version wins,
        // even when it is not the primary's.
        let mut maps = BTreeMap::new();
        maps.insert(0, vec![entry("a", 4, 1)]);
        maps.insert(1, vec![entry("a", 5, 2)]);
        let (found, repairs) = compare(&maps, 0, |_| Some(Some(Version::new(1, 5))));
        assert_eq!(found[0].bad[0].0, 0);
        assert_eq!(repairs[0].2, vec![0]);
    }

    #[test]
    fn no_good_copy_is_unrepairable_and_a_removed_object_must_go() {
        let mut rotten = entry("a", 5, 1);
        rotten.error = Some("checksum mismatch".into());
        let mut maps = BTreeMap::new();
        maps.insert(0, vec![rotten.clone()]);
        maps.insert(1, vec![rotten]);
        let (found, repairs) = compare(&maps, 0, |_| Some(Some(Version::new(1, 5))));
        assert!(!found[0].repairable && repairs.is_empty());
        let mut maps = BTreeMap::new();
        maps.insert(0, vec![]);
        maps.insert(1, vec![entry("gone", 3, 1)]);
        let (found, repairs) = compare(&maps, 0, |_| Some(None));
        assert_eq!(found[0].bad, vec![(1, "should not exist".to_string())]);
        assert_eq!(repairs[0].1, None);
    }
}
