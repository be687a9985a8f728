//! The monitor: sole owner and writer of the cluster map.
//!
//! It registers booting OSDs, marks silent or disconnected ones down (and,
//! after a longer interval, out), as well as ones their peers report
//! silent on the cluster network ([`failure`]), creates and removes pools,
//! persists every new epoch in its [`store`] before publishing it, and
//! pushes each epoch to every subscriber. It also gathers the PG states
//! that primaries report in their heartbeats, for `cairn status`, and each
//! OSD's used and total space, which it judges against the full ratios
//! (`full`), recording in the map which OSDs are nearfull, backfillfull or
//! full. It never touches object data.
//!
//! One monitor serves a cluster for now; a Raft quorum will replace
//! [`store::MapStore`] without changing the map model.

mod commands;
mod config;
mod crush_commands;
mod df;
mod failure;
mod full;
mod health;
mod options;
mod pool_stats;
pub mod store;
mod tier;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_map::crush::{CrushError, CrushMap};
use cairn_map::{ClusterMap, OsdUsage};
use cairn_types::{OsdId, PgId};
use cairn_wire::{Connection, Message, PgStat, Sender, WireError};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use tokio::net::TcpListener;

pub use config::ConfigSchema;
pub use options::MonOptions;
pub use store::{MapStore, MonStoreError};

#[derive(Debug, thiserror::Error)]
pub enum MonError {
    #[error(transparent)]
    Store(#[from] MonStoreError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot make the new cluster's CRUSH map: {0}")]
    Crush(#[from] CrushError),
}

pub struct Monitor {
    /// The running options: the file's, with the configuration database
    /// applied ([`config`]).
    opts: RwLock<MonOptions>,
    /// The option schema, once installed.
    config: std::sync::OnceLock<Arc<dyn ConfigSchema>>,
    state: Mutex<MonState>,
}

struct OsdSession {
    session: u64,
    last_heartbeat: Instant,
}

pub(crate) struct MonState {
    map: Arc<ClusterMap>,
    store: MapStore,
    subscribers: Vec<Sender>,
    sessions: HashMap<OsdId, OsdSession>,
    down_since: HashMap<OsdId, Instant>,
    /// Peers' reports of OSDs silent on the cluster network.
    failures: failure::FailureReports,
    pg_stats: HashMap<PgId, PgStat>,
    /// Recent per-pool counters, for `pool stats` rates.
    pool_samples: pool_stats::PoolSamples,
    /// Each OSD's recovery counters, as it last reported them.
    pub(crate) osd_counters: HashMap<OsdId, cairn_wire::RecoveryCounters>,
    /// Each OSD's latest reported usage.
    usage: HashMap<OsdId, OsdUsage>,
    /// PGs whose primary reported them recovered while they had history:
    /// trimmed together at the next tick.
    to_trim: HashSet<PgId>,
    /// pg_temp requests waiting for the batch to be published, newest
    /// per PG, with the OSD that asked.
    pending_pg_temp: HashMap<PgId, (OsdId, Vec<OsdId>)>,
    /// Whether a task will publish `pending_pg_temp`.
    pg_temp_flush_due: bool,
    /// The newest maps, oldest first, so a subscriber that fell behind
    /// gets every epoch it missed (OSDs detect intervals epoch by epoch).
    recent: VecDeque<Arc<ClusterMap>>,
    next_session: u64,
}

/// Maps kept for subscribers that fell behind; one further behind gets
/// the newest map only (and an OSD then re-peers every PG).
pub const RECENT_MAPS: usize = 512;

impl Monitor {
    /// Open the monitor's store in `dir`, creating a new cluster if empty.
    pub fn open(dir: &std::path::Path, opts: MonOptions) -> Result<Arc<Self>, MonError> {
        let (mut store, latest) = MapStore::open(dir)?;
        let map = match latest {
            Some(map) => map,
            None => {
                let crush =
                    CrushMap::new_cluster(&opts.crush_bucket_types, &opts.crush_chooseleaf_type)?;
                let fsid = format!("{:032x}", rand::random::<u128>());
                let map = ClusterMap::with_crush(fsid, crush);
                store.append(&map)?;
                map
            }
        };
        // OSDs must re-boot to be up: their sessions died with the old monitor.
        let mut map = map;
        let up: Vec<OsdId> = map.osds.values().filter(|o| o.up).map(|o| o.id).collect();
        if !up.is_empty() {
            for id in up {
                map.mark_down(id);
            }
            map.epoch += 1;
            store.append(&map)?;
        }
        tracing::info!("monitor open: fsid {} epoch {}", map.fsid, map.epoch);
        let map = Arc::new(map);
        let state = MonState {
            map: map.clone(),
            store,
            subscribers: Vec::new(),
            sessions: HashMap::new(),
            down_since: HashMap::new(),
            failures: failure::FailureReports::default(),
            pg_stats: HashMap::new(),
            pool_samples: Default::default(),
            osd_counters: HashMap::new(),
            usage: HashMap::new(),
            to_trim: HashSet::new(),
            pending_pg_temp: HashMap::new(),
            pg_temp_flush_due: false,
            recent: VecDeque::from([map]),
            next_session: 1,
        };
        Ok(Arc::new(Self {
            opts: RwLock::new(opts),
            config: std::sync::OnceLock::new(),
            state: Mutex::new(state),
        }))
    }

    /// The running options (hold briefly: never across an await).
    fn opts(&self) -> RwLockReadGuard<'_, MonOptions> {
        self.opts.read()
    }

    pub fn map(&self) -> Arc<ClusterMap> {
        self.state.lock().map.clone()
    }

    /// Serve until the listener fails.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        let ticker = self.clone();
        tokio::spawn(async move { ticker.tick_loop().await });
        loop {
            let (stream, peer) = listener.accept().await?;
            let mon = self.clone();
            tokio::spawn(async move {
                match Connection::from_stream(stream) {
                    Ok(conn) => mon.session(conn).await,
                    Err(e) => tracing::debug!("accept from {peer}: {e}"),
                }
            });
        }
    }

