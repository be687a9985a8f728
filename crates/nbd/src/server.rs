//! The server: its exports, its limits, the accept loops for TCP and Unix sockets, and
//! shutdown.
//!
//! Owns the lifetime of connections. Each accepted connection runs in its own task:
//! negotiation ([`crate::handshake`]) under a time limit, then transmission
//! ([`crate::transmission`]). A connection's failure is logged and ends only that
//! connection. [`NbdServer::shutdown`] stops the accept loops; connections stop reading
//! requests, answer those in flight and close; whatever is still running after
//! [`ServerOptions::shutdown_grace`] is aborted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_volume::Volume;
use tokio::io::{AsyncRead, AsyncWrite, BufReader, BufWriter};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn, Instrument};

use crate::handshake::{negotiate, Negotiation};
use crate::proto::*;
use crate::transmission::{self, wait_for_shutdown, Limits};
use crate::NbdError;

/// Socket buffer sizes of each connection's reader and writer.
const SOCKET_BUFFER_BYTES: usize = 128 * 1024;
/// Pause after an accept error (such as running out of file descriptors).
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// One volume offered under a name.
pub struct NbdExport<V: Volume> {
    name: String,
    description: String,
    volume: Arc<V>,
    read_only: bool,
}

impl<V: Volume> NbdExport<V> {
    /// An export called `name` serving `volume`; `read_only` refuses writes with `EPERM`.
    pub fn new(name: impl Into<String>, volume: Arc<V>, read_only: bool) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            volume,
            read_only,
        }
    }

    /// Sets the description sent for `NBD_INFO_DESCRIPTION`.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// The name clients ask for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Human-readable description (empty if none).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The volume behind the export.
    pub fn volume(&self) -> &Arc<V> {
        &self.volume
    }

    /// True if writes are refused.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Current size of the volume in bytes.
    pub fn size(&self) -> u64 {
        self.volume.size()
    }

    /// Transmission flags advertised for this export.
    pub fn transmission_flags(&self) -> u16 {
        let mut flags = TFLAG_HAS_FLAGS
            | TFLAG_SEND_FLUSH
            | TFLAG_SEND_FUA
            | TFLAG_SEND_TRIM
            | TFLAG_SEND_WRITE_ZEROES
            | TFLAG_CAN_MULTI_CONN;
        if self.read_only {
            flags |= TFLAG_READ_ONLY;
        }
        flags
    }
}

/// Limits of a server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Requests one connection may have in flight.
    pub requests_in_flight_max: usize,
    /// Request and reply data one connection may hold; raised to at least the largest
    /// request ([`BLOCK_SIZE_MAX_BYTES`]).
    pub bytes_in_flight_max: usize,
    /// Connections served at once over all listeners; further clients wait in the
    /// listen backlog.
    pub connections_max: usize,
    /// Time a client has to finish negotiating.
    pub handshake_timeout: Duration,
    /// Time connections get to finish after [`NbdServer::shutdown`] before being aborted.
    pub shutdown_grace: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            requests_in_flight_max: 256,
            bytes_in_flight_max: 256 * 1024 * 1024,
            connections_max: 1024,
            handshake_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// An NBD server offering one or more exports.
pub struct NbdServer<V: Volume> {
    exports: Vec<Arc<NbdExport<V>>>,
    options: ServerOptions,
    connection_slots: Arc<Semaphore>,
    shutdown: watch::Sender<bool>,
    /// Numbers connections for logs.
    connections_accepted: AtomicU64,
}

impl<V: Volume> NbdServer<V> {
    /// A server with a single export and default options.
    pub fn new(export_name: String, volume: Arc<V>, read_only: bool) -> Arc<Self> {
        let export = NbdExport::new(export_name, volume, read_only);
        Self::build(vec![export], ServerOptions::default())
    }

