//! A benchmark matrix spec: a TOML file naming the cluster to run against,
//! the workload axes to cross, and how to measure each point.
//!
//! ```toml
//! name = "clients-4k"
//! description = "4 KiB random I/O against the number of clients"
//!
//! [cluster]                 # a throwaway local cluster made for the run
//! osds = 3
//! store = "bluestore"       # bluestore | filestore | memstore
//! pg_num = 32
//! set = ["osd.bluestore_cache_size=512M"]
//!
//! [workload]                # every axis takes one value or a list
//! rw = ["randread", "randwrite", "randrw"]
//! rwmixread = 70
//! bs = ["4k", "64k"]
//! iodepth = [1, 32]
//! numjobs = 1
//! clients = [1, 2, 4]       # each client drives its own image
//! image_size = "1G"
//! precondition = true       # fill every image sequentially first
//! ramp = 2                  # seconds, not measured
//! runtime = 10              # seconds, measured
//! repetitions = 3           # reduced by median
//!
//! [driver]
//! kind = "builtin"          # builtin (client library) | fio (NBD gateway)
//! ```
//!
//! Parsing checks everything that can be checked without running anything
//! and names the line of the offending value: unknown keys, an unknown `rw`,
//! a `bs` that is not a multiple of 512, an `iodepth` of 0, more client
//! images than the cluster can hold.

use std::path::Path;

use cairn_bench::RwMode;
use serde::{Deserialize, Serialize};
use toml::Spanned;

/// Most clients (images) a point may have.
pub const MAX_CLIENTS: u32 = 256;
/// Most jobs per client.
pub const MAX_NUMJOBS: u32 = 64;
/// Largest block size.
pub const MAX_BS: u64 = 16 << 20;
/// BlueStore's block file size when the spec does not set one (the
/// `osd.bluestore_block_size` default).
const DEFAULT_BLOCK_SIZE: u64 = 4 << 30;

/// A spec that cannot be run, with the line of the value at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{}{reason}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct SpecError {
    /// 1-based line in the spec file, if the fault has one.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

/// One value or a list, as every workload axis accepts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Axis<T> {
    One(T),
    Many(Vec<T>),
}

impl<T: Clone> Axis<T> {
    fn values(&self) -> Vec<T> {
        match self {
            Axis::One(v) => vec![v.clone()],
            Axis::Many(v) => v.clone(),
        }
    }
}

/// A size: bytes as an integer, or text such as `"4k"`, `"1G"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum SizeText {
    Bytes(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: Option<String>,
    description: Option<String>,
    cluster: Option<RawCluster>,
    workload: Spanned<RawWorkload>,
    driver: Option<RawDriver>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    osds: Option<Spanned<u32>>,
    store: Option<Spanned<String>>,
    pg_num: Option<Spanned<u32>>,
    #[serde(default)]
    set: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    rw: Spanned<Axis<String>>,
    rwmixread: Option<Spanned<u32>>,
    bs: Spanned<Axis<SizeText>>,
    iodepth: Spanned<Axis<u32>>,
    numjobs: Option<Spanned<Axis<u32>>>,
    clients: Option<Spanned<Axis<u32>>>,
    image_size: Spanned<SizeText>,
    precondition: Option<bool>,
    ramp: Option<Spanned<u64>>,
    runtime: Spanned<u64>,
    repetitions: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDriver {
    kind: Spanned<String>,
}

/// The local cluster a spec runs against, started fresh for the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    pub osds: u32,
    /// `bluestore`, `filestore` or `memstore`.
    pub store: String,
    pub pg_num: u32,
    /// Options for the cluster's `cairn.toml`, as `section.key=value`.
    pub set: Vec<String>,
}

/// How the points are driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverKind {
    /// Cairn's own load generator on the client library, in process.
    Builtin,
    /// One fio process per client, through the NBD gateway (`cairn nbd`),
    /// fio's JSON output parsed.
    Fio,
}

impl DriverKind {
    /// The name used in specs and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            DriverKind::Builtin => "builtin",
            DriverKind::Fio => "fio",
        }
    }
}

/// A parsed, checked spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixSpec {
    pub name: String,
    pub description: String,
    pub cluster: ClusterSpec,
    pub driver: DriverKind,
    pub rw: Vec<RwMode>,
    pub rwmixread: u32,
    pub bs: Vec<u64>,
    pub iodepth: Vec<u32>,
    pub numjobs: Vec<u32>,
    pub clients: Vec<u32>,
    pub image_size: u64,
    pub precondition: bool,
    pub ramp_s: u64,
    pub runtime_s: u64,
    pub repetitions: u32,
}