    pub async fn bind(addr: &str) -> Result<TcpListener, MonError> {
        TcpListener::bind(addr)
            .await
            .map_err(|source| MonError::Listen {
                addr: addr.to_string(),
                source,
            })
    }

    /// Apply a change to a copy of the map; if it reports a change, persist the
    /// new epoch and publish it. Returns the closure's value.
    fn update<T>(
        &self,
        state: &mut MonState,
        change: impl FnOnce(&mut ClusterMap) -> (bool, T),
    ) -> Result<T, MonStoreError> {
        let mut next = (*state.map).clone();
        let (changed, value) = change(&mut next);
        if changed {
            next.epoch = state.map.epoch + 1;
            next.advance_history(&state.map);
            state.store.append(&next)?;
            tracing::info!("map epoch {}", next.epoch);
            state.map = Arc::new(next);
            state.recent.push_back(state.map.clone());
            while state.recent.len() > RECENT_MAPS {
                state.recent.pop_front();
            }
            let msg = Message::MapUpdate {
                map: Box::new((*state.map).clone()),
            };
            state.subscribers.retain(|s| s.send(msg.clone()));
        }
        Ok(value)
    }

    async fn session(self: Arc<Self>, mut conn: Connection) {
        let peer = conn.peer;
        let entity = match conn.reader.read().await {
            Ok(Message::Hello { entity, .. }) => entity,
            Ok(other) => {
                tracing::warn!("{peer}: expected hello, got {other:?}; closing");
                return;
            }
            Err(e @ WireError::Version { .. }) => {
                tracing::warn!("{peer}: {e}; closing");
                return;
            }
            Err(e) => {
                tracing::debug!("{peer}: {e}");
                return;
            }
        };
        let session = {
            let mut st = self.state.lock();
            st.next_session += 1;
            st.next_session
        };
        let mut booted: Option<OsdId> = None;
        loop {
            let msg = match conn.reader.read().await {
                Ok(msg) => msg,
                Err(WireError::Closed) => break,
                Err(e) => {
                    tracing::warn!("{entity} at {peer}: malformed message ({e}); closing");
                    break;
                }
            };
            if let Err(e) = self.handle(msg, &conn.sender, session, &mut booted) {
                tracing::error!("{entity}: {e}");
                break;
            }
        }
        if let Some(id) = booted {
            self.osd_session_closed(id, session);
        }
    }

