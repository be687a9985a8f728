//! The transmission phase of one connection: reading requests, running them against the
//! volume concurrently, and writing simple replies in completion order.
//!
//! Shape of a connection (all inside the connection's task, except the per-request tasks):
//!
//! ```text
//!  socket ─▶ reader loop ──(validate, read WRITE payload, take permits)──▶ tokio::spawn(op)
//!                 │ invalid request: error reply                                 │
//!                 ▼                                                              ▼
//!             mpsc<Reply> ◀───────────────────────────────────── reply when the op completes
//!                 │
//!                 ▼
//!  socket ◀─ writer loop (BufWriter; writes every queued reply, flushes when the queue is empty)
//! ```
//!
//! Bounds: at most `requests_in_flight_max` requests and `bytes_in_flight_max` bytes of
//! request/reply data are held per connection; the permits travel with each request and are
//! released once its reply has been handed to the writer. When a bound is reached the reader
//! stops reading, and TCP backpressure slows the client.
//!
//! Faults and what they cost:
//! * An invalid request (bad range, alignment, length, flags, write on a read-only export)
//!   gets an error reply; the connection keeps working. The payload of a rejected `WRITE` is
//!   read and discarded so the stream stays in sync.
//! * A volume error becomes `NBD_EIO` / `NBD_ENOSPC` / `NBD_EINVAL` for that request only.
//!   A volume read that returns the wrong number of bytes is answered with `NBD_EIO` rather
//!   than corrupting the stream.
//! * A bad request magic or a failed socket ends the connection: the reader stops, replies to
//!   requests already in flight are still written if the socket allows, then the connection
//!   closes.
//!
//! Durability: a completed `Volume` write is durable, so `NBD_CMD_FLAG_FUA` is satisfied by
//! replying only after the operation completed; `NBD_CMD_FLUSH` calls `Volume::flush`.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use cairn_volume::{Volume, VolumeError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, warn};

use crate::handshake::skip;
use crate::proto::*;
use crate::server::NbdExport;
use crate::NbdError;

/// A request that passed validation. `fua` is recorded but needs no extra work: a reply
/// is only sent once the volume operation completed, and completed operations are durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // Fields are the request's offset, length and flags, as named.
pub enum Command {
    /// `NBD_CMD_READ`: reply with `length` bytes from `offset`.
    Read { offset: u64, length: u32 },
    /// `NBD_CMD_WRITE`: the `length`-byte payload follows the header.
    Write { offset: u64, length: u32, fua: bool },
    /// `NBD_CMD_FLUSH`: `Volume::flush`.
    Flush,
    /// `NBD_CMD_TRIM`: `Volume::discard`.
    Trim { offset: u64, length: u32, fua: bool },
    /// `NBD_CMD_WRITE_ZEROES`: `Volume::write_zeroes` (which never leaves garbage, so
    /// `no_hole` needs nothing further).
    WriteZeroes {
        offset: u64,
        length: u32,
        fua: bool,
        no_hole: bool,
    },
    /// `NBD_CMD_DISC`: answer what is in flight, then close.
    Disconnect,
}

/// Checks a request against an export of `size_bytes` bytes. `Err` holds the `NBD_E*` value
/// to reply with.
pub fn validate(header: &RequestHeader, size_bytes: u64, read_only: bool) -> Result<Command, u32> {
    let flags_allowed = match header.command {
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
        _ => CMD_FLAG_FUA,
    };
    if header.flags & !flags_allowed != 0 {
        return Err(NBD_EINVAL);
    }
    let fua = header.flags & CMD_FLAG_FUA != 0;
    let (offset, length) = (header.offset, header.length);
    let writes = match header.command {
        CMD_DISC => return Ok(Command::Disconnect),
        CMD_FLUSH => return Ok(Command::Flush),
        CMD_READ => false,
        CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES => true,
        _ => return Err(NBD_EINVAL),
    };
    if writes && read_only {
        return Err(NBD_EPERM);
    }
    if length == 0 || length > BLOCK_SIZE_MAX_BYTES {
        return Err(NBD_EINVAL);
    }
    let end = offset.checked_add(u64::from(length));
    let block = u64::from(BLOCK_SIZE_MIN_BYTES);
    // A length that is not a whole number of blocks is allowed only to reach the end of an
    // export whose size is not a whole number of blocks.
    if offset % block != 0 || (u64::from(length) % block != 0 && end != Some(size_bytes)) {
        return Err(NBD_EINVAL);
    }
    let inside = matches!(end, Some(end) if end <= size_bytes);
    if !inside {
        let grows_data = matches!(header.command, CMD_WRITE | CMD_WRITE_ZEROES);
        return Err(if grows_data { NBD_ENOSPC } else { NBD_EINVAL });
    }
    Ok(match header.command {
        CMD_READ => Command::Read { offset, length },
        CMD_WRITE => Command::Write {
            offset,
            length,
            fua,
        },
        CMD_TRIM => Command::Trim {
            offset,
            length,
            fua,
        },
        _ => Command::WriteZeroes {
            offset,
            length,
            fua,
            no_hole: header.flags & CMD_FLAG_NO_HOLE != 0,
        },
    })
}

