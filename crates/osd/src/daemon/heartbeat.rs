//! Heartbeats between OSDs on the cluster network, as Ceph's OSDs send
//! them. The monitor's heartbeats travel on the public network; these find
//! a peer that is up in the map but cannot be reached where replication
//! happens (its cluster link cut, or it hangs).
//!
//! Every heartbeat interval this OSD pings its *peers* — the up OSDs that
//! share a PG with it in CRUSH's placement or an acting set, at most
//! [`MAX_PEERS`] — on the connections it uses for PG messages, and notes
//! their pongs. A peer silent for the grace (`mon.osd_heartbeat_grace_ms`)
//! is reported to the monitor every interval while it stays silent (the
//! monitor decides, counting reporters per failure domain), and its
//! connection is dropped at most once per grace so that the next ping
//! connects afresh instead of waiting on a TCP connection whose
//! retransmissions backed off during the cut.
//!
//! An OSD the map marks down while it lives boots again only once at
//! least a third of its peers answer ([`Heartbeats::healthy`], Ceph's
//! `osd_heartbeat_min_healthy_ratio`): one cut off from the cluster network
//! stays down instead of flapping up and down.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_map::ClusterMap;
use cairn_types::{Epoch, OsdId};
use cairn_wire::Message;
use parking_lot::Mutex;

use super::Osd;

/// Most peers one OSD sends heartbeats to.
pub const MAX_PEERS: usize = 1024;

/// What this OSD knows of its peers' heartbeats.
pub(crate) struct Heartbeats {
    grace: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The map epoch `peers` was chosen for.
    epoch: Epoch,
    peers: HashMap<OsdId, Beat>,
}

struct Beat {
    /// The peer's `up_from` when it became a peer: a restarted peer is
    /// waited for afresh.
    incarnation: Epoch,
    /// When this OSD started pinging it.
    since: Instant,
    last_pong: Option<Instant>,
    /// When its connection was last dropped for silence.
    dropped_at: Option<Instant>,
}

impl Beat {
    fn silent_for(&self, now: Instant) -> Duration {
        now.duration_since(self.last_pong.unwrap_or(self.since))
    }
}

/// What one heartbeat round does.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Round {
    /// Peers to ping.
    pub ping: Vec<OsdId>,
    /// Peers silent for longer than the grace, with for how long (ms).
    pub silent: Vec<(OsdId, u64)>,
    /// Silent peers whose connections to drop now.
    pub drop_links: Vec<OsdId>,
}

impl Heartbeats {
    pub fn new(grace: Duration) -> Self {
        Heartbeats {
            grace,
            state: Mutex::new(State::default()),
        }
    }

    /// One round at `now` under `map`: choose the peers again if the map
    /// changed, and say whom to ping, report and disconnect.
    pub fn round(&self, map: &ClusterMap, me: OsdId, now: Instant) -> Round {
        let mut st = self.state.lock();
        if st.epoch != map.epoch {
            let chosen = peers_of(map, me);
            st.peers.retain(|osd, beat| {
                chosen.contains(osd)
                    && map.osds.get(osd).map(|o| o.up_from) == Some(beat.incarnation)
            });
            for osd in chosen {
                st.peers.entry(osd).or_insert_with(|| Beat {
                    incarnation: map.osds.get(&osd).map_or(0, |o| o.up_from),
                    since: now,
                    last_pong: None,
                    dropped_at: None,
                });
            }
            st.epoch = map.epoch;
        }
        let mut round = Round::default();
        for (&osd, beat) in st.peers.iter_mut() {
            round.ping.push(osd);
            let silent = beat.silent_for(now);
            if silent <= self.grace {
                continue;
            }
            round.silent.push((osd, silent.as_millis() as u64));
            if beat
                .dropped_at
                .is_none_or(|at| now.duration_since(at) > self.grace)
            {
                beat.dropped_at = Some(now);
                round.drop_links.push(osd);
            }
        }
        round.ping.sort_unstable();
        round.silent.sort_unstable();
        round.drop_links.sort_unstable();
        round
    }

    /// `osd` answered a ping.
    pub fn pong(&self, osd: OsdId, now: Instant) {
        if let Some(beat) = self.state.lock().peers.get_mut(&osd) {
            beat.last_pong = Some(now);
            beat.dropped_at = None;
        }
    }

    /// Have at least a third of the peers answered within the grace? (An
    /// OSD with no peers is healthy.)
    pub fn healthy(&self, now: Instant) -> bool {
        let st = self.state.lock();
        let heard = st
            .peers
            .values()
            .filter(|b| b.last_pong.is_some() && b.silent_for(now) <= self.grace)
            .count();
        heard * 3 >= st.peers.len()
    }
}

