//! The tiering agent of one cache PG, run on its primary at every tick:
//! it flushes dirty objects older than `cache_min_flush_age` once the
//! dirty share of the target passes `cache_target_dirty_ratio` (more at
//! once above `cache_target_dirty_high_ratio`), and evicts clean objects
//! not accessed for `cache_min_evict_age`, least recent first, once the
//! cache is fuller than `cache_target_full_ratio`. A draining cache (mode
//! none) flushes and evicts everything. Its work is bounded: a few objects
//! in flight per PG, so client ops keep their share.
//!
//! Targets are per pool, and a PG judges how full the cache is by the
//! pool's totals ([`fullness`]). At the target itself the PG is *full*:
//! it takes no new object (ops on objects it does not hold go to the base
//! pool) until the agents have made room.

use cairn_map::tier::RATIO_ONE;
use cairn_map::CacheMode;

use super::{cache_of, fullness};
use crate::pg::{Ctx, Pg};

/// Flushes or evictions one PG's agent has in flight, at most, by urgency.
pub const AGENT_OPS_LOW: usize = 1;
pub const AGENT_OPS_HIGH: usize = 4;

/// Flushes every agent of one OSD has in flight together, at most (Ceph's
/// `osd_agent_max_ops`); below the high ratio they take only the first
/// [`AGENT_OSD_FLUSHES_LOW`] of them (`osd_agent_max_low_ops`). A flush
/// is a write to the base pool, whose disks are the slow ones: without
/// this bound, every PG flushing at once buries their queues and every
/// client op waiting behind them.
pub const AGENT_OSD_FLUSHES: usize = 4;
pub const AGENT_OSD_FLUSHES_LOW: usize = 2;

/// How often an idle agent looks again.
pub const AGENT_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

impl Pg {
    /// How full this cache PG counts as ([`fullness::levels`]); `None`
    /// before its objects are counted or when its pool is no cache.
    fn tier_levels(&self, ctx: &Ctx<'_>) -> Option<fullness::Levels> {
        let tier = self.primary.as_ref().and_then(|p| p.tier.as_ref())?;
        let ix = tier.index.as_ref()?;
        let pool = ctx.map.pool(self.id.pool)?;
        let here = fullness::Contents {
            objects: ix.objects(),
            bytes: ix.bytes(),
            dirty: ix.dirty(),
            dirty_bytes: ix.dirty_bytes(),
        };
        Some(fullness::levels(
            &pool.tier.params,
            pool.pg_num,
            here,
            tier.reported,
            ctx.tier_usage.get(self.id.pool, ctx.io.now()),
        ))
    }

    /// Is this cache PG full: takes it no new object?
    pub(crate) fn tier_full(&self, ctx: &Ctx<'_>) -> bool {
        self.tier_levels(ctx).is_some_and(|l| l.is_full())
    }

    /// Run the agent if due: every [`AGENT_IDLE`] when it has nothing to
    /// do, at every tick while it works.
    pub(crate) fn tier_agent_tick(&mut self, ctx: &mut Ctx<'_>) {
        // A sweep's objects put back (busy then) are tried again.
        self.kick_sweep(ctx);
        let now = ctx.io.now();
        let Some(tier) = self.tier_mut() else {
            return;
        };
        if now < tier.agent_at {
            return;
        }
        self.tier_agent(ctx);
        if let Some(tier) = self.tier_mut() {
            let working = tier.agent_flushing + tier.agent_evicting > 0;
            tier.agent_at = now
                + if working {
                    std::time::Duration::ZERO
                } else {
                    AGENT_IDLE
                };
        }
    }

    /// One round of the agent.
    pub(crate) fn tier_agent(&mut self, ctx: &mut Ctx<'_>) {
        if !self.is_active() || !self.missing.is_empty() {
            return;
        }
        let Some((_, mode, params)) = cache_of(ctx, self.id.pool) else {
            return;
        };
        let now = ctx.io.wall_secs();
        let pg = self.id;
        let store = ctx.io.store();
        let _ = self.tier_mut(); // made on first use
        let lasting = &self.tier_lasting.base_inflight;
        let Some(tier) = self.primary.as_mut().and_then(|p| p.tier.as_deref_mut()) else {
            return;
        };
        if tier.index.is_none() {
            match super::index::Index::load(store, pg, now) {
                Ok(ix) => tier.index = Some(ix),
                Err(e) => {
                    tracing::warn!("pg {pg}: tiering agent: {e}");
                    return;
                }
            }
        }
        let Some(levels) = self.tier_levels(ctx) else {
            return;
        };
        let Some(tier) = self.primary.as_mut().and_then(|p| p.tier.as_deref_mut()) else {
            return;
        };
        let Some(ix) = tier.index.as_ref() else {
            return;
        };
        let draining = mode == CacheMode::None;
        let (dirty, full) = (levels.dirty, levels.full);
        let flush_ops = if draining || dirty > u64::from(params.cache_target_dirty_high_ratio) {
            AGENT_OPS_HIGH
        } else if dirty > u64::from(params.cache_target_dirty_ratio) {
            AGENT_OPS_LOW
        } else {
            0
        };
        let evict_ops = if draining || full >= u64::from(RATIO_ONE) {
            AGENT_OPS_HIGH
        } else if full > u64::from(params.cache_target_full_ratio) {
            AGENT_OPS_LOW
        } else {
            0
        };
        tier.counters.flushing = flush_ops > 0;
        tier.counters.evicting = evict_ops > 0;
        tier.counters.full = levels.is_full();
        let room = |wanted: usize, active: usize| wanted.saturating_sub(active);
        let busy = &tier.busy;
        let flush_age = if draining {
            0
        } else {
            u64::from(params.cache_min_flush_age)
        };
        let evict_age = if draining {
            0
        } else {
            u64::from(params.cache_min_evict_age)
        };
        let pending = |n: &str| busy.contains_key(n) || lasting.contains_key(n);
        // The OSD's budget, shared by its PGs' agents this tick.
        let osd_room = if flush_ops >= AGENT_OPS_HIGH {
            AGENT_OSD_FLUSHES
        } else {
            AGENT_OSD_FLUSHES_LOW
        }
        .saturating_sub(ctx.agent_flushes);
        let flush = ix.flush_candidates(
            now,
            flush_age,
            room(flush_ops, tier.agent_flushing).min(osd_room),
            pending,
        );
        ctx.agent_flushes += flush.len();
        let evict = ix.evict_candidates(
            now,
            evict_age,
            room(evict_ops, tier.agent_evicting),
            pending,
        );
        tier.agent_flushing += flush.len();
        tier.agent_evicting += evict.len();
        // A flush goes ahead beside writes in flight (it sends what is
        // committed, and marks clean only if nothing came after it), so a
        // hot object is not kept from the base pool for ever.
        for oid in flush {
            self.flush(ctx, &oid, false, None, super::Origin::AgentFlush);
        }
        for oid in evict {
            if self.object_pending(&oid) {
                if let Some(t) = self.tier_mut() {
                    t.agent_evicting -= 1;
                }
                continue;
            }
            self.evict(ctx, &oid, None, super::Origin::AgentEvict);
        }
    }

    /// The agent's flushes in flight on this PG.
    pub fn agent_flushes(&self) -> usize {
        self.primary
            .as_ref()
            .and_then(|p| p.tier.as_ref())
            .map_or(0, |t| t.agent_flushing)
    }

    /// Has `oid` writes in flight?
    fn object_pending(&self, oid: &str) -> bool {
        self.primary
            .as_ref()
            .and_then(|p| p.objects.get(oid))
            .is_some_and(|o| o.pending_writes > 0)
    }
}
