//! Interoperability of `cairn nbd` with real NBD clients (libnbd's `nbdinfo`, `nbdcopy`
//! and `nbdsh`, QEMU's `qemu-io` and `qemu-img`, fio's `nbd` engine) and with a hand-rolled
//! client that breaks the protocol, all against a real cluster of `cairn` processes.
//!
//! The client tools are required: a missing one fails the test with the Debian package to
//! install (`libnbd-bin`, `python3-libnbd`, `qemu-utils`, `fio`).

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use cairn_client::Image;
use cairn_volume::Volume;
use common::nbd::*;
use common::{pattern, TestCluster};

const MIB: u64 = 1 << 20;
/// Size of every test image.
const IMAGE_BYTES: u64 = 256 * MIB;
/// Longest wait for one reply on a raw connection.
const RAW_IO_TIMEOUT: Duration = Duration::from_secs(60);

/// A cluster of 3 OSDs with a 256 MiB image `rbd/NAME`.
fn cluster_with_image(name: &str) -> TestCluster {
    let cluster = TestCluster::up(3);
    let spec = format!("rbd/{name}");
    cluster.ok(&["image", "create", &spec, "--size", "256M"]);
    cluster
}

fn unix_socket(cluster: &TestCluster, file: &str) -> Listen {
    Listen::Unix(cluster.path().join(file))
}

// ---------------------------------------------------------------------------------------
// 1. nbdinfo
// ---------------------------------------------------------------------------------------

#[test]
fn nbdinfo_shows_the_export_name_size_and_flags() {
    let cluster = cluster_with_image("info");
    let gateway = Gateway::start(&cluster, "info", unix_socket(&cluster, "nbd.sock"), &[]);

    let text = NBDINFO.ok(&["--json", gateway.uri.as_str()]);
    let info: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("nbdinfo --json: {e}:\n{text}"));
    assert_eq!(info["protocol"], "newstyle-fixed", "{info:#}");
    let exports = info["exports"].as_array().expect("exports");
    assert_eq!(exports.len(), 1, "{info:#}");
    let export = &exports[0];
    assert_eq!(export["export-name"], "info", "{info:#}");
    assert_eq!(export["export-size"], IMAGE_BYTES, "{info:#}");
    assert_eq!(export["is_read_only"], false, "{info:#}");
    assert_eq!(export["can_flush"], true, "{info:#}");
    assert_eq!(export["can_multi_conn"], true, "{info:#}");
    assert_eq!(export["block_size_minimum"], 512, "{info:#}");

    let size = NBDINFO.ok(&["--size", gateway.uri.as_str()]);
    assert_eq!(size.trim(), IMAGE_BYTES.to_string());

    // The export list (NBD_OPT_LIST) names the one export.
    let list_uri = format!("nbd+unix:///?socket={}", gateway.socket().display());
    let text = NBDINFO.ok(&["--list", "--json", list_uri.as_str()]);
    let list: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("nbdinfo --list: {e}:\n{text}"));
    let names: Vec<&str> = list["exports"]
        .as_array()
        .expect("exports")
        .iter()
        .filter_map(|e| e["export-name"].as_str())
        .collect();
    assert_eq!(names, ["info"], "{list:#}");

    // A name the server does not have is refused.
    let wrong = format!("nbd+unix:///nosuch?socket={}", gateway.socket().display());
    let output = NBDINFO.run(&[wrong.as_str()]);
    assert!(
        !output.status.success(),
        "nbdinfo on an unknown export succeeded:\n{}",
        both(&output)
    );

    // A read-only gateway says so, serves reads, and refuses writes with EPERM.
    let read_only = Gateway::start(
        &cluster,
        "info",
        unix_socket(&cluster, "ro.sock"),
        &["--read-only"],
    );
    let text = NBDINFO.ok(&["--json", read_only.uri.as_str()]);
    let info: serde_json::Value = serde_json::from_str(&text).expect("nbdinfo --json");
    assert_eq!(info["exports"][0]["is_read_only"], true, "{info:#}");
    let uri = read_only.uri.as_str();
    QEMU_IO.ok(&["-r", "-f", "raw", uri, "-c", "read -P 0 0 64k"]);
    // qemu opens read-write by default, which a read-only export refuses.
    let output = QEMU_IO.run(&["-f", "raw", uri, "-c", "write -P 0x11 0 4k"]);
    assert!(
        !output.status.success(),
        "qemu-io wrote through a read-only export:\n{}",
        both(&output)
    );
    let mut raw = RawNbd::connect(read_only.socket(), "info");
    assert_eq!(raw.write(0, &[0x11; 4096]), Err(EPERM), "write");
    assert_eq!(raw.read(0, 4096), Ok(vec![0; 4096]), "read after EPERM");
}

