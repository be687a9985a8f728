//! The server driven over real sockets by a minimal hand-written client: pipelining and
//! out-of-order replies, error replies that keep the connection usable, garbage that closes
//! only its own connection, and option haggling.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_nbd::proto::*;
use cairn_nbd::NbdExport;
use cairn_volume::{MemVolume, Volume, VolumeError};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MIB: u64 = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_leave_out_of_order_as_requests_complete() {
    let volume = Arc::new(GatedVolume::new(MIB, 0));
    volume
        .inner
        .write(0, Bytes::from(pattern(4096, 1)))
        .await
        .unwrap();
    volume
        .inner
        .write(4096, Bytes::from(pattern(4096, 2)))
        .await
        .unwrap();
    let server = TestServer::start(vec![NbdExport::new("disk0", volume.clone(), false)]).await;
    let (mut client, _) = RawClient::connect(tcp_stream(server.tcp).await, "disk0").await;

    // Read 1 blocks in the volume; read 2, a write and a flush sent after it finish first.
    client.send_request(CMD_READ, 0, 1, 0, 4096).await;
    client.send_request(CMD_READ, 0, 2, 4096, 4096).await;
    client.send_write(3, 8192, &pattern(4096, 3)).await;
    client.send_request(CMD_FLUSH, 0, 4, 0, 0).await;
    let mut early = HashMap::new();
    for _ in 0..3 {
        let (cookie, error, data) = client.reply().await;
        assert_eq!(error, 0);
        early.insert(cookie, data);
    }
    assert_eq!(
        early.keys().copied().collect::<HashSet<_>>(),
        HashSet::from([2, 3, 4])
    );
    assert_eq!(early[&2], pattern(4096, 2));

    volume.open_gate();
    let (cookie, error, data) = client.reply().await;
    assert_eq!((cookie, error), (1, 0));
    assert_eq!(data, pattern(4096, 1));
    assert_eq!(volume.inner.snapshot()[8192..12288], pattern(4096, 3));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_requests_in_flight_are_bounded_and_all_answered() {
    let volume = Arc::new(SlowVolume::new(4 * MIB, Duration::from_millis(20)));
    let server = TestServer::start(vec![NbdExport::new("disk0", volume.clone(), false)]).await;
    let (client, _) = RawClient::connect(unix_stream(&server.unix).await, "disk0").await;
    let (reader, mut writer) = client.stream.into_split();

    // 1024 writes of 4 KiB, each block with its own pattern, all sent before any reply is read.
    const REQUESTS: u64 = 1024;
    let receiver = tokio::spawn(async move {
        let mut reader = reader;
        let mut seen = HashSet::new();
        for _ in 0..REQUESTS {
            let mut bytes = [0u8; SimpleReplyHeader::BYTES];
            reader.read_exact(&mut bytes).await.unwrap();
            let reply = SimpleReplyHeader::decode(&bytes).unwrap();
            assert_eq!(reply.error, 0, "cookie {}", reply.cookie);
            assert!(
                seen.insert(reply.cookie),
                "duplicate reply {}",
                reply.cookie
            );
        }
        seen.len() as u64
    });
    let mut batch = Vec::new();
    for block in 0..REQUESTS {
        let header = RequestHeader {
            flags: 0,
            command: CMD_WRITE,
            cookie: block,
            offset: block * 4096,
            length: 4096,
        };
        batch.extend_from_slice(&header.encode());
        batch.extend_from_slice(&pattern(4096, block as u8));
    }
    writer.write_all(&batch).await.unwrap();
    assert_eq!(receiver.await.unwrap(), REQUESTS);

    let peak = volume.in_flight_peak.load(Ordering::SeqCst);
    eprintln!("peak in flight: {peak}");
    assert!(
        peak >= 64,
        "requests were not pipelined: peak {peak} in flight"
    );
    assert!(peak <= 256, "in-flight bound exceeded: peak {peak}");
    let snapshot = volume.inner.snapshot();
    for block in 0..REQUESTS as usize {
        assert_eq!(
            snapshot[block * 4096..(block + 1) * 4096],
            pattern(4096, block as u8)
        );
    }
    drop(writer);
    server.stop().await;
}

#[tokio::test]
async fn bad_requests_get_errors_and_the_connection_keeps_working() {
    let (server, volume) = mem_server("disk0", MIB).await;
    let (mut client, info) = RawClient::connect(tcp_stream(server.tcp).await, "disk0").await;
    assert_eq!(info.size, MIB);
    assert_eq!(client.write_and_wait(0, &pattern(4096, 9)).await, 0);

    let cases: &[(&str, u16, u16, u64, u32, u32)] = &[
        ("read past the end", CMD_READ, 0, MIB, 4096, NBD_EINVAL),
        (
            "read straddling the end",
            CMD_READ,
            0,
            MIB - 512,
            1024,
            NBD_EINVAL,
        ),
        ("trim past the end", CMD_TRIM, 0, MIB, 512, NBD_EINVAL),
        (
            "zeroes past the end",
            CMD_WRITE_ZEROES,
            0,
            MIB,
            512,
            NBD_ENOSPC,
        ),
        (
            "offset overflow",
            CMD_READ,
            0,
            u64::MAX - 511,
            1024,
            NBD_EINVAL,
        ),
        ("misaligned offset", CMD_READ, 0, 100, 512, NBD_EINVAL),
        ("misaligned length", CMD_READ, 0, 0, 100, NBD_EINVAL),
        ("zero length", CMD_READ, 0, 0, 0, NBD_EINVAL),
        (
            "over-large read",
            CMD_READ,
            0,
            0,
            BLOCK_SIZE_MAX_BYTES + 512,
            NBD_EINVAL,
        ),
        ("unknown command", 5, 0, 0, 512, NBD_EINVAL),
        ("block status without negotiation", 7, 0, 0, 512, NBD_EINVAL),
        ("unknown flag", CMD_READ, 1 << 6, 0, 512, NBD_EINVAL),
    ];
    for (what, command, flags, offset, length, expected) in cases {
        let (error, _) = client.call(*command, *flags, *offset, *length).await;
        assert_eq!(error, *expected, "{what}");
        let (error, data) = client.call(CMD_READ, 0, 0, 4096).await;
        assert_eq!((error, data), (0, pattern(4096, 9)), "after {what}");
    }

    // Rejected writes carry payloads that must be consumed to stay in sync.
    assert_eq!(
        client.write_and_wait(MIB - 512, &[1u8; 1024]).await,
        NBD_ENOSPC
    );
    assert_eq!(client.write_and_wait(100, &[1u8; 512]).await, NBD_EINVAL);
    let too_big = vec![0x5au8; BLOCK_SIZE_MAX_BYTES as usize + 512];
    assert_eq!(client.write_and_wait(0, &too_big).await, NBD_EINVAL);
    let (error, data) = client.call(CMD_READ, 0, 0, 4096).await;
    assert_eq!((error, data), (0, pattern(4096, 9)));

    // The largest allowed request works, and FUA, trim and zeroing do what they say.
    let big = pattern(BLOCK_SIZE_MAX_BYTES as usize, 4);
    let (server2, volume2) = mem_server("big", 2 * BLOCK_SIZE_MAX_BYTES as u64).await;
    let (mut big_client, _) = RawClient::connect(tcp_stream(server2.tcp).await, "big").await;
    assert_eq!(big_client.write_and_wait(512, &big).await, 0);
    let (error, data) = big_client
        .call(CMD_READ, 0, 512, BLOCK_SIZE_MAX_BYTES)
        .await;
    assert_eq!(error, 0);
    assert!(data == big);
    assert!(volume2.snapshot()[512..512 + big.len()] == big[..]);
    server2.stop().await;

    client
        .send_request(CMD_WRITE, CMD_FLAG_FUA, 5, 8192, 512)
        .await;
    client.write(&[3u8; 512]).await;
    assert_eq!(client.reply().await.1, 0);
    assert_eq!(client.call(CMD_TRIM, 0, 0, 1024).await.0, 0);
    assert_eq!(
        client
            .call(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 1024, 1024)
            .await
            .0,
        0
    );
    let snapshot = volume.snapshot();
    assert!(snapshot[..2048].iter().all(|b| *b == 0));
    assert_eq!(snapshot[2048..4096], pattern(4096, 9)[2048..]);
    assert_eq!(snapshot[8192..8704], [3u8; 512]);
    server.stop().await;
}

#[tokio::test]
async fn read_only_export_refuses_writes() {
    let volume = Arc::new(MemVolume::new(MIB));
    let server = TestServer::start(vec![NbdExport::new("ro", volume, true)]).await;
    let (mut client, info) = RawClient::connect(tcp_stream(server.tcp).await, "ro").await;
    assert_ne!(info.flags & TFLAG_READ_ONLY, 0);
    assert_eq!(client.write_and_wait(0, &[1u8; 4096]).await, NBD_EPERM);
    assert_eq!(client.call(CMD_TRIM, 0, 0, 512).await.0, NBD_EPERM);
    assert_eq!(client.call(CMD_WRITE_ZEROES, 0, 0, 512).await.0, NBD_EPERM);
    assert_eq!(client.call(CMD_FLUSH, 0, 0, 0).await.0, 0);
    let (error, data) = client.call(CMD_READ, 0, 0, 4096).await;
    assert_eq!((error, data), (0, vec![0u8; 4096]));
    server.stop().await;
}

#[tokio::test]
async fn volume_errors_become_nbd_errors() {
    let volume = Arc::new(FaultyVolume {
        inner: MemVolume::new(MIB),
        faults: HashMap::from([
            (0, VolumeError::Io("disk on fire".into())),
            (4096, VolumeError::NoSpace),
            (8192, VolumeError::Invalid("nope".into())),
        ]),
        short_read_offset: 12288,
    });
    let server = TestServer::start(vec![NbdExport::new("disk0", volume, false)]).await;
    let (mut client, _) = RawClient::connect(tcp_stream(server.tcp).await, "disk0").await;
    assert_eq!(client.call(CMD_READ, 0, 0, 512).await.0, NBD_EIO);
    assert_eq!(client.call(CMD_READ, 0, 4096, 512).await.0, NBD_ENOSPC);
    assert_eq!(client.write_and_wait(4096, &[0u8; 512]).await, NBD_ENOSPC);
    assert_eq!(client.call(CMD_READ, 0, 8192, 512).await.0, NBD_EINVAL);
    // A volume returning too few bytes must not desynchronise the stream.
    assert_eq!(client.call(CMD_READ, 0, 12288, 1024).await.0, NBD_EIO);
    assert_eq!(
        client.call(CMD_READ, 0, 16384, 512).await,
        (0, vec![0u8; 512])
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_closes_only_its_own_connection() {
    let (server, _volume) = mem_server("disk0", MIB).await;
    let (mut good, _) = RawClient::connect(tcp_stream(server.tcp).await, "disk0").await;
    assert_eq!(good.write_and_wait(0, &[0x11; 4096]).await, 0);

    // Garbage instead of a request, with requests still in flight before it.
    let (mut bad, _) = RawClient::connect(unix_stream(&server.unix).await, "disk0").await;
    bad.send_request(CMD_READ, 0, 1, 0, 512).await;
    bad.write(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n").await;
    let (cookie, error, _) = bad.reply().await;
    assert_eq!(
        (cookie, error),
        (1, 0),
        "requests before the garbage are still answered"
    );
    assert!(bad.closed_by_server().await);

    // Garbage instead of an option.
    let mut bad_option = RawClient::new(tcp_stream(server.tcp).await);
    bad_option.start().await;
    bad_option.write(&[0xde; 16]).await;
    assert!(bad_option.closed_by_server().await);

    // Garbage instead of client flags: an HTTP request has unknown flag bits.
    let mut bad_flags = RawClient::new(tcp_stream(server.tcp).await);
    bad_flags.greeting().await;
    bad_flags.write(b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(bad_flags.closed_by_server().await);

    // A client that vanishes mid-request.
    let (mut vanishing, _) = RawClient::connect(tcp_stream(server.tcp).await, "disk0").await;
    vanishing.send_request(CMD_WRITE, 0, 1, 0, 4096).await;
    vanishing.write(&[0u8; 100]).await;
    drop(vanishing);

    // The first connection and new ones keep working.
    let (error, data) = good.call(CMD_READ, 0, 0, 4096).await;
    assert_eq!((error, data), (0, vec![0x11; 4096]));
    let (mut fresh, _) = RawClient::connect(unix_stream(&server.unix).await, "disk0").await;
    let (error, data) = fresh.call(CMD_READ, 0, 0, 4096).await;
    assert_eq!((error, data), (0, vec![0x11; 4096]));
    server.stop().await;
}

#[tokio::test]
async fn option_haggling() {
    let volume = Arc::new(MemVolume::new(MIB));
    let exports = vec![
        NbdExport::new("disk0", volume.clone(), false).with_description("the first disk"),
        NbdExport::new("disk1", Arc::new(MemVolume::new(2 * MIB)), true),
    ];
    let server = TestServer::start(exports).await;
    let mut client = RawClient::new(tcp_stream(server.tcp).await);
    client.start().await;

    // LIST: one SERVER reply per export, then ACK.
    client.send_option(OPT_LIST, &[]).await;
    let mut names = Vec::new();
    loop {
        let (header, data) = client.option_reply().await;
        assert_eq!(header.option, OPT_LIST);
        if header.reply_type == REP_ACK {
            break;
        }
        assert_eq!(header.reply_type, REP_SERVER);
        let length = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
        names.push(String::from_utf8(data[4..4 + length].to_vec()).unwrap());
    }
    assert_eq!(names, ["disk0", "disk1"]);

    // Unsupported options get ERR_UNSUP and the negotiation goes on.
    for option in [
        OPT_STARTTLS,
        OPT_STRUCTURED_REPLY,
        OPT_SET_META_CONTEXT,
        OPT_EXTENDED_HEADERS,
        4,
        99,
    ] {
        client.send_option(option, &[0, 0, 0, 0]).await;
        let (header, _) = client.option_reply().await;
        assert_eq!((header.option, header.reply_type), (option, REP_ERR_UNSUP));
    }

    // INFO on an unknown export, then on known ones.
    assert_eq!(
        client.info(OPT_INFO, "nope", &[]).await.unwrap_err(),
        REP_ERR_UNKNOWN
    );
    let info = client
        .info(
            OPT_INFO,
            "disk0",
            &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE],
        )
        .await
        .unwrap();
    assert_eq!(info.size, MIB);
    assert_eq!(info.block_sizes, Some((512, 4096, 32 * 1024 * 1024)));
    assert_eq!(info.name.as_deref(), Some("disk0"));
    assert_eq!(info.description.as_deref(), Some("the first disk"));
    let expected_flags = TFLAG_HAS_FLAGS
        | TFLAG_SEND_FLUSH
        | TFLAG_SEND_FUA
        | TFLAG_SEND_TRIM
        | TFLAG_SEND_WRITE_ZEROES
        | TFLAG_CAN_MULTI_CONN;
    assert_eq!(info.flags, expected_flags);
    let info = client.info(OPT_INFO, "disk1", &[]).await.unwrap();
    assert_eq!(
        (info.size, info.flags),
        (2 * MIB, expected_flags | TFLAG_READ_ONLY)
    );
    // Block sizes are sent even unrequested; the empty name is the default export.
    assert!(info.block_sizes.is_some());
    assert_eq!(client.info(OPT_INFO, "", &[]).await.unwrap().size, MIB);

    // GO on an unknown export fails without ending the negotiation; GO on a known one works.
    assert_eq!(
        client.info(OPT_GO, "nope", &[]).await.unwrap_err(),
        REP_ERR_UNKNOWN
    );
    let info = client.info(OPT_GO, "disk1", &[]).await.unwrap();
    assert_eq!(info.size, 2 * MIB);
    assert_eq!(
        client.call(CMD_READ, 0, 2 * MIB - 512, 512).await,
        (0, vec![0u8; 512])
    );
    server.stop().await;
}

#[tokio::test]
async fn abort_ends_the_negotiation() {
    let (server, _volume) = mem_server("disk0", MIB).await;
    let mut client = RawClient::new(unix_stream(&server.unix).await);
    client.start().await;
    client.send_option(OPT_ABORT, &[]).await;
    let (header, data) = client.option_reply().await;
    assert_eq!(
        (header.option, header.reply_type, data.len()),
        (OPT_ABORT, REP_ACK, 0)
    );
    assert!(client.closed_by_server().await);

    // A client that sends ABORT and hangs up at once is fine too.
    let mut client = RawClient::new(unix_stream(&server.unix).await);
    client.start().await;
    client.send_option(OPT_ABORT, &[]).await;
    drop(client);
    server.stop().await;
}

#[tokio::test]
async fn disconnect_finishes_requests_in_flight() {
    let volume = Arc::new(SlowVolume::new(MIB, Duration::from_millis(50)));
    let server = TestServer::start(vec![NbdExport::new("disk0", volume.clone(), false)]).await;
    let (mut client, _) = RawClient::connect(tcp_stream(server.tcp).await, "disk0").await;
    for block in 0..16u64 {
        client
            .send_write(block, block * 4096, &pattern(4096, block as u8))
            .await;
    }
    client.send_request(CMD_DISC, 0, 99, 0, 0).await;
    let mut answered = HashSet::new();
    for _ in 0..16 {
        let (cookie, error, _) = client.reply().await;
        assert_eq!(error, 0);
        answered.insert(cookie);
    }
    assert_eq!(answered.len(), 16);
    assert!(client.closed_by_server().await);
    let snapshot = volume.inner.snapshot();
    for block in 0..16usize {
        assert_eq!(
            snapshot[block * 4096..(block + 1) * 4096],
            pattern(4096, block as u8)
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_listeners_and_closes_connections() {
    let (server, _volume) = mem_server("disk0", MIB).await;
    let (mut idle, _) = RawClient::connect(tcp_stream(server.tcp).await, "disk0").await;
    let mut negotiating = RawClient::new(unix_stream(&server.unix).await);
    negotiating.greeting().await;
    let tcp = server.tcp;
    let unix = server.unix.clone();
    server.stop().await;
    assert!(idle.closed_by_server().await);
    assert!(negotiating.closed_by_server().await);
    assert!(tokio::net::TcpStream::connect(tcp).await.is_err());
    assert!(tokio::net::UnixStream::connect(&unix).await.is_err());
}
