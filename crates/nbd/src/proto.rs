//! NBD wire format: constants, and the encoding and decoding of every fixed-size message
//! the server exchanges. Pure functions over byte slices; no I/O lives here.
//!
//! All integers are big-endian ("network byte order"). Only the subset the server speaks
//! is described: fixed newstyle negotiation and simple replies.
//!
//! # Handshake (server greeting and client flags)
//!
//! | Direction | Field            | Size | Meaning                                               |
//! |-----------|------------------|------|-------------------------------------------------------|
//! | S → C     | magic            | 8    | `NBDMAGIC` ([`NBD_MAGIC`])                            |
//! | S → C     | option magic     | 8    | `IHAVEOPT` ([`OPTION_MAGIC`]): newstyle negotiation   |
//! | S → C     | handshake flags  | 2    | `FIXED_NEWSTYLE` \| `NO_ZEROES`                       |
//! | C → S     | client flags     | 4    | `C_FIXED_NEWSTYLE` \| `C_NO_ZEROES`; other bits: drop |
//!
//! # Option request (client → server), then `length` bytes of option data
//!
//! | Field  | Size | Meaning                                                  |
//! |--------|------|----------------------------------------------------------|
//! | magic  | 8    | `IHAVEOPT`; anything else closes the connection          |
//! | option | 4    | `NBD_OPT_*`                                              |
//! | length | 4    | bytes of option data that follow (at most [`OPTION_DATA_MAX_BYTES`]) |
//!
//! # Option reply (server → client), then `length` bytes of reply data
//!
//! | Field      | Size | Meaning                                              |
//! |------------|------|------------------------------------------------------|
//! | magic      | 8    | [`OPTION_REPLY_MAGIC`]                               |
//! | option     | 4    | the option being answered                            |
//! | reply type | 4    | `NBD_REP_*`; bit 31 set means an error               |
//! | length     | 4    | bytes of reply data that follow                      |
//!
//! Reply data of `NBD_REP_SERVER`: name length (4), name. Reply data of `NBD_REP_INFO`:
//! info type (2) then, for `NBD_INFO_EXPORT`, size (8) and transmission flags (2); for
//! `NBD_INFO_NAME` / `NBD_INFO_DESCRIPTION`, the string; for `NBD_INFO_BLOCK_SIZE`,
//! minimum (4), preferred (4) and maximum (4) block sizes.
//!
//! Option data of `NBD_OPT_INFO` / `NBD_OPT_GO`: name length (4), name, number of info
//! requests (2), that many info types (2 each).
//!
//! `NBD_OPT_EXPORT_NAME` has no option reply: the server answers with size (8),
//! transmission flags (2) and, unless both sides set `NO_ZEROES`, 124 zero bytes.
//!
//! # Request (client → server), 28 bytes, then `length` bytes of payload for `WRITE`
//!
//! | Field   | Size | Meaning                                                  |
//! |---------|------|----------------------------------------------------------|
//! | magic   | 4    | [`REQUEST_MAGIC`]; anything else closes the connection   |
//! | flags   | 2    | `NBD_CMD_FLAG_*` (`FUA`, `NO_HOLE`)                      |
//! | type    | 2    | `NBD_CMD_*`                                              |
//! | cookie  | 8    | opaque; echoed in the reply ("handle" in older specs)    |
//! | offset  | 8    | byte offset into the export                              |
//! | length  | 4    | bytes to read / write / trim / zero                      |
//!
//! # Simple reply (server → client), 16 bytes, then `length` bytes of data for a
//! successful `READ`
//!
//! | Field  | Size | Meaning                                                   |
//! |--------|------|-----------------------------------------------------------|
//! | magic  | 4    | [`SIMPLE_REPLY_MAGIC`]                                    |
//! | error  | 4    | 0 or an `NBD_E*` errno value                              |
//! | cookie | 8    | the request's cookie                                      |

/// `NBDMAGIC`, the first eight bytes the server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: announces newstyle negotiation, and starts every option request.
pub const OPTION_MAGIC: u64 = 0x4948_4156_454f_5054;
/// Starts every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Starts every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Starts every simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flag: the server speaks fixed newstyle negotiation.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can omit the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle negotiation.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: the client does not want the 124 zero bytes.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;
/// Every client flag the server understands; any other bit closes the connection.
pub const CLIENT_FLAGS_KNOWN: u32 = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES;
/// Zero bytes sent after the `NBD_OPT_EXPORT_NAME` answer unless `NO_ZEROES` was agreed.
pub const EXPORT_NAME_PADDING_BYTES: usize = 124;

