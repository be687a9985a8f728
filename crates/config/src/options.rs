//! The option sections: one declaration per option gives its field, type,
//! default, validation and documentation (used by rustdoc, [`options`] and
//! [`render_defaults`](crate::render_defaults)) together, so no option can
//! exist without all of them.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use toml::{Table, Value};

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
    /// What the option does.
    pub doc: &'static str,
}

impl OptionDoc {
    /// The full option name, e.g. `osd.heartbeat_interval_ms`.
    pub fn key(&self) -> String {
        format!("{}.{}", self.section, self.name)
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

/// The object store an OSD uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// Durable store on the local file system, with a journal.
    #[default]
    Filestore,
    /// Volatile in-memory store, for tests.
    Memstore,
}

impl StoreKind {
    /// The name used in `cairn.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Filestore => "filestore",
            StoreKind::Memstore => "memstore",
        }
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StoreKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "filestore" => Ok(StoreKind::Filestore),
            "memstore" => Ok(StoreKind::Memstore),
            _ => Err(format!("expected one of filestore|memstore, got {s:?}")),
        }
    }
}

/// A raw value for an option: from a TOML file or from a command-line override.
#[derive(Clone, Copy)]
pub(crate) enum Raw<'a> {
    Toml(&'a Value),
    Arg(&'a str),
}

/// How a value of an option type is read, written and described.
pub(crate) trait OptValue: Sized {
    /// The type name shown in [`OptionDoc::kind`].
    const KIND: &'static str;
    fn from_toml(v: &Value) -> Result<Self, String>;
    fn from_arg(s: &str) -> Result<Self, String>;
    /// The TOML form. Integers above `i64::MAX` (not representable in TOML,
    /// and rejected by validation) are written as `i64::MAX`.
    fn to_toml(&self) -> Value;
    /// Whether the value can be written to TOML at all.
    fn representable(&self) -> Result<(), String> {
        Ok(())
    }
    fn parse(raw: Raw<'_>) -> Result<Self, String> {
        match raw {
            Raw::Toml(v) => Self::from_toml(v),
            Raw::Arg(s) => Self::from_arg(s),
        }
    }
}

/// A TOML value as shown in error messages.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Table(_) => "a table".to_string(),
        Value::Array(_) => "an array".to_string(),
        other => other.to_string(),
    }
}

/// Reads an unsigned integer no larger than `max`.
fn unsigned(raw: Result<i64, String>, max: u64) -> Result<u64, String> {
    let expected = if max == i64::MAX as u64 {
        "expected an unsigned integer".to_string()
    } else {
        format!("expected an unsigned integer up to {max}")
    };
    match raw {
        Ok(i) if i >= 0 && i as u64 <= max => Ok(i as u64),
        Ok(i) => Err(format!("{expected}, got {i}")),
        Err(got) => Err(format!("{expected}, got {got}")),
    }
}

fn toml_int(v: &Value) -> Result<i64, String> {
    match v {
        Value::Integer(i) => Ok(*i),
        other => Err(describe(other)),
    }
}

fn arg_int(s: &str) -> Result<i64, String> {
    match s.parse::<i64>() {
        Ok(i) => Ok(i),
        // A number too large for TOML: show it as a number, not a string.
        Err(_) if s.parse::<u64>().is_ok() => Err(s.to_string()),
        Err(_) => Err(format!("{s:?}")),
    }
}

impl OptValue for u64 {
    const KIND: &'static str = "u64";
    fn from_toml(v: &Value) -> Result<Self, String> {
        unsigned(toml_int(v), i64::MAX as u64)
    }
    fn from_arg(s: &str) -> Result<Self, String> {
        unsigned(arg_int(s), i64::MAX as u64)
    }
    fn to_toml(&self) -> Value {
        Value::Integer(i64::try_from(*self).unwrap_or(i64::MAX))
    }
    fn representable(&self) -> Result<(), String> {
        match i64::try_from(*self) {
            Ok(_) => Ok(()),
            Err(_) => Err(format!("must be at most {}, got {self}", i64::MAX)),
        }
    }
}

impl OptValue for u32 {
    const KIND: &'static str = "u32";
    fn from_toml(v: &Value) -> Result<Self, String> {
        unsigned(toml_int(v), u32::MAX.into()).map(|u| u as u32)
    }
    fn from_arg(s: &str) -> Result<Self, String> {
        unsigned(arg_int(s), u32::MAX.into()).map(|u| u as u32)
    }
    fn to_toml(&self) -> Value {
        Value::Integer((*self).into())
    }
}

