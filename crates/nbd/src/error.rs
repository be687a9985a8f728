//! The crate's error type: why a connection ended early, or why a server could not be built.
//!
//! Errors about a single request never appear here: they travel to the client as an
//! `NBD_E*` value in the reply, and the connection keeps working.

/// Why a connection (or the construction of a server) failed.
#[derive(Debug, thiserror::Error)]
pub enum NbdError {
    /// The socket failed or the peer went away.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The client set client flags the server does not know.
    #[error("client sent unknown client flags {0:#x}")]
    BadClientFlags(u32),
    /// An option request did not start with `IHAVEOPT`.
    #[error("bad option magic {0:#018x}")]
    BadOptionMagic(u64),
    /// A transmission request did not start with the request magic.
    #[error("bad request magic {0:#010x}")]
    BadRequestMagic(u32),
    /// `NBD_OPT_EXPORT_NAME` named an export that does not exist; the protocol has no error
    /// reply for it, so the connection is closed.
    #[error("unknown export {0:?} requested with NBD_OPT_EXPORT_NAME")]
    UnknownExport(String),
    /// The client did not finish negotiating in time.
    #[error("handshake not finished within {0:?}")]
    HandshakeTimeout(std::time::Duration),
    /// The server configuration is unusable.
    #[error("invalid server configuration: {0}")]
    Config(String),
}

impl NbdError {
    /// True if the client broke the protocol (as opposed to a network failure).
    pub fn is_protocol_violation(&self) -> bool {
        matches!(
            self,
            NbdError::BadClientFlags(_)
                | NbdError::BadOptionMagic(_)
                | NbdError::BadRequestMagic(_)
                | NbdError::UnknownExport(_)
                | NbdError::HandshakeTimeout(_)
        )
    }
}