/// The `NBD_E*` value for a volume error. `writing` distinguishes a write past the end
/// (`ENOSPC`) from a read past the end (`EINVAL`).
pub fn errno_for(error: &VolumeError, writing: bool) -> u32 {
    match error {
        VolumeError::OutOfRange { .. } if writing => NBD_ENOSPC,
        VolumeError::OutOfRange { .. } | VolumeError::Invalid(_) => NBD_EINVAL,
        VolumeError::NoSpace => NBD_ENOSPC,
        VolumeError::Io(_) => NBD_EIO,
    }
}

/// Per-connection bounds on work in flight.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub requests_in_flight_max: usize,
    pub bytes_in_flight_max: usize,
}

/// Permits held by one request until its reply has been handed to the writer.
struct Permits {
    _request: OwnedSemaphorePermit,
    _bytes: Option<OwnedSemaphorePermit>,
}

struct Reply {
    header: SimpleReplyHeader,
    data: Option<Bytes>,
    _permits: Permits,
}

/// Why the reader stopped.
#[derive(Debug)]
enum ReadEnd {
    Disconnect,
    Eof,
    Shutdown,
}

/// Serves requests until the client disconnects, the connection fails, or `shutdown` turns
/// true. Requests already in flight are answered before returning (if the socket allows).
pub(crate) async fn serve<V, R, W>(
    export: Arc<NbdExport<V>>,
    reader: BufReader<R>,
    writer: BufWriter<W>,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), NbdError>
where
    V: Volume,
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let size_bytes = export.size();
    let (replies, queue) = mpsc::channel(limits.requests_in_flight_max);
    let write = write_replies(queue, writer);
    tokio::pin!(write);
    let read_end = {
        let read = read_requests(&export, size_bytes, reader, replies, limits);
        tokio::pin!(read);
        tokio::select! {
            end = &mut read => end,
            () = wait_for_shutdown(&mut shutdown) => Ok(ReadEnd::Shutdown),
            written = &mut write => {
                // The writer only returns first if the socket failed.
                written?;
                return Ok(());
            }
        }
    };
    debug!(
        ?read_end,
        "stopped reading requests, answering those in flight"
    );
    let written = write.await;
    read_end?;
    written?;
    Ok(())
}

/// Waits until the flag turns true (or its sender is gone).
pub(crate) async fn wait_for_shutdown(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

async fn read_requests<V, R>(
    export: &Arc<NbdExport<V>>,
    size_bytes: u64,
    mut reader: BufReader<R>,
    replies: mpsc::Sender<Reply>,
    limits: Limits,
) -> Result<ReadEnd, NbdError>
where
    V: Volume,
    R: AsyncRead + Unpin,
{
    let request_slots = Arc::new(Semaphore::new(limits.requests_in_flight_max));
    let byte_budget = Arc::new(Semaphore::new(limits.bytes_in_flight_max));
    loop {
        let mut header_bytes = [0u8; RequestHeader::BYTES];
        match reader.read_exact(&mut header_bytes).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(ReadEnd::Eof),
            Err(e) => return Err(e.into()),
        }
        let header = RequestHeader::decode(&header_bytes).map_err(NbdError::BadRequestMagic)?;
        let command = validate(&header, size_bytes, export.read_only());
        if command == Ok(Command::Disconnect) {
            return Ok(ReadEnd::Disconnect);
        }
        let buffered_bytes = match command {
            Ok(Command::Read { length, .. }) | Ok(Command::Write { length, .. }) => length,
            _ => 0,
        };
        let permits = acquire(&request_slots, &byte_budget, buffered_bytes).await?;
        let payload = match command {
            Ok(Command::Write { length, .. }) => read_payload(&mut reader, length).await?,
            _ => {
                skip(&mut reader, u64::from(header.payload_bytes())).await?;
                Bytes::new()
            }
        };
        match command {
            Err(error) => {
                debug!(?header, error, "rejected request");
                let reply = Reply {
                    header: SimpleReplyHeader {
                        error,
                        cookie: header.cookie,
                    },
                    data: None,
                    _permits: permits,
                };
                if replies.send(reply).await.is_err() {
                    return Ok(ReadEnd::Eof);
                }
            }
            Ok(command) => {
                let volume = export.volume().clone();
                let replies = replies.clone();
                tokio::spawn(async move {
                    let (error, data) = execute(&*volume, command, payload).await;
                    let reply = Reply {
                        header: SimpleReplyHeader {
                            error,
                            cookie: header.cookie,
                        },
                        data,
                        _permits: permits,
                    };
                    // Fails only if the writer already gave up on the connection.
                    let _ = replies.send(reply).await;
                });
            }
        }
    }
}