/// Transmission flag: always set.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
/// Transmission flag: writes fail with `EPERM`.
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
/// Transmission flag: `NBD_CMD_FLUSH` is supported.
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
/// Transmission flag: `NBD_CMD_FLAG_FUA` is supported.
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
/// Transmission flag: `NBD_CMD_TRIM` is supported.
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
/// Transmission flag: `NBD_CMD_WRITE_ZEROES` is supported.
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Transmission flag: flushes are visible across connections; clients may open several.
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

/// Option: choose an export and enter transmission (no error reply possible).
pub const OPT_EXPORT_NAME: u32 = 1;
/// Option: end the negotiation.
pub const OPT_ABORT: u32 = 2;
/// Option: list the exports.
pub const OPT_LIST: u32 = 3;
/// Option: start TLS (not supported).
pub const OPT_STARTTLS: u32 = 5;
/// Option: describe an export.
pub const OPT_INFO: u32 = 6;
/// Option: describe an export and enter transmission.
pub const OPT_GO: u32 = 7;
/// Option: use structured replies (not supported).
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// Option: list metadata contexts (not supported).
pub const OPT_LIST_META_CONTEXT: u32 = 9;
/// Option: select metadata contexts (not supported).
pub const OPT_SET_META_CONTEXT: u32 = 10;
/// Option: use extended headers (not supported).
pub const OPT_EXTENDED_HEADERS: u32 = 11;

/// Option reply: the option succeeded / the list is complete.
pub const REP_ACK: u32 = 1;
/// Option reply: one export of an `NBD_OPT_LIST`.
pub const REP_SERVER: u32 = 2;
/// Option reply: one piece of export information for `NBD_OPT_INFO` / `NBD_OPT_GO`.
pub const REP_INFO: u32 = 3;
/// Bit 31 marks an option reply as an error.
pub const REP_FLAG_ERROR: u32 = 1 << 31;
/// Option error: the option is unknown to this server.
pub const REP_ERR_UNSUP: u32 = REP_FLAG_ERROR | 1;
/// Option error: the option data is malformed.
pub const REP_ERR_INVALID: u32 = REP_FLAG_ERROR | 3;
/// Option error: no export has that name.
pub const REP_ERR_UNKNOWN: u32 = REP_FLAG_ERROR | 6;
/// Option error: the server is shutting down.
pub const REP_ERR_SHUTDOWN: u32 = REP_FLAG_ERROR | 7;
/// Option error: the option data is too large to process.
pub const REP_ERR_TOO_BIG: u32 = REP_FLAG_ERROR | 9;

/// Info type: size and transmission flags (always sent).
pub const INFO_EXPORT: u16 = 0;
/// Info type: the canonical export name.
pub const INFO_NAME: u16 = 1;
/// Info type: a human-readable description.
pub const INFO_DESCRIPTION: u16 = 2;
/// Info type: block size constraints (always sent).
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Command: read `length` bytes.
pub const CMD_READ: u16 = 0;
/// Command: write the `length` payload bytes.
pub const CMD_WRITE: u16 = 1;
/// Command: soft disconnect.
pub const CMD_DISC: u16 = 2;
/// Command: make completed writes durable.
pub const CMD_FLUSH: u16 = 3;
/// Command: discard a range.
pub const CMD_TRIM: u16 = 4;
/// Command: make a range read as zeros.
pub const CMD_WRITE_ZEROES: u16 = 6;

/// Command flag: force unit access; the reply waits until the data is durable.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag (`WRITE_ZEROES`): do not punch a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;

/// Error: operation not permitted (write to a read-only export).
pub const NBD_EPERM: u32 = 1;
/// Error: input/output error.
pub const NBD_EIO: u32 = 5;
/// Error: out of memory.
pub const NBD_ENOMEM: u32 = 12;
/// Error: invalid request.
pub const NBD_EINVAL: u32 = 22;
/// Error: no space left (also: write past the end).
pub const NBD_ENOSPC: u32 = 28;
/// Error: server shutting down.
pub const NBD_ESHUTDOWN: u32 = 108;

/// Smallest request granularity: offsets and lengths are multiples of this.
pub const BLOCK_SIZE_MIN_BYTES: u32 = 512;
/// Preferred request granularity.
pub const BLOCK_SIZE_PREFERRED_BYTES: u32 = 4096;
/// Largest request (and `WRITE` payload) accepted.
pub const BLOCK_SIZE_MAX_BYTES: u32 = 32 * 1024 * 1024;
/// Largest option data the server reads; longer options get `NBD_REP_ERR_TOO_BIG`.
pub const OPTION_DATA_MAX_BYTES: u32 = 64 * 1024;
/// Longest export name or description the protocol allows.
pub const STRING_MAX_BYTES: usize = 4096;

