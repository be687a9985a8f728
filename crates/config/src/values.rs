//! The types option values take, and how each is read from TOML or the
//! command line, written back, and described.
//!
//! Besides integers, booleans and strings there are ratios (a float from 0
//! to 1) and *choices*: enums whose values are fixed words, such as the
//! object store backend. A choice is declared once with [`choice!`] and gets
//! parsing, printing and a type name listing its words (`cairn config
//! defaults` shows `Type: bluestore|filestore|memstore.`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use toml::Value;

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

/// A share of something, from 0 to 1 (cache ratios, compression ratio).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ratio(pub f64);

// Ratios are validated finite, so equality is an equivalence.
impl Eq for Ratio {}

impl Ratio {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl OptValue for Ratio {
    const KIND: &'static str = "ratio";
    fn from_toml(v: &Value) -> Result<Self, String> {
        let f = match v {
            Value::Float(f) => *f,
            Value::Integer(i) => *i as f64,
            other => {
                return Err(format!(
                    "expected a number from 0 to 1, got {}",
                    describe(other)
                ))
            }
        };
        ratio(f)
    }
    fn from_arg(s: &str) -> Result<Self, String> {
        match s.parse::<f64>() {
            Ok(f) => ratio(f),
            Err(_) => Err(format!("expected a number from 0 to 1, got {s:?}")),
        }
    }
    fn to_toml(&self) -> Value {
        Value::Float(self.0)
    }
}

fn ratio(f: f64) -> Result<Ratio, String> {
    if (0.0..=1.0).contains(&f) {
        Ok(Ratio(f))
    } else {
        Err(format!("expected a number from 0 to 1, got {f}"))
    }
}

/// Declare a choice option type: an enum of fixed words.
macro_rules! choice {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $(#[doc = $doc0:literal])* $v0:ident = $w0:literal
            $(, $(#[doc = $doc:literal])* $v:ident = $w:literal)* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $(#[doc = $doc0])* #[serde(rename = $w0)] $v0,
            $( $(#[doc = $doc])* #[serde(rename = $w)] $v, )*
        }

        impl $name {
            /// Every accepted word, `|`-separated.
            pub const WORDS: &'static str = concat!($w0 $(, "|", $w)*);

            /// The word used in `cairn.toml`.
            pub fn as_str(self) -> &'static str {
                match self { $name::$v0 => $w0, $( $name::$v => $w, )* }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $w0 => Ok($name::$v0),
                    $( $w => Ok($name::$v), )*
                    _ => Err(format!("expected one of {}, got {s:?}", Self::WORDS)),
                }
            }
        }

        impl OptValue for $name {
            const KIND: &'static str = $name::WORDS;
            fn from_toml(v: &Value) -> Result<Self, String> {
                match v {
                    Value::String(s) => s.parse(),
                    other => Err(format!("expected one of {}, got {}", Self::WORDS, describe(other))),
                }
            }
            fn from_arg(s: &str) -> Result<Self, String> {
                s.parse()
            }
            fn to_toml(&self) -> Value {
                Value::String(self.as_str().to_string())
            }
        }
    };
}

choice! {
    /// The object store an OSD uses.
    pub enum StoreKind {
        /// Data on a raw device or preallocated file, metadata in RocksDB.
        Bluestore = "bluestore",
        /// A file per object on the local file system, with a journal.
        Filestore = "filestore",
        /// Volatile, in memory, for tests.
        Memstore = "memstore",
    }
}

choice! {
    /// Checksum of stored data.
    pub enum ChecksumKind {
        Crc32c = "crc32c",
        Xxhash64 = "xxhash64",
        None = "none",
    }
}

choice! {
    /// When the BlueStore compresses.
    pub enum CompressionModeKind {
        None = "none",
        Passive = "passive",
        Aggressive = "aggressive",
        Force = "force",
    }
}

choice! {
    /// Compression algorithm.
    pub enum CompressionAlgorithmKind {
        Lz4 = "lz4",
        Zstd = "zstd",
        Snappy = "snappy",
    }
}

choice! {
    /// How the BlueStore submits device I/O.
    pub enum IoEngineKind {
        Uring = "uring",
        Threads = "threads",
    }
}
