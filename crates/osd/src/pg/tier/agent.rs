//! The tiering agent of one cache PG, run on its primary at every tick:
//! it flushes dirty objects older than `cache_min_flush_age` once the
//! dirty share of the target passes `cache_target_dirty_ratio` (more at
//! once above `cache_target_dirty_high_ratio`), and evicts clean objects
//! not accessed for `cache_min_evict_age`, least recent first, once the
//! cache is fuller than `cache_target_full_ratio`. A draining cache (mode
//! none) flushes and evicts everything. Its work is bounded: a few objects
//! in flight per PG, so client ops keep their share.
//!
//! Targets are per pool; a PG takes its share (`target / pg_num`). At the
//! target itself the PG is *full*: it takes no new object (ops on objects
//! it does not hold go to the base pool) until the agent has made room.

use cairn_map::tier::RATIO_ONE;
use cairn_map::{CacheMode, TierParams};

use super::cache_of;
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

/// How full a PG is against its share of the targets, in millionths
/// (`None`: no target set).
fn ratio(n: u64, target: u64, pg_num: u32) -> Option<u64> {
    if target == 0 {
        return None;
    }
    let share = (target / u64::from(pg_num.max(1))).max(1);
    Some(n.saturating_mul(u64::from(RATIO_ONE)) / share)
}

/// The larger of the object and byte ratios.
fn worst(objects: u64, bytes: u64, p: &TierParams, pg_num: u32) -> Option<u64> {
    let a = ratio(objects, p.target_max_objects, pg_num);
    let b = ratio(bytes, p.target_max_bytes, pg_num);
    a.max(b)
}

impl Pg {
    /// Is this cache PG at its share of the targets?
    pub(crate) fn tier_full(&self, ctx: &Ctx<'_>) -> bool {
        let (Some(tier), Some(pool)) = (
            self.primary.as_ref().and_then(|p| p.tier.as_ref()),
            ctx.map.pool(self.id.pool),
        ) else {
            return false;
        };
        let Some(ix) = tier.index.as_ref() else {
            return false;
        };
        worst(ix.objects(), ix.bytes(), &pool.tier.params, pool.pg_num)
            .is_some_and(|r| r >= u64::from(RATIO_ONE))
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
        let pg_num = ctx.map.pool(self.id.pool).map_or(1, |p| p.pg_num);
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
        let Some(ix) = tier.index.as_ref() else {
            return;
        };
        let draining = mode == CacheMode::None;
        let dirty = worst(ix.dirty(), ix.dirty_bytes(), &params, pg_num).unwrap_or(0);
        let full = worst(ix.objects(), ix.bytes(), &params, pg_num).unwrap_or(0);
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
        tier.counters.full = full >= u64::from(RATIO_ONE);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_per_pg_shares_of_the_targets() {
        let p = TierParams {
            target_max_objects: 800,
            target_max_bytes: 8 << 20,
            ..TierParams::default()
        };
        // 8 PGs: 100 objects and 1 MiB each.
        assert_eq!(worst(50, 0, &p, 8), Some(500_000));
        assert_eq!(worst(10, 1 << 20, &p, 8), Some(1_000_000));
        assert_eq!(worst(10, 0, &TierParams::default(), 8), None);
    }
}