// ---------------------------------------------------------------------------------------
// 2. qemu-io and qemu-img
// ---------------------------------------------------------------------------------------

/// Writes patterns (one across the object boundary at 4 MiB), then checks them from a new
/// qemu-io process, and zeroes a range across the boundary.
fn qemu_io_round_trip(uri: &str) {
    qemu_io(
        uri,
        &["write -P 0xab 0 1M", "write -P 0xcd 4193792 8192", "flush"],
    );
    let text = qemu_io(uri, &["read -P 0xab 0 1M", "read -P 0xcd 4193792 8192"]);
    assert!(
        text.contains("read 1048576/1048576 bytes at offset 0"),
        "{text}"
    );
    assert!(
        text.contains("read 8192/8192 bytes at offset 4193792"),
        "{text}"
    );
    // Never-written space reads as zeros.
    qemu_io(uri, &["read -P 0 1M 1M", "read -P 0 200M 64k"]);
    // WRITE_ZEROES across the boundary, leaving the bytes around it alone.
    qemu_io(uri, &["write -z 4193792 1024"]);
    qemu_io(
        uri,
        &[
            "read -P 0 4193792 1024",
            "read -P 0xcd 4194816 7168",
            "read -P 0xab 1047552 1024",
        ],
    );
}

#[test]
fn qemu_io_patterns_over_unix_socket_and_tcp() {
    // Two gateways write the one image in turn, both up: that needs the
    // exclusive lock off (with it, the second waits for the first to go).
    let cluster = TestCluster::up(3);
    cluster.ok(&[
        "image",
        "create",
        "rbd/qemu",
        "--size",
        "256M",
        "--image-feature",
        "none",
    ]);

    let unix = Gateway::start(&cluster, "qemu", unix_socket(&cluster, "nbd.sock"), &[]);
    qemu_io_round_trip(&unix.uri);
    let text = QEMU_IMG.ok(&["info", unix.uri.as_str()]);
    assert!(
        text.contains("virtual size: 256 MiB (268435456 bytes)"),
        "qemu-img info:\n{text}"
    );
    let text = QEMU_IMG.ok(&["info", "--output=json", unix.uri.as_str()]);
    let info: serde_json::Value = serde_json::from_str(&text).expect("qemu-img json");
    assert_eq!(info["virtual-size"], IMAGE_BYTES, "{info:#}");

    // The same image over TCP shows what was written over the socket, then takes its own
    // round trip.
    let tcp = Gateway::start(&cluster, "qemu", Listen::Tcp, &[]);
    assert!(tcp.uri.starts_with("nbd://127.0.0.1:"), "{}", tcp.uri);
    qemu_io(
        &tcp.uri,
        &["read -P 0xab 0 1023k", "read -P 0xcd 4194816 4096"],
    );
    qemu_io(
        &tcp.uri,
        &["write -P 0x5a 100M 1M", "write -P 0x5b 113242112 8192"],
    );
    qemu_io(
        &tcp.uri,
        &["read -P 0x5a 100M 1M", "read -P 0x5b 113242112 8192"],
    );
    // ... and the Unix-socket gateway sees the TCP writes.
    qemu_io(
        &unix.uri,
        &["read -P 0x5a 100M 1M", "read -P 0x5b 113242112 8192"],
    );
    let text = QEMU_IMG.ok(&["info", tcp.uri.as_str()]);
    assert!(
        text.contains("virtual size: 256 MiB (268435456 bytes)"),
        "qemu-img info:\n{text}"
    );
}

// ---------------------------------------------------------------------------------------
// 3. nbdcopy round trip
// ---------------------------------------------------------------------------------------

