//! Shared test harness: an in-process server on a random TCP port and a Unix socket, a
//! minimal raw NBD client, and volume wrappers that delay or fail operations.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_nbd::proto::*;
use cairn_nbd::{NbdExport, NbdServer, ServerOptions};
use cairn_volume::{MemVolume, Volume, VolumeError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// A server listening on 127.0.0.1:random and on a Unix socket in a temporary directory.
pub struct TestServer<V: Volume> {
    pub server: Arc<NbdServer<V>>,
    pub tcp: SocketAddr,
    pub unix: PathBuf,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl<V: Volume> TestServer<V> {
    pub async fn start(exports: Vec<NbdExport<V>>) -> Self {
        let server = NbdServer::with_exports(exports, ServerOptions::default()).expect("server");
        let dir = tempfile::tempdir().expect("tempdir");
        let unix = dir.path().join("nbd.sock");
        let tcp_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind tcp");
        let tcp = tcp_listener.local_addr().expect("local addr");
        let unix_listener = UnixListener::bind(&unix).expect("bind unix");
        let tasks = vec![
            tokio::spawn(server.clone().serve_tcp(tcp_listener)),
            tokio::spawn(server.clone().serve_unix(unix_listener)),
        ];
        Self {
            server,
            tcp,
            unix,
            tasks,
            _dir: dir,
        }
    }

    /// Shuts the server down and checks both accept loops returned cleanly.
    pub async fn stop(mut self) {
        self.server.shutdown();
        for task in self.tasks.drain(..) {
            let result = tokio::time::timeout(IO_TIMEOUT, task).await;
            result
                .expect("serve loop did not stop")
                .expect("join")
                .expect("serve");
        }
    }

    pub fn unix_uri(&self, name: &str) -> String {
        format!("nbd+unix:///{name}?socket={}", self.unix.display())
    }

    pub fn tcp_uri(&self, name: &str) -> String {
        format!("nbd://{}/{name}", self.tcp)
    }
}

/// A single-export server on a fresh `MemVolume`.
pub async fn mem_server(name: &str, size: u64) -> (TestServer<MemVolume>, Arc<MemVolume>) {
    let volume = Arc::new(MemVolume::new(size));
    let export = NbdExport::new(name, volume.clone(), false).with_description("test disk");
    (TestServer::start(vec![export]).await, volume)
}

/// A volume whose reads at `gated_offset` wait until [`GatedVolume::open_gate`].
pub struct GatedVolume {
    pub inner: MemVolume,
    pub gated_offset: u64,
    gate: Semaphore,
}

impl GatedVolume {
    pub fn new(size: u64, gated_offset: u64) -> Self {
        Self {
            inner: MemVolume::new(size),
            gated_offset,
            gate: Semaphore::new(0),
        }
    }

    pub fn open_gate(&self) {
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }
}

impl Volume for GatedVolume {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    async fn read(&self, offset: u64, len: u64) -> cairn_volume::Result<Bytes> {
        if offset == self.gated_offset {
            let _permit = self
                .gate
                .acquire()
                .await
                .map_err(|e| VolumeError::Io(e.to_string()))?;
        }
        self.inner.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: Bytes) -> cairn_volume::Result<()> {
        self.inner.write(offset, data).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64) -> cairn_volume::Result<()> {
        self.inner.write_zeroes(offset, len).await
    }
    async fn discard(&self, offset: u64, len: u64) -> cairn_volume::Result<()> {
        self.inner.discard(offset, len).await
    }
    async fn flush(&self) -> cairn_volume::Result<()> {
        self.inner.flush().await
    }
}

/// A volume where every operation takes `delay` and the peak of concurrent operations is
/// recorded, standing in for a high-latency cluster image.
pub struct SlowVolume {
    pub inner: MemVolume,
    delay: Duration,
    in_flight: AtomicUsize,
    pub in_flight_peak: AtomicUsize,
}

impl SlowVolume {
    pub fn new(size: u64, delay: Duration) -> Self {
        Self {
            inner: MemVolume::new(size),
            delay,
            in_flight: AtomicUsize::new(0),
            in_flight_peak: AtomicUsize::new(0),
        }
    }

    async fn slow<T>(&self, op: impl std::future::Future<Output = T>) -> T {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.in_flight_peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        let result = op.await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

impl Volume for SlowVolume {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    async fn read(&self, offset: u64, len: u64) -> cairn_volume::Result<Bytes> {
        self.slow(self.inner.read(offset, len)).await
    }
    async fn write(&self, offset: u64, data: Bytes) -> cairn_volume::Result<()> {
        self.slow(self.inner.write(offset, data)).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64) -> cairn_volume::Result<()> {
        self.slow(self.inner.write_zeroes(offset, len)).await
    }
    async fn discard(&self, offset: u64, len: u64) -> cairn_volume::Result<()> {
        self.slow(self.inner.discard(offset, len)).await
    }
    async fn flush(&self) -> cairn_volume::Result<()> {
        self.slow(self.inner.flush()).await
    }
}

/// A volume that fails reads at chosen offsets with chosen errors, and can return short reads.
pub struct FaultyVolume {
    pub inner: MemVolume,
    pub faults: HashMap<u64, VolumeError>,
    pub short_read_offset: u64,
}

impl Volume for FaultyVolume {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    async fn read(&self, offset: u64, len: u64) -> cairn_volume::Result<Bytes> {
        if let Some(error) = self.faults.get(&offset) {
            return Err(error.clone());
        }
        let data = self.inner.read(offset, len).await?;
        if offset == self.short_read_offset {
            return Ok(data.slice(..data.len() / 2));
        }
        Ok(data)
    }
    async fn write(&self, offset: u64, data: Bytes) -> cairn_volume::Result<()> {
        if let Some(error) = self.faults.get(&offset) {
            return Err(error.clone());
        }
        self.inner.write(offset, data).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64) -> cairn_volume::Result<()> {
        self.inner.write_zeroes(offset, len).await
    }
    async fn discard(&self, offset: u64, len: u64) -> cairn_volume::Result<()> {
        self.inner.discard(offset, len).await
    }
    async fn flush(&self) -> cairn_volume::Result<()> {
        self.inner.flush().await
    }
}

/// What `NBD_OPT_GO` reported.
#[derive(Debug, Default, Clone)]
pub struct ExportInfo {
    pub size: u64,
    pub flags: u16,
    pub block_sizes: Option<(u32, u32, u32)>,
    pub name: Option<String>,
    pub description: Option<String>,
}

/// A minimal NBD client speaking raw bytes, for driving the server into corners real
/// clients avoid.
pub struct RawClient<S> {
    pub stream: S,
    /// Cookies of reads in flight, with their lengths, to know which replies carry data.
    reads: HashMap<u64, u32>,
}

pub async fn tcp_stream(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).await.expect("connect tcp");
    stream.set_nodelay(true).expect("nodelay");
    stream
}

pub async fn unix_stream(path: &PathBuf) -> UnixStream {
    UnixStream::connect(path).await.expect("connect unix")
}

impl<S: AsyncRead + AsyncWrite + Unpin> RawClient<S> {
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            reads: HashMap::new(),
        }
    }

    /// Reads the greeting and returns the handshake flags.
    pub async fn greeting(&mut self) -> u16 {
        let mut greeting = [0u8; GREETING_BYTES];
        self.read_exact(&mut greeting).await;
        assert_eq!(&greeting[0..8], b"NBDMAGIC");
        assert_eq!(&greeting[8..16], b"IHAVEOPT");
        u16::from_be_bytes([greeting[16], greeting[17]])
    }

    /// Greeting plus client flags `FIXED_NEWSTYLE | NO_ZEROES`.
    pub async fn start(&mut self) {
        let flags = self.greeting().await;
        assert_eq!(flags, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        self.write(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
            .await;
    }

    pub async fn send_option(&mut self, option: u32, data: &[u8]) {
        let header = OptionHeader {
            option,
            length: data.len() as u32,
        };
        self.write(&header.encode()).await;
        self.write(data).await;
    }

    pub async fn option_reply(&mut self) -> (OptionReplyHeader, Vec<u8>) {
        let mut bytes = [0u8; OptionReplyHeader::BYTES];
        self.read_exact(&mut bytes).await;
        let header = OptionReplyHeader::decode(&bytes).expect("option reply magic");
        let mut data = vec![0u8; header.length as usize];
        self.read_exact(&mut data).await;
        (header, data)
    }

    /// Sends `NBD_OPT_INFO` or `NBD_OPT_GO`; returns the information, or the error reply type.
    pub async fn info(
        &mut self,
        option: u32,
        name: &str,
        requests: &[u16],
    ) -> Result<ExportInfo, u32> {
        let request = InfoRequest {
            name: name.as_bytes().to_vec(),
            info_types: requests.to_vec(),
        };
        self.send_option(option, &request.encode()).await;
        let mut info = ExportInfo::default();
        loop {
            let (header, data) = self.option_reply().await;
            assert_eq!(header.option, option);
            match header.reply_type {
                REP_ACK => return Ok(info),
                REP_INFO => parse_info(&mut info, &data),
                error => {
                    assert!(error & REP_FLAG_ERROR != 0, "unexpected reply {error}");
                    return Err(error);
                }
            }
        }
    }

    /// Full handshake with `NBD_OPT_GO`.
    pub async fn connect(stream: S, name: &str) -> (Self, ExportInfo) {
        let mut client = Self::new(stream);
        client.start().await;
        let info = client
            .info(OPT_GO, name, &[INFO_BLOCK_SIZE])
            .await
            .expect("GO");
        (client, info)
    }

    pub async fn send_request(
        &mut self,
        command: u16,
        flags: u16,
        cookie: u64,
        offset: u64,
        length: u32,
    ) {
        let header = RequestHeader {
            flags,
            command,
            cookie,
            offset,
            length,
        };
        if command == CMD_READ {
            self.reads.insert(cookie, length);
        }
        self.write(&header.encode()).await;
    }

    pub async fn send_write(&mut self, cookie: u64, offset: u64, data: &[u8]) {
        self.send_request(CMD_WRITE, 0, cookie, offset, data.len() as u32)
            .await;
        self.write(data).await;
    }

    /// Reads one reply; returns (cookie, error, data of a successful read).
    pub async fn reply(&mut self) -> (u64, u32, Vec<u8>) {
        let mut bytes = [0u8; SimpleReplyHeader::BYTES];
        self.read_exact(&mut bytes).await;
        let header = SimpleReplyHeader::decode(&bytes).expect("reply magic");
        let length = self.reads.remove(&header.cookie).unwrap_or(0);
        let mut data = Vec::new();
        if header.error == 0 && length > 0 {
            data = vec![0u8; length as usize];
            self.read_exact(&mut data).await;
        }
        (header.cookie, header.error, data)
    }

    /// One request, one reply.
    pub async fn call(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
    ) -> (u32, Vec<u8>) {
        let cookie = offset.wrapping_add(0xc0de_0000);
        self.send_request(command, flags, cookie, offset, length)
            .await;
        let (got, error, data) = self.reply().await;
        assert_eq!(got, cookie);
        (error, data)
    }

    pub async fn write_and_wait(&mut self, offset: u64, data: &[u8]) -> u32 {
        self.send_write(77, offset, data).await;
        let (cookie, error, _) = self.reply().await;
        assert_eq!(cookie, 77);
        error
    }

    /// True once the server has closed the connection (EOF or reset).
    pub async fn closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match tokio::time::timeout(IO_TIMEOUT, self.stream.read(&mut byte)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(_)) => false,
            Err(_) => panic!("server neither answered nor closed"),
        }
    }

    pub async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write to server");
    }

    pub async fn read_exact(&mut self, buffer: &mut [u8]) {
        tokio::time::timeout(IO_TIMEOUT, self.stream.read_exact(buffer))
            .await
            .expect("timed out waiting for server")
            .expect("read from server");
    }
}

fn parse_info(info: &mut ExportInfo, data: &[u8]) {
    let info_type = u16::from_be_bytes([data[0], data[1]]);
    let body = &data[2..];
    match info_type {
        INFO_EXPORT => {
            assert_eq!(body.len(), 10);
            info.size = u64::from_be_bytes(body[0..8].try_into().unwrap());
            info.flags = u16::from_be_bytes(body[8..10].try_into().unwrap());
        }
        INFO_BLOCK_SIZE => {
            assert_eq!(body.len(), 12);
            let word = |i: usize| u32::from_be_bytes(body[i..i + 4].try_into().unwrap());
            info.block_sizes = Some((word(0), word(4), word(8)));
        }
        INFO_NAME => info.name = Some(String::from_utf8(body.to_vec()).unwrap()),
        INFO_DESCRIPTION => info.description = Some(String::from_utf8(body.to_vec()).unwrap()),
        other => panic!("unknown info type {other}"),
    }
}

/// Deterministic test data.
pub fn pattern(length: usize, seed: u8) -> Vec<u8> {
    (0..length)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
