//! The OSD: serves the objects of the placement groups it holds.
//!
//! The logic and the daemon are apart. [`OsdCore`] is one OSD's logic as a
//! state machine over a narrow interface ([`io::OsdIo`]: store, peers,
//! clients, monitor, clock): its map, its PGs ([`pg`]: peering over past
//! intervals, client operations, log recovery, backfill) and its recovery
//! budget. It never blocks, sleeps or spawns, so the same code runs in the
//! daemon and in a seeded whole-cluster simulation (`cairn-sim`).
//! [`Osd`] (the `daemon` module) wraps it with tokio: it accepts client
//! and peer connections, keeps the monitor session, runs store operations
//! and timers, and feeds every event back into the core.
//!
//! What this crate must never do: acknowledge a write before every acting
//! member (and backfill target) has committed it, serve a PG before peering
//! has heard from every earlier interval that may have acknowledged writes,
//! or serve an object some acting member is missing.

mod core;
mod daemon;
pub mod io;
pub mod pace;
pub mod pg;
mod slots;
mod write_times;

pub use crate::core::{
    CoreOptions, OsdCore, PlantedBug, CATCH_UP_PER_PRIMARY, MAX_HELD, MAX_OID_LEN,
};
pub use daemon::{ClientLimits, ConfigHook, Listeners, Osd, OsdError, OsdOptions, ProcessUsage};
pub use pg::{Pg, Role};
pub use write_times::WriteTimes;