/// One point of the matrix: a workload at one concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Point {
    pub rw: RwMode,
    /// Percentage of reads (randrw only; 0 or 100 follow from the others).
    pub rwmixread: u32,
    pub bs: u64,
    pub iodepth: u32,
    pub numjobs: u32,
    pub clients: u32,
}

impl Point {
    /// A short stable name, e.g. `randwrite-4k-qd32-j1-c4`.
    pub fn id(&self) -> String {
        let mix = if self.rw == RwMode::RandRw {
            format!("{}", self.rwmixread)
        } else {
            String::new()
        };
        format!(
            "{}{mix}-{}-qd{}-j{}-c{}",
            self.rw,
            bs_name(self.bs),
            self.iodepth,
            self.numjobs,
            self.clients
        )
    }

    /// The workload without its concurrency, e.g. `randwrite 4K`; points
    /// with the same workload line up in tables and plots.
    pub fn workload(&self) -> String {
        let mix = if self.rw == RwMode::RandRw {
            format!(" {}/{}", self.rwmixread, 100 - self.rwmixread)
        } else {
            String::new()
        };
        format!("{}{mix} {}", self.rw, bs_name(self.bs).to_uppercase())
    }
}

/// `4096` -> `4k`, `1048576` -> `1m`, `1536` -> `1536`.
pub fn bs_name(bs: u64) -> String {
    if bs >= 1 << 20 && bs % (1 << 20) == 0 {
        format!("{}m", bs >> 20)
    } else if bs >= 1024 && bs % 1024 == 0 {
        format!("{}k", bs >> 10)
    } else {
        bs.to_string()
    }
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

impl MatrixSpec {
    /// Read and check the spec in `path`; its file stem names it unless it
    /// has a `name`.
    pub fn load(path: &Path) -> Result<MatrixSpec, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|e| SpecError {
            line: None,
            reason: format!("cannot read {}: {e}", path.display()),
        })?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "matrix".into());
        MatrixSpec::parse(&text, &stem)
    }

    /// Parse and check a spec's text.
    pub fn parse(text: &str, default_name: &str) -> Result<MatrixSpec, SpecError> {
        let raw: RawSpec = toml::from_str(text).map_err(|e| SpecError {
            line: e.span().map(|s| line_of(text, s.start)),
            reason: e.message().trim().to_string(),
        })?;
        let at = |span: std::ops::Range<usize>, reason: String| SpecError {
            line: Some(line_of(text, span.start)),
            reason,
        };

        let cluster = raw.cluster.unwrap_or(RawCluster {
            osds: None,
            store: None,
            pg_num: None,
            set: Vec::new(),
        });
        let osds = match &cluster.osds {
            Some(o) if *o.get_ref() == 0 || *o.get_ref() > 64 => {
                return Err(at(
                    o.span(),
                    format!("osds {} is not in 1..=64", o.get_ref()),
                ))
            }
            Some(o) => *o.get_ref(),
            None => 3,
        };
        let store = match &cluster.store {
            Some(s) if !["bluestore", "filestore", "memstore"].contains(&s.get_ref().as_str()) => {
                return Err(at(
                    s.span(),
                    format!(
                        "unknown store {:?}; valid stores are bluestore, filestore, memstore",
                        s.get_ref()
                    ),
                ))
            }
            Some(s) => s.get_ref().clone(),
            None => "bluestore".into(),
        };
        let pg_num = match &cluster.pg_num {
            Some(p) if !p.get_ref().is_power_of_two() || *p.get_ref() > 65536 => {
                return Err(at(
                    p.span(),
                    format!("pg_num {} is not a power of two up to 65536", p.get_ref()),
                ))
            }
            Some(p) => *p.get_ref(),
            None => 32,
        };
        let mut set = Vec::new();
        let mut block_size = DEFAULT_BLOCK_SIZE;
        let mut config = cairn_config::Config::default();
        for s in &cluster.set {
            let Some((key, value)) = s.get_ref().split_once('=') else {
                return Err(at(s.span(), format!("{:?} is not KEY=VALUE", s.get_ref())));
            };
            config
                .set(key.trim(), value.trim())
                .map_err(|e| at(s.span(), e.to_string()))?;
            if key.trim() == "osd.bluestore_block_size" {
                block_size = cairn_types::parse_size(value.trim())
                    .map_err(|_| at(s.span(), format!("invalid size {:?}", value.trim())))?;
            }
            set.push(s.get_ref().clone());
        }

        let w = raw.workload.into_inner();
        let mut rw = Vec::new();
        for name in w.rw.get_ref().values() {
            let mode: RwMode = name.parse().map_err(|_| {
                at(
                    w.rw.span(),
                    format!(
                        "unknown rw {name:?}; valid modes are read, write, randread, randwrite, randrw"
                    ),
                )
            })?;
            rw.push(mode);
        }
        if rw.is_empty() {
            return Err(at(w.rw.span(), "rw lists no values".into()));
        }
        let rwmixread = match &w.rwmixread {
            Some(m) if *m.get_ref() > 100 => {
                return Err(at(
                    m.span(),
                    format!("rwmixread {} is over 100", m.get_ref()),
                ))
            }
            Some(m) => *m.get_ref(),
            None => 70,
        };
        let image_size = size(&w.image_size, text)?;
        if image_size < 1 << 20 || image_size % 512 != 0 || image_size > 1 << 50 {
            return Err(at(
                w.image_size.span(),
                format!("image_size {image_size} is not a multiple of 512 from 1 MiB to 1 PiB"),
            ));
        }
        let mut bs = Vec::new();
        for b in w.bs.get_ref().values() {
            let b = size_value(&b).map_err(|r| at(w.bs.span(), r))?;
            if b == 0 || b % 512 != 0 {
                return Err(at(
                    w.bs.span(),
                    format!("bs {b} is not a positive multiple of 512"),
                ));
            }
            if b > MAX_BS || b > image_size {
                return Err(at(
                    w.bs.span(),
                    format!("bs {b} is larger than 16 MiB or the image ({image_size})"),
                ));
            }
            bs.push(b);
        }
        if bs.is_empty() {
            return Err(at(w.bs.span(), "bs lists no values".into()));
        }
        let iodepth = ranged(&w.iodepth, "iodepth", 1, cairn_bench::MAX_IODEPTH, text)?;
        let numjobs = match &w.numjobs {
            Some(n) => ranged(n, "numjobs", 1, MAX_NUMJOBS, text)?,
            None => vec![1],
        };
        let clients = match &w.clients {
            Some(c) => ranged(c, "clients", 1, MAX_CLIENTS, text)?,
            None => vec![1],
        };
        // Sequential jobs walk their own slices of an image: each must
        // hold a block.
        let most_jobs = numjobs.iter().copied().max().unwrap_or(1);
        if rw.iter().any(|m| !m.is_random()) {
            if let Some(&b) = bs.iter().find(|&&b| b * u64::from(most_jobs) > image_size) {
                let span = w.numjobs.as_ref().map(|n| n.span()).unwrap_or(w.bs.span());
                return Err(at(
                    span,
                    format!(
                        "{most_jobs} sequential jobs of bs {b} do not fit in an image of {image_size} bytes"
                    ),
                ));
            }
        }
        for (name, span, dup) in [
            ("rw", w.rw.span(), has_duplicates(&rw)),
            ("bs", w.bs.span(), has_duplicates(&bs)),
            ("iodepth", w.iodepth.span(), has_duplicates(&iodepth)),
            (
                "numjobs",
                w.numjobs.as_ref().map(|n| n.span()).unwrap_or_default(),
                has_duplicates(&numjobs),
            ),
            (
                "clients",
                w.clients.as_ref().map(|c| c.span()).unwrap_or_default(),
                has_duplicates(&clients),
            ),
        ] {
            if dup {
                return Err(at(span, format!("{name} lists a value twice")));
            }
        }
        let ramp_s = w.ramp.as_ref().map(|r| *r.get_ref()).unwrap_or(2);
        if ramp_s > 3600 {
            let span = w.ramp.as_ref().map(|r| r.span()).unwrap_or_default();
            return Err(at(span, format!("ramp {ramp_s} s is over an hour")));
        }
        let runtime_s = *w.runtime.get_ref();
        if runtime_s == 0 || runtime_s > 3600 {
            return Err(at(
                w.runtime.span(),
                format!("runtime {runtime_s} s is not in 1..=3600"),
            ));
        }
        let repetitions = match &w.repetitions {
            Some(r) if *r.get_ref() == 0 || *r.get_ref() > 100 => {
                return Err(at(
                    r.span(),
                    format!("repetitions {} is not in 1..=100", r.get_ref()),
                ))
            }
            Some(r) => *r.get_ref(),
            None => 1,
        };

        // Every client has its own image, each stored `min(3, osds)` times
        // (pool `rbd`'s replication), on BlueStore block files of
        // `block_size`; keep a tenth of that free.
        let most = clients.iter().copied().max().unwrap_or(1);
        let replicas = u64::from(osds.min(3));
        let needed = u64::from(most)
            .saturating_mul(image_size)
            .saturating_mul(replicas);
        if store == "bluestore" {
            let capacity = u64::from(osds).saturating_mul(block_size) / 10 * 9;
            if needed > capacity {
                let span = w.clients.as_ref().map(|c| c.span()).unwrap_or_default();
                return Err(at(
                    span,
                    format!(
                        "{most} clients need {most} images of {image_size} bytes, \
                         {needed} bytes with {replicas} replicas; {osds} OSDs of \
                         {block_size} bytes hold at most {capacity} (raise \
                         osd.bluestore_block_size or lower image_size)"
                    ),
                ));
            }
        }

        let driver = match &raw.driver {
            None => DriverKind::Builtin,
            Some(d) => match d.kind.get_ref().as_str() {
                "builtin" => DriverKind::Builtin,
                "fio" => DriverKind::Fio,
                other => {
                    return Err(at(
                        d.kind.span(),
                        format!("unknown driver {other:?}; valid drivers are builtin, fio"),
                    ))
                }
            },
        };
        Ok(MatrixSpec {
            name: raw.name.unwrap_or_else(|| default_name.to_string()),
            description: raw.description.unwrap_or_default(),
            cluster: ClusterSpec {
                osds,
                store,
                pg_num,
                set,
            },
            driver,
            rw,
            rwmixread,
            bs,
            iodepth,
            numjobs,
            clients,
            image_size,
            precondition: w.precondition.unwrap_or(true),
            ramp_s,
            runtime_s,
            repetitions,
        })
    }

    /// Every point, in run order: rw, then bs, iodepth, numjobs, clients
    /// (the last varies fastest).
    pub fn points(&self) -> Vec<Point> {
        let mut out = Vec::new();
        for &rw in &self.rw {
            for &bs in &self.bs {
                for &iodepth in &self.iodepth {
                    for &numjobs in &self.numjobs {
                        for &clients in &self.clients {
                            out.push(Point {
                                rw,
                                rwmixread: self.rwmixread,
                                bs,
                                iodepth,
                                numjobs,
                                clients,
                            });
                        }
                    }
                }
            }
        }
        out
    }

    /// The most clients any point has: the images the run creates.
    pub fn images(&self) -> u32 {
        self.clients.iter().copied().max().unwrap_or(1)
    }

    /// Seconds the whole matrix takes to measure (ramps, runtimes and
    /// repetitions; not cluster start-up or preconditioning).
    pub fn measured_seconds(&self) -> u64 {
        self.points().len() as u64 * u64::from(self.repetitions) * (self.ramp_s + self.runtime_s)
    }
}

