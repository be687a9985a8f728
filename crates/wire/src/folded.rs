//! The packed form of a log entry's folded entries ([`Superseded`]), as
//! sent and stored.
//!
//! A member catching up after a long outage may take thousands of folded
//! entries per object, and it persists them before its PG can go active:
//! their size is time clients wait. Folded entries of one object ascend,
//! and their request ids mostly come from one client in order, so each
//! field is written as the zigzag varint of its difference from the one
//! before: about 5 bytes an entry where a plain encoding takes 33.
//!
//! | field                 | encoding                                        |
//! |-----------------------|-------------------------------------------------|
//! | count                 | varint                                          |
//! | per entry: flags      | one byte: bit 0 delete, bit 1 has a request id  |
//! | epoch, counter        | zigzag varint of the difference from the last   |
//! | client, tid (if any)  | zigzag varint of the difference from the last   |
//!
//! Decoding is strict: a short, over-long or trailing input, unknown flag
//! bits or an epoch past `u32` is an error naming what failed.

use cairn_types::{ReqId, Version};
use serde::de::Error as _;
use serde::{Deserializer, Serializer};

use crate::pg::{LogOp, Superseded};

const DELETE: u8 = 1;
const HAS_REQID: u8 = 2;
/// Folded entries in one log entry at most: a sanity bound far above any
/// log (`pack` never writes more; a frame's size bounds them first).
pub const MAX_FOLDED: u64 = 1 << 32;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `cur - prev` as a zigzag varint (small either way).
fn put_delta(out: &mut Vec<u8>, prev: u64, cur: u64) {
    let d = cur.wrapping_sub(prev) as i64;
    put_varint(out, ((d << 1) ^ (d >> 63)) as u64);
}

