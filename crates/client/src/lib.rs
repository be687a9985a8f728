//! The client library: what a gateway or application links to reach a
//! Cairn cluster.
//!
//! - [`cluster::Cluster`]: the monitor session (map subscription, admin
//!   commands) and the objecter, which sends each object operation to its
//!   PG's primary and resends it — same request id — when the map moves
//!   the PG or a connection fails, until it completes.
//! - [`striper`]: image byte ranges → object extents.
//! - [`image::Image`]: RBD-like images (metadata in cluster objects, data in
//!   `rbd_data.<id>.<object number>` objects), implementing
//!   [`cairn_volume::Volume`] so NBD and `cairn bench` drive it.

pub mod cluster;
mod error;
pub mod image;
mod mon_session;
mod osd_conn;
pub mod striper;

pub use cluster::{ClientOptions, Cluster, Reconfigure};
pub use error::ClientError;
pub use image::{Image, ImageInfo};
