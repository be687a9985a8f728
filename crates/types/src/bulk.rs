//! Bulk payloads (object data) carried out of line in wire frames.
//!
//! A field marked `#[serde(with = "cairn_types::bulk")]` (a `Bytes`) or
//! `#[serde(with = "cairn_types::bulk::option")]` (an `Option<Bytes>`)
//! serializes in one of two ways:
//! - inside [`collect`] (the wire encoding a frame): only its length goes
//!   into the serialized message; the bytes themselves are handed back
//!   beside it, by reference, in field order, for the frame to send after
//!   the message without copying them;
//! - anywhere else (a journal, a test): exactly as a plain `Bytes`, so
//!   every on-disk encoding is unchanged.
//!
//! Decoding mirrors it: inside [`with_segment`] (the wire decoding a frame
//! it received) a marked field takes the next slice of the frame's data
//! segment, sharing its buffer (no copy); anywhere else it decodes inline.
//! The mode is a per-thread setting held only for the duration of one
//! synchronous encode or decode; nothing survives between calls.
//!
//! Must never: decode a length the segment does not hold (an error names
//! it), or leave a mode set after the call that set it returns or panics.

use std::cell::RefCell;

use bytes::Bytes;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where the calling thread is, for marked fields.
enum Mode {
    /// Encoding a frame: payloads go here, in order.
    Collect(Vec<Bytes>),
    /// Decoding a frame: payloads come from this segment, from `at` on.
    Segment { data: Bytes, at: usize },
}

thread_local! {
    static MODE: RefCell<Option<Mode>> = const { RefCell::new(None) };
}

/// Restores the previous mode when a call ends, however it ends.
struct Restore(Option<Mode>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        MODE.with(|m| *m.borrow_mut() = previous);
    }
}

fn enter(mode: Mode) -> Restore {
    Restore(MODE.with(|m| m.borrow_mut().replace(mode)))
}

fn leave() -> Option<Mode> {
    MODE.with(|m| m.borrow_mut().take())
}

/// Run `encode` with marked fields collected out of line; returns its
/// result and the payloads, in the order they were serialized. `encode`
/// must run the serializer once: `bincode::serialize_into` does, while
/// `bincode::serialize` first sizes the value with a pass of its own and
/// would hand every payload twice.
pub fn collect<R>(encode: impl FnOnce() -> R) -> (R, Vec<Bytes>) {
    let _restore = enter(Mode::Collect(Vec::new()));
    let out = encode();
    let payloads = match leave() {
        Some(Mode::Collect(payloads)) => payloads,
        _ => Vec::new(),
    };
    (out, payloads)
}

/// A frame's data segment was not consumed exactly by its message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the frame's data segment holds {len} bytes, its message used {used}")]
pub struct SegmentMismatch {
    pub len: usize,
    pub used: usize,
}

/// Run `decode` with marked fields taken, in order, from `data`. Fails if
/// `decode` left part of `data` unused (a decode error inside `decode` is
/// its own result).
pub fn with_segment<R>(data: Bytes, decode: impl FnOnce() -> R) -> Result<R, SegmentMismatch> {
    let len = data.len();
    let _restore = enter(Mode::Segment { data, at: 0 });
    let out = decode();
    match leave() {
        Some(Mode::Segment { at, .. }) if at == len => Ok(out),
        Some(Mode::Segment { at, .. }) => Err(SegmentMismatch { len, used: at }),
        _ => Err(SegmentMismatch { len, used: 0 }),
    }
}

/// Serialize a marked `Bytes` field (see the module docs).
pub fn serialize<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    let collected = MODE.with(|m| match &mut *m.borrow_mut() {
        Some(Mode::Collect(payloads)) => {
            payloads.push(bytes.clone());
            true
        }
        _ => false,
    });
    if collected {
        (bytes.len() as u64).serialize(s)
    } else {
        s.serialize_bytes(bytes)
    }
}

/// Deserialize a marked `Bytes` field (see the module docs).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    let in_segment = MODE.with(|m| matches!(&*m.borrow(), Some(Mode::Segment { .. })));
    if !in_segment {
        return Bytes::deserialize(d);
    }
    let len = u64::deserialize(d)?;
    MODE.with(|m| match &mut *m.borrow_mut() {
        Some(Mode::Segment { data, at }) => {
            let left = (data.len() - *at) as u64;
            if len > left {
                return Err(D::Error::custom(format!(
                    "a payload of {len} bytes where the data segment has {left} left"
                )));
            }
            let start = *at;
            *at += len as usize;
            Ok(data.slice(start..*at))
        }
        _ => Err(D::Error::custom("the data segment vanished while decoding")),
    })
}

