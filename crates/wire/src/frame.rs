//! two segments:
//!
//! | field     | size | meaning                                              |
//! |-----------|------|------------------------------------------------------|
//! | magic     | 3    | `"CRN"`                                               |
//! | version   | 1    | [`WIRE_VERSION`], the encoding of the messages        |
//! | front_len | 4    | length of the front segment, LE                       |
//! | data_len  | 4    | length of the data segment, LE                        |
//! | crc       | 4    | crc32c of the front then the data segment, LE         |
//! | front     | n    | a [`Message`] in bincode (fixed-width integers, LE)   |
//! | data      | m    | the message's bulk payloads (object data), in order   |
//!
//! Object data (a write's bytes, a read's result, a replicated write's or
//! a recovery push's) is marked `cairn_types::bulk`: the front holds only
//! its length, and the bytes follow in the data segment. A sender hands
//! them to the socket by reference (a vectored write; no copy into a send
//! buffer) and a receiver decodes them as slices of the buffer the frame
//! was read into (no copy out of it). `front_len + data_len` is at most
//! [`MAX_FRAME_LEN`].
//!
//! A frame with a bad magic, another wire version, an over-long length, a
//! bad crc, an undecodable front or a data segment its message does not use
//! exactly is a [`WireError`]; the receiver closes that connection and
//! nothing else. Another version is told apart from garbage, so a daemon of
//! another build is refused with a line saying so rather than a decoding
//! error.

use bytes::Bytes;

use crate::msg::Message;

pub const FRAME_MAGIC: [u8; 3] = *b"CRN";
/// The encoding of [`Message`]: bumped by every change to a message's
/// shape or to the frame, since bincode carries no field names to tell
/// versions apart. 3: the data segment. 4: `ObjOp::OmapCmp`. 7: a cache
/// pool's totals (`Message::TierUsage`, bytes in `TierStat`).
pub const WIRE_VERSION: u8 = 7;
pub const FRAME_HEADER_LEN: usize = 16;
/// Largest front plus data: a whole 64 MiB object (the largest object
/// size) plus headroom.
pub const MAX_FRAME_LEN: usize = 80 << 20;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("bad frame magic {0:02x?}")]
    BadMagic([u8; 3]),
    #[error("the peer speaks wire version {theirs}, this build speaks {ours}")]
    Version { theirs: u8, ours: u8 },
    #[error("frame of {0} bytes exceeds the limit")]
    TooLong(usize),
    #[error("frame checksum mismatch")]
    BadCrc,
    #[error("undecodable message: {0}")]
    Decode(String),
    #[error("message too large to encode: {0}")]
    Encode(String),
    #[error("connection closed")]
    Closed,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// A parsed frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub front_len: usize,
    pub data_len: usize,
    pub crc: u32,
}

impl FrameHeader {
    /// Bytes after the header.
    pub fn body_len(&self) -> usize {
        self.front_len + self.data_len
    }
}

/// Append the header and front of a frame holding `msg` to `out`; returns
/// the data segment's payloads, which must follow on the wire in order.
pub fn encode_frame_parts(msg: &Message, out: &mut Vec<u8>) -> Result<Vec<Bytes>, WireError> {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
    let (encoded, payloads) =
        cairn_types::bulk::collect(|| bincode::serialize_into(&mut *out, msg));
    if let Err(e) = encoded {
        out.truncate(start);
        return Err(WireError::Encode(e.to_string()));
    }
    let front_len = out.len() - start - FRAME_HEADER_LEN;
    let data_len: usize = payloads.iter().map(Bytes::len).sum();
    if front_len + data_len > MAX_FRAME_LEN {
        out.truncate(start);
        return Err(WireError::TooLong(front_len + data_len));
    }
    let crc = payloads.iter().fold(
        crc32c::crc32c(&out[start + FRAME_HEADER_LEN..]),
        |crc, p| crc32c::crc32c_append(crc, p),
    );
    out[start..start + 3].copy_from_slice(&FRAME_MAGIC);
    out[start + 3] = WIRE_VERSION;
    out[start + 4..start + 8].copy_from_slice(&(front_len as u32).to_le_bytes());
    out[start + 8..start + 12].copy_from_slice(&(data_len as u32).to_le_bytes());
    out[start + 12..start + 16].copy_from_slice(&crc.to_le_bytes());
    Ok(payloads)
}

/// Append one whole frame holding `msg` to `out`, its data segment copied
/// in (for tests and tools; connections send payloads by reference).
pub fn encode_frame(msg: &Message, out: &mut Vec<u8>) -> Result<(), WireError> {
    for payload in encode_frame_parts(msg, out)? {
        out.extend_from_slice(&payload);
    }
    Ok(())
}

/// Parse a frame header.
pub fn decode_header(header: &[u8; FRAME_HEADER_LEN]) -> Result<FrameHeader, WireError> {
    let word =
        |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
    let magic = [header[0], header[1], header[2]];
    if magic != FRAME_MAGIC {
        return Err(WireError::BadMagic(magic));
    }
    if header[3] != WIRE_VERSION {
        return Err(WireError::Version {
            theirs: header[3],
            ours: WIRE_VERSION,
        });
    }
    let (front_len, data_len) = (word(4) as usize, word(8) as usize);
    match front_len.checked_add(data_len) {
        Some(len) if len <= MAX_FRAME_LEN => Ok(FrameHeader {
            front_len,
            data_len,
            crc: word(12),
        }),
        _ => Err(WireError::TooLong(front_len.saturating_add(data_len))),
    }
}