impl OptValue for bool {
    const KIND: &'static str = "bool";
    fn from_toml(v: &Value) -> Result<Self, String> {
        match v {
            Value::Boolean(b) => Ok(*b),
            other => Err(format!("expected true or false, got {}", describe(other))),
        }
    }
    fn from_arg(s: &str) -> Result<Self, String> {
        match s {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(format!("expected true or false, got {s:?}")),
        }
    }
    fn to_toml(&self) -> Value {
        Value::Boolean(*self)
    }
}

impl OptValue for String {
    const KIND: &'static str = "string";
    fn from_toml(v: &Value) -> Result<Self, String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(format!("expected a string, got {}", describe(other))),
        }
    }
    fn from_arg(s: &str) -> Result<Self, String> {
        Ok(s.to_string())
    }
    fn to_toml(&self) -> Value {
        Value::String(self.clone())
    }
}

impl OptValue for StoreKind {
    const KIND: &'static str = "filestore|memstore";
    fn from_toml(v: &Value) -> Result<Self, String> {
        match v {
            Value::String(s) => s.parse(),
            other => Err(format!(
                "expected one of filestore|memstore, got {}",
                describe(other)
            )),
        }
    }
    fn from_arg(s: &str) -> Result<Self, String> {
        s.parse()
    }
    fn to_toml(&self) -> Value {
        Value::String(self.as_str().to_string())
    }
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

fn socket_addr(v: &str) -> Result<(), String> {
    match v.parse::<SocketAddr>() {
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "expected a socket address such as 127.0.0.1:6789, got {v:?}"
        )),
    }
}

/// The accepted values of `global.log_level`.
pub const LOG_LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

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
    (
        $(#[$meta:meta])*
        pub struct $name:ident in $section:literal {
            $(
                $(#[doc = $doc:literal])+
                $field:ident: $ty:ty = $default:expr, check $check:expr;
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
        log_level: String = "info".to_string(), check log_level;
    }
}

section! {
    /// `[mon]`: monitor options.
    pub struct MonConfig in "mon" {
        /// An OSD with no heartbeat for this long (milliseconds) is marked
        /// down. Must exceed `osd.heartbeat_interval_ms`.
        osd_heartbeat_grace_ms: u64 = 6000, check at_least_one;
        /// Mark an OSD down at once when its monitor session closes.
        osd_down_on_disconnect: bool = true, check any;
        /// A down OSD is marked out after this many seconds (0 = never).
        osd_down_out_interval_s: u64 = 600, check any;
        /// Number of PGs of a new pool when none is given (1 to 65536).
        pool_default_pg_num: u32 = 32, check pg_num;
        /// Replicas per object of a new pool when none is given (at least 1).
        pool_default_size: u32 = 3, check at_least_one;
        /// Replicas that must be up for a new pool's PGs to accept writes
        /// (1 to `pool_default_size`).
        pool_default_min_size: u32 = 2, check at_least_one;
    }
}

section! {
    /// `[osd]`: OSD daemon options; `[osd.N]` overrides them for OSD `N`.
    pub struct OsdConfig in "osd" {
        /// Address to serve on (`ip:port`; port 0 = any free port).
        bind_addr: String = "127.0.0.1:0".to_string(), check socket_addr;
        /// Interval between heartbeats to the monitor, in milliseconds (at
        /// least 1).
        heartbeat_interval_ms: u64 = 1000, check at_least_one;
        /// Object store backend: filestore (durable) or memstore (volatile,
        /// for tests).
        store: StoreKind = StoreKind::Filestore, check any;
        /// Filestore journal size, in bytes, that triggers a checkpoint (at
        /// least 1).
        journal_max_bytes: u64 = 256 << 20, check at_least_one;
        /// PG log entries kept per PG (at least 1).
        pg_log_max_entries: u32 = 3000, check at_least_one;
        /// Threads serving the OSD's I/O (at least 1). 1 runs everything on
        /// one thread with no cross-thread wakeups, which is fastest per core;
        /// scale with more OSDs per device rather than more threads.
        worker_threads: u32 = 1, check at_least_one;
    }
}

section! {
    /// `[client]`: client library options.
    pub struct ClientConfig in "client" {
        /// Fail an op not completed in this many milliseconds (0 = wait
        /// forever, as a disk does).
        op_timeout_ms: u64 = 0, check any;
        /// Object size, in bytes, for new images: a power of two from 4 KiB
        /// to 64 MiB.
        image_default_object_size: u64 = 4 << 20, check object_size;
        /// Most ops a client has in flight at once (at least 1).
        max_inflight_ops: u32 = 1024, check at_least_one;
    }
}
