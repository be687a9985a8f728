//! Connection halves. A [`FrameReader`] reads frames from a stream; a
//! [`Sender`] queues messages to a writer task that batches everything queued
//! into one `write` — so many pipelined requests cost one syscall, and no
//! sender ever waits on the socket.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

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

/// A handle to a connection's writer task. Cloning is cheap; the task ends
/// when every `Sender` is dropped or the socket fails.
#[derive(Clone)]
pub struct Sender {
    tx: mpsc::UnboundedSender<Message>,
}

impl Sender {
    /// Queue a message. Returns false if the connection is gone.
    pub fn send(&self, msg: Message) -> bool {
        self.tx.send(msg).is_ok()
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Start a writer task for `writer`.
    pub fn spawn<W: AsyncWrite + Unpin + Send + 'static>(writer: W) -> Sender {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(writer, rx));
        Sender { tx }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::UnboundedReceiver<Message>,
) {
    let mut out = Vec::with_capacity(64 << 10);
    while let Some(msg) = rx.recv().await {
        out.clear();
        let mut queue = Some(msg);
        // Batch whatever is queued, up to a bound, into one write.
        while let Some(msg) = queue.take() {
            if let Err(e) = encode_frame(&msg, &mut out) {
                tracing::error!("dropping unencodable message: {e}");
            }
            if out.len() < (4 << 20) {
                queue = rx.try_recv().ok();
            }
        }
        if let Err(e) = writer.write_all(&out).await {
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
