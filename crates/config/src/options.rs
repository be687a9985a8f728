//! The option sections: one declaration per option gives its field, type,
//! default, validation and documentation (used by rustdoc, [`options`] and
//! [`render_defaults`](crate::render_defaults)) together, so no option can
//! exist without all of them.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use toml::{Table, Value};

use crate::crush::{bucket_types, crush_name, device_class, location, weight};
pub(crate) use crate::values::{describe, OptValue, Raw};
use crate::values::{
    ChecksumKind, CompressionAlgorithmKind, CompressionModeKind, IoEngineKind, Ratio, StoreKind,
};

/// Documentation of one option, as listed by [`options`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OptionDoc {
    /// The section: `global`, `mon`, `osd` or `client`.
    pub section: &'static str,
    /// The option name within the section.
    pub name: &'static str,
    /// The value type: `u64`, `u32`, `bool`, `string` or `filestore|memstore`.
    pub kind: &'static str,
    /// The default, written as a TOML value (strings are quoted).
    pub default: String,
    /// Whether running daemons apply a change at once (`cairn config
    /// set`, `cairn tell`); otherwise it is read only at start.
    pub runtime: bool,
    /// What the option does.
    pub doc: &'static str,
}

impl OptionDoc {
    /// The full option name, e.g. `osd.heartbeat_interval_ms`.
    pub fn key(&self) -> String {
        format!("{}.{}", self.section, self.name)
    }

    /// The default as a value (a number is a number, a string unquoted).
    pub fn default_value(&self) -> toml::Value {
        let text = format!("v = {}", self.default);
        toml::from_str::<toml::Table>(&text)
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or(toml::Value::String(self.default.clone()))
    }
}

/// Every option of every section, in file order.
pub fn options() -> Vec<OptionDoc> {
    let mut all = GlobalConfig::docs();
    all.extend(MonConfig::docs());
    all.extend(OsdConfig::docs());
    all.extend(ClientConfig::docs());
    all
}

// ------------------------------------------------------------- validators

fn any<T>(_: &T) -> Result<(), String> {
    Ok(())
}

fn at_least_one<T: Copy + Into<u64>>(v: &T) -> Result<(), String> {
    match (*v).into() {
        0 => Err("must be at least 1, got 0".to_string()),
        _ => Ok(()),
    }
}

/// Watches are renewed every third of their timeout: under a second
/// would renew many times a second; over an hour would hold a dead
/// client's image for that long.
fn watch_timeout(v: &u64) -> Result<(), String> {
    if (1_000..=3_600_000).contains(v) {
        Ok(())
    } else {
        Err(format!("must be from 1000 (1 s) to 3600000 (1 h), got {v}"))
    }
}

fn at_least_100(v: &u32) -> Result<(), String> {
    if *v >= 100 {
        Ok(())
    } else {
        Err(format!("must be at least 100 (percent), got {v}"))
    }
}

fn socket_addr(v: &str) -> Result<(), String> {
    match v.parse::<SocketAddr>() {
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "expected a socket address such as 127.0.0.1:6789, got {v:?}"
        )),
    }
}

/// An address an OSD binds and announces in the map: empty (a default
/// applies), or `ip:port` with a specific IP.
fn announced_addr(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    match v.parse::<SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => Err(format!(
            "{v:?} cannot be announced to others: give this host's address, not {}",
            addr.ip()
        )),
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "expected empty or a socket address such as 10.0.0.1:0, got {v:?}"
        )),
    }
}

/// The accepted values of `global.log_level`.
pub const LOG_LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

/// A device emulation: none, or a spinning disk.
fn device_emulation(v: &str) -> Result<(), String> {
    match v {
        "" | "hdd" => Ok(()),
        other => Err(format!("must be empty or \"hdd\", got {other:?}")),
    }
}

fn log_level(v: &str) -> Result<(), String> {
    if LOG_LEVELS.contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "expected one of {}, got {v:?}",
            LOG_LEVELS.join("|")
        ))
    }
}

/// Smallest and largest `client.image_default_object_size`.
pub const OBJECT_SIZE_RANGE: (u64, u64) = (4 << 10, 64 << 20);

