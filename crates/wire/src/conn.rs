//! Connection halves. A [`FrameReader`] reads frames from a stream; a
//! [`Sender`] queues messages to a writer task that batches everything queued
//! into one `write` — so many pipelined requests cost one syscall, and no
//! sender ever waits on the socket.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};

use crate::frame::{decode_header, decode_payload, encode_frame, WireError, FRAME_HEADER_LEN};
use crate::msg::Message;

/// Reads frames; any error ends the connection.
pub struct FrameReader<R> {
    inner: BufReader<R>,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner: BufReader::with_capacity(256 << 10, inner),
            buf: Vec::new(),
        }
    }

    /// The next message, or [`WireError::Closed`] at a clean end of stream.
    pub async fn read(&mut self) -> Result<Message, WireError> {
        let mut header = [0u8; FRAME_HEADER_LEN];
        match self.inner.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(WireError::Closed)
            }
            Err(e) => return Err(e.into()),
        }
        let (len, crc) = decode_header(&header)?;
        self.buf.resize(len, 0);
        self.inner.read_exact(&mut self.buf).await?;
        let msg = decode_payload(&self.buf, crc);
        if self.buf.capacity() > (1 << 20) {
            self.buf = Vec::new();
        }
        msg
    }
}

/// Messages a [`Sender`] holds that its writer task has not yet taken. A
/// connection whose peer stops reading must not grow without end: a send
/// beyond this closes the connection instead (its owner sees `false` and
/// treats the peer as reset, as for any failed connection). Client
/// connections stay far below it (the OSD's client throttle bounds the
/// replies a connection can have outstanding); a peer link reaches it only
/// when the peer has stopped reading for seconds.
pub const SENDER_QUEUE_MAX: usize = 65536;

/// What a [`Sender`] shares with its writer task.
struct Shared {
    /// Messages queued and not yet taken by the writer.
    queued: AtomicUsize,
    /// Set when the queue overflowed: every later send fails.
    overflowed: AtomicBool,
    /// Wakes a writer stuck on a peer that does not read, so it closes.
    close: Notify,
}

/// A handle to a connection's writer task. Cloning is cheap; the task ends
/// when every `Sender` is dropped, the socket fails, or the queue
/// overflows ([`SENDER_QUEUE_MAX`]).
#[derive(Clone)]
pub struct Sender {
    tx: mpsc::UnboundedSender<Message>,
    shared: Arc<Shared>,
}

impl Sender {
    /// Queue a message. Returns false if the connection is gone, or if it
    /// was closed now because [`SENDER_QUEUE_MAX`] messages wait unsent.
    pub fn send(&self, msg: Message) -> bool {
        self.send_bounded(msg, SENDER_QUEUE_MAX)
    }

    fn send_bounded(&self, msg: Message, max: usize) -> bool {
        let shared = &self.shared;
        if shared.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        let queued = shared.queued.fetch_add(1, Ordering::Relaxed);
        if queued >= max {
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            if !shared.overflowed.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "{queued} messages wait unsent on a connection (its peer is not \
                     reading); closing it"
                );
                shared.close.notify_one();
            }
            return false;
        }
        if self.tx.send(msg).is_err() {
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed() || self.shared.overflowed.load(Ordering::Relaxed)
    }

    /// Messages queued and not yet taken by the writer task.
    pub fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::Relaxed)
    }

    /// Start a writer task for `writer`.
    pub fn spawn<W: AsyncWrite + Unpin + Send + 'static>(writer: W) -> Sender {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            overflowed: AtomicBool::new(false),
            close: Notify::new(),
        });
        tokio::spawn(write_loop(writer, rx, shared.clone()));
        Sender { tx, shared }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::UnboundedReceiver<Message>,
    shared: Arc<Shared>,
) {
    let mut out = Vec::with_capacity(64 << 10);
    // The queue overflows only while the writer is behind, so only the
    // socket write waits for `close`; an idle writer sees the flag after.
    while let Some(msg) = rx.recv().await {
        if shared.overflowed.load(Ordering::Relaxed) {
            break;
        }
        out.clear();
        let mut taken = 0;
        let mut queue = Some(msg);
        // Batch whatever is queued, up to a bound, into one write.
        while let Some(msg) = queue.take() {
            taken += 1;
            if let Err(e) = encode_frame(&msg, &mut out) {
                tracing::error!("dropping unencodable message: {e}");
            }
            if out.len() < (4 << 20) {
                queue = rx.try_recv().ok();
            }
        }
        shared.queued.fetch_sub(taken, Ordering::Relaxed);
        // Biased: a write that completes at once never registers a waiter.
        let written = tokio::select! {
            biased;
            r = writer.write_all(&out) => r,
            _ = shared.close.notified() => break,
        };
        if let Err(e) = written {
            tracing::debug!("connection write failed: {e}");
            return;
        }
        if out.capacity() > (8 << 20) {
            out = Vec::with_capacity(64 << 10);
        }
    }
    let _ = writer.shutdown().await;
}

