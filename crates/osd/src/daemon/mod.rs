//! The OSD daemon: [`OsdCore`] behind one lock, driven by tokio.
//!
//! Two listeners, as Ceph's OSDs have: the *public* address takes clients
//! and admin tools (the monitor session goes out from the public side
//! too), the *cluster* address takes the other OSDs (replication, peering,
//! recovery). A peer that says hello on the public address, or a client on
//! the cluster address, is turned away, so the two networks stay apart.
//!
//! Connections: every client and peer connection gets a reader task that
//! turns messages into core calls; replies and messages go out through each
//! connection's writer task (never waiting on a socket under the lock).
//! Messages to a peer go on the connection this OSD opened to it (replies
//! come back on the peer's own), so both directions keep their order; a
//! connection lost either way is reported to the core as a peer reset.
//! Store commits and reads run as tasks that call back into the core; an
//! object's metadata missing from memory is read before its op reaches the
//! core, off the loop (`meta_ahead`).

mod config;
mod heartbeat;
mod io;
mod meta_ahead;
mod mon_client;
mod peers;
mod throttle;
mod tier_client;
mod usage;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_store::{ObjectId, ObjectStore, TxOp};
use cairn_types::{Entity, OsdId};
use cairn_wire::{Connection, Message, PgBody, Sender, WireError};
use parking_lot::{Mutex, RwLock};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::core::{CoreOptions, OsdCore};
pub use config::ConfigHook;
use io::DaemonIo;
use peers::Peers;
pub use throttle::ClientLimits;
pub use usage::ProcessUsage;

/// OSD behaviour, from the `[osd]` section of the configuration.
#[derive(Clone, Debug)]
pub struct OsdOptions {
    pub id: OsdId,
    pub mon_addr: String,
    pub heartbeat_interval: Duration,
    /// A peer silent on the cluster network for this long is reported to
    /// the monitor (`mon.osd_heartbeat_grace_ms`).
    pub heartbeat_grace: Duration,
    /// File holding the cluster fsid this OSD belongs to (written at first boot).
    pub fsid_file: Option<std::path::PathBuf>,
    pub core: CoreOptions,
    /// Sent with every boot: CRUSH location, device class and size.
    pub crush: cairn_map::crush::DeviceReport,
    /// Longest catch-up before the first boot (`osd.boot_catch_up_ms`;
    /// zero: none).
    pub boot_catch_up: Duration,
    /// Back-pressure on clients (`osd.client_message_cap`,
    /// `osd.client_message_size_cap`).
    pub client_limits: ClientLimits,
}

#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("store: {0}")]
    Store(#[from] cairn_store::StoreError),
}

/// The OSD's listening sockets, from [`Osd::bind`].
pub struct Listeners {
    pub public: TcpListener,
    pub cluster: TcpListener,
}

/// Which of the OSD's two networks a connection came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Network {
    Public,
    Cluster,
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Network::Public => "public",
            Network::Cluster => "cluster",
        })
    }
}

async fn listen(addr: SocketAddr) -> Result<TcpListener, OsdError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| OsdError::Listen {
            addr: addr.to_string(),
            source,
        })
}

/// How often the core's timers (peering retries, recovery waiting for a
/// slot) are run.
const TICK: Duration = Duration::from_millis(100);

/// One OSD daemon.
pub struct Osd {
    pub(crate) opts: OsdOptions,
    pub(crate) store: Arc<dyn ObjectStore>,
    /// Where clients and the monitor reach this OSD.
    pub(crate) public_addr: SocketAddr,
    /// Where peers reach this OSD.
    pub(crate) cluster_addr: SocketAddr,
    core: Mutex<OsdCore>,
    /// The newest map, readable without the core's lock (peer addresses).
    pub(crate) map: RwLock<Arc<cairn_map::ClusterMap>>,
    pub(crate) peers: Peers,
    /// Peers' answers to this OSD's heartbeats on the cluster network.
    pub(crate) heartbeats: heartbeat::Heartbeats,
    /// Client connections and the ops they have in flight.
    pub(crate) clients: throttle::Clients,
    /// Object metadata read ahead of ops, off the loop.
    meta_ahead: meta_ahead::MetaAhead,
    next_client: AtomicU64,
    /// The monitor session's sender, while one is up.
    pub(crate) mon: Mutex<Option<Sender>>,
    /// Wakes the heartbeat loop early (a PG changed state).
    pub(crate) report_now: Notify,
    /// Set once the catch-up before the first boot is done (or skipped).
    pub(crate) caught_up: std::sync::atomic::AtomicBool,
    /// Bytes stored per primary PG, for the monitor's `df`.
    pub(crate) pg_bytes: Arc<usage::PgBytes>,
    /// How a cache pool's primaries reach its base pool.
    pub(crate) tier_client: tier_client::TierClient,
    /// The option schema for runtime configuration, once installed.
    config: std::sync::OnceLock<Arc<dyn ConfigHook>>,
    start: Instant,
}

