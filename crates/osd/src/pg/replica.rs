//! A member's side: answering peering queries, merging the authoritative
//! log at activation, applying RepOps and pushed objects, answering pulls
//! and backfill scans, and deleting a stray copy when told to.
//!
//! A member applies RepOps and pushes only for the activation it last
//! accepted, from the OSD its own map names primary: a primary of an ended
//! interval can never change it.

use cairn_store::{ObjectId, Transaction};
use cairn_types::{Epoch, OsdId, Version};
use cairn_wire::{ActId, Backfill, LogBase, LogEntry, LogOp, ObjectCopy, PgBody, PgInfo};

use super::log::{self, Missing, PgLog};
use super::persist::{self, VERSION_ATTR};
use super::{CopyPurpose, Ctx, Pg, Role, Wait};

/// Objects listed per backfill scan reply at most.
pub const MAX_SCAN: u32 = 1024;

/// A pull being answered: copies gathered so far.
#[derive(Debug)]
pub(crate) struct PullAnswer {
    pub to: OsdId,
    pub act: ActId,
    pub tid: u64,
    pub wanted: Vec<(String, Version)>,
    pub copies: Vec<Option<ObjectCopy>>,
    pub pending: usize,
    pub error: Option<String>,
}

/// An activation from the primary (see [`PgBody::Activate`]).
#[derive(Debug)]
pub(crate) struct Activation {
    pub act: ActId,
    /// The authoritative info.
    pub auth: PgInfo,
    pub base: Option<LogBase>,
    pub entries: Vec<LogEntry>,
    pub backfill: bool,
}

impl Pg {
    pub(crate) fn answer_query(&mut self, ctx: &mut Ctx<'_>, from: OsdId, query_epoch: Epoch) {
        let info = (self.holds && self.damaged.is_none()).then(|| self.info.clone());
        let missing = self.missing.iter().map(|(k, v)| (k.clone(), *v)).collect();
        ctx.send(
            from,
            self.id,
            PgBody::Info {
                query_epoch,
                info,
                missing,
                damaged: self.damaged.clone(),
            },
        );
    }

    pub(crate) fn answer_get_log(&mut self, ctx: &mut Ctx<'_>, from: OsdId, query_epoch: Epoch) {
        ctx.send(
            from,
            self.id,
            PgBody::Log {
                query_epoch,
                info: self.info.clone(),
                entries: log::compact(self.log.entries(), Version::ZERO),
            },
        );
    }

    /// As a stray, tell the primary what this OSD holds.
    pub(crate) fn notify_primary(&mut self, ctx: &mut Ctx<'_>) {
        if !self.holds || self.damaged.is_some() {
            return;
        }
        if let Some(primary) = self.mapping.primary() {
            ctx.send(
                primary,
                self.id,
                PgBody::Notify {
                    info: self.info.clone(),
                },
            );
        }
    }

    /// Is `from`, activating as `act`, the primary this member follows?
    fn follows(&self, from: OsdId, act: ActId) -> bool {
        self.replica_act == Some((from, act))
    }

