//! Frame format. Every message travels as one frame:
//!
//! | field   | size | meaning                                           |
//! |---------|------|---------------------------------------------------|
//! | magic   | 3    | `"CRN"`                                            |
//! | version | 1    | [`WIRE_VERSION`], the encoding of the messages     |
//! | length  | 4    | payload length in bytes, ≤ [`MAX_FRAME_LEN`], LE   |
//! | crc     | 4    | crc32c of the payload, LE                          |
//! | payload | n    | a [`Message`] in bincode (fixed-int, little-endian) |
//!
//! A frame with a bad magic, another wire version, an over-long length, a
//! bad crc or an undecodable payload is a [`WireError`]; the receiver
//! closes that connection and nothing else. Another version is told apart
//! from garbage, so a daemon of another build is refused with a line
//! saying so rather than a decoding error.

use crate::msg::Message;

pub const FRAME_MAGIC: [u8; 3] = *b"CRN";
/// The encoding of [`Message`]: bumped by every change to a message's
/// shape, since bincode carries no field names to tell versions apart.
pub const WIRE_VERSION: u8 = 2;
pub const FRAME_HEADER_LEN: usize = 12;
/// Largest payload: a whole 64 MiB object (the largest object size) plus headroom.
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

/// Append one frame holding `msg` to `out`.
pub fn encode_frame(msg: &Message, out: &mut Vec<u8>) -> Result<(), WireError> {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
    bincode::serialize_into(&mut *out, msg).map_err(|e| WireError::Encode(e.to_string()))?;
    let len = out.len() - start - FRAME_HEADER_LEN;
    if len > MAX_FRAME_LEN {
        out.truncate(start);
        return Err(WireError::TooLong(len));
    }
    let crc = crc32c::crc32c(&out[start + FRAME_HEADER_LEN..]);
    out[start..start + 3].copy_from_slice(&FRAME_MAGIC);
    out[start + 3] = WIRE_VERSION;
    out[start + 4..start + 8].copy_from_slice(&(len as u32).to_le_bytes());
    out[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Parse a frame header: returns (payload length, expected crc).
pub fn decode_header(header: &[u8; FRAME_HEADER_LEN]) -> Result<(usize, u32), WireError> {
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
    let len = word(4) as usize;
    if len > MAX_FRAME_LEN {
        return Err(WireError::TooLong(len));
    }
    Ok((len, word(8)))
}

/// Check and decode a payload.
pub fn decode_payload(payload: &[u8], crc: u32) -> Result<Message, WireError> {
    if crc32c::crc32c(payload) != crc {
        return Err(WireError::BadCrc);
    }
    bincode::deserialize(payload).map_err(|e| WireError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::*;
    use bytes::Bytes;
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
        })
    }

    fn decode_one(buf: &[u8]) -> Result<Message, WireError> {
        let header: [u8; FRAME_HEADER_LEN] = buf[..FRAME_HEADER_LEN].try_into().unwrap();
        let (len, crc) = decode_header(&header)?;
        decode_payload(&buf[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len], crc)
    }

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        encode_frame(&sample(), &mut buf).unwrap();
        encode_frame(&Message::Ping { nonce: 1 }, &mut buf).unwrap();
        assert_eq!(decode_one(&buf).unwrap(), sample());
        let first = FRAME_HEADER_LEN + u32::from_le_bytes(buf[4..8].try_into().unwrap()) as usize;
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
    }

    #[test]
    fn garbage_with_a_valid_crc_fails_to_decode() {
        let payload = vec![0xffu8; 32];
        let crc = crc32c::crc32c(&payload);
        assert!(matches!(
            decode_payload(&payload, crc),
            Err(WireError::Decode(_))
        ));
    }
}