impl Osd {
    /// Bind the OSD's public and cluster addresses and load its PGs; the
    /// OSD is not yet serving.
    pub async fn bind(
        opts: OsdOptions,
        store: Arc<dyn ObjectStore>,
        public: SocketAddr,
        cluster: SocketAddr,
    ) -> Result<(Arc<Self>, Listeners), OsdError> {
        let listeners = Listeners {
            public: listen(public).await?,
            cluster: listen(cluster).await?,
        };
        let local = |l: &TcpListener, addr: SocketAddr| {
            l.local_addr().map_err(|source| OsdError::Listen {
                addr: addr.to_string(),
                source,
            })
        };
        let public_addr = local(&listeners.public, public)?;
        let cluster_addr = local(&listeners.cluster, cluster)?;
        let clients = throttle::Clients::new(opts.client_limits);
        let opts_mon_addr = opts.mon_addr.clone();
        let osd = Arc::new_cyclic(|weak| {
            let start = Instant::now();
            let mut loader = io::LoadIo {
                store: store.clone(),
                start,
            };
            let core = OsdCore::new(opts.id, opts.core.clone(), &mut loader);
            Osd {
                peers: Peers::new(opts.id, weak.clone()),
                heartbeats: heartbeat::Heartbeats::new(opts.heartbeat_grace),
                opts,
                store,
                public_addr,
                cluster_addr,
                core: Mutex::new(core),
                map: RwLock::new(Arc::new(cairn_map::ClusterMap::before_first())),
                clients,
                meta_ahead: meta_ahead::MetaAhead::new(),
                next_client: AtomicU64::new(1),
                mon: Mutex::new(None),
                report_now: Notify::new(),
                caught_up: std::sync::atomic::AtomicBool::new(false),
                pg_bytes: Arc::default(),
                config: std::sync::OnceLock::new(),
                tier_client: tier_client::TierClient::new(opts_mon_addr),
                start,
            }
        });
        Ok((osd, listeners))
    }

    /// The addresses the OSD listens on: public, then cluster.
    pub fn addrs(&self) -> (SocketAddr, SocketAddr) {
        (self.public_addr, self.cluster_addr)
    }

    pub fn id(&self) -> OsdId {
        self.opts.id
    }

    pub fn epoch(&self) -> cairn_types::Epoch {
        self.core.lock().map().epoch
    }