/// The up OSDs sharing a PG with `me` in CRUSH's placement or an acting
/// set (at most [`MAX_PEERS`]). CRUSH's placement keeps a down OSD's
/// peers, so it can tell whether it may boot again.
fn peers_of(map: &ClusterMap, me: OsdId) -> BTreeSet<OsdId> {
    let mut peers = BTreeSet::new();
    for pg in map.all_pgs() {
        let raw = map.raw_placement(pg);
        let acting = map.acting(pg).osds;
        if !raw.contains(&me) && !acting.contains(&me) {
            continue;
        }
        let others = raw.iter().chain(&acting).copied();
        peers.extend(others.filter(|&o| o != me && map.is_up(o)));
        if peers.len() >= MAX_PEERS {
            break;
        }
    }
    peers
}

impl Osd {
    /// Ping peers every heartbeat interval; report silent ones.
    pub(crate) async fn peer_heartbeat_loop(self: Arc<Self>) {
        let mut interval = tokio::time::interval(self.opts.heartbeat_interval);
        let mut nonce = 0u64;
        loop {
            interval.tick().await;
            let map = self.map.read().clone();
            if map.epoch == 0 {
                continue;
            }
            let round = self.heartbeats.round(&map, self.id(), Instant::now());
            for &osd in &round.drop_links {
                tracing::info!(
                    "osd.{}: osd.{osd} silent on the cluster network; reconnecting",
                    self.id()
                );
                self.peers.drop_link(osd);
            }
            for &osd in &round.ping {
                nonce += 1;
                self.peers.ping(osd, nonce);
            }
            if round.silent.is_empty() || !map.is_up(self.id()) {
                continue;
            }
            let Some(mon) = self.mon.lock().clone() else {
                continue;
            };
            for (target, silent_ms) in round.silent {
                mon.send(Message::OsdFailure {
                    reporter: self.id(),
                    target,
                    silent_ms,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use cairn_map::WEIGHT_ONE;

    use super::*;

    fn map() -> ClusterMap {
        let mut map = ClusterMap::new("test".into());
        for id in 0..4 {
            map.osd_boot(id, format!("127.0.0.1:{id}"), WEIGHT_ONE);
        }
        map.create_pool("rbd", 3, 2, 16).unwrap();
        map.epoch = 5;
        map
    }

    #[test]
    fn silent_peers_are_reported_and_disconnected_once_per_grace() {
        let map = map();
        let grace = Duration::from_secs(3);
        let hb = Heartbeats::new(grace);
        let t0 = Instant::now();
        let first = hb.round(&map, 0, t0);
        assert_eq!(first.ping, vec![1, 2, 3]);
        assert!(first.silent.is_empty() && first.drop_links.is_empty());
        assert!(!hb.healthy(t0), "nobody answered yet");
        hb.pong(1, t0 + Duration::from_secs(1));
        assert!(
            hb.healthy(t0 + Duration::from_secs(1)),
            "one of three answered"
        );
        let later = hb.round(&map, 0, t0 + Duration::from_secs(4));
        assert_eq!(later.silent, vec![(2, 4000), (3, 4000)]);
        assert_eq!(later.drop_links, vec![2, 3]);
        let again = hb.round(&map, 0, t0 + Duration::from_secs(5));
        assert_eq!(again.silent.len(), 3, "osd.1 silent too by now");
        assert_eq!(
            again.drop_links,
            vec![1],
            "2 and 3 were dropped within the grace"
        );
        assert!(!hb.healthy(t0 + Duration::from_secs(5)));
    }

    #[test]
    fn a_restarted_peer_is_waited_for_afresh_and_down_ones_are_left_out() {
        let mut map = map();
        let hb = Heartbeats::new(Duration::from_secs(3));
        let t0 = Instant::now();
        hb.round(&map, 0, t0);
        map.mark_down(3);
        map.epoch += 1;
        assert_eq!(hb.round(&map, 0, t0).ping, vec![1, 2]);
        // Marked down, osd.0 keeps its CRUSH peers to judge its health by.
        map.mark_down(0);
        map.epoch += 1;
        assert_eq!(hb.round(&map, 0, t0).ping, vec![1, 2]);
        map.osd_boot(3, "127.0.0.1:3".into(), WEIGHT_ONE);
        map.epoch += 1;
        let t1 = t0 + Duration::from_secs(10);
        let round = hb.round(&map, 0, t1);
        assert_eq!(round.ping, vec![1, 2, 3]);
        assert!(!round.silent.iter().any(|(o, _)| *o == 3), "{round:?}");
    }
}
