use cairn_wire::OpError;

#[derive(Debug, thiserror::Error, Clone)]
pub enum ClientError {
    #[error("cannot reach the monitor at {addr}: {reason} (is the cluster running? see `cairn cluster up`)")]
    MonUnreachable { addr: String, reason: String },
    #[error("lost the monitor session")]
    MonLost,
    #[error("{0}")]
    Command(String),
    #[error("pool '{0}' does not exist")]
    NoSuchPool(String),
    #[error("image '{0}' does not exist")]
    NoSuchImage(String),
    #[error("image '{0}' already exists")]
    ImageExists(String),
    #[error("{0}")]
    Invalid(String),
    /// The image is in use (open somewhere, or an admin operation runs).
    #[error("{0}")]
    Busy(String),
    #[error("operation failed: {0}")]
    Op(#[from] OpError),
    /// Nothing answered in time; says what did not.
    #[error("{0}")]
    Timeout(String),
    #[error("protocol error: {0}")]
    Protocol(String),
}