    fn handle(
        self: &Arc<Self>,
        msg: Message,
        sender: &Sender,
        session: u64,
        booted: &mut Option<OsdId>,
    ) -> Result<(), MonStoreError> {
        match msg {
            Message::OsdBoot {
                id,
                addr,
                cluster_addr,
                fsid,
                crush,
            } => {
                let mut st = self.state.lock();
                if fsid != st.map.fsid {
                    tracing::error!("osd.{id} belongs to cluster {fsid}, not {}", st.map.fsid);
                    return Ok(());
                }
                st.sessions.insert(
                    id,
                    OsdSession {
                        session,
                        last_heartbeat: Instant::now(),
                    },
                );
                st.down_since.remove(&id);
                st.failures.forget(id);
                *booted = Some(id);
                tracing::info!(
                    "osd.{id} booted at {addr}, cluster {cluster_addr} ({})",
                    crush.location
                );
                let addrs = cairn_map::OsdAddrs {
                    public: addr,
                    cluster: cluster_addr,
                };
                let refused = self.update(&mut st, |map| {
                    (true, map.osd_boot_with(id, addrs, &crush).err())
                })?;
                if let Some(e) = refused {
                    tracing::error!("osd.{id}: CRUSH location not applied: {e}");
                }
            }
            Message::OsdHeartbeat {
                id,
                pgs,
                usage,
                counters,
                ..
            } => {
                let mut st = self.state.lock();
                st.osd_counters.insert(id, counters);
                if let Some(s) = st.sessions.get_mut(&id).filter(|s| s.session == session) {
                    s.last_heartbeat = Instant::now();
                }
                if let Some(usage) = usage {
                    self.judge_usage(&mut st, id, usage)?;
                }
                for stat in pgs {
                    if stat.recovered && st.map.pg_history.contains_key(&stat.pg) {
                        st.to_trim.insert(stat.pg);
                    }
                    st.pg_stats.insert(stat.pg, stat);
                }
                let st = &mut *st;
                st.pool_samples.sample(&st.map, &st.pg_stats);
                let pools = tier::cache_usage(&st.map, &st.pg_stats);
                if !pools.is_empty() {
                    sender.send(Message::TierUsage { pools });
                }
            }
            Message::OsdFailure {
                reporter,
                target,
                silent_ms,
            } => {
                if *booted != Some(reporter) || reporter == target {
                    tracing::warn!(
                        "failure report by osd.{reporter} from another session; ignored"
                    );
                    return Ok(());
                }
                let mut st = self.state.lock();
                self.failure_reported(&mut st, reporter, target, silent_ms);
            }
            Message::Subscribe { have } => {
                let mut st = self.state.lock();
                // A subscriber resuming gets every epoch it missed (an OSD
                // tells interval changes epoch by epoch); a new one, the
                // newest map.
                let missed: Vec<Arc<ClusterMap>> = match st.recent.front() {
                    Some(oldest) if have > 0 && oldest.epoch <= have + 1 => st
                        .recent
                        .iter()
                        .filter(|m| m.epoch > have)
                        .cloned()
                        .collect(),
                    _ if st.map.epoch > have => vec![st.map.clone()],
                    _ => Vec::new(),
                };
                for map in missed {
                    sender.send(Message::MapUpdate {
                        map: Box::new((*map).clone()),
                    });
                }
                st.subscribers.push(sender.clone());
            }
            Message::OsdUpThru { id, epoch } => {
                let mut st = self.state.lock();
                if *booted != Some(id) {
                    tracing::warn!("up_thru for osd.{id} from another session; ignored");
                    return Ok(());
                }
                self.update(&mut st, |map| (map.set_up_thru(id, epoch), ()))?;
            }
            Message::PgTemp { id, pg, osds } => {
                let mut st = self.state.lock();
                if *booted != Some(id) || st.map.acting(pg).primary() != Some(id) {
                    tracing::info!("pg_temp for {pg} from osd.{id}, not its primary; ignored");
                    return Ok(());
                }
                st.pending_pg_temp.insert(pg, (id, osds));
                if self.opts().pg_temp_batch.is_zero() {
                    self.publish_pg_temp(&mut st)?;
                } else if !st.pg_temp_flush_due {
                    st.pg_temp_flush_due = true;
                    let mon = self.clone();
                    tokio::spawn(async move {
                        let batch = mon.opts().pg_temp_batch;
                        tokio::time::sleep(batch).await;
                        let mut st = mon.state.lock();
                        st.pg_temp_flush_due = false;
                        if let Err(e) = mon.publish_pg_temp(&mut st) {
                            tracing::error!("cannot persist map: {e}");
                        }
                    });
                }
            }
            Message::MonCommand { tid, cmd } => {
                let result = self.command(cmd)?;
                sender.send(Message::MonReply { tid, result });
            }
            Message::Ping { nonce } => {
                sender.send(Message::Pong { nonce });
            }
            other => tracing::debug!("monitor ignores {other:?}"),
        }
        Ok(())
    }