fn object_size(v: &u64) -> Result<(), String> {
    let (min, max) = OBJECT_SIZE_RANGE;
    if v.is_power_of_two() && (min..=max).contains(v) {
        Ok(())
    } else {
        Err(format!(
            "must be a power of two from {min} (4 KiB) to {max} (64 MiB), got {v}"
        ))
    }
}

fn at_least_16m(v: &u64) -> Result<(), String> {
    if *v >= 16 << 20 {
        Ok(())
    } else {
        Err(format!(
            "must be at least {} (16 MiB), got {v}",
            16u64 << 20
        ))
    }
}

fn at_least_1m(v: &u64) -> Result<(), String> {
    if *v >= 1 << 20 {
        Ok(())
    } else {
        Err(format!("must be at least {} (1 MiB), got {v}", 1u64 << 20))
    }
}

fn at_least_4k(v: &u64) -> Result<(), String> {
    if *v >= 4096 {
        Ok(())
    } else {
        Err(format!("must be at least 4096, got {v}"))
    }
}

fn alloc_unit(v: &u64) -> Result<(), String> {
    if v.is_power_of_two() && *v >= 4096 {
        Ok(())
    } else {
        Err(format!("must be a power of two of at least 4096, got {v}"))
    }
}

fn shard_size(v: &u64) -> Result<(), String> {
    if *v >= 4096 && *v <= 64 << 20 && v % 4096 == 0 {
        Ok(())
    } else {
        Err(format!("must be a multiple of 4096 up to 64 MiB, got {v}"))
    }
}

fn positive_ratio(v: &Ratio) -> Result<(), String> {
    if v.get() > 0.0 {
        Ok(())
    } else {
        Err(format!(
            "must be greater than 0 and at most 1, got {}",
            v.get()
        ))
    }
}

fn pg_num(v: &u32) -> Result<(), String> {
    match *v {
        1..=65536 => Ok(()),
        _ => Err(format!("must be from 1 to 65536, got {v}")),
    }
}

// ---------------------------------------------------------------- sections

/// Why a section rejected a key.
pub(crate) enum FieldError {
    Unknown,
    Invalid(String),
}