/// The same rule for an `Option<Bytes>` field.
pub mod option {
    use super::*;

    /// A `Bytes` that serializes through the marked rule.
    struct Marked<'a>(&'a Bytes);

    impl Serialize for Marked<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            super::serialize(self.0, s)
        }
    }

    struct MarkedOwned(Bytes);

    impl<'de> Deserialize<'de> for MarkedOwned {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            super::deserialize(d).map(MarkedOwned)
        }
    }

    pub fn serialize<S: Serializer>(bytes: &Option<Bytes>, s: S) -> Result<S::Ok, S::Error> {
        bytes.as_ref().map(Marked).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Bytes>, D::Error> {
        Ok(Option::<MarkedOwned>::deserialize(d)?.map(|m| m.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Msg {
        tid: u64,
        #[serde(with = "crate::bulk")]
        data: Bytes,
        #[serde(with = "crate::bulk::option")]
        more: Option<Bytes>,
        #[serde(with = "crate::bulk::option")]
        none: Option<Bytes>,
        inline: Bytes,
    }

    fn encode(m: &Msg) -> Vec<u8> {
        let mut out = Vec::new();
        bincode::serialize_into(&mut out, m).unwrap();
        out
    }

    fn sample() -> Msg {
        Msg {
            tid: 7,
            data: Bytes::from(vec![1u8; 4096]),
            more: Some(Bytes::from_static(b"more")),
            none: None,
            inline: Bytes::from_static(b"kept inline"),
        }
    }

    #[test]
    fn outside_a_frame_a_marked_field_encodes_as_plain_bytes() {
        #[derive(Serialize)]
        struct Plain {
            tid: u64,
            data: Bytes,
            more: Option<Bytes>,
            none: Option<Bytes>,
            inline: Bytes,
        }
        let m = sample();
        let plain = Plain {
            tid: m.tid,
            data: m.data.clone(),
            more: m.more.clone(),
            none: None,
            inline: m.inline.clone(),
        };
        let ours = bincode::serialize(&m).unwrap();
        assert_eq!(ours, bincode::serialize(&plain).unwrap());
        assert_eq!(bincode::deserialize::<Msg>(&ours).unwrap(), m);
    }

    #[test]
    fn in_a_frame_payloads_travel_out_of_line_and_come_back_as_slices() {
        let m = sample();
        let (front, payloads) = collect(|| encode(&m));
        assert_eq!(payloads.len(), 2);
        assert_eq!(payloads[0].as_ptr(), m.data.as_ptr(), "sent by reference");
        assert!(front.len() < 100, "the front holds lengths only");
        let segment = Bytes::from([payloads[0].to_vec(), payloads[1].to_vec()].concat());
        let back: Msg = with_segment(segment.clone(), || bincode::deserialize(&front).unwrap())
            .expect("segment used exactly");
        assert_eq!(back, m);
        assert_eq!(
            back.data.as_ptr(),
            segment.as_ptr(),
            "received without a copy"
        );
        // The mode does not outlive the calls.
        assert_eq!(
            bincode::deserialize::<Msg>(&bincode::serialize(&m).unwrap()).unwrap(),
            m
        );
    }

    #[test]
    fn a_segment_of_the_wrong_size_is_an_error() {
        let m = sample();
        let (front, payloads) = collect(|| encode(&m));
        let whole = [payloads[0].to_vec(), payloads[1].to_vec()].concat();
        let short = Bytes::from(whole[..100].to_vec());
        let r = with_segment(short, || bincode::deserialize::<Msg>(&front));
        assert!(!matches!(r, Ok(Ok(_))), "a payload past the segment fails");
        let long = Bytes::from([whole, vec![0u8; 3]].concat());
        let r = with_segment(long, || bincode::deserialize::<Msg>(&front));
        assert_eq!(
            r.err(),
            Some(SegmentMismatch {
                len: 4103,
                used: 4100
            })
        );
    }

    #[test]
    fn a_panic_inside_leaves_no_mode_behind() {
        let caught = std::panic::catch_unwind(|| collect(|| panic!("inside")));
        assert!(caught.is_err());
        let m = sample();
        assert_eq!(
            bincode::serialize(&m).unwrap().len(),
            bincode::serialize(&m).unwrap().len()
        );
        let (_, payloads) = collect(|| encode(&m));
        assert_eq!(payloads.len(), 2, "a fresh collection");
        assert!(MODE.with(|m| m.borrow().is_none()));
    }
}
