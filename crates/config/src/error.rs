//! The configuration error type.

use std::path::PathBuf;

use thiserror::Error;

/// Why a configuration could not be loaded or changed.
///
/// Every variant carries `origin`: the file path, `cairn.toml` for
/// [`Config::parse`](crate::Config::parse), or `override` for
/// [`Config::set`](crate::Config::set); the message starts with it.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid TOML.
    #[error("{origin}: {message}")]
    Syntax {
        /// Where the text came from.
        origin: String,
        /// The TOML parser's message (with line and column).
        message: String,
    },
    /// A section other than `[global]`, `[mon]`, `[osd]`, `[client]`, `[osd.N]`.
    #[error("{origin}: unknown section '[{section}]'")]
    UnknownSection {
        /// Where the text came from.
        origin: String,
        /// The section name, e.g. `osdd` or `osd.x`.
        section: String,
    },
    /// An option no section has, e.g. `osd.heartbeat_intervl_ms`.
    #[error("{origin}: unknown option '{key}'{}", suggestion.as_ref().map(|s| format!("; did you mean '{s}'?")).unwrap_or_default())]
    UnknownOption {
        /// Where the text came from.
        origin: String,
        /// The full option name, e.g. `osd.heartbeat_intervl_ms`.
        key: String,
        /// The nearest known option, if one is close (a typo).
        suggestion: Option<String>,
    },
    /// A key at the top level of the file, before any section header.
    #[error(
        "{origin}: option '{key}' is outside any section; \
         put it under [global], [mon], [osd] or [client]"
    )]
    OutsideSection {
        /// Where the text came from.
        origin: String,
        /// The key.
        key: String,
    },
    /// A known option with a value of the wrong type or out of range.
    #[error("{origin}: invalid value for '{key}': {reason}")]
    InvalidValue {
        /// Where the text came from.
        origin: String,
        /// The full option name, e.g. `osd.3.store`.
        key: String,
        /// What was expected and what was found.
        reason: String,
    },
    /// `cairn config set` of an option read only at start.
    #[error(
        "{origin}: '{key}' is read only when a daemon starts; set it in cairn.toml \
         and restart the daemons that use it"
    )]
    NeedsRestart {
        /// Where the change came from.
        origin: String,
        /// The full option name.
        key: String,
    },
    /// `cairn config set WHO KEY` where WHO does not read KEY.
    #[error("{origin}: '{key}' is not read by {who}{}", hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default())]
    NotReadBy {
        /// Where the change came from.
        origin: String,
        /// The full option name.
        key: String,
        /// The daemon or daemon type named.
        who: String,
        /// Which daemons read it instead.
        hint: Option<String>,
    },
    /// A malformed option name given to [`Config::set`](crate::Config::set).
    #[error("{origin}: invalid option name '{name}': {reason}")]
    InvalidName {
        /// Where the name came from.
        origin: String,
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ConfigError {
    /// The option, section or name the error is about, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Io { .. } | ConfigError::Syntax { .. } => None,
            ConfigError::UnknownSection { section, .. } => Some(section),
            ConfigError::UnknownOption { key, .. }
            | ConfigError::OutsideSection { key, .. }
            | ConfigError::InvalidValue { key, .. }
            | ConfigError::NeedsRestart { key, .. }
            | ConfigError::NotReadBy { key, .. } => Some(key),
            ConfigError::InvalidName { name, .. } => Some(name),
        }
    }
}
