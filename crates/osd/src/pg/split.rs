//! Splitting this OSD's copy of a PG when its pool's pg_num grows.
//!
//! A PG of a pool with `n` PGs holds the objects whose placement hash
//! modulo `n` is its seed; under `N = n·2^k` they spread over the seeds
//! `seed + i·n`. Every OSD holding a copy splits it when it first sees a
//! map with the larger pg_num (a member down at the time, when it
//! returns), before the map reaches any PG: objects move to the child
//! collections (the store's `SplitCollection`, decided when it applies,
//! so writes still in flight move too), and each child takes the parent's
//! info (last_update, log tail, backfill progress, scrub stamps) with the
//! log entries and missing objects of its own objects. A child's log
//! head is the parent's: peering compares members by it, and all copies
//! of a child then compare as their parents did.
//!
//! All of it is one store transaction, so a crash leaves the copy wholly
//! unsplit (split again on restart) or wholly split. The child's
//! peering, with its history seeded from the parent's by the monitor,
//! finds these copies wherever CRUSH now places the child; backfill moves
//! them there.

use cairn_store::{split_destination, Transaction};
use cairn_types::PgId;
use cairn_wire::PgInfo;

use super::log::Missing;
use super::{persist, Ctx, Pg, Wait};

impl Pg {
    /// Split this copy for the pool's new `pg_num`; returns the child
    /// PGs (none if this OSD holds nothing to split). The copy must not
    /// have been split for `pg_num` already.
    pub(crate) fn split(&mut self, ctx: &mut Ctx<'_>, pg_num: u32) -> Vec<Pg> {
        let old = self.info.pg_num;
        assert!(
            old < pg_num && pg_num.is_power_of_two(),
            "pg {}: split from pg_num {old} to {pg_num}",
            self.id
        );
        self.info.pg_num = pg_num;
        if !self.holds || old == 0 {
            return Vec::new();
        }
        assert!(
            old.is_power_of_two() && self.id.seed < old,
            "pg {}: split of a copy made for pg_num {old}",
            self.id
        );
        if let Some(why) = &self.damaged {
            // Its state cannot be read, so not split either: the copy is
            // rebuilt from peers, and backfill drops the objects that
            // belong elsewhere.
            tracing::warn!("pg {}: not splitting a damaged copy ({why})", self.id);
            return Vec::new();
        }
        let parent = self.id;
        let dest = |name: &str| split_destination(parent, pg_num, name).unwrap_or(parent);
        let mut txn = Transaction::new();
        txn.split_collection(parent, pg_num);
        let mut children = Vec::new();
        for seed in (parent.seed + old..pg_num).step_by(old as usize) {
            let child = PgId::new(parent.pool, seed);
            let log = self.log.split_off(|e| dest(&e.oid) != child);
            let missing: Missing = self
                .missing
                .iter()
                .filter(|(name, _)| dest(name) == child)
                .map(|(name, v)| (name.clone(), *v))
                .collect();
            self.missing.retain(|name, _| dest(name) != child);
            let info = PgInfo {
                pg: child,
                ..self.info.clone()
            };
            persist::save_info(&mut txn, &info);
            persist::log_rewrite(&mut txn, child, &log);
            persist::missing_rewrite(&mut txn, child, &missing);
            children.push(Pg::from_parts(child, info, log, missing, true));
        }
        persist::log_rewrite(&mut txn, parent, &self.log);
        persist::missing_rewrite(&mut txn, parent, &self.missing);
        persist::save_info(&mut txn, &self.info);
        self.inconsistent.retain(|i| dest(&i.name) == parent);
        tracing::info!(
            "pg {parent}: split for pg_num {pg_num} into {} more PGs",
            children.len()
        );
        if let Err(e) = self.submit(ctx, txn, Wait::Quiet) {
            // Nothing was applied: the copy stays unsplit on disk, so it
            // must not be served split either.
            tracing::error!("pg {parent}: cannot split: {e}; this copy is rebuilt from peers");
            self.damaged = Some(format!("split failed: {e}"));
            return Vec::new();
        }
        // Each child answers peering only once the split is durable (a
        // member reports only what it would still hold after a crash):
        // a transaction of its own, committed after the split, says when.
        for child in &mut children {
            let mut txn = Transaction::new();
            persist::save_info(&mut txn, &child.info);
            if let Err(e) = child.submit(ctx, txn, Wait::Quiet) {
                tracing::error!("pg {}: cannot persist the split: {e}", child.id);
                child.damaged = Some(format!("split failed: {e}"));
            }
        }
        children
    }
}
