//! [`Ctx`]: what a PG reaches the world through while it handles one
//! event (store, peers, clients, monitor, clock), and [`MonRequests`], the
//! monitor requests its OSD has in flight. Owns no PG state; decides
//! nothing for a PG.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_map::ClusterMap;
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::{OpError, OsdOpReply, PgBody, PgMessage};

use super::tier;
use crate::io::{ClientId, OsdIo};
use crate::slots::Slots;
use crate::CoreOptions;

/// What a PG needs from its OSD while handling one event.
pub(crate) struct Ctx<'a> {
    pub me: OsdId,
    pub map: &'a Arc<ClusterMap>,
    pub opts: &'a CoreOptions,
    pub io: &'a mut dyn OsdIo,
    pub next_id: &'a mut u64,
    pub slots: &'a mut Slots,
    /// Where this OSD's client writes spent their time, as primary.
    pub write_times: &'a mut crate::WriteTimes,
    pub requests: &'a mut MonRequests,
    /// Flushes the cache-tier agents of this OSD have in flight, counted
    /// at each tick ([`tier::agent`]).
    pub agent_flushes: usize,
    /// The cache pools' totals from the monitor ([`tier::fullness`]).
    pub tier_usage: &'a tier::fullness::TierUsage,
    /// Answers to the cache tier's own writes ([`tier::TIER_CLIENT`]),
    /// handed to their PG once the event is handled.
    pub tier_replies: Vec<(PgId, u64, Result<Vec<cairn_wire::OpOutput>, OpError>)>,
}

impl Ctx<'_> {
    /// Answer a client op; the cache tier's own go to `tier_replies`.
    pub fn reply_to(&mut self, pg: PgId, client: ClientId, reply: OsdOpReply) {
        if client == tier::TIER_CLIENT {
            self.tier_replies.push((pg, reply.tid, reply.result));
        } else {
            self.io.reply(client, reply);
        }
    }
}

/// What this OSD last asked the monitor, so that its PGs do not repeat it
/// (it is asked again after `peering_retry`, in case it was lost).
#[derive(Debug, Default)]
pub(crate) struct MonRequests {
    pub up_thru: Epoch,
    up_thru_at: Duration,
    pg_temp: HashMap<PgId, (Vec<OsdId>, Epoch, Duration)>,
}

impl Ctx<'_> {
    pub fn request_up_thru(&mut self, epoch: Epoch) {
        let now = self.io.now();
        let r = &mut *self.requests;
        if epoch > r.up_thru || now >= r.up_thru_at + self.opts.peering_retry {
            r.up_thru = r.up_thru.max(epoch);
            r.up_thru_at = now;
            self.io.request_up_thru(epoch);
        }
    }

    pub fn request_pg_temp(&mut self, pg: PgId, osds: Vec<OsdId>) {
        let now = self.io.now();
        let epoch = self.map.epoch;
        let retry = self.opts.peering_retry;
        let fresh = self
            .requests
            .pg_temp
            .get(&pg)
            .is_some_and(|(o, e, at)| *o == osds && *e == epoch && now < *at + retry);
        if !fresh {
            self.requests.pg_temp.insert(pg, (osds.clone(), epoch, now));
            self.io.request_pg_temp(pg, osds);
        }
    }

    pub fn id(&mut self) -> u64 {
        *self.next_id += 1;
        *self.next_id
    }

    pub fn send(&mut self, to: OsdId, pg: PgId, body: PgBody) {
        let epoch = self.map.epoch;
        self.io.send(to, PgMessage { pg, epoch, body });
    }

    /// Answer `to`'s request on the connection it came on (see
    /// [`OsdIo::answer`]).
    pub fn answer(&mut self, to: OsdId, pg: PgId, body: PgBody) {
        let epoch = self.map.epoch;
        self.io.answer(to, PgMessage { pg, epoch, body });
    }

    pub fn now(&self) -> Duration {
        self.io.now()
    }
}