    /// A server with several exports. The first is also the default export (the one an
    /// empty name selects). Names must be unique, non-empty and at most 4096 bytes.
    pub fn with_exports(
        exports: Vec<NbdExport<V>>,
        options: ServerOptions,
    ) -> Result<Arc<Self>, NbdError> {
        if exports.is_empty() {
            return Err(NbdError::Config("no exports".into()));
        }
        for (index, export) in exports.iter().enumerate() {
            if export.name.is_empty() || export.name.len() > STRING_MAX_BYTES {
                return Err(NbdError::Config(format!(
                    "bad export name {:?}",
                    export.name
                )));
            }
            if export.description.len() > STRING_MAX_BYTES {
                return Err(NbdError::Config(format!(
                    "description of {:?} too long",
                    export.name
                )));
            }
            if exports[..index].iter().any(|e| e.name == export.name) {
                return Err(NbdError::Config(format!(
                    "duplicate export {:?}",
                    export.name
                )));
            }
        }
        if options.requests_in_flight_max == 0 || options.connections_max == 0 {
            return Err(NbdError::Config("limits must be at least 1".into()));
        }
        Ok(Self::build(exports, options))
    }

    fn build(exports: Vec<NbdExport<V>>, mut options: ServerOptions) -> Arc<Self> {
        options.bytes_in_flight_max = options
            .bytes_in_flight_max
            .max(BLOCK_SIZE_MAX_BYTES as usize);
        Arc::new(Self {
            exports: exports.into_iter().map(Arc::new).collect(),
            connection_slots: Arc::new(Semaphore::new(options.connections_max)),
            options,
            shutdown: watch::Sender::new(false),
            connections_accepted: AtomicU64::new(0),
        })
    }

    /// The exports, default first.
    pub fn exports(&self) -> &[Arc<NbdExport<V>>] {
        &self.exports
    }

    /// The limits in force.
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// Stops every accept loop of this server; open connections answer the requests they
    /// have in flight and close. Idempotent.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// True once [`NbdServer::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Serves clients from `listener` until [`NbdServer::shutdown`]; returns once its
    /// connections have ended. Transient accept errors are logged and retried; an error
    /// that leaves the listener unusable is returned at once, aborting its connections.
    pub async fn serve_tcp(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        self.serve_listener(listener).await
    }

    /// As [`NbdServer::serve_tcp`], for a Unix socket. The socket file is left for the
    /// caller, which created it, to remove.
    pub async fn serve_unix(self: Arc<Self>, listener: UnixListener) -> std::io::Result<()> {
        self.serve_listener(listener).await
    }

    /// Serves one already-connected stream (of any kind) to completion.
    pub async fn serve_stream<S>(self: Arc<Self>, stream: S) -> Result<(), NbdError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (reader, writer) = tokio::io::split(stream);
        self.serve_connection(reader, writer).await
    }

    async fn serve_listener<L: Listener>(self: Arc<Self>, listener: L) -> std::io::Result<()> {
        let mut shutdown = self.shutdown.subscribe();
        let mut connections = JoinSet::new();
        info!(address = %listener.local_name(), "NBD server listening");
        loop {
            while let Some(ended) = connections.try_join_next() {
                log_task_end(ended);
            }
            let slot = tokio::select! {
                slot = self.connection_slots.clone().acquire_owned() => slot,
                () = wait_for_shutdown(&mut shutdown) => break,
            };
            let Ok(slot) = slot else { break };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = wait_for_shutdown(&mut shutdown) => break,
            };
            match accepted {
                Ok((reader, writer, peer)) => {
                    let id = self.connections_accepted.fetch_add(1, Ordering::Relaxed);
                    let span = tracing::info_span!("nbd", id, %peer);
                    let server = self.clone();
                    connections.spawn(server.run(reader, writer, slot).instrument(span));
                }
                Err(error) if is_fatal_accept_error(&error) => return Err(error),
                Err(error) => {
                    warn!(%error, "accept failed; retrying");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
            }
        }
        drop(listener);
        self.finish_connections(connections).await;
        Ok(())
    }

    /// Waits for connections to end after a shutdown, aborting them after the grace time.
    async fn finish_connections(&self, mut connections: JoinSet<()>) {
        let grace = self.options.shutdown_grace;
        let drained = tokio::time::timeout(grace, async {
            while let Some(ended) = connections.join_next().await {
                log_task_end(ended);
            }
        })
        .await;
        if drained.is_err() {
            warn!(
                remaining = connections.len(),
                "connections still open after {grace:?}; aborting"
            );
            connections.shutdown().await;
        }
    }

    /// Runs one accepted connection and logs how it ended.
    async fn run<R, W>(self: Arc<Self>, reader: R, writer: W, _slot: OwnedSemaphorePermit)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        debug!("connection accepted");
        match self.serve_connection(reader, writer).await {
            Ok(()) => debug!("connection closed"),
            Err(error) if error.is_protocol_violation() => {
                warn!(%error, "closing connection: client broke the protocol");
            }
            Err(error) => info!(%error, "connection ended"),
        }
    }

    async fn serve_connection<R, W>(self: Arc<Self>, reader: R, writer: W) -> Result<(), NbdError>
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send,
    {
        let mut shutdown = self.shutdown.subscribe();
        let mut reader = BufReader::with_capacity(SOCKET_BUFFER_BYTES, reader);
        let mut writer = BufWriter::with_capacity(SOCKET_BUFFER_BYTES, writer);
        let timeout = self.options.handshake_timeout;
        let negotiation = tokio::select! {
            negotiated = tokio::time::timeout(
                timeout,
                negotiate(&self.exports, &mut reader, &mut writer),
            ) => negotiated.map_err(|_| NbdError::HandshakeTimeout(timeout))??,
            () = wait_for_shutdown(&mut shutdown) => return Ok(()),
        };
        let export = match negotiation {
            Negotiation::Aborted => {
                debug!("client aborted the negotiation");
                return Ok(());
            }
            Negotiation::Transmission(export) => export,
        };
        debug!(
            export = export.name(),
            size = export.size(),
            "transmission started"
        );
        let limits = Limits {
            requests_in_flight_max: self.options.requests_in_flight_max,
            bytes_in_flight_max: self.options.bytes_in_flight_max,
        };
        transmission::serve(export, reader, writer, limits, shutdown).await
    }
}

