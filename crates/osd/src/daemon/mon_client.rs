//! The OSD's monitor session: subscribe to maps (every epoch, so that no
//! interval change is missed), boot, heartbeat with the stats of the PGs
//! this OSD is primary for and its store's used and total space, carry the
//! core's `up_thru` and `pg_temp` requests, and re-boot if the monitor
//! marks this OSD down while it lives (once enough peers answer its
//! heartbeats, see [`super::heartbeat`]).
//! A lost session is re-established with backoff; the OSD keeps serving
//! with the map it has meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_map::ClusterMap;
use cairn_types::{Entity, Epoch};
use cairn_wire::{connect, Message, Sender, WireError};

use super::Osd;

/// Heartbeats between two counts of the primary PGs' bytes (each asks
/// every object its size, off the core's lock).
const PG_BYTES_EVERY: u64 = 5;

impl Osd {
    pub(crate) async fn mon_session_loop(self: Arc<Self>) {
        let mut delay = Duration::from_millis(100);
        loop {
            match self.clone().mon_session().await {
                Ok(()) => delay = Duration::from_millis(100),
                Err(e) => {
                    tracing::warn!("osd.{}: monitor session: {e}", self.id());
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
            }
            *self.mon.lock() = None;
            tokio::time::sleep(delay).await;
        }
    }

    /// Install a map from the monitor.
    fn take_map(self: &Arc<Self>, map: ClusterMap) {
        let map = Arc::new(map);
        let old = {
            let mut current = self.map.write();
            if map.epoch <= current.epoch {
                return;
            }
            std::mem::replace(&mut *current, map.clone())
        };
        self.map_config_changed(&old, &map);
        self.map_pools_changed(&old, &map);
        self.peers.forget_stale(&map);
        self.with_core(|core, io| core.handle_map(map, io));
        self.report_now.notify_one();
    }

    async fn mon_session(self: Arc<Self>) -> Result<(), WireError> {
        let hello = Message::Hello {
            entity: Entity::Osd(self.id()),
            fsid: None,
        };
        let mut conn = connect(&self.opts.mon_addr, hello).await?;
        let have = self.map.read().epoch;
        conn.sender.send(Message::Subscribe { have });
        let first = loop {
            match conn.reader.read().await? {
                Message::MapUpdate { map } => break map,
                _ => continue,
            }
        };
        let fsid = first.fsid.clone();
        self.check_fsid(&fsid)?;
        self.take_map(*first);
        if !self.caught_up.swap(true, Ordering::SeqCst) {
            self.catch_up_before_boot().await;
        }
        let boot = Message::OsdBoot {
            id: self.id(),
            addr: self.public_addr.to_string(),
            cluster_addr: self.cluster_addr.to_string(),
            fsid,
            crush: self.opts.crush.clone(),
        };
        conn.sender.send(boot.clone());
        *self.mon.lock() = Some(conn.sender.clone());
        tracing::info!(
            "osd.{} booting at {} (cluster {})",
            self.id(),
            self.public_addr,
            self.cluster_addr
        );
        // Set while this OSD, marked down, waits for its peers to answer
        // before it boots again (the heartbeat loop sends the boot).
        let reboot = Arc::new(AtomicBool::new(false));
        let heartbeat = tokio::spawn(self.clone().heartbeat_loop(
            conn.sender.clone(),
            boot.clone(),
            reboot.clone(),
        ));
        let result = loop {
            match conn.reader.read().await {
                Ok(Message::MapUpdate { map }) => {
                    let me = map.osds.get(&self.id()).cloned();
                    let epoch = map.epoch;
                    self.take_map(*map);
                    if let Some(info) = me {
                        if !info.up && info.down_at == epoch {
                            self.marked_down(epoch, &conn.sender, &boot, &reboot);
                        }
                    }
                }
                Ok(Message::TierUsage { pools }) => {
                    self.with_core(|core, io| {
                        core.set_tier_usage(pools, crate::io::OsdIo::now(io))
                    });
                }
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        };
        heartbeat.abort();
        result
    }

    /// Before the first boot, while the map records this OSD down: take
    /// the log entries its PGs' primaries wrote meanwhile (see
    /// `OsdCore::start_catch_up`), for at most `boot_catch_up`.
    async fn catch_up_before_boot(self: &Arc<Self>) {
        let limit = self.opts.boot_catch_up;
        if limit.is_zero() {
            return;
        }
        let asked = self.with_core(|core, io| core.start_catch_up(io));
        if asked == 0 {
            return;
        }
        let deadline = Instant::now() + limit;
        while self.with_core(|core, _| core.catching_up()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.with_core(|core, _| core.end_catch_up());
    }

    /// The map marks this OSD down while it lives: boot again now if its
    /// peers answer its heartbeats, else once they do.
    fn marked_down(&self, epoch: Epoch, sender: &Sender, boot: &Message, reboot: &AtomicBool) {
        if self.heartbeats.healthy(Instant::now()) {
            tracing::warn!("osd.{}: map {epoch} marks me down; re-booting", self.id());
            sender.send(boot.clone());
        } else {
            tracing::warn!(
                "osd.{}: map {epoch} marks me down; too few peers answer on the cluster \
                 network, re-booting once they do",
                self.id()
            );
            reboot.store(true, Ordering::SeqCst);
        }
    }

    fn check_fsid(&self, fsid: &str) -> Result<(), WireError> {
        let Some(path) = &self.opts.fsid_file else {
            return Ok(());
        };
        match std::fs::read_to_string(path) {
            Ok(stored) if stored.trim() == fsid => Ok(()),
            Ok(stored) => {
                tracing::error!(
                    "osd.{} belongs to cluster {} but the monitor runs cluster {fsid}; exiting",
                    self.id(),
                    stored.trim()
                );
                std::process::exit(1);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::write(path, format!("{fsid}\n"))?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn heartbeat_loop(
        self: Arc<Self>,
        sender: Sender,
        boot: Message,
        reboot: Arc<AtomicBool>,
    ) {
        let mut interval = tokio::time::interval(self.opts.heartbeat_interval);
        let mut round = 0u64;
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = self.report_now.notified() => {
                    // Coalesce bursts of state changes into one report.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            if reboot.load(Ordering::SeqCst) && self.heartbeats.healthy(Instant::now()) {
                tracing::info!("osd.{}: peers answer again; re-booting", self.id());
                reboot.store(false, Ordering::SeqCst);
                sender.send(boot.clone());
            }
            let (epoch, mut pgs, counters) = self.with_core(|core, io| {
                let stats = core.stats(io);
                (core.map().epoch, stats, core.counters())
            });
            if round % PG_BYTES_EVERY == 0 {
                let primary = pgs.iter().map(|s| s.pg).collect();
                self.pg_bytes.recount(self.store.clone(), primary);
            }
            round += 1;
            self.pg_bytes.fill(&mut pgs);
            let usage = match self.store.statfs() {
                Ok(st) => Some(cairn_map::OsdUsage {
                    used_bytes: st.used_bytes,
                    total_bytes: st.total_bytes,
                }),
                Err(e) => {
                    tracing::warn!("osd.{}: statfs failed: {e}", self.id());
                    None
                }
            };
            let msg = Message::OsdHeartbeat {
                id: self.id(),
                epoch,
                pgs,
                usage,
                counters,
            };
            if !sender.send(msg) {
                return;
            }
        }
    }
}
