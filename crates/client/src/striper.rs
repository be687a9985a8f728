//! Striping math: where a byte range of an image lies in its objects.
//!
//! An image of object size `S` stores bytes `[k·S, (k+1)·S)` in object `k`.
//! [`map_extents`] cuts a range at object boundaries; it is pure and is the
//! one place this arithmetic lives.

/// A piece of an image range inside one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub object_no: u64,
    /// Offset inside the object.
    pub offset: u64,
    pub len: u64,
    /// Offset of this piece inside the caller's buffer.
    pub buf_offset: u64,
}

impl Extent {
    /// Does the piece cover its whole object?
    pub fn is_whole_object(&self, object_size: u64) -> bool {
        self.offset == 0 && self.len == object_size
    }
}

/// Split `[offset, offset + len)` into per-object extents, in order.
pub fn map_extents(offset: u64, len: u64, object_size: u64) -> Vec<Extent> {
    assert!(
        object_size.is_power_of_two(),
        "object size {object_size} not a power of two"
    );
    let mut extents = Vec::with_capacity(((len / object_size) + 2) as usize);
    let mut pos = offset;
    let end = offset + len;
    while pos < end {
        let object_no = pos / object_size;
        let in_object = pos % object_size;
        let piece = (object_size - in_object).min(end - pos);
        extents.push(Extent {
            object_no,
            offset: in_object,
            len: piece,
            buf_offset: pos - offset,
        });
        pos += piece;
    }
    extents
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 4 << 20;

    #[test]
    fn a_range_inside_one_object_is_one_extent() {
        assert_eq!(
            map_extents(4096, 4096, S),
            vec![Extent {
                object_no: 0,
                offset: 4096,
                len: 4096,
                buf_offset: 0
            }]
        );
        assert_eq!(map_extents(S, 512, S)[0].object_no, 1);
        assert!(map_extents(123, 0, S).is_empty());
    }

    #[test]
    fn ranges_are_cut_at_object_boundaries() {
        let e = map_extents(S - 1024, 2048 + S, S);
        assert_eq!(
            e,
            vec![
                Extent {
                    object_no: 0,
                    offset: S - 1024,
                    len: 1024,
                    buf_offset: 0
                },
                Extent {
                    object_no: 1,
                    offset: 0,
                    len: S,
                    buf_offset: 1024
                },
                Extent {
                    object_no: 2,
                    offset: 0,
                    len: 1024,
                    buf_offset: 1024 + S
                },
            ]
        );
        assert!(e[1].is_whole_object(S));
        assert!(!e[0].is_whole_object(S));
    }

    #[test]
    fn extents_tile_the_range_exactly() {
        let mut seed = 0x1234_5678_u64;
        for _ in 0..2000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let object_size = 1u64 << (12 + (seed >> 60) % 6);
            let offset = (seed >> 20) % (64 * object_size);
            let len = (seed >> 7) % (5 * object_size);
            let extents = map_extents(offset, len, object_size);
            let mut expect = offset;
            let mut covered = 0;
            for e in &extents {
                assert_eq!(e.object_no * object_size + e.offset, expect);
                assert_eq!(e.buf_offset, covered);
                assert!(e.len > 0 && e.offset + e.len <= object_size);
                expect += e.len;
                covered += e.len;
            }
            assert_eq!(covered, len);
        }
    }
}