fn log_task_end(ended: Result<(), tokio::task::JoinError>) {
    if let Err(error) = ended {
        if error.is_panic() {
            warn!(%error, "connection task panicked");
        }
    }
}

/// Accept errors after which the listener is unusable; others (aborted connections, file
/// descriptor exhaustion) are retried.
fn is_fatal_accept_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    const EBADF: i32 = 9;
    const EINVAL: i32 = 22;
    const ENOTSOCK: i32 = 88;
    const EOPNOTSUPP: i32 = 95;
    if matches!(error.kind(), ErrorKind::InvalidInput) {
        return true;
    }
    matches!(
        error.raw_os_error(),
        Some(EBADF | EINVAL | ENOTSOCK | EOPNOTSUPP)
    )
}

/// A listening socket whose accepted connections split into owned halves.
trait Listener: Send {
    type Reader: AsyncRead + Unpin + Send + 'static;
    type Writer: AsyncWrite + Unpin + Send + 'static;

    fn accept(
        &self,
    ) -> impl std::future::Future<Output = std::io::Result<(Self::Reader, Self::Writer, String)>> + Send;

    fn local_name(&self) -> String;
}

impl Listener for TcpListener {
    type Reader = tokio::net::tcp::OwnedReadHalf;
    type Writer = tokio::net::tcp::OwnedWriteHalf;

    async fn accept(&self) -> std::io::Result<(Self::Reader, Self::Writer, String)> {
        let (stream, peer) = TcpListener::accept(self).await?;
        // Replies are batched by the writer; Nagle would only add latency.
        if let Err(error) = stream.set_nodelay(true) {
            debug!(%error, "could not set TCP_NODELAY");
        }
        let (reader, writer) = stream.into_split();
        Ok((reader, writer, peer.to_string()))
    }

    fn local_name(&self) -> String {
        self.local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "tcp".into())
    }
}

impl Listener for UnixListener {
    type Reader = tokio::net::unix::OwnedReadHalf;
    type Writer = tokio::net::unix::OwnedWriteHalf;

    async fn accept(&self) -> std::io::Result<(Self::Reader, Self::Writer, String)> {
        let (stream, _) = UnixListener::accept(self).await?;
        let (reader, writer) = stream.into_split();
        Ok((reader, writer, "unix".to_string()))
    }

    fn local_name(&self) -> String {
        self.local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
            .unwrap_or_else(|| "unix".into())
    }
}