async fn acquire(
    request_slots: &Arc<Semaphore>,
    byte_budget: &Arc<Semaphore>,
    bytes: u32,
) -> Result<Permits, NbdError> {
    let closed = |_| NbdError::Io(std::io::Error::other("request permits closed"));
    let request = request_slots
        .clone()
        .acquire_owned()
        .await
        .map_err(closed)?;
    let bytes = if bytes == 0 {
        None
    } else {
        Some(
            byte_budget
                .clone()
                .acquire_many_owned(bytes)
                .await
                .map_err(closed)?,
        )
    };
    Ok(Permits {
        _request: request,
        _bytes: bytes,
    })
}

/// Reads a `WRITE` payload of `length` bytes without zero-filling the buffer first.
async fn read_payload<R: AsyncRead + Unpin>(reader: &mut R, length: u32) -> std::io::Result<Bytes> {
    let length = length as usize;
    let mut buffer = BytesMut::with_capacity(length);
    while buffer.len() < length {
        let remaining = (length - buffer.len()) as u64;
        let read = (&mut *reader).take(remaining).read_buf(&mut buffer).await?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(buffer.freeze())
}

/// Runs one validated command; returns the reply's error value and, for reads, the data.
async fn execute<V: Volume>(volume: &V, command: Command, payload: Bytes) -> (u32, Option<Bytes>) {
    let result = match command {
        Command::Read { offset, length } => {
            return match volume.read(offset, u64::from(length)).await {
                Ok(data) if data.len() == length as usize => (0, Some(data)),
                Ok(data) => {
                    warn!(
                        offset,
                        length,
                        got = data.len(),
                        "volume read returned wrong length"
                    );
                    (NBD_EIO, None)
                }
                Err(error) => (report(&error, false), None),
            };
        }
        Command::Write { offset, .. } => volume.write(offset, payload).await,
        Command::Flush => volume.flush().await,
        Command::Trim { offset, length, .. } => volume.discard(offset, u64::from(length)).await,
        Command::WriteZeroes { offset, length, .. } => {
            volume.write_zeroes(offset, u64::from(length)).await
        }
        Command::Disconnect => return (NBD_EINVAL, None),
    };
    let writing = matches!(command, Command::Write { .. } | Command::WriteZeroes { .. });
    match result {
        Ok(()) => (0, None),
        Err(error) => (report(&error, writing), None),
    }
}

fn report(error: &VolumeError, writing: bool) -> u32 {
    let errno = errno_for(error, writing);
    if errno == NBD_EIO {
        warn!(%error, "volume operation failed");
    } else {
        debug!(%error, errno, "volume operation rejected");
    }
    errno
}

/// Writes replies as they arrive; flushes whenever no further reply is queued, so replies
/// completing together leave in one write.
async fn write_replies<W: AsyncWrite + Unpin>(
    mut queue: mpsc::Receiver<Reply>,
    mut writer: BufWriter<W>,
) -> std::io::Result<()> {
    while let Some(reply) = queue.recv().await {
        write_reply(&mut writer, reply).await?;
        while let Ok(reply) = queue.try_recv() {
            write_reply(&mut writer, reply).await?;
        }
        writer.flush().await?;
    }
    Ok(())
}

async fn write_reply<W: AsyncWrite + Unpin>(
    writer: &mut BufWriter<W>,
    reply: Reply,
) -> std::io::Result<()> {
    writer.write_all(&reply.header.encode()).await?;
    if let Some(data) = &reply.data {
        writer.write_all(data).await?;
    }
    Ok(())
}