/// Check and decode a frame's body (`header.body_len()` bytes after its
/// header): the data segment's payloads become slices of `body`.
pub fn decode_body(header: &FrameHeader, body: Bytes) -> Result<Message, WireError> {
    if body.len() != header.body_len() {
        return Err(WireError::Protocol(format!(
            "a frame body of {} bytes where its header says {}",
            body.len(),
            header.body_len()
        )));
    }
    if crc32c::crc32c(&body) != header.crc {
        return Err(WireError::BadCrc);
    }
    let data = body.slice(header.front_len..);
    let front = &body[..header.front_len];
    cairn_types::bulk::with_segment(data, || bincode::deserialize(front))
        .map_err(|e| WireError::Decode(e.to_string()))?
        .map_err(|e| WireError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::*;
    use cairn_types::{PgId, ReqId};

    fn sample() -> Message {
        Message::OsdOp(OsdOp {
            tid: 7,
            reqid: ReqId { client: 9, tid: 7 },
            epoch: 3,
            pg: PgId::new(1, 5),
            oid: "rbd_data.ab.0000000000000001".into(),
            ops: vec![ObjOp::Write {
                offset: 4096,
                data: Bytes::from(vec![0xab; 4096]),
            }],
            ignore_overlay: false,
        })
    }

    fn decode_one(buf: &[u8]) -> Result<Message, WireError> {
        let header: [u8; FRAME_HEADER_LEN] = buf[..FRAME_HEADER_LEN].try_into().unwrap();
        let header = decode_header(&header)?;
        let body = &buf[FRAME_HEADER_LEN..FRAME_HEADER_LEN + header.body_len()];
        decode_body(&header, Bytes::copy_from_slice(body))
    }

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        encode_frame(&sample(), &mut buf).unwrap();
        encode_frame(&Message::Ping { nonce: 1 }, &mut buf).unwrap();
        assert_eq!(decode_one(&buf).unwrap(), sample());
        let word = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().unwrap()) as usize;
        let first = FRAME_HEADER_LEN + word(4) + word(8);
        assert_eq!(word(8), 4096, "the write's data is the data segment");
        assert_eq!(
            decode_one(&buf[first..]).unwrap(),
            Message::Ping { nonce: 1 }
        );
    }

    #[test]
    fn corrupt_frames_are_rejected() {
        let mut buf = Vec::new();
        encode_frame(&sample(), &mut buf).unwrap();
        let mut bad_magic = buf.clone();
        bad_magic[0] ^= 1;
        assert!(matches!(
            decode_one(&bad_magic),
            Err(WireError::BadMagic(_))
        ));
        let mut bad_crc = buf.clone();
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 0xff;
        assert!(matches!(decode_one(&bad_crc), Err(WireError::BadCrc)));
        let mut other_version = buf.clone();
        other_version[3] = WIRE_VERSION + 1;
        assert!(matches!(
            decode_one(&other_version),
            Err(WireError::Version { theirs, ours }) if theirs == WIRE_VERSION + 1 && ours == WIRE_VERSION
        ));
        let mut too_long = buf.clone();
        too_long[4..8].copy_from_slice(&(u32::MAX).to_le_bytes());
        assert!(matches!(decode_one(&too_long), Err(WireError::TooLong(_))));
        let mut both_long = buf.clone();
        both_long[4..8].copy_from_slice(&(MAX_FRAME_LEN as u32 / 2 + 1).to_le_bytes());
        both_long[8..12].copy_from_slice(&(MAX_FRAME_LEN as u32 / 2 + 1).to_le_bytes());
        assert!(matches!(decode_one(&both_long), Err(WireError::TooLong(_))));
    }

    /// A data segment longer or shorter than the message's payloads, with
    /// a crc that matches, is refused.
    #[test]
    fn a_data_segment_the_message_does_not_use_exactly_is_refused() {
        let mut buf = Vec::new();
        encode_frame(&sample(), &mut buf).unwrap();
        let header = decode_header(&buf[..FRAME_HEADER_LEN].try_into().unwrap()).unwrap();
        for delta in [-1i64, 1] {
            let data_len = (header.data_len as i64 + delta) as usize;
            let mut body = buf[FRAME_HEADER_LEN..].to_vec();
            body.resize(header.front_len + data_len, 0);
            let h = FrameHeader {
                data_len,
                crc: crc32c::crc32c(&body),
                ..header
            };
            assert!(
                matches!(
                    decode_body(&h, Bytes::from(body)),
                    Err(WireError::Decode(_))
                ),
                "data segment off by {delta}"
            );
        }
    }

    #[test]
    fn garbage_with_a_valid_crc_fails_to_decode() {
        let payload = vec![0xffu8; 32];
        let header = FrameHeader {
            front_len: 32,
            data_len: 0,
            crc: crc32c::crc32c(&payload),
        };
        assert!(matches!(
            decode_body(&header, Bytes::from(payload)),
            Err(WireError::Decode(_))
        ));
    }
}
