//! Connection halves. A [`FrameReader`] reads frames from a stream; a
//! [`Sender`] queues messages to a writer task that batches everything queued
//! into one vectored `write` — so many pipelined requests cost one syscall,
//! and no sender ever waits on the socket.
//!
//! Object data is never copied on its way through a connection: the writer
//! hands each frame's data segment to the socket by reference, and the
//! reader reads frames into a shared buffer and decodes their payloads as
//! slices of it (see `frame`). A payload so decoded keeps the read buffer
//! it came from (at most [`READ_CHUNK`] bytes, or its own frame when
//! larger) alive for as long as it lives.

use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};

use crate::frame::{decode_body, decode_header, encode_frame_parts, WireError, FRAME_HEADER_LEN};
use crate::msg::Message;

/// Bytes a reader asks the socket for at once when its buffer runs low,
/// so that small frames arriving together cost one read.
pub const READ_CHUNK: usize = 64 << 10;
/// A read buffer this large, once empty, is dropped for a fresh one.
const READ_BUF_KEEP: usize = 1 << 20;
/// Payloads up to this size are copied into the send buffer instead of
/// sent by reference: a separate iovec costs more than the copy.
const COPY_PAYLOAD_MAX: usize = 512;
/// iovecs handed to one `writev` (Linux's `IOV_MAX`).
const IOVECS_MAX: usize = 1024;
/// Bytes batched into one write, at most (one message may exceed it).
const BATCH_BYTES: usize = 4 << 20;