    /// Run one event through the core.
    pub(crate) fn with_core<R>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut OsdCore, &mut DaemonIo) -> R,
    ) -> R {
        self.with_core_from(None, f)
    }

    /// [`Self::with_core`] for a message that came on a connection peer
    /// `from` opened (`incoming`): answers go back on it.
    fn with_core_from<R>(
        self: &Arc<Self>,
        incoming: Option<(OsdId, &Sender)>,
        f: impl FnOnce(&mut OsdCore, &mut DaemonIo) -> R,
    ) -> R {
        let mut io = DaemonIo {
            osd: self.clone(),
            incoming,
        };
        let mut core = self.core.lock();
        f(&mut core, &mut io)
    }

    /// Run the OSD: monitor session, timers and both accept loops. Returns
    /// only if a listener fails.
    pub async fn serve(self: Arc<Self>, listeners: Listeners) -> std::io::Result<()> {
        tokio::spawn(self.clone().mon_session_loop());
        tokio::spawn(self.clone().tick_loop());
        tokio::spawn(self.clone().peer_heartbeat_loop());
        tokio::try_join!(
            self.clone().accept_loop(listeners.public, Network::Public),
            self.clone()
                .accept_loop(listeners.cluster, Network::Cluster),
        )?;
        Ok(())
    }

    async fn accept_loop(
        self: Arc<Self>,
        listener: TcpListener,
        network: Network,
    ) -> std::io::Result<()> {
        loop {
            let (stream, peer) = listener.accept().await?;
            let osd = self.clone();
            tokio::spawn(async move {
                match Connection::from_stream(stream) {
                    Ok(conn) => osd.serve_connection(conn, network).await,
                    Err(e) => tracing::debug!("accept from {peer}: {e}"),
                }
            });
        }
    }

    async fn tick_loop(self: Arc<Self>) {
        let mut interval = tokio::time::interval(TICK);
        loop {
            interval.tick().await;
            self.with_core(|core, io| core.tick(io));
        }
    }

    async fn serve_connection(self: Arc<Self>, mut conn: Connection, network: Network) {
        let peer = conn.peer;
        let entity = match conn.reader.read().await {
            Ok(Message::Hello { entity, .. }) => entity,
            Err(e @ WireError::Version { .. }) => {
                tracing::warn!("{peer}: {e}; closing");
                return;
            }
            Ok(_) | Err(_) => {
                tracing::warn!("{peer}: connection did not start with hello; closing");
                return;
            }
        };
        match (entity, network) {
            (Entity::Osd(from), Network::Cluster) => self.serve_peer(from, conn).await,
            (Entity::Osd(_), Network::Public) | (_, Network::Cluster) => {
                tracing::warn!(
                    "{entity} at {peer} connected on the {network} address, which is not for it; \
                     closing"
                );
            }
            (_, Network::Public) => self.serve_client(entity, conn).await,
        }
    }

    /// Messages from peer OSD `from`, until its connection ends.
    async fn serve_peer(self: Arc<Self>, from: OsdId, mut conn: Connection) {
        loop {
            match conn.reader.read().await {
                Ok(Message::Pg(msg)) => {
                    if let PgBody::RepOp { txn: Some(txn), .. } = &msg.body {
                        let oids = txn.ops.iter().filter_map(TxOp::object);
                        self.meta_ahead.load(&self.store, oids).await;
                        self.meta_ahead
                            .read_partial(&self.store, meta_ahead::txn_writes(txn))
                            .await;
                    }
                    self.with_core_from(Some((from, &conn.sender)), |core, io| {
                        core.peer_message(from, msg, io)
                    })
                }
                Ok(Message::Ping { nonce }) => {
                    conn.sender.send(Message::Pong { nonce });
                }
                Ok(other) => {
                    tracing::warn!("osd.{from}: unexpected {other:?}; closing");
                    break;
                }
                Err(WireError::Closed) => break,
                Err(e) => {
                    tracing::warn!(
                        "osd.{from} at {}: malformed message ({e}); closing",
                        conn.peer
                    );
                    break;
                }
            }
        }
        // Whatever osd.from sent after the last message read is lost.
        self.with_core(|core, io| core.peer_reset(from, io));
    }

    /// Requests from a client (or an admin tool), until its connection ends.
    async fn serve_client(self: Arc<Self>, entity: Entity, mut conn: Connection) {
        let client = self.next_client.fetch_add(1, Ordering::Relaxed);
        self.clients.open(client, conn.sender.clone());
        loop {
            self.clients.room_for(client).await;
            let msg = match conn.reader.read().await {
                Ok(msg) => msg,
                Err(WireError::Closed) => break,
                Err(e) => {
                    tracing::warn!(
                        "{entity} at {}: malformed message ({e}); closing",
                        conn.peer
                    );
                    break;
                }
            };
            match msg {
                Message::OsdOp(mut op) => {
                    self.clients.admit(client, &op).await;
                    // The name lent to the object id, not copied, and back.
                    let oid = ObjectId::new(op.pg, std::mem::take(&mut op.oid));
                    self.meta_ahead.load(&self.store, [&oid]).await;
                    let writes = meta_ahead::client_writes(&oid, &op.ops);
                    self.meta_ahead.read_partial(&self.store, writes).await;
                    op.oid = oid.name;
                    self.with_core(|core, io| core.client_op(client, op, io));
                }
                Message::Ping { nonce } => {
                    conn.sender.send(Message::Pong { nonce });
                }
                Message::OsdAdmin { tid, cmd } => {
                    let result = match cmd {
                        cairn_wire::OsdAdminCommand::Perf => Ok(self.perf_dump()),
                        cairn_wire::OsdAdminCommand::Scrub { pg, deep, repair } => self
                            .with_core(|core, io| core.request_scrub(pg, deep, repair, io))
                            .map(|()| format!("{{\"pg\":\"{pg}\",\"scrub\":\"scheduled\"}}")),
                        cairn_wire::OsdAdminCommand::ConfigSet { key, value } => {
                            self.tell_config_set(&key, &value)
                        }
                        cairn_wire::OsdAdminCommand::ConfigShow => self.config_show(),
                        cairn_wire::OsdAdminCommand::TierFlushEvictAll { pool } => self
                            .with_core(|core, io| core.tier_flush_evict_all(pool, io))
                            .map(|pgs| {
                                let pgs: Vec<String> = pgs.iter().map(|p| p.to_string()).collect();
                                serde_json::json!({ "pgs": pgs }).to_string()
                            }),
                        cairn_wire::OsdAdminCommand::TierSweepStatus { pool } => {
                            let sweeps = self.with_core(|core, _| core.tier_sweeps(pool));
                            let pgs: serde_json::Map<String, serde_json::Value> = sweeps
                                .into_iter()
                                .map(|(pg, v)| (pg.to_string(), v))
                                .collect();
                            Ok(serde_json::Value::Object(pgs).to_string())
                        }
                    };
                    conn.sender.send(Message::OsdAdminReply { tid, result });
                }
                other => {
                    tracing::warn!("{entity} at {}: unexpected {other:?}; closing", conn.peer);
                    break;
                }
            }
        }
        self.clients.close(client);
    }

    /// The store's counters with the OSD's own, as one flat JSON object.
    fn perf_dump(&self) -> String {
        let mut value: serde_json::Value = serde_json::from_str(&self.store.perf_dump())
            .unwrap_or_else(|e| serde_json::json!({ "store_counters_error": e.to_string() }));
        if let Some(map) = value.as_object_mut() {
            for (name, v) in self.clients.counters() {
                map.insert(name.into(), v.into());
            }
            for (name, v) in self.meta_ahead.counters() {
                map.insert(name.into(), v.into());
            }
            for (name, v) in self.core.lock().write_times().counters() {
                map.insert(name.into(), v.into());
            }
            if let Some(usage) = ProcessUsage::now() {
                map.insert("process_cpu_us".into(), usage.cpu_us.into());
                map.insert(
                    "process_context_switches".into(),
                    usage.context_switches.into(),
                );
            }
        }
        value.to_string()
    }
}