/// Size of the server's greeting.
pub const GREETING_BYTES: usize = 18;

/// The server greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
pub fn encode_greeting(handshake_flags: u16) -> [u8; GREETING_BYTES] {
    let mut out = [0u8; GREETING_BYTES];
    out[0..8].copy_from_slice(&NBD_MAGIC.to_be_bytes());
    out[8..16].copy_from_slice(&OPTION_MAGIC.to_be_bytes());
    out[16..18].copy_from_slice(&handshake_flags.to_be_bytes());
    out
}

/// Header of an option request, after its magic has been checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// `NBD_OPT_*`.
    pub option: u32,
    /// Bytes of option data that follow.
    pub length: u32,
}

impl OptionHeader {
    /// Encoded size, magic included.
    pub const BYTES: usize = 16;

    /// Decodes an option header; `Err` carries the bad magic.
    pub fn decode(bytes: &[u8; Self::BYTES]) -> Result<Self, u64> {
        let magic = u64::from_be_bytes(take(bytes, 0));
        if magic != OPTION_MAGIC {
            return Err(magic);
        }
        Ok(Self {
            option: u32::from_be_bytes(take(bytes, 8)),
            length: u32::from_be_bytes(take(bytes, 12)),
        })
    }

    /// Encodes the header (as a client would).
    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..8].copy_from_slice(&OPTION_MAGIC.to_be_bytes());
        out[8..12].copy_from_slice(&self.option.to_be_bytes());
        out[12..16].copy_from_slice(&self.length.to_be_bytes());
        out
    }
}

/// Header of an option reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionReplyHeader {
    /// The option being answered.
    pub option: u32,
    /// `NBD_REP_*`.
    pub reply_type: u32,
    /// Bytes of reply data that follow.
    pub length: u32,
}

impl OptionReplyHeader {
    /// Encoded size, magic included.
    pub const BYTES: usize = 20;

    /// Encodes the header.
    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..8].copy_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
        out[8..12].copy_from_slice(&self.option.to_be_bytes());
        out[12..16].copy_from_slice(&self.reply_type.to_be_bytes());
        out[16..20].copy_from_slice(&self.length.to_be_bytes());
        out
    }

    /// Decodes an option reply header; `Err` carries the bad magic.
    pub fn decode(bytes: &[u8; Self::BYTES]) -> Result<Self, u64> {
        let magic = u64::from_be_bytes(take(bytes, 0));
        if magic != OPTION_REPLY_MAGIC {
            return Err(magic);
        }
        Ok(Self {
            option: u32::from_be_bytes(take(bytes, 8)),
            reply_type: u32::from_be_bytes(take(bytes, 12)),
            length: u32::from_be_bytes(take(bytes, 16)),
        })
    }
}

/// The data of an `NBD_OPT_INFO` / `NBD_OPT_GO` option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// Export name as sent (not necessarily UTF-8).
    pub name: Vec<u8>,
    /// Requested `NBD_INFO_*` types.
    pub info_types: Vec<u16>,
}

impl InfoRequest {
    /// Parses the option data; `None` if the lengths inside it are inconsistent.
    pub fn decode(data: &[u8]) -> Option<Self> {
        let name_len = u32::from_be_bytes(data.get(0..4)?.try_into().ok()?) as usize;
        let name_end = 4usize.checked_add(name_len)?;
        let name = data.get(4..name_end)?.to_vec();
        let count_end = name_end.checked_add(2)?;
        let count = u16::from_be_bytes(data.get(name_end..count_end)?.try_into().ok()?);
        let rest = &data[count_end..];
        if rest.len() != usize::from(count) * 2 {
            return None;
        }
        let info_types = rest
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        Some(Self { name, info_types })
    }

    /// Encodes the option data (as a client would).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + self.name.len() + 2 * self.info_types.len());
        out.extend_from_slice(&(self.name.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.name);
        out.extend_from_slice(&(self.info_types.len() as u16).to_be_bytes());
        for info in &self.info_types {
            out.extend_from_slice(&info.to_be_bytes());
        }
        out
    }
}

