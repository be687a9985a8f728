//! NBD (Network Block Device) server: exposes any [`cairn_volume::Volume`] to standard
//! clients (the Linux kernel's `nbd-client`, QEMU, libnbd tools, fio).
//!
//! The server speaks fixed newstyle negotiation with simple replies only:
//!
//! * options `NBD_OPT_EXPORT_NAME`, `NBD_OPT_GO`, `NBD_OPT_INFO`, `NBD_OPT_LIST`,
//!   `NBD_OPT_ABORT`; every other option gets `NBD_REP_ERR_UNSUP`;
//! * commands `READ`, `WRITE`, `FLUSH`, `TRIM`, `WRITE_ZEROES` (with `NO_HOLE`), `DISC`,
//!   with the `FUA` flag; advertised block sizes are 512 (minimum), 4096 (preferred) and
//!   32 MiB (maximum); `CAN_MULTI_CONN` is advertised because every connection reaches the
//!   same volume.
//!
//! Requests are pipelined: each connection reads requests continuously, runs each as its
//! own task against the volume, and replies in completion order, so a high-latency volume
//! sees many operations at once. See [`transmission`] for the shape and the bounds.
//!
//! Modules, and what each owns:
//!
//! | Module           | Owns                                                               |
//! |------------------|--------------------------------------------------------------------|
//! | [`proto`]        | constants and encoding of every message (with wire-format tables) |
//! | [`handshake`]    | greeting, client flags and option haggling                         |
//! | [`transmission`] | request validation, execution, reply writing for one connection    |
//! | [`server`]       | exports, limits, accept loops, connection lifetime, shutdown       |
//! | [`error`]        | [`NbdError`], why a connection ended                               |
//!
//! Fault model: anything a client sends may be wrong. A bad request gets an error reply
//! and the connection continues; broken framing (bad magic) or a failed socket ends that
//! connection only; nothing a client sends can panic the server or make it allocate more
//! than the per-connection bounds in [`ServerOptions`].
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use cairn_nbd::NbdServer;
//! use cairn_volume::MemVolume;
//!
//! let server = NbdServer::new("disk0".into(), Arc::new(MemVolume::new(1 << 30)), false);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:10809").await?;
//! let serving = tokio::spawn(server.clone().serve_tcp(listener));
//! // ... later:
//! server.shutdown();
//! # let _ = serving.await;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod error;
pub mod handshake;
pub mod proto;
pub mod server;
pub mod transmission;

pub use error::NbdError;
pub use server::{NbdExport, NbdServer, ServerOptions};