    pub(crate) fn activate_replica(&mut self, ctx: &mut Ctx<'_>, from: OsdId, a: Activation) {
        let Activation {
            act,
            auth,
            base,
            entries,
            backfill,
        } = a;
        let refuse = |ctx: &mut Ctx<'_>, pg, why: String| {
            ctx.send(
                from,
                pg,
                PgBody::Activated {
                    act,
                    result: Err(why),
                },
            );
        };
        if self.role != Role::Replica || self.mapping.primary() != Some(from) {
            return refuse(
                ctx,
                self.id,
                format!("osd.{} does not follow osd.{from} for this PG", ctx.me),
            );
        }
        // The primary may activate an interval this member's newer map has
        // ended (the same primary, another acting set or a split): its
        // writes must not land here.
        if self.interval_seen_begin && act.epoch < self.interval_since {
            let why = format!(
                "activation {act} is for an ended interval (this member's began at {})",
                self.interval_since
            );
            return refuse(ctx, self.id, why);
        }
        if auth.pg_num != self.info.pg_num {
            let why = format!(
                "activation {act} is from a copy split for pg_num {}, this one for {}",
                auth.pg_num, self.info.pg_num
            );
            return refuse(ctx, self.id, why);
        }
        if self.replica_act.is_some_and(|(_, a)| a > act) {
            return; // a newer activation was accepted already
        }
        // A reservation granted for an earlier activation ends with it.
        ctx.slots.release_remote(self.id);
        let arrived = ctx.now();
        let taken = (
            entries.iter().map(|e| 1 + e.superseded.len()).sum(),
            entries.len(),
        );
        let mut txn = Transaction::new();
        let result = if backfill {
            self.merge_as_backfill_target(ctx, &auth, &entries, &mut txn)
        } else {
            self.merge_as_member(ctx, &auth, base.as_ref(), entries, &mut txn)
        };
        if let Err(why) = result {
            // Count this copy incomplete, so the next peering backfills it.
            tracing::warn!(
                "pg {}: cannot catch up from the log ({why}); needs backfill",
                self.id
            );
            self.info.backfill = Backfill::Partial { done_upto: None };
            let mut txn = Transaction::new();
            persist::save_info(&mut txn, &self.info);
            if let Err(e) = self.submit(ctx, txn, Wait::Quiet) {
                tracing::error!("pg {}: {e}", self.id);
            }
            return refuse(ctx, self.id, why);
        }
        self.info.last_epoch_started = act.epoch;
        self.damaged = None;
        persist::save_info(&mut txn, &self.info);
        let wait = Wait::ReplicaActivated {
            primary: from,
            act,
            arrived,
            merged: ctx.now().saturating_sub(arrived),
            entries: taken,
        };
        match self.submit(ctx, txn, wait) {
            Ok(()) => self.replica_act = Some((from, act)),
            Err(e) => refuse(ctx, self.id, format!("cannot persist activation: {e}")),
        }
    }

    /// Merge the authoritative log (or, with a `base`, its entries after
    /// this member's newest) into this complete member's.
    fn merge_as_member(
        &mut self,
        ctx: &mut Ctx<'_>,
        auth: &PgInfo,
        base: Option<&LogBase>,
        entries: Vec<LogEntry>,
        txn: &mut Transaction,
    ) -> Result<(), String> {
        if !self.usable() && self.holds {
            return Err("this copy is incomplete or damaged".into());
        }
        let store = ctx.io.store();
        let pg = self.id;
        let local = |name: &str| {
            persist::object_version(store, &ObjectId::new(pg, name))
                .ok()
                .flatten()
        };
        let Some(base) = base else {
            let merged = log::merge(
                &self.log,
                &self.missing,
                auth.log_tail,
                auth.last_update,
                &entries,
                local,
            )
            .map_err(|e| e.to_string())?;
            for name in &merged.remove {
                txn.remove(&ObjectId::new(pg, name.clone()));
            }
            if merged.rewritten {
                persist::log_rewrite(txn, pg, &merged.log);
            } else {
                for entry in merged.log.entries_after(self.log.head()) {
                    persist::log_append(txn, pg, entry);
                }
            }
            persist::missing_rewrite(txn, pg, &merged.missing);
            self.log = merged.log;
            self.missing = merged.missing;
            self.caught_up();
            return Ok(());
        };
        self.append_after_own_head(ctx, auth, base, entries, txn)
    }

    /// The member's info after taking the authority's log.
    pub(crate) fn caught_up(&mut self) {
        self.info.last_update = self.log.head();
        self.info.log_tail = self.log.tail();
        self.info.backfill = Backfill::Complete;
    }

    /// Take the authoritative log as a backfill target: keep what an
    /// earlier backfill already brought if the log reaches back to it,
    /// else start over.
    fn merge_as_backfill_target(
        &mut self,
        ctx: &mut Ctx<'_>,
        auth: &PgInfo,
        entries: &[LogEntry],
        txn: &mut Transaction,
    ) -> Result<(), String> {
        // From a peer, and taken as this member's log as it is below.
        log::check_order(entries).map_err(|e| e.to_string())?;
        log::check_unique(entries).map_err(|e| e.to_string())?;
        if let Some(early) = entries.first().filter(|e| e.version <= auth.log_tail) {
            return Err(format!(
                "log entry {} at or before the log's tail {}",
                early.version, auth.log_tail
            ));
        }
        let pg = self.id;
        let kept = match (&self.info.backfill, &self.damaged) {
            (Backfill::Partial { done_upto }, None) if self.holds => {
                let store = ctx.io.store();
                let local = |name: &str| {
                    persist::object_version(store, &ObjectId::new(pg, name))
                        .ok()
                        .flatten()
                };
                log::merge(
                    &self.log,
                    &self.missing,
                    auth.log_tail,
                    auth.last_update,
                    entries,
                    local,
                )
                .ok()
                .map(|merged| (done_upto.clone(), merged))
            }
            _ => None,
        };
        let (done_upto, log, missing) = match kept {
            Some((done_upto, merged)) => {
                let covered = Backfill::Partial {
                    done_upto: done_upto.clone(),
                };
                for name in merged.remove.iter().filter(|n| covered.covers(n)) {
                    txn.remove(&ObjectId::new(pg, name.clone()));
                }
                let missing: Missing = merged
                    .missing
                    .into_iter()
                    .filter(|(n, _)| covered.covers(n))
                    .collect();
                (done_upto, merged.log, missing)
            }
            None => (
                None,
                PgLog::with_head(
                    auth.log_tail,
                    entries
                        .last()
                        .map_or(auth.last_update, |e| e.version.max(auth.last_update))
                        .max(auth.log_tail),
                    entries.to_vec(),
                ),
                Missing::new(),
            ),
        };
        persist::log_rewrite(txn, pg, &log);
        persist::missing_rewrite(txn, pg, &missing);
        self.info.last_update = log.head();
        self.info.log_tail = log.tail();
        self.info.backfill = Backfill::Partial { done_upto };
        self.log = log;
        self.missing = missing;
        Ok(())
    }

    pub(crate) fn apply_repop(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        entry: LogEntry,
        data: Option<Transaction>,
    ) {
        let version = entry.version;
        let refuse = |ctx: &mut Ctx<'_>, pg, why: String| {
            ctx.send(
                from,
                pg,
                PgBody::RepOpReply {
                    act,
                    version,
                    result: Err(why),
                },
            );
        };
        if !self.follows(from, act) {
            return refuse(ctx, self.id, format!("not active for osd.{from} as {act}"));
        }
        if version <= self.info.last_update {
            return refuse(ctx, self.id, format!("stale version {version}"));
        }
        if !entry.superseded.is_empty() {
            // A write is one change: folded ones come only with catch-ups.
            let why = format!("write at {version} carries folded entries");
            return refuse(ctx, self.id, why);
        }
        if !self.owns(ctx, &entry.oid) {
            // A primary that has not split yet: the object is a child's.
            let why = format!("object {:?} is not in pg {} any more", entry.oid, self.id);
            return refuse(ctx, self.id, why);
        }
        if data.is_some() && self.missing.contains_key(&entry.oid) {
            tracing::error!(
                "pg {}: a write to {:?}, which this member is missing, reached it",
                self.id,
                entry.oid
            );
            return refuse(
                ctx,
                self.id,
                format!("object {:?} is missing here", entry.oid),
            );
        }
        let lacking = data.is_none() && self.missing.contains_key(&entry.oid);
        let mut txn = data.unwrap_or_default();
        if lacking {
            // An object this member misses was written: it now misses the
            // newer version (or, removed, need not fetch it at all).
            match entry.op {
                LogOp::Modify => {
                    self.missing.insert(entry.oid.clone(), version);
                    persist::missing_add(&mut txn, self.id, &entry.oid, version);
                }
                LogOp::Delete => {
                    self.missing.remove(&entry.oid);
                    persist::missing_remove(&mut txn, self.id, std::slice::from_ref(&entry.oid));
                    txn.remove(&ObjectId::new(self.id, entry.oid.clone()));
                }
            }
        }
        let trim = self.prepare_append(ctx, &entry, &mut txn);
        if let Err(e) = self.submit(
            ctx,
            txn,
            Wait::RepCommit {
                primary: from,
                act,
                version,
            },
        ) {
            tracing::error!("pg {}: replicated write failed: {e}", self.id);
            return refuse(ctx, self.id, e.to_string());
        }
        self.finish_append(entry, trim);
    }

    /// Put `entry` (the next log entry) into `txn`, trimming the log in
    /// batches beyond the configured length (with the info then). Returns
    /// how to trim the log in memory; [`Pg::finish_append`] applies it once
    /// `txn` is submitted.
    pub(crate) fn prepare_append(
        &self,
        ctx: &Ctx<'_>,
        entry: &LogEntry,
        txn: &mut Transaction,
    ) -> Option<Version> {
        persist::log_append(txn, self.id, entry);
        let max = ctx.opts.pg_log_max_entries;
        let added = 1 + entry.superseded.len();
        let trim = if self.log.weight() + added > max + max / 8 + 16 {
            // What stays must weigh `max` with the new entry.
            self.log.trim_point(max.saturating_sub(added))
        } else {
            None
        };
        // The stored info is not rewritten for every entry (Ceph's "fast
        // info"): its last_update may lag the stored log, whose newest
        // entry `persist::load` takes instead. Only a trim, which moves
        // log_tail, saves it.
        if let Some(tail) = trim {
            txn.log_trim(self.id, tail);
            let mut info = self.info.clone();
            info.last_update = entry.version;
            info.log_tail = tail;
            persist::save_info(txn, &info);
        }
        trim
    }

    /// Apply in memory what [`Pg::prepare_append`] put in a submitted
    /// transaction.
    pub(crate) fn finish_append(&mut self, entry: LogEntry, trim: Option<Version>) {
        self.info.last_update = entry.version;
        self.log.append(entry);
        if let Some(tail) = trim {
            self.log.trim_to(tail);
            self.info.log_tail = tail;
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply_push(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        tid: u64,
        objects: Vec<ObjectCopy>,
        removes: Vec<String>,
        backfill_upto: Option<Backfill>,
    ) {
        if !self.follows(from, act) {
            let result = Err(format!("not active for osd.{from} as {act}"));
            return ctx.send(from, self.id, PgBody::PushReply { act, tid, result });
        }
        let foreign = objects
            .iter()
            .map(|c| &c.name)
            .chain(&removes)
            .find(|name| !self.owns(ctx, name));
        if let Some(name) = foreign {
            let result = Err(format!("object {name:?} is not in pg {} any more", self.id));
            return ctx.send(from, self.id, PgBody::PushReply { act, tid, result });
        }
        // A copy older than the version this member needs would be taken
        // as recovered: refused (the primary's bug, never to be stored).
        let stale = objects.iter().find_map(|c| {
            let need = *self.missing.get(&c.name)?;
            (c.version < need).then(|| (c.name.clone(), c.version, need))
        });
        if let Some((name, v, need)) = stale {
            tracing::error!(
                "pg {}: osd.{from} pushed {name:?} at {v}, older than the {need} needed here",
                self.id
            );
            let result = Err(format!("{name:?} pushed at {v}, but {need} is needed"));
            return ctx.send(from, self.id, PgBody::PushReply { act, tid, result });
        }
        let mut txn = Transaction::new();
        let mut done = Vec::with_capacity(objects.len() + removes.len());
        for copy in objects {
            install_copy(&mut txn, self.id, &copy);
            done.push(copy.name);
        }
        for name in removes {
            txn.remove(&ObjectId::new(self.id, name.clone()));
            done.push(name);
        }
        let was_missing: Vec<String> = done
            .into_iter()
            .filter(|n| self.missing.remove(n).is_some())
            .collect();
        persist::missing_remove(&mut txn, self.id, &was_missing);
        if let Some(backfill) = backfill_upto {
            self.info.backfill = backfill;
            persist::save_info(&mut txn, &self.info);
        }
        if let Err(e) = self.submit(
            ctx,
            txn,
            Wait::PushCommit {
                primary: from,
                act,
                tid,
            },
        ) {
            let result = Err(e.to_string());
            ctx.send(from, self.id, PgBody::PushReply { act, tid, result });
        }
    }

    pub(crate) fn answer_pull(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        tid: u64,
        wanted: Vec<(String, Version)>,
    ) {
        if self.mapping.primary() != Some(from) {
            let result = Err(format!("osd.{from} is not this PG's primary"));
            return ctx.send(from, self.id, PgBody::PullReply { act, tid, result });
        }
        if wanted.is_empty() {
            return ctx.send(
                from,
                self.id,
                PgBody::PullReply {
                    act,
                    tid,
                    result: Ok(Vec::new()),
                },
            );
        }
        let key = ctx.id();
        for (index, (name, _)) in wanted.iter().enumerate() {
            if self.missing.contains_key(name) {
                let result = Err(format!("osd.{} does not hold {name:?}", ctx.me));
                return ctx.send(from, self.id, PgBody::PullReply { act, tid, result });
            }
            let id = ctx.id();
            self.waits.insert(
                id,
                Wait::Copy {
                    act,
                    oid: name.clone(),
                    purpose: CopyPurpose::Pull { key, index },
                },
            );
            ctx.io.read_object(
                ObjectId::new(self.id, name.clone()),
                crate::io::Done { pg: self.id, id },
            );
        }
        let n = wanted.len();
        self.pull_answers.insert(
            key,
            PullAnswer {
                to: from,
                act,
                tid,
                wanted,
                copies: vec![None; n],
                pending: n,
                error: None,
            },
        );
    }

    /// A copy read to answer a pull is in.
    pub(crate) fn pull_copy_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        key: u64,
        index: usize,
        result: crate::io::CopyResult,
    ) {
        let Some(answer) = self.pull_answers.get_mut(&key) else {
            return;
        };
        answer.pending -= 1;
        let (name, version) = &answer.wanted[index];
        match result {
            Ok(Some(copy)) if copy.version == *version => answer.copies[index] = Some(copy),
            Ok(Some(copy)) => {
                answer.error = Some(format!("holds {name:?} at {} not {version}", copy.version))
            }
            Ok(None) => answer.error = Some(format!("does not hold {name:?}")),
            Err(e) => answer.error = Some(e.to_string()),
        }
        if answer.pending > 0 {
            return;
        }
        let Some(answer) = self.pull_answers.remove(&key) else {
            return;
        };
        let result = match answer.error {
            Some(e) => Err(format!("osd.{}: {e}", ctx.me)),
            None => Ok(answer.copies.into_iter().flatten().collect()),
        };
        ctx.send(
            answer.to,
            self.id,
            PgBody::PullReply {
                act: answer.act,
                tid: answer.tid,
                result,
            },
        );
    }

    pub(crate) fn answer_scan(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        tid: u64,
        after: Option<String>,
        max: u32,
    ) {
        let result = if !self.follows(from, act) {
            Err(format!("not active for osd.{from} as {act}"))
        } else {
            scan(
                ctx.io.store(),
                self.id,
                after.as_deref(),
                max.min(MAX_SCAN) as usize,
            )
        };
        ctx.send(from, self.id, PgBody::ScanReply { act, tid, result });
    }

    pub(crate) fn answer_reserve(&mut self, ctx: &mut Ctx<'_>, from: OsdId, act: ActId) {
        let result = if self.mapping.primary() != Some(from) {
            Err(format!("osd.{from} is not this PG's primary"))
        } else {
            ctx.slots.reserve_remote(self.id)
        };
        tracing::debug!(
            "osd.{} pg {}: backfill reservation for osd.{from} as {act}: {result:?}",
            ctx.me,
            self.id
        );
        ctx.send(from, self.id, PgBody::Reserved { act, result });
    }

    pub(crate) fn got_release(&mut self, ctx: &mut Ctx<'_>, from: OsdId, act: ActId) {
        tracing::debug!(
            "osd.{} pg {}: release from osd.{from} as {act}",
            ctx.me,
            self.id
        );
        if self.mapping.primary() == Some(from) || self.role != Role::Replica {
            ctx.slots.release_remote(self.id);
        }
    }

    /// The primary says the PG is clean without this copy.
    pub(crate) fn remove_stray(&mut self, ctx: &mut Ctx<'_>, from: OsdId) {
        if self.role != Role::Stray || self.mapping.primary() != Some(from) || self.uncommitted > 0
        {
            return;
        }
        tracing::info!("pg {}: removing this OSD's stray copy", self.id);
        let mut txn = Transaction::new();
        txn.remove_collection(self.id);
        if let Err(e) = self.submit(ctx, txn, Wait::Quiet) {
            return tracing::error!("pg {}: cannot remove stray copy: {e}", self.id);
        }
        self.info = PgInfo::empty(self.id, self.mapping.pg_num);
        self.log = PgLog::default();
        self.missing = Missing::new();
        self.damaged = None;
        self.holds = false;
        self.objects_estimate = 0;
    }
}

