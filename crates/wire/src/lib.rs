//! The wire: how Cairn's daemons and clients talk.
//!
//! This crate owns the binary framing ([`frame`]), every message
//! ([`msg`]) and the connection halves that read and write them
//! ([`conn`]). It knows nothing of what a message means; the monitor, OSD and
//! client give meaning. A malformed frame is an error for that connection only.

pub mod conn;
pub mod folded;
pub mod frame;
pub mod msg;
pub mod pg;

pub use conn::{connect, Connection, FrameReader, Sender, CONNECT_TIMEOUT, READ_CHUNK};
pub use frame::{
    decode_body, decode_header, encode_frame, encode_frame_parts, FrameHeader, WireError,
    FRAME_HEADER_LEN, MAX_FRAME_LEN, WIRE_VERSION,
};
pub use msg::*;
pub use pg::*;