/// Reads frames; any error ends the connection.
pub struct FrameReader<R> {
    inner: R,
    /// Bytes read and not yet split off as frames.
    buf: BytesMut,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: BytesMut::new(),
        }
    }

    /// The next message, or [`WireError::Closed`] at a clean end of stream.
    pub async fn read(&mut self) -> Result<Message, WireError> {
        if self.buf.is_empty() && self.buf.capacity() > READ_BUF_KEEP {
            self.buf = BytesMut::new();
        }
        self.fill(FRAME_HEADER_LEN).await.map_err(|e| match e {
            WireError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => WireError::Closed,
            e => e,
        })?;
        let mut header = [0u8; FRAME_HEADER_LEN];
        header.copy_from_slice(&self.buf[..FRAME_HEADER_LEN]);
        let header = decode_header(&header)?;
        let total = FRAME_HEADER_LEN + header.body_len();
        self.fill(total).await?;
        let body = self
            .buf
            .split_to(total)
            .split_off(FRAME_HEADER_LEN)
            .freeze();
        decode_body(&header, body)
    }

    /// Read until the buffer holds at least `need` bytes.
    async fn fill(&mut self, need: usize) -> Result<(), WireError> {
        while self.buf.len() < need {
            self.buf.reserve((need - self.buf.len()).max(READ_CHUNK));
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
        Ok(())
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

/// What the writer sends next: a range of its send buffer, or a payload
/// by reference.
enum Piece {
    Out(std::ops::Range<usize>),
    Data(Bytes),
}

/// One batch of frames: headers, fronts and small payloads in `out`,
/// larger payloads by reference, in wire order.
#[derive(Default)]
struct Batch {
    out: Vec<u8>,
    pieces: Vec<Piece>,
    /// Start of the part of `out` not yet in `pieces`.
    pending: usize,
    bytes: usize,
}

impl Batch {
    fn add(&mut self, msg: &Message) {
        let payloads = match encode_frame_parts(msg, &mut self.out) {
            Ok(payloads) => payloads,
            Err(e) => {
                tracing::error!("dropping unencodable message: {e}");
                return;
            }
        };
        for payload in payloads {
            self.bytes += payload.len();
            if payload.len() <= COPY_PAYLOAD_MAX {
                self.out.extend_from_slice(&payload);
            } else {
                self.seal();
                self.pieces.push(Piece::Data(payload));
            }
        }
    }

    /// Close the current range of `out`.
    fn seal(&mut self) {
        if self.pending < self.out.len() {
            self.pieces.push(Piece::Out(self.pending..self.out.len()));
            self.pending = self.out.len();
        }
    }

    fn len(&self) -> usize {
        self.out.len() + self.bytes
    }

    fn clear(&mut self) {
        self.out.clear();
        self.pieces.clear();
        self.pending = 0;
        self.bytes = 0;
        if self.out.capacity() > (8 << 20) {
            self.out = Vec::with_capacity(64 << 10);
        }
    }

    async fn write_to<W: AsyncWrite + Unpin>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.seal();
        let out = &self.out;
        let mut slices: Vec<IoSlice<'_>> = self
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Out(range) => IoSlice::new(&out[range.clone()]),
                Piece::Data(data) => IoSlice::new(data),
            })
            .collect();
        let mut left = &mut slices[..];
        while !left.is_empty() {
            let n = writer
                .write_vectored(&left[..left.len().min(IOVECS_MAX)])
                .await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut left, n);
        }
        Ok(())
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::UnboundedReceiver<Message>,
    shared: Arc<Shared>,
) {
    let mut batch = Batch {
        out: Vec::with_capacity(64 << 10),
        ..Batch::default()
    };
    // The queue overflows only while the writer is behind, so only the
    // socket write waits for `close`; an idle writer sees the flag after.
    while let Some(msg) = rx.recv().await {
        if shared.overflowed.load(Ordering::Relaxed) {
            break;
        }
        batch.clear();
        let mut taken = 0;
        let mut queue = Some(msg);
        // Batch whatever is queued, up to a bound, into one write.
        while let Some(msg) = queue.take() {
            taken += 1;
            batch.add(&msg);
            if batch.len() < BATCH_BYTES {
                queue = rx.try_recv().ok();
            }
        }
        shared.queued.fetch_sub(taken, Ordering::Relaxed);
        // Biased: a write that completes at once never registers a waiter.
        let written = tokio::select! {
            biased;
            r = batch.write_to(&mut writer) => r,
            _ = shared.close.notified() => break,
        };
        if let Err(e) = written {
            tracing::debug!("connection write failed: {e}");
            return;
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

    fn write(n: u64, len: usize) -> Message {
        use cairn_types::{PgId, ReqId};
        let data: Vec<u8> = (0..len).map(|i| (i as u64 * 31 + n) as u8).collect();
        Message::OsdOp(crate::msg::OsdOp {
            tid: n,
            reqid: ReqId { client: 1, tid: n },
            epoch: 1,
            pg: PgId::new(1, 0),
            oid: format!("obj{n}"),
            ops: vec![crate::msg::ObjOp::Write {
                offset: 0,
                data: Bytes::from(data),
            }],
            ignore_overlay: false,
        })
    }

    /// Frames with payloads of every size class (none, copied, by
    /// reference, larger than a read chunk), through a pipe small enough
    /// that writes and reads stop mid-frame, arrive whole and in order.
    #[tokio::test]
    async fn payloads_of_every_size_survive_partial_writes_and_reads() {
        let (ours, theirs) = tokio::io::duplex(1000);
        let sender = Sender::spawn(ours);
        let mut reader = FrameReader::new(theirs);
        let sizes = [
            0,
            1,
            COPY_PAYLOAD_MAX,
            COPY_PAYLOAD_MAX + 1,
            4096,
            READ_CHUNK + 3,
            1 << 20,
        ];
        let sent: Vec<Message> = (0..40u64)
            .map(|n| match n % 8 {
                7 => ping(n),
                k => write(n, sizes[k as usize]),
            })
            .collect();
        let expect = sent.clone();
        let feeder = tokio::spawn(async move {
            for msg in sent {
                assert!(sender.send(msg));
                tokio::task::yield_now().await;
            }
            sender
        });
        for want in expect {
            let got = reader.read().await.expect("a message");
            assert_eq!(got, want);
        }
        drop(feeder.await.expect("feeder"));
        assert!(matches!(reader.read().await, Err(WireError::Closed)));
    }

    /// A frame's payloads come out of the reader as slices of the buffer
    /// the frame was read into, not copies: two payloads of one frame sit
    /// as far apart in memory as they do in the frame.
    #[tokio::test]
    async fn payloads_are_read_without_a_copy() {
        use cairn_types::{PgId, ReqId};
        let (a, b): (Vec<u8>, Vec<u8>) = (
            (0..4001u32).map(|i| (i * 7 + 1) as u8).collect(),
            (0..2999u32).map(|i| (i * 13 + 5) as u8).collect(),
        );
        let msg = Message::OsdOp(crate::msg::OsdOp {
            tid: 1,
            reqid: ReqId { client: 1, tid: 1 },
            epoch: 1,
            pg: PgId::new(1, 0),
            oid: "obj".into(),
            ops: vec![
                crate::msg::ObjOp::Write {
                    offset: 0,
                    data: Bytes::from(a.clone()),
                },
                crate::msg::ObjOp::Write {
                    offset: 8192,
                    data: Bytes::from(b.clone()),
                },
            ],
            ignore_overlay: false,
        });
        let mut frame = Vec::new();
        crate::frame::encode_frame(&msg, &mut frame).unwrap();
        let at = |p: &[u8]| {
            frame
                .windows(p.len())
                .position(|w| w == p)
                .expect("the payload is in the frame")
        };
        let apart = at(&b) - at(&a);
        let mut reader = FrameReader::new(&frame[..]);
        let Message::OsdOp(op) = reader.read().await.expect("a message") else {
            panic!("not an op");
        };
        let [crate::msg::ObjOp::Write { data: da, .. }, crate::msg::ObjOp::Write { data: db, .. }] =
            op.ops.as_slice()
        else {
            panic!("not two writes: {:?}", op.ops);
        };
        assert_eq!((&da[..], &db[..]), (&a[..], &b[..]));
        assert_eq!(
            db.as_ptr() as usize - da.as_ptr() as usize,
            apart,
            "the payloads were copied out of the read buffer"
        );
    }

    /// A stream that ends inside a frame is an error, not a clean close;
    /// one that ends between frames is a clean close.
    #[tokio::test]
    async fn a_frame_cut_short_is_an_error() {
        let mut frame = Vec::new();
        crate::frame::encode_frame(&write(1, 4096), &mut frame).unwrap();
        for cut in [FRAME_HEADER_LEN + 10, frame.len() - 1] {
            let (mut ours, theirs) = tokio::io::duplex(1 << 16);
            ours.write_all(&frame[..cut]).await.unwrap();
            drop(ours);
            let mut reader = FrameReader::new(theirs);
            match reader.read().await {
                Err(WireError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
    }
}
