//! What a benchmark run does: the access pattern, block size, concurrency and
//! duration, and the checks that a spec fits the volume it is run against.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::BenchError;

/// The most operations one job may keep in flight.
pub const MAX_IODEPTH: u32 = 4096;

/// Block sizes must be a multiple of this many bytes.
pub const SECTOR: u64 = 512;

/// The access pattern of a run, named as in fio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RwMode {
    /// Sequential reads; each job walks its own slice of the region.
    Read,
    /// Sequential writes; each job walks its own slice of the region.
    Write,
    /// Reads at uniformly random block-aligned offsets.
    RandRead,
    /// Writes at uniformly random block-aligned offsets.
    RandWrite,
    /// A random mix of reads and writes (see [`BenchSpec::rwmixread`]).
    RandRw,
}

impl RwMode {
    /// Every mode, in the order they are listed in messages.
    pub const ALL: [RwMode; 5] = [
        RwMode::Read,
        RwMode::Write,
        RwMode::RandRead,
        RwMode::RandWrite,
        RwMode::RandRw,
    ];

    /// The fio name of the mode (`"randwrite"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
            RwMode::RandRead => "randread",
            RwMode::RandWrite => "randwrite",
            RwMode::RandRw => "randrw",
        }
    }

    /// Whether offsets are chosen at random (rather than walked in order).
    pub fn is_random(self) -> bool {
        matches!(self, RwMode::RandRead | RwMode::RandWrite | RwMode::RandRw)
    }

    /// Whether the mode issues reads.
    pub fn reads(self) -> bool {
        matches!(self, RwMode::Read | RwMode::RandRead | RwMode::RandRw)
    }

    /// Whether the mode issues writes.
    pub fn writes(self) -> bool {
        matches!(self, RwMode::Write | RwMode::RandWrite | RwMode::RandRw)
    }
}

impl fmt::Display for RwMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RwMode {
    type Err = BenchError;

    /// Parse a fio mode name, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        RwMode::ALL
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| BenchError::UnknownRwMode(s.to_string()))
    }
}

/// The parameters of a benchmark run, modelled on fio's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchSpec {
    /// The access pattern.
    pub rw: RwMode,
    /// Percentage of operations that are reads in [`RwMode::RandRw`]; ignored
    /// by the other modes.
    pub rwmixread: u32,
    /// Bytes per operation; a non-zero multiple of 512. Offsets are aligned to it.
    pub bs: u64,
    /// Operations each job keeps in flight (1..=4096).
    pub iodepth: u32,
    /// Independent jobs per volume, each with its own RNG and histograms.
    pub numjobs: u32,
    /// How long operations are measured, after the ramp.
    pub runtime: Duration,
    /// Warm-up time at the start: operations completing in it are not counted.
    pub ramp: Duration,
    /// Write the whole region sequentially (4 MiB blocks, 16 in flight) before
    /// the run, so reads hit allocated data. Not counted.
    pub precondition: bool,
    /// Only use the first `size` bytes of the volume; `None` is the whole volume.
    pub size: Option<u64>,
    /// Seed of the offset and data generators; `None` draws a random one (the
    /// seed used is in the report).
    pub seed: Option<u64>,
}

impl Default for BenchSpec {
    /// 4 KiB random reads, 16 in flight, one job, 10 s, no ramp.
    fn default() -> Self {
        Self {
            rw: RwMode::RandRead,
            rwmixread: 70,
            bs: 4096,
            iodepth: 16,
            numjobs: 1,
            runtime: Duration::from_secs(10),
            ramp: Duration::ZERO,
            precondition: false,
            size: None,
            seed: None,
        }
    }
}

impl BenchSpec {
    /// The number of bytes at the start of a volume of `volume_size` bytes
    /// that the run uses.
    pub fn region(&self, volume_size: u64) -> u64 {
        self.size.unwrap_or(volume_size)
    }