/// Both halves of a TCP connection.
pub struct Connection {
    pub reader: FrameReader<tokio::net::tcp::OwnedReadHalf>,
    pub sender: Sender,
    pub peer: SocketAddr,
}

impl Connection {
    pub fn from_stream(stream: TcpStream) -> std::io::Result<Self> {
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?;
        let (r, w) = stream.into_split();
        Ok(Self {
            reader: FrameReader::new(r),
            sender: Sender::spawn(w),
            peer,
        })
    }
}

/// Longest a TCP connect may take: an address whose host does not answer
/// (a cut link drops the handshake without a reset) fails after this
/// instead of after the kernel's SYN retries (about two minutes).
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Connect to `addr` (within [`CONNECT_TIMEOUT`]) and send `hello` as the
/// first message.
pub async fn connect(addr: &str, hello: Message) -> Result<Connection, WireError> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| {
            let what = format!("connecting to {addr} timed out after {CONNECT_TIMEOUT:?}");
            std::io::Error::new(std::io::ErrorKind::TimedOut, what)
        })??;
    let conn = Connection::from_stream(stream)?;
    if !conn.sender.send(hello) {
        return Err(WireError::Closed);
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ping(nonce: u64) -> Message {
        Message::Ping { nonce }
    }

    /// A peer that never reads: the queue fills to its bound, the send
    /// past it fails and closes the connection, and every later send fails.
    #[tokio::test]
    async fn a_peer_that_does_not_read_is_cut_at_the_bound() {
        let (ours, _theirs) = tokio::io::duplex(4096);
        let sender = Sender::spawn(ours);
        // The writer has not run yet: nothing is taken from the queue.
        for n in 0..100 {
            assert!(
                sender.send_bounded(ping(n), 100),
                "send {n} within the bound"
            );
        }
        assert_eq!(sender.queued(), 100);
        assert!(
            !sender.send_bounded(ping(100), 100),
            "the send past the bound"
        );
        assert!(sender.is_closed());
        tokio::task::yield_now().await;
        assert!(!sender.send(ping(101)), "a closed connection takes nothing");
    }

    /// A peer that reads keeps a queue well below the bound, and gets every
    /// message in order.
    #[tokio::test]
    async fn a_reading_peer_gets_everything_in_order() {
        let (ours, theirs) = tokio::io::duplex(4096);
        let sender = Sender::spawn(ours);
        let mut reader = FrameReader::new(theirs);
        for round in 0..20u64 {
            for n in 0..50 {
                assert!(sender.send_bounded(ping(round * 50 + n), 64));
            }
            for n in 0..50 {
                match reader.read().await.expect("a message") {
                    Message::Ping { nonce } => assert_eq!(nonce, round * 50 + n),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        assert_eq!(sender.queued(), 0);
        assert!(!sender.is_closed());
    }
}