/// Copies the whole export out with nbdcopy and returns its bytes.
fn copy_out(uri: &str, file: &Path) -> Vec<u8> {
    let _ = std::fs::remove_file(file);
    NBDCOPY.ok(&[uri, file.to_str().expect("utf-8 path")]);
    std::fs::read(file).expect("read copied file")
}

/// Panics, naming the first differing offset, unless `actual` is `expected` followed by
/// zeros up to the image size.
fn assert_image_content(actual: &[u8], expected: &[u8], what: &str) {
    assert_eq!(actual.len() as u64, IMAGE_BYTES, "{what}: wrong length");
    if let Some(at) = (0..expected.len()).find(|&i| actual[i] != expected[i]) {
        panic!(
            "{what}: byte {at} is {:#04x}, expected {:#04x}",
            actual[at], expected[at]
        );
    }
    if let Some(at) = actual[expected.len()..].iter().position(|&b| b != 0) {
        panic!("{what}: byte {} is not zero", expected.len() + at);
    }
}

#[test]
fn nbdcopy_round_trip_survives_a_gateway_restart() {
    let cluster = cluster_with_image("copy");
    let mut gateway = Gateway::start(&cluster, "copy", unix_socket(&cluster, "nbd.sock"), &[]);
    let data_bytes = 64 * MIB as usize;
    let data = pattern(0xC0FFEE, data_bytes);
    let input = cluster.path().join("copy-in.bin");
    std::fs::write(&input, &data).expect("write input");

    NBDCOPY.ok(&[input.to_str().expect("utf-8 path"), gateway.uri.as_str()]);
    let out = cluster.path().join("copy-out.bin");
    let copied = copy_out(&gateway.uri, &out);
    assert_image_content(&copied, &data, "nbdcopy out");
    drop(copied);

    // The data is in the cluster: read it with the client library.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = cluster.client().await;
        let image = Image::open(&client, "rbd", "copy").await.expect("open");
        assert_eq!(image.size(), IMAGE_BYTES);
        let chunk = 4 * MIB as usize;
        for offset in (0..data_bytes).step_by(chunk) {
            let back = image
                .read(offset as u64, chunk as u64)
                .await
                .expect("read through the client library");
            if back[..] != data[offset..offset + chunk] {
                let at = (0..chunk).find(|&i| back[i] != data[offset + i]).unwrap();
                panic!("client library read differs at byte {}", offset + at);
            }
        }
        let tail = image
            .read(IMAGE_BYTES - MIB, MIB)
            .await
            .expect("read the end");
        assert!(tail.iter().all(|&b| b == 0), "unwritten end is not zero");
    });

    // A fresh gateway process serves the same bytes.
    gateway.kill();
    drop(gateway);
    let gateway = Gateway::start(&cluster, "copy", unix_socket(&cluster, "nbd.sock"), &[]);
    let copied = copy_out(&gateway.uri, &out);
    assert_image_content(&copied, &data, "nbdcopy out after a gateway restart");
}

// ---------------------------------------------------------------------------------------
// 4. fio with the nbd engine
// ---------------------------------------------------------------------------------------

#[test]
fn fio_verified_random_writes_persist_across_connections() {
    let cluster = cluster_with_image("fio");
    let gateway = Gateway::start(&cluster, "fio", unix_socket(&cluster, "nbd.sock"), &[]);
    let uri = gateway.uri.as_str();

    // Random 4k writes over [0, 64M), each block exactly once (the random map stays on: with
    // `norandommap` and iodepth > 1 fio may overwrite a block while an earlier write to it is
    // still in flight, and NBD does not order concurrent requests), then read back and
    // verified on the same connection.
    let text = assert_fio_ok(
        uri,
        "write",
        &[
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=32",
            "--size=64M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--randrepeat=0",
        ],
    );
    assert!(text.contains("connected to NBD server"), "{text}");

    // A new connection (and process) reads every block and checks its checksum and offset.
    assert_fio_ok(
        uri,
        "reread",
        &[
            "--rw=read",
            "--bs=4k",
            "--iodepth=16",
            "--size=64M",
            "--verify=crc32c",
            "--verify_fatal=1",
        ],
    );

    // The check has teeth: the same verification over never-written space fails.
    let (ok, text) = fio(
        uri,
        "control",
        &[
            "--rw=read",
            "--bs=4k",
            "--offset=64M",
            "--size=1M",
            "--verify=crc32c",
            "--verify_fatal=1",
        ],
    );
    assert!(
        !ok && text.contains("verify:"),
        "verifying unwritten space should fail:\n{text}"
    );

    // Two jobs (two connections) doing mixed random reads and writes on their own halves
    // of [128M, 192M), verified at the end.
    let text = assert_fio_ok(
        uri,
        "mixed",
        &[
            "--rw=randrw",
            "--rwmixread=50",
            "--bs=4k",
            "--iodepth=16",
            "--numjobs=2",
            "--offset=128M",
            "--offset_increment=32M",
            "--size=32M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--randrepeat=0",
            "--group_reporting",
        ],
    );
    assert_eq!(
        text.matches("connected to NBD server").count(),
        2,
        "expected two connections:\n{text}"
    );
}