    /// Check the spec against a volume of `volume_size` bytes.
    pub fn validate(&self, volume_size: u64) -> Result<(), BenchError> {
        let invalid =
            |param: &'static str, reason: String| Err(BenchError::InvalidSpec { param, reason });
        if self.bs == 0 || self.bs % SECTOR != 0 {
            return invalid(
                "bs",
                format!("{} is not a positive multiple of {SECTOR}", self.bs),
            );
        }
        if let Some(size) = self.size {
            if size == 0 {
                return invalid("size", "must be positive".into());
            }
            if size > volume_size {
                return invalid(
                    "size",
                    format!("{size} is larger than the volume ({volume_size} bytes)"),
                );
            }
        }
        let region = self.region(volume_size);
        if self.bs > region {
            return invalid(
                "bs",
                format!(
                    "{} is larger than the tested region ({region} bytes)",
                    self.bs
                ),
            );
        }
        if self.iodepth == 0 || self.iodepth > MAX_IODEPTH {
            return invalid(
                "iodepth",
                format!("{} is not in 1..={MAX_IODEPTH}", self.iodepth),
            );
        }
        if self.numjobs == 0 {
            return invalid("numjobs", "must be at least 1".into());
        }
        if self.runtime.is_zero() {
            return invalid("runtime", "must be positive".into());
        }
        if self.rwmixread > 100 {
            return invalid(
                "rwmixread",
                format!("{} is more than 100 percent", self.rwmixread),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn param_of(r: Result<(), BenchError>) -> Option<&'static str> {
        match r {
            Ok(()) => None,
            Err(BenchError::InvalidSpec { param, .. }) => Some(param),
            Err(e) => panic!("unexpected error {e}"),
        }
    }

    #[test]
    fn default_spec_is_valid() {
        assert_eq!(param_of(BenchSpec::default().validate(MIB)), None);
    }

    #[test]
    fn invalid_specs_name_the_parameter() {
        let base = BenchSpec::default();
        let cases: Vec<(BenchSpec, u64, &str)> = vec![
            (
                BenchSpec {
                    bs: 0,
                    ..base.clone()
                },
                MIB,
                "bs",
            ),
            (
                BenchSpec {
                    bs: 1000,
                    ..base.clone()
                },
                MIB,
                "bs",
            ),
            (
                BenchSpec {
                    bs: 2 * MIB,
                    ..base.clone()
                },
                MIB,
                "bs",
            ),
            (
                BenchSpec {
                    bs: 8192,
                    size: Some(4096),
                    ..base.clone()
                },
                MIB,
                "bs",
            ),
            (
                BenchSpec {
                    size: Some(0),
                    ..base.clone()
                },
                MIB,
                "size",
            ),
            (
                BenchSpec {
                    size: Some(MIB + 1),
                    ..base.clone()
                },
                MIB,
                "size",
            ),
            (
                BenchSpec {
                    iodepth: 0,
                    ..base.clone()
                },
                MIB,
                "iodepth",
            ),
            (
                BenchSpec {
                    iodepth: 4097,
                    ..base.clone()
                },
                MIB,
                "iodepth",
            ),
            (
                BenchSpec {
                    numjobs: 0,
                    ..base.clone()
                },
                MIB,
                "numjobs",
            ),
            (
                BenchSpec {
                    runtime: Duration::ZERO,
                    ..base.clone()
                },
                MIB,
                "runtime",
            ),
            (
                BenchSpec {
                    rwmixread: 101,
                    ..base.clone()
                },
                MIB,
                "rwmixread",
            ),
            (base.clone(), 0, "bs"),
        ];
        for (spec, size, want) in cases {
            assert_eq!(
                param_of(spec.validate(size)),
                Some(want),
                "{spec:?} on {size}"
            );
        }
    }

    #[test]
    fn boundary_specs_are_valid() {
        let base = BenchSpec::default();
        let cases = vec![
            BenchSpec {
                bs: 512,
                ..base.clone()
            },
            BenchSpec {
                bs: MIB,
                ..base.clone()
            },
            BenchSpec {
                bs: 4096,
                size: Some(4096),
                ..base.clone()
            },
            BenchSpec {
                iodepth: 1,
                ..base.clone()
            },
            BenchSpec {
                iodepth: 4096,
                ..base.clone()
            },
            BenchSpec {
                rwmixread: 0,
                ..base.clone()
            },
            BenchSpec {
                rwmixread: 100,
                ..base.clone()
            },
            BenchSpec {
                runtime: Duration::from_nanos(1),
                ..base.clone()
            },
        ];
        for spec in cases {
            assert_eq!(param_of(spec.validate(MIB)), None, "{spec:?}");
        }
    }

    #[test]
    fn region_defaults_to_the_volume() {
        let spec = BenchSpec::default();
        assert_eq!(spec.region(MIB), MIB);
        assert_eq!(
            BenchSpec {
                size: Some(4096),
                ..spec
            }
            .region(MIB),
            4096
        );
    }

    #[test]
    fn modes_parse_and_print() {
        for mode in RwMode::ALL {
            assert_eq!(mode.as_str().parse::<RwMode>().ok(), Some(mode));
            assert_eq!(mode.to_string(), mode.as_str());
        }
        assert_eq!("RandRW".parse::<RwMode>().ok(), Some(RwMode::RandRw));
        let err = "randomwrite".parse::<RwMode>().unwrap_err().to_string();
        assert!(err.contains("randomwrite"), "{err}");
        for mode in RwMode::ALL {
            assert!(err.contains(mode.as_str()), "{err} lacks {mode}");
        }
    }

    #[test]
    fn mode_directions() {
        assert!(RwMode::Read.reads() && !RwMode::Read.writes() && !RwMode::Read.is_random());
        assert!(RwMode::Write.writes() && !RwMode::Write.reads());
        assert!(RwMode::RandRw.reads() && RwMode::RandRw.writes() && RwMode::RandRw.is_random());
        assert!(RwMode::RandWrite.is_random() && !RwMode::RandWrite.reads());
    }
}