/// Put a whole object copy in place of whatever `txn`'s target holds.
pub(crate) fn install_copy(txn: &mut Transaction, pg: cairn_types::PgId, copy: &ObjectCopy) {
    let oid = ObjectId::new(pg, copy.name.clone());
    txn.remove(&oid);
    let Some(data) = &copy.data else {
        return;
    };
    txn.touch(&oid);
    if !data.is_empty() {
        txn.write(&oid, 0, data.clone());
    }
    for (key, value) in &copy.attrs {
        txn.set_attr(&oid, key, value.clone());
    }
    if !copy.omap.is_empty() {
        txn.omap_set(&oid, copy.omap.clone());
    }
    txn.set_attr(&oid, VERSION_ATTR, persist::encode(&copy.version));
}

/// Client objects of `pg` named after `after`, at most `max`, in name order,
/// with their versions; and whether that is all of them.
pub(crate) fn scan(
    store: &dyn cairn_store::ObjectStore,
    pg: cairn_types::PgId,
    after: Option<&str>,
    max: usize,
) -> Result<(Vec<(String, Version)>, bool), String> {
    let names = store.list_objects(pg).map_err(|e| e.to_string())?;
    let start = match after {
        Some(a) => names.partition_point(|n| n.as_str() <= a),
        None => 0,
    };
    let mut out = Vec::with_capacity(max.min(names.len()));
    let mut rest = names[start..].iter().filter(|n| !persist::is_internal(n));
    for name in rest.by_ref() {
        let version = persist::object_version(store, &ObjectId::new(pg, name.clone()))?
            .ok_or_else(|| format!("object {name:?} vanished during a scan"))?;
        out.push((name.clone(), version));
        if out.len() == max {
            break;
        }
    }
    let done = rest.next().is_none();
    Ok((out, done))
}