// ---------------------------------------------------------------------------------------
// 5. nbdsh (libnbd's Python shell)
// ---------------------------------------------------------------------------------------

/// A script for nbdsh (`h` is the connected handle): FUA writes across the
/// object boundary at 4 MiB, pipelined reads completing out of order,
/// TRIM and WRITE_ZEROES to zeros, FLUSH, and a clean disconnect.
const NBDSH_SCRIPT: &str = r#"
boundary = 4 * 1024 * 1024
assert h.get_size() == 256 * 1024 * 1024
assert h.can_flush() and h.can_fua() and h.can_trim() and h.can_zero()
assert h.can_multi_conn() and not h.is_read_only()
blocks = [bytes([i + 1]) * 4096 for i in range(32)]
start = boundary - 16 * 4096
for i, b in enumerate(blocks):
    h.pwrite(b, start + i * 4096, nbd.CMD_FLAG_FUA if i % 2 else 0)
bufs = [nbd.Buffer(4096) for _ in blocks]
cookies = [h.aio_pread(buf, start + i * 4096) for i, buf in enumerate(bufs)]
assert h.aio_in_flight() > 0
while h.aio_in_flight() > 0:
    h.poll(-1)
for c in cookies:
    assert h.aio_command_completed(c)
for i, buf in enumerate(bufs):
    assert buf.to_bytearray() == blocks[i], "block %d" % i
h.trim(2 * 4096, boundary - 4096)
h.zero(4096, boundary + 4096, nbd.CMD_FLAG_FUA)
h.flush()
assert h.pread(3 * 4096, boundary - 4096) == bytes(3 * 4096)
assert h.pread(4096, boundary - 8192) == blocks[14]
assert h.pread(4096, boundary + 8192) == blocks[18]
h.shutdown()
print("nbdsh script ok")
"#;

#[test]
fn nbdsh_script_drives_every_command() {
    let cluster = cluster_with_image("sh");
    let gateway = Gateway::start(&cluster, "sh", unix_socket(&cluster, "nbd.sock"), &[]);
    let text = NBDSH.ok(&["-u", gateway.uri.as_str(), "-c", NBDSH_SCRIPT]);
    assert!(text.contains("nbdsh script ok"), "{text}");
    // What nbdsh wrote is what qemu-io reads, from another process.
    qemu_io(
        &gateway.uri,
        &[
            "read -P 0x0f 4186112 4096",
            "read -P 0 4190208 12288",
            "read -P 0x13 4202496 4096",
        ],
    );
}

// ---------------------------------------------------------------------------------------
// 6. Misbehaving clients, with a hand-rolled NBD client.
// ---------------------------------------------------------------------------------------

const OPTION_MAGIC: u64 = 0x4948_4156_454f_5054; // "IHAVEOPT"
const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const INFO_EXPORT: u16 = 0;
const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_FLUSH: u16 = 3;
const EPERM: u32 = 1;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;

/// A raw NBD connection in the transmission phase.
struct RawNbd {
    stream: UnixStream,
    size: u64,
    next_cookie: u64,
}

