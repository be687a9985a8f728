//! Catch-up before boot, per PG: the acting primary answers an OSD that
//! is starting again (still down in the map) with its log after that
//! OSD's newest entry, and the starting OSD appends it.
//!
//! Taking the entries is what activation does for a member whose log the
//! authority's extends (`replica::merge_as_member` with a base): the same
//! check that the log ends at `base`, the same append, the objects written
//! since counted missing. Nothing else changes: the copy stays a stray
//! with its `last_epoch_started`, so it can never be chosen as authority
//! over the members that served meanwhile, and the entries it took are
//! history to every later peering (or divergent, and rolled back then, as
//! a replica's unacknowledged writes are). The gain is that the peering at
//! boot, which clients wait for, merges only what was written since.
//!
//! Must never: append to a log that no longer ends at `base`, or take
//! entries once this OSD is up (peering owns the log from then on; the
//! core drops late answers).

use cairn_store::{ObjectId, Transaction};
use cairn_types::OsdId;
use cairn_wire::{LogBase, LogEntry, PgBody, PgInfo};

use super::{log, persist, Ctx, Pg, Phase, Role, Wait};

impl Pg {
    /// Where this copy's log ends, if it may catch up before boot: a
    /// complete, undamaged copy with a log.
    pub(crate) fn catch_up_base(&self) -> Option<LogBase> {
        if !self.holds || !self.usable() {
            return None;
        }
        let head = self.log.head();
        let entry = self.log.get(head)?;
        Some(LogBase {
            version: head,
            oid: entry.oid.clone(),
        })
    }

    /// As the acting primary: send `from` this log after `base`.
    pub(crate) fn answer_catch_up(&mut self, ctx: &mut Ctx<'_>, from: OsdId, base: LogBase) {
        let result = if self.role != Role::Primary || !matches!(self.phase, Phase::Active) {
            Err(format!("osd.{} is not the active primary", ctx.me))
        } else if ctx.map.is_up(from) {
            Err(format!("osd.{from} is up: it catches up by peering"))
        } else {
            match self.log.get(base.version) {
                Some(e) if e.oid == base.oid => Ok((
                    self.info.clone(),
                    log::compact(self.log.entries_after(base.version), base.version),
                )),
                _ => Err(format!(
                    "{} ({:?}) is not in this log ({}..{})",
                    base.version,
                    base.oid,
                    self.log.tail(),
                    self.log.head()
                )),
            }
        };
        ctx.answer(from, self.id, PgBody::CatchUpLog { base, result });
    }

    /// As an OSD starting again: append the acting primary's entries after
    /// `base`. Returns how many changes were taken.
    pub(crate) fn take_catch_up(
        &mut self,
        ctx: &mut Ctx<'_>,
        base: &LogBase,
        auth: &PgInfo,
        entries: Vec<LogEntry>,
    ) -> Result<usize, String> {
        if self.role != Role::Stray {
            return Err(format!("this OSD is a {:?} of the PG now", self.role));
        }
        if !self.holds || !self.usable() {
            return Err("this copy is incomplete or damaged".into());
        }
        if auth.pg_num != self.info.pg_num {
            return Err(format!(
                "the primary's copy is split for pg_num {}, this one for {}",
                auth.pg_num, self.info.pg_num
            ));
        }
        let taken = entries.iter().map(|e| 1 + e.superseded.len()).sum();
        let mut txn = Transaction::new();
        self.append_after_own_head(ctx, auth, base, entries, &mut txn)?;
        persist::save_info(&mut txn, &self.info);
        self.submit(ctx, txn, Wait::Quiet)
            .map_err(|e| format!("cannot persist the catch-up: {e}"))?;
        Ok(taken)
    }

    /// Append `entries`, the authority's log after `base`, into `txn` and
    /// memory: objects they change become missing, objects they remove go.
    /// This log must end exactly at `base`, with the same entry: then the
    /// authority's log is ours followed by them (nothing of ours diverges)
    /// and ours only grows.
    pub(crate) fn append_after_own_head(
        &mut self,
        ctx: &mut Ctx<'_>,
        auth: &PgInfo,
        base: &LogBase,
        entries: Vec<LogEntry>,
        txn: &mut Transaction,
    ) -> Result<(), String> {
        let ours = self.log.get(base.version).map(|e| e.oid.as_str());
        if self.log.head() != base.version || ours != Some(base.oid.as_str()) {
            return Err(format!(
                "its log ends at {} ({ours:?}), not at {} ({:?})",
                self.log.head(),
                base.version,
                base.oid
            ));
        }
        let store = ctx.io.store();
        let pg = self.id;
        let local = |name: &str| {
            persist::object_version(store, &ObjectId::new(pg, name))
                .ok()
                .flatten()
        };
        let appended = log::append_after_head(&self.log, &self.missing, &entries, local)
            .map_err(|e| e.to_string())?;
        for name in &appended.remove {
            txn.remove(&ObjectId::new(pg, name.clone()));
        }
        for entry in entries {
            persist::log_append(txn, pg, &entry);
            self.log.append(entry);
        }
        self.log.advance_head(auth.last_update);
        persist::missing_rewrite(txn, pg, &appended.missing);
        self.missing = appended.missing;
        self.caught_up();
        Ok(())
    }
}