/// Encode `folded` in the packed form.
pub fn pack(folded: &[Superseded]) -> Vec<u8> {
    assert!(
        folded.len() as u64 <= MAX_FOLDED,
        "{} folded entries in one log entry",
        folded.len()
    );
    let mut out = Vec::with_capacity(2 + folded.len() * 6);
    put_varint(&mut out, folded.len() as u64);
    let (mut epoch, mut counter, mut client, mut tid) = (0u64, 0u64, 0u64, 0u64);
    for s in folded {
        let mut flags = 0;
        if s.op == LogOp::Delete {
            flags |= DELETE;
        }
        if s.reqid.is_some() {
            flags |= HAS_REQID;
        }
        out.push(flags);
        put_delta(&mut out, epoch, u64::from(s.version.epoch));
        put_delta(&mut out, counter, s.version.counter);
        epoch = u64::from(s.version.epoch);
        counter = s.version.counter;
        if let Some(r) = s.reqid {
            put_delta(&mut out, client, r.client);
            put_delta(&mut out, tid, r.tid);
            client = r.client;
            tid = r.tid;
        }
    }
    out
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnpackError {
    #[error("folded entries: input ends inside {0}")]
    Short(&'static str),
    #[error("folded entries: {0} is an over-long varint")]
    Overlong(&'static str),
    #[error("folded entries: count {0} above the limit {MAX_FOLDED}")]
    TooMany(u64),
    #[error("folded entries: unknown flags {0:#x}")]
    Flags(u8),
    #[error("folded entries: epoch {0} out of range")]
    Epoch(u64),
    #[error("folded entries: {0} bytes after the last entry")]
    Trailing(usize),
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn byte(&mut self, what: &'static str) -> Result<u8, UnpackError> {
        let (&b, rest) = self.bytes.split_first().ok_or(UnpackError::Short(what))?;
        self.bytes = rest;
        Ok(b)
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, UnpackError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte(what)?;
            if shift == 63 && b > 1 {
                return Err(UnpackError::Overlong(what));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                // One encoding per value: no zero byte ends a longer one.
                if b == 0 && shift > 0 {
                    return Err(UnpackError::Overlong(what));
                }
                return Ok(v);
            }
        }
        Err(UnpackError::Overlong(what))
    }

    fn delta(&mut self, prev: u64, what: &'static str) -> Result<u64, UnpackError> {
        let zz = self.varint(what)?;
        let d = ((zz >> 1) as i64) ^ -((zz & 1) as i64);
        Ok(prev.wrapping_add(d as u64))
    }
}

/// Decode the packed form, exactly.
pub fn unpack(bytes: &[u8]) -> Result<Vec<Superseded>, UnpackError> {
    let mut r = Reader { bytes };
    let count = r.varint("the count")?;
    if count > MAX_FOLDED {
        return Err(UnpackError::TooMany(count));
    }
    // Every entry takes at least three bytes: never reserve past the input.
    let mut out = Vec::with_capacity((count as usize).min(bytes.len() / 3));
    let (mut epoch, mut counter, mut client, mut tid) = (0u64, 0u64, 0u64, 0u64);
    for _ in 0..count {
        let flags = r.byte("the flags")?;
        if flags & !(DELETE | HAS_REQID) != 0 {
            return Err(UnpackError::Flags(flags));
        }
        epoch = r.delta(epoch, "an epoch")?;
        counter = r.delta(counter, "a counter")?;
        let e = u32::try_from(epoch).map_err(|_| UnpackError::Epoch(epoch))?;
        let reqid = if flags & HAS_REQID != 0 {
            client = r.delta(client, "a client")?;
            tid = r.delta(tid, "a tid")?;
            Some(ReqId { client, tid })
        } else {
            None
        };
        out.push(Superseded {
            version: Version::new(e, counter),
            reqid,
            op: if flags & DELETE != 0 {
                LogOp::Delete
            } else {
                LogOp::Modify
            },
        });
    }
    if !r.bytes.is_empty() {
        return Err(UnpackError::Trailing(r.bytes.len()));
    }
    Ok(out)
}

/// For `#[serde(with = "folded")]`.
pub fn serialize<S: Serializer>(folded: &[Superseded], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(&pack(folded))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Superseded>, D::Error> {
    let bytes = bytes_cow(d)?;
    unpack(&bytes).map_err(D::Error::custom)
}

/// Borrowed bytes where the format allows, owned otherwise.
fn bytes_cow<'de, D: Deserializer<'de>>(d: D) -> Result<std::borrow::Cow<'de, [u8]>, D::Error> {
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = std::borrow::Cow<'de, [u8]>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("packed folded entries")
        }
        fn visit_borrowed_bytes<E>(self, v: &'de [u8]) -> Result<Self::Value, E> {
            Ok(std::borrow::Cow::Borrowed(v))
        }
        fn visit_bytes<E>(self, v: &[u8]) -> Result<Self::Value, E> {
            Ok(std::borrow::Cow::Owned(v.to_vec()))
        }
        fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Self::Value, E> {
            Ok(std::borrow::Cow::Owned(v))
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut v = Vec::new();
            while let Some(b) = seq.next_element::<u8>()? {
                v.push(b);
            }
            Ok(std::borrow::Cow::Owned(v))
        }
    }
    d.deserialize_bytes(Visit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(epoch: u32, counter: u64, reqid: Option<(u64, u64)>, op: LogOp) -> Superseded {
        Superseded {
            version: Version::new(epoch, counter),
            reqid: reqid.map(|(client, tid)| ReqId { client, tid }),
            op,
        }
    }

    #[test]
    fn packs_small_and_round_trips_anything() {
        let folded: Vec<Superseded> = (0..1000)
            .map(|i| s(7, 100 + i * 8, Some((42, 5000 + i * 3)), LogOp::Modify))
            .collect();
        let packed = pack(&folded);
        assert!(
            packed.len() <= 16 + folded.len() * 5,
            "{} bytes",
            packed.len()
        );
        assert_eq!(unpack(&packed).unwrap(), folded);
        // Extremes and descents survive too.
        let odd = vec![
            s(u32::MAX, u64::MAX, Some((u64::MAX, 0)), LogOp::Delete),
            s(0, 0, None, LogOp::Modify),
            s(3, 1 << 63, Some((0, u64::MAX)), LogOp::Delete),
        ];
        assert_eq!(unpack(&pack(&odd)).unwrap(), odd);
        assert_eq!(unpack(&pack(&[])).unwrap(), vec![]);
        // Through bincode, as a log entry's field.
        let holder = Holder {
            folded: odd.clone(),
        };
        let via: Vec<u8> = bincode::serialize(&holder).unwrap();
        let back: Holder = bincode::deserialize(&via).unwrap();
        assert_eq!(back.folded, odd);
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Holder {
        #[serde(with = "super")]
        folded: Vec<Superseded>,
    }

    #[test]
    fn damaged_input_is_an_error_naming_what_failed() {
        let good = pack(&[s(1, 2, Some((3, 4)), LogOp::Modify)]);
        for cut in 0..good.len() {
            assert!(
                matches!(unpack(&good[..cut]), Err(UnpackError::Short(_))),
                "cut at {cut}"
            );
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(unpack(&trailing), Err(UnpackError::Trailing(1)));
        let mut flags = good.clone();
        flags[1] = 0x84;
        assert_eq!(unpack(&flags), Err(UnpackError::Flags(0x84)));
        assert_eq!(unpack(&[0xff; 11]), Err(UnpackError::Overlong("the count")));
        // 0 written in two bytes: one encoding per value.
        assert_eq!(
            unpack(&[0x80, 0x00]),
            Err(UnpackError::Overlong("the count"))
        );
        let mut many = Vec::new();
        put_varint(&mut many, MAX_FOLDED + 1);
        assert_eq!(unpack(&many), Err(UnpackError::TooMany(MAX_FOLDED + 1)));
        let mut epoch = vec![1, 0];
        put_delta(&mut epoch, 0, u64::from(u32::MAX) + 1);
        epoch.push(0);
        assert_eq!(
            unpack(&epoch),
            Err(UnpackError::Epoch(u64::from(u32::MAX) + 1))
        );
    }
}