impl RawNbd {
    /// Connects and negotiates with `NBD_OPT_GO` for `name`.
    fn connect(socket: &Path, name: &str) -> RawNbd {
        let mut stream = UnixStream::connect(socket).expect("connect");
        stream
            .set_read_timeout(Some(RAW_IO_TIMEOUT))
            .expect("timeout");
        let mut greeting = [0u8; 18];
        stream.read_exact(&mut greeting).expect("greeting");
        assert_eq!(greeting[..8], NBD_MAGIC.to_be_bytes(), "NBDMAGIC");
        assert_eq!(greeting[8..16], OPTION_MAGIC.to_be_bytes(), "IHAVEOPT");
        let handshake_flags = u16::from_be_bytes([greeting[16], greeting[17]]);
        assert!(handshake_flags & 1 != 0, "server is not fixed newstyle");
        // Client flags: FIXED_NEWSTYLE | NO_ZEROES.
        stream.write_all(&3u32.to_be_bytes()).expect("flags");
        let mut data = Vec::new();
        data.extend_from_slice(&(name.len() as u32).to_be_bytes());
        data.extend_from_slice(name.as_bytes());
        data.extend_from_slice(&0u16.to_be_bytes());
        let mut option = Vec::new();
        option.extend_from_slice(&OPTION_MAGIC.to_be_bytes());
        option.extend_from_slice(&OPT_GO.to_be_bytes());
        option.extend_from_slice(&(data.len() as u32).to_be_bytes());
        option.extend_from_slice(&data);
        stream.write_all(&option).expect("NBD_OPT_GO");
        let mut size = None;
        loop {
            let mut header = [0u8; 20];
            stream.read_exact(&mut header).expect("option reply");
            assert_eq!(header[..8], OPTION_REPLY_MAGIC.to_be_bytes());
            let reply_type = u32::from_be_bytes(header[12..16].try_into().unwrap());
            let length = u32::from_be_bytes(header[16..20].try_into().unwrap());
            let mut body = vec![0u8; length as usize];
            stream.read_exact(&mut body).expect("option reply data");
            match reply_type {
                REP_ACK => break,
                REP_INFO if body[..2] == INFO_EXPORT.to_be_bytes() => {
                    size = Some(u64::from_be_bytes(body[2..10].try_into().unwrap()));
                }
                REP_INFO => {}
                other => panic!(
                    "NBD_OPT_GO answered with {other:#x}: {}",
                    String::from_utf8_lossy(&body)
                ),
            }
        }
        RawNbd {
            stream,
            size: size.expect("NBD_INFO_EXPORT"),
            next_cookie: 1,
        }
    }

    fn send(&mut self, command: u16, offset: u64, length: u32, payload: &[u8]) -> u64 {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let mut request = Vec::with_capacity(28 + payload.len());
        request.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        request.extend_from_slice(&0u16.to_be_bytes()); // flags
        request.extend_from_slice(&command.to_be_bytes());
        request.extend_from_slice(&cookie.to_be_bytes());
        request.extend_from_slice(&offset.to_be_bytes());
        request.extend_from_slice(&length.to_be_bytes());
        request.extend_from_slice(payload);
        self.stream.write_all(&request).expect("send request");
        cookie
    }

    /// Reads a simple reply to `cookie` (requests here are sent one at a time); returns its
    /// error value.
    fn reply(&mut self, cookie: u64) -> u32 {
        let mut header = [0u8; 16];
        self.stream.read_exact(&mut header).expect("reply header");
        assert_eq!(header[..4], SIMPLE_REPLY_MAGIC.to_be_bytes(), "reply magic");
        assert_eq!(
            u64::from_be_bytes(header[8..16].try_into().unwrap()),
            cookie,
            "reply cookie"
        );
        u32::from_be_bytes(header[4..8].try_into().unwrap())
    }

    fn read(&mut self, offset: u64, length: u32) -> Result<Vec<u8>, u32> {
        let cookie = self.send(CMD_READ, offset, length, &[]);
        match self.reply(cookie) {
            0 => {
                let mut data = vec![0u8; length as usize];
                self.stream.read_exact(&mut data).expect("read data");
                Ok(data)
            }
            error => Err(error),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), u32> {
        let cookie = self.send(CMD_WRITE, offset, data.len() as u32, data);
        match self.reply(cookie) {
            0 => Ok(()),
            error => Err(error),
        }
    }

    fn flush(&mut self) -> Result<(), u32> {
        let cookie = self.send(CMD_FLUSH, 0, 0, &[]);
        match self.reply(cookie) {
            0 => Ok(()),
            error => Err(error),
        }
    }

    /// Asserts the server closed this connection: a read returns EOF or a reset, not a
    /// timeout.
    fn assert_closed_by_server(&mut self) {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => {}
            Ok(_) => panic!("server sent data after garbage instead of closing"),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("server did not close the connection after garbage: {e}"),
        }
    }
}