/// What the loader needs from a section; implemented by `section!`.
pub(crate) trait Section: Default + Clone {
    const NAME: &'static str;
    const KEYS: &'static [&'static str];
    fn docs() -> Vec<OptionDoc>;
    /// Parses, validates and stores one option; returns its static name.
    fn set(&mut self, key: &str, raw: Raw<'_>) -> Result<&'static str, FieldError>;
    fn get(&self, key: &str) -> Option<Value>;
    fn copy_from(&mut self, other: &Self, key: &str);
    /// Validates every field; on failure names the option.
    fn check(&self) -> Result<(), (&'static str, String)>;
    fn to_table(&self) -> Table {
        Self::KEYS
            .iter()
            .filter_map(|k| Some((k.to_string(), self.get(k)?)))
            .collect()
    }
}

macro_rules! section {
    (@runtime) => { false };
    (@runtime runtime) => { true };
    (
        $(#[$meta:meta])*
        pub struct $name:ident in $section:literal {
            $(
                $(#[doc = $doc:literal])+
                $field:ident: $ty:ty = $default:expr, check $check:expr $(, $when:ident)?;
            )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $name {
            $( $(#[doc = $doc])+ pub $field: $ty, )+
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $field: $default, )+ }
            }
        }

        impl Section for $name {
            const NAME: &'static str = $section;
            const KEYS: &'static [&'static str] = &[$(stringify!($field)),+];

            fn docs() -> Vec<OptionDoc> {
                let defaults = Self::default();
                vec![$(OptionDoc {
                    section: $section,
                    name: stringify!($field),
                    kind: <$ty as OptValue>::KIND,
                    default: OptValue::to_toml(&defaults.$field).to_string(),
                    runtime: section!(@runtime $($when)?),
                    doc: concat!($($doc),+).trim(),
                }),+]
            }

            fn set(&mut self, key: &str, raw: Raw<'_>) -> Result<&'static str, FieldError> {
                match key {
                    $(stringify!($field) => {
                        let v = <$ty as OptValue>::parse(raw).map_err(FieldError::Invalid)?;
                        ($check)(&v).map_err(FieldError::Invalid)?;
                        self.$field = v;
                        Ok(stringify!($field))
                    })+
                    _ => Err(FieldError::Unknown),
                }
            }

            fn get(&self, key: &str) -> Option<Value> {
                match key {
                    $(stringify!($field) => Some(OptValue::to_toml(&self.$field)),)+
                    _ => None,
                }
            }

            fn copy_from(&mut self, other: &Self, key: &str) {
                match key {
                    $(stringify!($field) => self.$field = other.$field.clone(),)+
                    _ => {}
                }
            }

            fn check(&self) -> Result<(), (&'static str, String)> {
                $(
                    OptValue::representable(&self.$field)
                        .and_then(|()| ($check)(&self.$field))
                        .map_err(|e| (stringify!($field), e))?;
                )+
                Ok(())
            }
        }
    };
}

section! {
    /// `[global]`: options every daemon and client reads.
    pub struct GlobalConfig in "global" {
        /// Address the monitor listens on and everyone connects to
        /// (`ip:port`).
        mon_addr: String = "127.0.0.1:6789".to_string(), check socket_addr;
        /// Log level for daemons: one of error, warn, info, debug, trace.
        log_level: String = "info".to_string(), check log_level, runtime;
    }
}

section! {
    /// `[mon]`: monitor options.
    pub struct MonConfig in "mon" {
        /// An OSD with no heartbeat for this long (milliseconds) is marked
        /// down. Must exceed `osd.heartbeat_interval_ms`.
        osd_heartbeat_grace_ms: u64 = 6000, check at_least_one, runtime;
        /// An OSD is marked down when OSDs in at least this many distinct
        /// `osd_reporter_subtree_level` buckets report that it has not
        /// answered their heartbeats on the cluster network for
        /// `osd_heartbeat_grace_ms` (at least 1). OSDs also report after
        /// that grace.
        osd_min_down_reporters: u32 = 2, check at_least_one, runtime;
        /// Failure reports count once per bucket of this CRUSH type (`osd`
        /// or a bucket type), so one host cut off from the others cannot
        /// have them marked down.
        osd_reporter_subtree_level: String = "host".to_string(), check crush_name, runtime;
        /// Mark an OSD down at once when its monitor session closes.
        osd_down_on_disconnect: bool = true, check any, runtime;
        /// A down OSD is marked out after this many seconds (0 = never).
        osd_down_out_interval_s: u64 = 600, check any, runtime;
        /// pg_temp requests arriving within this many milliseconds of the
        /// first are published together in one map epoch (0 = one epoch
        /// per request). A returning OSD makes many primaries ask at once;
        /// each epoch makes every OSD and client re-check every PG.
        pg_temp_batch_ms: u64 = 20, check any, runtime;
        /// Number of PGs of a new pool when none is given (1 to 65536).
        pool_default_pg_num: u32 = 32, check pg_num, runtime;
        /// Replicas per object of a new pool when none is given (at least 1).
        pool_default_size: u32 = 3, check at_least_one, runtime;
        /// Replicas that must be up for a new pool's PGs to accept writes
        /// (1 to `pool_default_size`).
        pool_default_min_size: u32 = 2, check at_least_one, runtime;
        /// CRUSH bucket types of a new cluster, lowest first, separated by
        /// spaces; `osd` (the devices) comes below them. Must include
        /// `host` and `root`. Read when the monitor creates the cluster.
        crush_bucket_types: String = "host rack row datacenter root".to_string(),
            check bucket_types;
        /// Failure domain of a new cluster's default rule
        /// (`replicated_rule`): replicas go to distinct items of this type
        /// (`osd` or a bucket type; a cluster on one machine uses `osd`).
        /// Read when the monitor creates the cluster.
        osd_crush_chooseleaf_type: String = "host".to_string(), check crush_name;
        /// An OSD whose store is at least this full (used / total bytes,
        /// from its heartbeats) is `nearfull`: a health warning. Above 0,
        /// at most `osd_backfillfull_ratio`.
        osd_nearfull_ratio: Ratio = Ratio(0.85), check positive_ratio, runtime;
        /// An OSD at least this full is `backfillfull`: it takes no
        /// backfill (PGs moving to it wait as `backfill_toofull`). At
        /// most `osd_full_ratio`.
        osd_backfillfull_ratio: Ratio = Ratio(0.90), check positive_ratio, runtime;
        /// An OSD at least this full is `full`: writes to its PGs fail at
        /// once with a no-space error (NBD ENOSPC) while reads, removes
        /// and discards still work; health is HEALTH_ERR. At most 1.
        osd_full_ratio: Ratio = Ratio(0.95), check positive_ratio, runtime;
    }
}

section! {
    /// `[osd]`: OSD daemon options; `[osd.N]` overrides them for OSD `N`.
    pub struct OsdConfig in "osd" {
        /// The public address when `public_addr` is empty (its older
        /// name; `ip:port`, port 0 = any free port).
        bind_addr: String = "127.0.0.1:0".to_string(), check socket_addr;
        /// Address on the public network, where clients, admin tools and
        /// the monitor reach this OSD (`ip:port`, port 0 = any free port).
        /// The IP is announced in the map, so it must be one others can
        /// reach, not 0.0.0.0. Empty: `bind_addr`.
        public_addr: String = String::new(), check announced_addr;
        /// Address on the cluster network, where other OSDs reach this OSD
        /// for replication, peering and recovery (`ip:port`, port 0 = any
        /// free port; not 0.0.0.0). Empty: the public address's IP with any
        /// free port.
        cluster_addr: String = String::new(), check announced_addr;
        /// Interval between heartbeats to the monitor, in milliseconds (at
        /// least 1).
        heartbeat_interval_ms: u64 = 1000, check at_least_one;
        /// Object store backend: bluestore (data on a raw device or a
        /// preallocated file, metadata in RocksDB), filestore (a file per
        /// object with a journal) or memstore (volatile, for tests).
        store: StoreKind = StoreKind::Bluestore, check any;
        /// Filestore journal size, in bytes, that triggers a checkpoint (at
        /// least 1).
        journal_max_bytes: u64 = 256 << 20, check at_least_one;
        /// PG log entries kept per PG (at least 1; Ceph's
        /// `osd_max_pg_log_entries`). A member that was away for fewer
        /// writes than this catches up by log recovery (only the objects
        /// those writes touched); one away longer is backfilled (the whole
        /// PG compared and copied). Fewer entries cost less per write.
        pg_log_max_entries: u32 = 3000, check at_least_one, runtime;
        /// Objects in log recovery at once on this OSD (at least 1; Ceph's
        /// `osd_recovery_max_active`).
        recovery_max_active: u32 = 3, check at_least_one, runtime;
        /// Pause, in milliseconds, between starting recovery operations
        /// (Ceph's `osd_recovery_sleep`), to leave the disk to clients.
        recovery_sleep_ms: u64 = 0, check any, runtime;
        /// While clients are being served, recovery yields to them: one
        /// operation (an object, a backfill step) at a time, started at
        /// most every this many milliseconds.
        recovery_sleep_busy_ms: u64 = 20, check any, runtime;
        /// ... and the pause grows up to this many milliseconds while the
        /// p99 of client writes is above `recovery_slowdown_pct` percent of
        /// their p99 without recovery (it doubles per second that it is,
        /// and shrinks by an eighth per second that it is not). Not above
        /// `recovery_sleep_busy_ms`: the pause stays fixed.
        recovery_sleep_busy_max_ms: u64 = 1000, check any, runtime;
        /// Client writes' p99 allowed during recovery, in percent of their
        /// p99 without it (at least 100).
        recovery_slowdown_pct: u32 = 200, check at_least_100, runtime;
        /// PGs backfilling at once with this OSD as primary, and as many
        /// with it as target (at least 1; Ceph's `osd_max_backfills`).
        max_backfills: u32 = 1, check at_least_one, runtime;
        /// Unanswered peering requests are sent again after this many
        /// milliseconds (at least 1).
        peering_retry_ms: u64 = 2000, check at_least_one, runtime;
        /// A PG is scrubbed (metadata compared across its copies) this many
        /// seconds after its last scrub (0: only on request; Ceph's
        /// `osd_scrub_min_interval`).
        scrub_interval_s: u64 = 86400, check any, runtime;
        /// A PG is deep-scrubbed (every byte read and compared) this many
        /// seconds after its last deep scrub (0: only on request; Ceph's
        /// `osd_deep_scrub_interval`).
        deep_scrub_interval_s: u64 = 604800, check any, runtime;
        /// PGs scrubbing at once with this OSD as primary (at least 1;
        /// Ceph's `osd_max_scrubs`): the scrub load limit.
        max_scrubs: u32 = 1, check at_least_one, runtime;
        /// A client write slower than this many milliseconds, from its
        /// arrival at the primary to its acknowledgement, is logged with
        /// where its time went (0: never; Ceph's `osd_op_complaint_time`).
        op_complaint_time_ms: u64 = 1000, check any, runtime;
        /// For fault tests only, never in production: hold every
        /// transaction this many milliseconds before it reaches the store,
        /// so this OSD commits behind its peers (0 = off).
        debug_commit_delay_ms: u64 = 0, check any;
        /// An OSD starting again while the map records it down first asks
        /// its PGs' primaries for the log entries written while it was away
        /// and appends them, for at most this many milliseconds, and only
        /// then boots: the peering that clients wait for at its return then
        /// merges only what was written meanwhile (0: boot at once).
        boot_catch_up_ms: u64 = 10000, check any;
        /// Client ops one connection may have in flight at this OSD (read
        /// but not answered; at least 1). Beyond it the OSD stops reading
        /// that connection until one is answered, so a client sending
        /// faster than the OSD commits waits in TCP and is never refused
        /// (Ceph's `osd_client_message_cap`).
        client_message_cap: u32 = 256, check at_least_one;
        /// Bytes of client ops (their data) in flight at this OSD over
        /// every connection; beyond it no client connection is read until
        /// an answer frees room (at least 1; Ceph's
        /// `osd_client_message_size_cap`).
        client_message_size_cap: u64 = 512 << 20, check at_least_one;
        /// Client ops in flight at this OSD over every connection (read
        /// but not answered; at least 1); beyond it no client connection
        /// is read until an answer frees room.
        client_ops_max: u32 = 1024, check at_least_one;
        /// Threads serving the OSD's I/O (at least 1). 1 runs everything on
        /// one thread with no cross-thread wakeups, which is fastest per core;
        /// scale with more OSDs per device rather than more threads.
        worker_threads: u32 = 1, check at_least_one;
        /// BlueStore: the data device, a block device or a preallocated
        /// file. Empty: `block` in the OSD's directory.
        bluestore_block_path: String = String::new(), check any;
        /// BlueStore: size in bytes of the file `cairn osd mkfs` creates
        /// when the data device does not exist (at least 16 MiB).
        bluestore_block_size: u64 = 4 << 30, check at_least_16m;
        /// BlueStore: RocksDB directory. Empty: `db` in the OSD's
        /// directory.
        bluestore_db_path: String = String::new(), check any;
        /// BlueStore: directory for RocksDB's write-ahead log, e.g. on a
        /// faster device. Empty: inside the database directory.
        bluestore_wal_path: String = String::new(), check any;
        /// BlueStore: allocation unit in bytes, fixed at mkfs: a power of
        /// two, at least 4096.
        bluestore_min_alloc_size: u64 = 4096, check alloc_unit;
        /// BlueStore: bytes of an object mapped by one extent-map shard
        /// (one RocksDB entry), fixed at mkfs: a multiple of
        /// `bluestore_min_alloc_size`, at most 64 MiB.
        bluestore_extent_shard_size: u64 = 256 << 10, check shard_size;
        /// BlueStore: bytes of the commit journal at the start of the data
        /// device, fixed at mkfs (at least 1 MiB; at most an eighth of the
        /// device is used).
        bluestore_journal_size: u64 = 64 << 20, check at_least_1m;
        /// BlueStore: overwrites of allocated space up to this many bytes
        /// go through the commit journal (deferred) instead of new space; 0
        /// sends every write to new space.
        bluestore_deferred_max_bytes: u64 = 64 << 10, check any;
        /// BlueStore: overwrites larger than this are deferred only while
        /// the store is lightly loaded (fewer than four other transactions
        /// waiting for their commit); under load they go to new space, so
        /// their data reaches the device once instead of twice.
        bluestore_deferred_busy_max_bytes: u64 = 32 << 10, check any;
        /// BlueStore: when the store has been committing one transaction
        /// at a time and is idle, the submitter of a small transaction
        /// writes its journal record itself instead of handing it to the
        /// commit thread. Lower latency for a store used alone (`cairn
        /// bench store` at queue depth 1), but in an OSD the submitter is
        /// its event loop, which then cannot send the write to the
        /// replicas until its own journal write is done: off by default,
        /// so the primary's commit and the replicas' overlap.
        bluestore_inline_commits: bool = false, check any;
        /// BlueStore: the OSD's event loop writes journal records itself,
        /// through an io_uring of its own, and acknowledges commits when
        /// the ring completes, instead of handing each group to the commit
        /// thread and a record thread (two thread hand-offs per commit).
        /// What cannot be done without blocking still goes to the commit
        /// thread. Off: every commit goes through the commit thread.
        bluestore_loop_commits: bool = true, check any;
        /// BlueStore: checksum of stored data, verified on every read.
        bluestore_csum_type: ChecksumKind = ChecksumKind::Crc32c, check any;
        /// BlueStore: when to compress. Without client hints (not sent
        /// yet) passive compresses nothing and aggressive everything.
        bluestore_compression_mode: CompressionModeKind = CompressionModeKind::None,
            check any;
        /// BlueStore: compression algorithm.
        bluestore_compression_algorithm: CompressionAlgorithmKind =
            CompressionAlgorithmKind::Lz4, check any;
        /// BlueStore: keep compressed data only if it takes at most this
        /// share of the raw size.
        bluestore_compression_required_ratio: Ratio = Ratio(0.875), check any;
        /// BlueStore: writes smaller than this many bytes are not
        /// compressed.
        bluestore_compression_min_blob_size: u64 = 8 << 10, check any;
        /// BlueStore: a compressed blob holds at most this many raw bytes
        /// (at least 4096).
        bluestore_compression_max_blob_size: u64 = 64 << 10, check at_least_4k;
        /// BlueStore: bytes of the onode, data and RocksDB block caches
        /// together.
        bluestore_cache_size: u64 = 128 << 20, check any;
        /// BlueStore: share of the cache for onodes (object metadata).
        bluestore_cache_meta_ratio: Ratio = Ratio(0.4), check any;
        /// BlueStore: share of the cache for RocksDB's block cache; the
        /// rest (1 - meta - kv) caches data.
        bluestore_cache_kv_ratio: Ratio = Ratio(0.2), check any;
        /// BlueStore: resize the onode and data caches to keep the OSD's
        /// memory near `memory_target`.
        bluestore_cache_autotune: bool = false, check any;
        /// Memory in bytes the OSD aims to stay within when cache
        /// autotuning is on.
        memory_target: u64 = 512 << 20, check at_least_16m;
        /// BlueStore: a RocksDB options string (`key=value` pairs separated
        /// by `,` or `;`), applied verbatim; `compaction_threads` and
        /// `flusher_threads` size RocksDB's thread pools.
        bluestore_rocksdb_options: String = String::new(), check any;
        /// BlueStore: bytes of metadata writes kept as the newest value per
        /// key in front of RocksDB, which then takes them once per journal
        /// sync (or when this fills) instead of every version; 0 writes
        /// straight to RocksDB.
        bluestore_kv_buffer_bytes: u64 = 4 << 20, check any;
        /// BlueStore on a rotational device: bytes per second RocksDB's
        /// memtable flushes and compactions may write (0: unlimited).
        /// Unpaced, the three OSDs' flushes and compactions land at once
        /// and journal writes queue behind them for tens of milliseconds.
        /// The class is `crush_device_class` when that is hdd, ssd or nvme
        /// and the database is on the data's disk; otherwise it is
        /// detected from the device holding the database.
        /// It paces memtable flushes too, which with
        /// `bluestore_kv_buffer_bytes = 0` every journal sync waits for.
        bluestore_rocksdb_write_rate_hdd: u64 = 16 << 20, check any;
        /// As `bluestore_rocksdb_write_rate_hdd`, on an SSD or NVMe device
        /// (or one whose class is unknown).
        bluestore_rocksdb_write_rate_ssd: u64 = 0, check any;
        /// BlueStore: how device I/O is submitted.
        bluestore_io_engine: IoEngineKind = IoEngineKind::Uring, check any;
        /// For tests and benchmarks only, never in production: serve the
        /// data device like a spinning disk ("hdd": one request at a time,
        /// a seek of `hdd_emulation_seek_ms` unless sequential, streaming
        /// at `hdd_emulation_mib_per_s`), so slow and fast pools can be
        /// tried on one machine. The device class is then detected as hdd.
        /// Empty: off.
        bluestore_device_emulation: String = String::new(), check device_emulation;
        /// The emulated spinning disk's seek and rotation cost per random
        /// request, in milliseconds.
        hdd_emulation_seek_ms: u64 = 6, check any;
        /// The emulated spinning disk's streaming bandwidth, in MiB/s (at
        /// least 1).
        hdd_emulation_mib_per_s: u64 = 150, check at_least_one;
        /// Where the OSD is in the CRUSH hierarchy, as `type=name` pairs
        /// separated by spaces (e.g. `host=h1 rack=r1`); buckets missing
        /// from the map are created, and a missing `root` means
        /// `root=default`. Empty: `host=<this machine's short name>`.
        /// `cairn osd --crush-location` overrides it.
        crush_location: String = String::new(), check location;
        /// Move the OSD to `crush_location` at every start if it sits
        /// elsewhere (off: only a new OSD is placed there).
        crush_update_on_start: bool = true, check any;
        /// Device class in CRUSH (e.g. hdd, ssd, nvme). Empty: detected
        /// from the data device (rotational: hdd; nvme: nvme; otherwise
        /// ssd), and applied only when the OSD first joins; set, it is
        /// applied at every start.
        crush_device_class: String = String::new(), check device_class;
        /// CRUSH weight of a new OSD in TiB (e.g. 1.5). Empty: the data
        /// device's size in TiB (at least a tiny nonzero weight).
        crush_initial_weight: String = String::new(), check weight;
    }
}

section! {
    /// `[client]`: client library options.
    pub struct ClientConfig in "client" {
        /// Fail an op not completed in this many milliseconds (0 = wait
        /// forever, as a disk does).
        op_timeout_ms: u64 = 0, check any, runtime;
        /// An op slower than this many milliseconds is logged (warn) with
        /// each of its attempts: the epoch, PG and OSD it went to and why
        /// it was sent again (0 = never). What an OSD reports as slow
        /// starts when the op reaches it; this counts from the client.
        op_complaint_time_ms: u64 = 1000, check any, runtime;
        /// Object size, in bytes, for new images: a power of two from 4 KiB
        /// to 64 MiB.
        image_default_object_size: u64 = 4 << 20, check object_size;
        /// Most ops a client has in flight at once (at least 1).
        max_inflight_ops: u32 = 1024, check at_least_one;
        /// An open image's watch (what keeps `image rm` and shrinking
        /// from pulling it away) lapses if not renewed within this many
        /// milliseconds; it is renewed every third of it, and the image's
        /// I/O waits while it is lapsed (Ceph's `osd_client_watch_timeout`).
        watch_timeout_ms: u64 = 30_000, check watch_timeout;
        /// An admin command (and a client's connection to its first map)
        /// fails after this many milliseconds without an answer, naming
        /// what did not answer (`--timeout` overrides it per command).
        command_timeout_ms: u64 = 30_000, check at_least_one, runtime;
    }
}

/// Where an OSD listens: its public and cluster addresses, resolved from
/// `public_addr`, `bind_addr` and `cluster_addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OsdBindAddrs {
    /// For clients, admin tools and the monitor.
    pub public: SocketAddr,
    /// For other OSDs (replication, peering, recovery).
    pub cluster: SocketAddr,
}

impl OsdConfig {
    /// The public and cluster addresses this OSD binds. Fails (naming the
    /// option) if an address does not parse or both are the same fixed
    /// `ip:port`.
    pub fn addrs(&self) -> Result<OsdBindAddrs, (&'static str, String)> {
        let (key, text) = if self.public_addr.is_empty() {
            ("bind_addr", &self.bind_addr)
        } else {
            ("public_addr", &self.public_addr)
        };
        let public: SocketAddr = text
            .parse()
            .map_err(|_| (key, format!("expected a socket address, got {text:?}")))?;
        let cluster = if self.cluster_addr.is_empty() {
            SocketAddr::new(public.ip(), 0)
        } else {
            self.cluster_addr.parse().map_err(|_| {
                let text = &self.cluster_addr;
                (
                    "cluster_addr",
                    format!("expected a socket address, got {text:?}"),
                )
            })?
        };
        if cluster == public && public.port() != 0 {
            return Err((
                "cluster_addr",
                format!("must differ from the public address, got {cluster} for both"),
            ));
        }
        Ok(OsdBindAddrs { public, cluster })
    }
}