fn has_duplicates<T: PartialEq>(values: &[T]) -> bool {
    values
        .iter()
        .enumerate()
        .any(|(i, v)| values[..i].contains(v))
}

fn size_value(s: &SizeText) -> Result<u64, String> {
    match s {
        SizeText::Bytes(b) => Ok(*b),
        SizeText::Text(t) => {
            cairn_types::parse_size(t.trim()).map_err(|_| format!("invalid size {t:?}"))
        }
    }
}

fn size(s: &Spanned<SizeText>, text: &str) -> Result<u64, SpecError> {
    size_value(s.get_ref()).map_err(|reason| SpecError {
        line: Some(line_of(text, s.span().start)),
        reason,
    })
}

fn ranged(
    axis: &Spanned<Axis<u32>>,
    name: &str,
    min: u32,
    max: u32,
    text: &str,
) -> Result<Vec<u32>, SpecError> {
    let values = axis.get_ref().values();
    let line = Some(line_of(text, axis.span().start));
    if values.is_empty() {
        return Err(SpecError {
            line,
            reason: format!("{name} lists no values"),
        });
    }
    for v in &values {
        if *v < min || *v > max {
            return Err(SpecError {
                line,
                reason: format!("{name} {v} is not in {min}..={max}"),
            });
        }
    }
    Ok(values)
}