    fn osd_session_closed(&self, id: OsdId, session: u64) {
        let mut st = self.state.lock();
        if st.sessions.get(&id).map(|s| s.session) != Some(session) {
            return; // a newer boot replaced this session
        }
        st.sessions.remove(&id);
        if self.opts().down_on_disconnect {
            tracing::info!("osd.{id} disconnected; marking down");
            self.mark_down(&mut st, id);
        }
    }

    /// `reporter` says `target` has been silent on the cluster network:
    /// mark it down once enough distinct buckets report it.
    fn failure_reported(&self, st: &mut MonState, reporter: OsdId, target: OsdId, silent_ms: u64) {
        if !st.map.is_up(reporter) || !st.map.is_up(target) {
            return; // a down reporter's view, or already down
        }
        st.failures.report(target, reporter, Instant::now());
        let level = self.opts().reporter_subtree_level.clone();
        let level = &level;
        let domains = st.failures.domains(&st.map, target, level);
        if (domains.len() as u32) < self.opts().min_down_reporters {
            return;
        }
        tracing::warn!(
            "osd.{target} is silent on the cluster network for {silent_ms} ms, reported from \
             {level}s {domains:?}; marking down"
        );
        st.sessions.remove(&target);
        self.mark_down(st, target);
    }

    fn mark_down(&self, st: &mut MonState, id: OsdId) {
        st.failures.forget(id);
        st.down_since.insert(id, Instant::now());
        if let Err(e) = self.update(st, |map| (map.mark_down(id), ())) {
            tracing::error!("cannot persist map: {e}");
        }
    }