/// Reply data of `NBD_INFO_EXPORT`.
pub fn encode_info_export(size_bytes: u64, transmission_flags: u16) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[0..2].copy_from_slice(&INFO_EXPORT.to_be_bytes());
    out[2..10].copy_from_slice(&size_bytes.to_be_bytes());
    out[10..12].copy_from_slice(&transmission_flags.to_be_bytes());
    out
}

/// Reply data of `NBD_INFO_BLOCK_SIZE` with the server's fixed constraints.
pub fn encode_info_block_size() -> [u8; 14] {
    let mut out = [0u8; 14];
    out[0..2].copy_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    out[2..6].copy_from_slice(&BLOCK_SIZE_MIN_BYTES.to_be_bytes());
    out[6..10].copy_from_slice(&BLOCK_SIZE_PREFERRED_BYTES.to_be_bytes());
    out[10..14].copy_from_slice(&BLOCK_SIZE_MAX_BYTES.to_be_bytes());
    out
}

/// Reply data of `NBD_INFO_NAME` / `NBD_INFO_DESCRIPTION`.
pub fn encode_info_string(info_type: u16, text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + text.len());
    out.extend_from_slice(&info_type.to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

/// Reply data of `NBD_REP_SERVER`.
pub fn encode_rep_server(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    out.extend_from_slice(&(name.len() as u32).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// A transmission request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// `NBD_CMD_FLAG_*`.
    pub flags: u16,
    /// `NBD_CMD_*`.
    pub command: u16,
    /// Opaque value echoed in the reply.
    pub cookie: u64,
    /// Byte offset into the export.
    pub offset: u64,
    /// Bytes affected (and, for `WRITE`, bytes of payload).
    pub length: u32,
}

impl RequestHeader {
    /// Encoded size, magic included.
    pub const BYTES: usize = 28;

    /// Decodes a request header; `Err` carries the bad magic.
    pub fn decode(bytes: &[u8; Self::BYTES]) -> Result<Self, u32> {
        let magic = u32::from_be_bytes(take(bytes, 0));
        if magic != REQUEST_MAGIC {
            return Err(magic);
        }
        Ok(Self {
            flags: u16::from_be_bytes(take(bytes, 4)),
            command: u16::from_be_bytes(take(bytes, 6)),
            cookie: u64::from_be_bytes(take(bytes, 8)),
            offset: u64::from_be_bytes(take(bytes, 16)),
            length: u32::from_be_bytes(take(bytes, 24)),
        })
    }

    /// Encodes the header (as a client would).
    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.command.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..28].copy_from_slice(&self.length.to_be_bytes());
        out
    }

    /// Bytes of payload that follow this header on the wire.
    pub fn payload_bytes(&self) -> u32 {
        if self.command == CMD_WRITE {
            self.length
        } else {
            0
        }
    }
}

/// A simple reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReplyHeader {
    /// 0 or `NBD_E*`.
    pub error: u32,
    /// The request's cookie.
    pub cookie: u64,
}

impl SimpleReplyHeader {
    /// Encoded size, magic included.
    pub const BYTES: usize = 16;

    /// Encodes the header.
    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        out[4..8].copy_from_slice(&self.error.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out
    }

    /// Decodes a simple reply header; `Err` carries the bad magic.
    pub fn decode(bytes: &[u8; Self::BYTES]) -> Result<Self, u32> {
        let magic = u32::from_be_bytes(take(bytes, 0));
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(magic);
        }
        Ok(Self {
            error: u32::from_be_bytes(take(bytes, 4)),
            cookie: u64::from_be_bytes(take(bytes, 8)),
        })
    }
}

/// A human-readable name of an option, for logs.
pub fn option_name(option: u32) -> &'static str {
    match option {
        OPT_EXPORT_NAME => "EXPORT_NAME",
        OPT_ABORT => "ABORT",
        OPT_LIST => "LIST",
        OPT_STARTTLS => "STARTTLS",
        OPT_INFO => "INFO",
        OPT_GO => "GO",
        OPT_STRUCTURED_REPLY => "STRUCTURED_REPLY",
        OPT_LIST_META_CONTEXT => "LIST_META_CONTEXT",
        OPT_SET_META_CONTEXT => "SET_META_CONTEXT",
        OPT_EXTENDED_HEADERS => "EXTENDED_HEADERS",
        _ => "unknown",
    }
}

/// Copies `N` bytes starting at `at` out of a fixed-size buffer whose length the caller's
/// type already guarantees.
fn take<const N: usize, const M: usize>(bytes: &[u8; M], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[at..at + N]);
    out
}