#[test]
fn misbehaving_clients_get_errors_and_cost_only_their_connection() {
    let cluster = cluster_with_image("raw");
    let mut gateway = Gateway::start(&cluster, "raw", unix_socket(&cluster, "nbd.sock"), &[]);
    let socket = gateway.socket().to_path_buf();

    let mut good = RawNbd::connect(&socket, "raw");
    assert_eq!(good.size, IMAGE_BYTES);
    let block = pattern(5, 8192);
    good.write(4 * MIB - 4096, &block).expect("write");
    good.flush().expect("flush");
    assert_eq!(good.read(4 * MIB - 4096, 8192).expect("read"), block);

    let mut bad = RawNbd::connect(&socket, "raw");
    let size = bad.size;
    // Reads past the end: EINVAL, and the connection keeps working.
    assert_eq!(bad.read(size, 4096), Err(EINVAL), "read at the end");
    assert_eq!(bad.read(size - 512, 1024), Err(EINVAL), "read over the end");
    assert_eq!(
        bad.read(u64::MAX - 511, 512),
        Err(EINVAL),
        "read at 2^64-512"
    );
    assert_eq!(bad.read(4 * MIB - 4096, 8192).expect("read after"), block);
    // Misaligned reads: EINVAL.
    assert_eq!(bad.read(1, 4096), Err(EINVAL), "read at offset 1");
    assert_eq!(bad.read(0, 100), Err(EINVAL), "read of 100 bytes");
    assert_eq!(bad.read(4 * MIB - 4096, 8192).expect("read after"), block);
    // A write past the end: ENOSPC, and its payload is skipped, not taken for requests.
    assert_eq!(
        bad.write(size, &[0x77; 4096]),
        Err(ENOSPC),
        "write at the end"
    );
    // An unknown command: EINVAL.
    let cookie = bad.send(0x55, 0, 512, &[]);
    assert_eq!(bad.reply(cookie), EINVAL, "unknown command");
    // A read longer than the advertised maximum (32 MiB): EINVAL.
    assert_eq!(bad.read(0, 33 << 20), Err(EINVAL), "read of 33 MiB");
    assert_eq!(bad.read(4 * MIB - 4096, 8192).expect("read after"), block);

    // Garbage instead of a request closes that connection only.
    bad.stream.write_all(&[0xde; 28]).expect("send garbage");
    bad.assert_closed_by_server();
    // Garbage instead of an option closes a negotiating connection.
    let mut negotiating = UnixStream::connect(&socket).expect("connect");
    negotiating
        .set_read_timeout(Some(RAW_IO_TIMEOUT))
        .expect("timeout");
    let mut greeting = [0u8; 18];
    negotiating.read_exact(&mut greeting).expect("greeting");
    negotiating.write_all(&3u32.to_be_bytes()).expect("flags");
    negotiating.write_all(&[0xad; 64]).expect("garbage option");
    let mut rest = Vec::new();
    match negotiating.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("server did not close a connection with a garbage option: {e}"),
    }

    // The connection opened before keeps working, and the gateway still serves new
    // clients.
    gateway.assert_running();
    let other = pattern(6, 4096);
    good.write(8 * MIB, &other).expect("write after garbage");
    assert_eq!(good.read(8 * MIB, 4096).expect("read after garbage"), other);
    assert_eq!(good.read(4 * MIB - 4096, 8192).expect("read"), block);
    let uri = gateway.uri.clone();
    qemu_io(&uri, &["read -P 0 16M 64k", "write -P 0x42 16M 64k"]);
    qemu_io(&uri, &["read -P 0x42 16M 64k"]);
    let mut again = RawNbd::connect(&socket, "raw");
    assert_eq!(again.read(16 * MIB, 512).expect("read"), vec![0x42; 512]);
    gateway.assert_running();
}