    async fn tick_loop(self: Arc<Self>) {
        let mut interval = tokio::time::interval(Duration::from_millis(250));
        loop {
            interval.tick().await;
            let mut st = self.state.lock();
            self.trim_recovered(&mut st);
            let now_s = crate::commands::unix_s();
            if st.map.blocklist.any_expired(now_s) {
                let expired = self.update(&mut st, |map| {
                    let n = map.blocklist.expire(now_s);
                    (n > 0, n)
                });
                match expired {
                    Ok(n) => tracing::info!("{n} blocklist entries expired"),
                    Err(e) => tracing::error!("cannot expire blocklist entries: {e}"),
                }
            }
            let now = Instant::now();
            st.failures.expire(now, self.opts().heartbeat_grace);
            let silent: Vec<OsdId> = st
                .sessions
                .iter()
                .filter(|(_, s)| now.duration_since(s.last_heartbeat) > self.opts().heartbeat_grace)
                .map(|(id, _)| *id)
                .collect();
            for id in silent {
                tracing::warn!(
                    "osd.{id} missed heartbeats for {:?}; marking down",
                    self.opts().heartbeat_grace
                );
                st.sessions.remove(&id);
                self.mark_down(&mut st, id);
            }
            if let Some(out_after) = self.opts().down_out_interval {
                let due: Vec<OsdId> = st
                    .down_since
                    .iter()
                    .filter(|(_, t)| now.duration_since(**t) > out_after)
                    .map(|(id, _)| *id)
                    .collect();
                for id in due {
                    st.down_since.remove(&id);
                    tracing::warn!("osd.{id} down for {out_after:?}; marking out");
                    if let Err(e) = self.update(&mut st, |map| {
                        let changed = map.set_in(id, false).unwrap_or(false);
                        (changed, ())
                    }) {
                        tracing::error!("cannot persist map: {e}");
                    }
                }
            }
        }
    }
}

impl Monitor {
    /// Record OSD `id`'s reported usage; a new epoch if it crosses a ratio.
    fn judge_usage(
        &self,
        st: &mut MonState,
        id: OsdId,
        usage: OsdUsage,
    ) -> Result<(), MonStoreError> {
        st.usage.insert(id, usage);
        let Some(state) = full::state_change(&st.map, &self.opts().full_ratios, id, &usage) else {
            return Ok(());
        };
        tracing::warn!(
            "osd.{id} is {state} now: {} of {} bytes used ({:.1}%)",
            usage.used_bytes,
            usage.total_bytes,
            usage.ratio() * 100.0
        );
        self.update(st, |map| (map.set_full_state(id, state), ()))
    }

    /// Apply every waiting pg_temp request in one new epoch. A request
    /// counts only if its sender is still up and the PG's primary in the
    /// newest map: the map may have moved on since it was sent.
    fn publish_pg_temp(&self, st: &mut MonState) -> Result<(), MonStoreError> {
        if st.pending_pg_temp.is_empty() {
            return Ok(());
        }
        let mut requests: Vec<(PgId, (OsdId, Vec<OsdId>))> = st.pending_pg_temp.drain().collect();
        requests.sort_by_key(|(pg, _)| *pg);
        self.update(st, |map| {
            let mut changed = false;
            for (pg, (id, osds)) in &requests {
                if !map.is_up(*id) || map.acting(*pg).primary() != Some(*id) {
                    tracing::info!("pg_temp for {pg} from osd.{id}, not its primary; ignored");
                    continue;
                }
                match map.set_pg_temp(*pg, osds.clone()) {
                    Ok(c) => {
                        tracing::info!("pg {pg}: pg_temp {osds:?} (osd.{id})");
                        changed |= c;
                    }
                    Err(e) => {
                        tracing::warn!("pg {pg}: pg_temp {osds:?} from osd.{id} refused: {e}");
                    }
                }
            }
            (changed, ())
        })
    }

    /// Forget the past intervals of PGs whose primaries reported them
    /// recovered in their current interval, in one new epoch.
    fn trim_recovered(&self, st: &mut MonState) {
        if st.to_trim.is_empty() {
            return;
        }
        let pgs: Vec<PgId> = st.to_trim.drain().collect();
        let stats: Vec<PgStat> = pgs
            .iter()
            .filter_map(|pg| st.pg_stats.get(pg).cloned())
            .collect();
        let result = self.update(st, |map| {
            let mut changed = false;
            for stat in &stats {
                if stat.recovered {
                    changed |= map.trim_history(stat.pg, stat.interval_epoch, &stat.acting);
                }
            }
            (changed, ())
        });
        if let Err(e) = result {
            tracing::error!("cannot persist map: {e}");
        }
    }
}

/// Serve a monitor on an already-bound listener (for callers that chose the port).
pub async fn run(mon: Arc<Monitor>, listener: TcpListener) -> std::io::Result<()> {
    mon.serve(listener).await
}
