//! Unit tests of message encoding and decoding, request validation, and the negotiation run
//! over an in-memory stream.

mod common;

use std::sync::Arc;

use cairn_nbd::proto::*;
use cairn_nbd::transmission::{errno_for, validate, Command};
use cairn_nbd::{NbdError, NbdExport, NbdServer, ServerOptions};
use cairn_volume::{MemVolume, VolumeError};
use common::RawClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn greeting_is_nbdmagic_ihaveopt_flags() {
    let greeting = encode_greeting(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    assert_eq!(&greeting[8..16], b"IHAVEOPT");
    assert_eq!(&greeting[16..], &[0, 3]);
}

#[test]
fn request_header_round_trips_and_checks_magic() {
    let header = RequestHeader {
        flags: CMD_FLAG_FUA,
        command: CMD_WRITE,
        cookie: 0x0102_0304_0506_0708,
        offset: 0x1122_3344_5566_7788,
        length: 0x99aa_bbcc,
    };
    let bytes = header.encode();
    assert_eq!(
        bytes,
        [
            0x25, 0x60, 0x95, 0x13, 0, 1, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44,
            0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc
        ]
    );
    assert_eq!(RequestHeader::decode(&bytes), Ok(header));
    assert_eq!(header.payload_bytes(), 0x99aa_bbcc);
    let read = RequestHeader {
        command: CMD_READ,
        ..header
    };
    assert_eq!(read.payload_bytes(), 0);

    let mut bad = bytes;
    bad[0] = 0xff;
    assert_eq!(RequestHeader::decode(&bad), Err(0xff60_9513));
}

#[test]
fn simple_reply_layout() {
    let reply = SimpleReplyHeader {
        error: NBD_ENOSPC,
        cookie: 42,
    };
    let bytes = reply.encode();
    assert_eq!(
        bytes,
        [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 28, 0, 0, 0, 0, 0, 0, 0, 42]
    );
    assert_eq!(SimpleReplyHeader::decode(&bytes), Ok(reply));
}

#[test]
fn option_headers_round_trip() {
    let option = OptionHeader {
        option: OPT_GO,
        length: 9,
    };
    let bytes = option.encode();
    assert_eq!(&bytes[..8], b"IHAVEOPT");
    assert_eq!(OptionHeader::decode(&bytes), Ok(option));
    let mut bad = bytes;
    bad[7] = b'X';
    assert!(OptionHeader::decode(&bad).is_err());

    let reply = OptionReplyHeader {
        option: OPT_LIST,
        reply_type: REP_ERR_UNSUP,
        length: 3,
    };
    let bytes = reply.encode();
    assert_eq!(&bytes[..8], &[0, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9]);
    assert_eq!(&bytes[12..16], &[0x80, 0, 0, 1]);
    assert_eq!(OptionReplyHeader::decode(&bytes), Ok(reply));
}

#[test]
fn info_request_parsing_rejects_inconsistent_lengths() {
    let request = InfoRequest {
        name: b"disk0".to_vec(),
        info_types: vec![INFO_NAME, INFO_BLOCK_SIZE],
    };
    let bytes = request.encode();
    assert_eq!(
        bytes,
        [0, 0, 0, 5, b'd', b'i', b's', b'k', b'0', 0, 2, 0, 1, 0, 3]
    );
    assert_eq!(InfoRequest::decode(&bytes), Some(request));
    // Truncated, overlong, and a name length that overflows the buffer.
    assert_eq!(InfoRequest::decode(&bytes[..bytes.len() - 1]), None);
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(InfoRequest::decode(&longer), None);
    assert_eq!(InfoRequest::decode(&[0xff, 0xff, 0xff, 0xff, 0, 0]), None);
    assert_eq!(InfoRequest::decode(&[]), None);
    // Empty name, no requests.
    assert_eq!(
        InfoRequest::decode(&[0, 0, 0, 0, 0, 0]),
        Some(InfoRequest {
            name: vec![],
            info_types: vec![]
        })
    );
}

#[test]
fn info_payloads() {
    let export = encode_info_export(1 << 30, TFLAG_HAS_FLAGS | TFLAG_READ_ONLY);
    assert_eq!(export, [0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 3]);
    let sizes = encode_info_block_size();
    assert_eq!(sizes, [0, 3, 0, 0, 2, 0, 0, 0, 0x10, 0, 0x02, 0, 0, 0]);
    assert_eq!(encode_info_string(INFO_NAME, "ab"), [0, 1, b'a', b'b']);
    assert_eq!(encode_rep_server("ab"), [0, 0, 0, 2, b'a', b'b']);
}

fn request(command: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
    RequestHeader {
        flags,
        command,
        cookie: 1,
        offset,
        length,
    }
}

#[test]
fn validation_of_ranges_alignment_and_flags() {
    let size = 1 << 20;
    let ok = |c, f, o, l| validate(&request(c, f, o, l), size, false);
    assert_eq!(
        ok(CMD_READ, 0, 0, 4096),
        Ok(Command::Read {
            offset: 0,
            length: 4096
        })
    );
    assert_eq!(
        ok(CMD_WRITE, CMD_FLAG_FUA, 512, 512),
        Ok(Command::Write {
            offset: 512,
            length: 512,
            fua: true
        })
    );
    assert_eq!(
        ok(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 0, 512),
        Ok(Command::WriteZeroes {
            offset: 0,
            length: 512,
            fua: false,
            no_hole: true
        })
    );
    assert_eq!(ok(CMD_FLUSH, 0, 0, 0), Ok(Command::Flush));
    assert_eq!(ok(CMD_DISC, 0, 0, 0), Ok(Command::Disconnect));
    // The last block exactly.
    assert!(ok(CMD_READ, 0, size - 512, 512).is_ok());

    // Past the end: EINVAL for reads and trims, ENOSPC for writes and zeroing.
    assert_eq!(ok(CMD_READ, 0, size, 512), Err(NBD_EINVAL));
    assert_eq!(ok(CMD_TRIM, 0, size - 512, 1024), Err(NBD_EINVAL));
    assert_eq!(ok(CMD_WRITE, 0, size - 512, 1024), Err(NBD_ENOSPC));
    assert_eq!(ok(CMD_WRITE_ZEROES, 0, size, 512), Err(NBD_ENOSPC));
    assert_eq!(ok(CMD_READ, 0, u64::MAX - 511, 1024), Err(NBD_EINVAL));
    // Alignment, length limits, unknown commands and flags.
    assert_eq!(ok(CMD_READ, 0, 1, 512), Err(NBD_EINVAL));
    assert_eq!(ok(CMD_READ, 0, 0, 100), Err(NBD_EINVAL));
    assert_eq!(ok(CMD_READ, 0, 0, 0), Err(NBD_EINVAL));
    assert_eq!(
        ok(CMD_READ, 0, 0, BLOCK_SIZE_MAX_BYTES + 512),
        Err(NBD_EINVAL)
    );
    assert_eq!(ok(5, 0, 0, 512), Err(NBD_EINVAL));
    assert_eq!(ok(CMD_READ, 1 << 7, 0, 512), Err(NBD_EINVAL));
    assert_eq!(ok(CMD_WRITE, CMD_FLAG_NO_HOLE, 0, 512), Err(NBD_EINVAL));

    // Read-only exports refuse every kind of write but serve reads and flushes.
    let ro = |c, o, l| validate(&request(c, 0, o, l), size, true);
    assert_eq!(ro(CMD_WRITE, 0, 512), Err(NBD_EPERM));
    assert_eq!(ro(CMD_TRIM, 0, 512), Err(NBD_EPERM));
    assert_eq!(ro(CMD_WRITE_ZEROES, 0, 512), Err(NBD_EPERM));
    assert!(ro(CMD_READ, 0, 512).is_ok());
    assert!(ro(CMD_FLUSH, 0, 0).is_ok());
}

#[test]
fn unaligned_export_size_allows_reaching_the_end() {
    let size = 1000;
    assert!(validate(&request(CMD_READ, 0, 512, 488), size, false).is_ok());
    assert_eq!(
        validate(&request(CMD_READ, 0, 512, 480), size, false),
        Err(NBD_EINVAL)
    );
    assert_eq!(
        validate(&request(CMD_READ, 0, 0, 1024), size, false),
        Err(NBD_EINVAL)
    );
}

#[test]
fn volume_errors_map_to_nbd_errors() {
    let out_of_range = VolumeError::OutOfRange {
        offset: 0,
        len: 1,
        size: 0,
    };
    assert_eq!(errno_for(&out_of_range, false), NBD_EINVAL);
    assert_eq!(errno_for(&out_of_range, true), NBD_ENOSPC);
    assert_eq!(errno_for(&VolumeError::NoSpace, true), NBD_ENOSPC);
    assert_eq!(
        errno_for(&VolumeError::Invalid("x".into()), true),
        NBD_EINVAL
    );
    assert_eq!(errno_for(&VolumeError::Io("x".into()), false), NBD_EIO);
}

#[test]
fn server_configuration_is_checked() {
    let volume = Arc::new(MemVolume::new(4096));
    let export = |name: &str| NbdExport::new(name, volume.clone(), false);
    let options = ServerOptions::default;
    assert!(NbdServer::<MemVolume>::with_exports(vec![], options()).is_err());
    assert!(NbdServer::with_exports(vec![export("")], options()).is_err());
    assert!(NbdServer::with_exports(vec![export("a"), export("a")], options()).is_err());
    assert!(NbdServer::with_exports(vec![export("a"), export("b")], options()).is_ok());
    let flags = export("a").transmission_flags();
    let expected = TFLAG_HAS_FLAGS
        | TFLAG_SEND_FLUSH
        | TFLAG_SEND_FUA
        | TFLAG_SEND_TRIM
        | TFLAG_SEND_WRITE_ZEROES
        | TFLAG_CAN_MULTI_CONN;
    assert_eq!(flags, expected);
    let read_only = NbdExport::new("r", volume.clone(), true).transmission_flags();
    assert_eq!(read_only, expected | TFLAG_READ_ONLY);
}

/// Serves one in-memory stream; returns the client end and the serving task.
fn duplex_server(
    size: u64,
) -> (
    tokio::io::DuplexStream,
    tokio::task::JoinHandle<Result<(), NbdError>>,
) {
    let server = NbdServer::new("disk0".into(), Arc::new(MemVolume::new(size)), false);
    let (client, server_end) = tokio::io::duplex(1 << 20);
    (client, tokio::spawn(server.serve_stream(server_end)))
}

#[tokio::test]
async fn export_name_without_no_zeroes_sends_padding() {
    let (stream, task) = duplex_server(1 << 20);
    let mut client = RawClient::new(stream);
    client.greeting().await;
    client.write(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes()).await;
    client.send_option(OPT_EXPORT_NAME, b"disk0").await;
    let mut answer = [0xffu8; 8 + 2 + EXPORT_NAME_PADDING_BYTES];
    client.read_exact(&mut answer).await;
    assert_eq!(u64::from_be_bytes(answer[..8].try_into().unwrap()), 1 << 20);
    assert_eq!(
        u16::from_be_bytes([answer[8], answer[9]]) & TFLAG_HAS_FLAGS,
        1
    );
    assert!(answer[10..].iter().all(|b| *b == 0));
    // Transmission works right after.
    let (error, data) = client.call(CMD_READ, 0, 0, 512).await;
    assert_eq!((error, data.len()), (0, 512));
    client.send_request(CMD_DISC, 0, 9, 0, 0).await;
    assert!(client.closed_by_server().await);
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn export_name_with_no_zeroes_and_empty_default_name() {
    let (stream, task) = duplex_server(8192);
    let mut client = RawClient::new(stream);
    client.start().await;
    client.send_option(OPT_EXPORT_NAME, b"").await;
    let mut answer = [0u8; 10];
    client.read_exact(&mut answer).await;
    assert_eq!(u64::from_be_bytes(answer[..8].try_into().unwrap()), 8192);
    // The next bytes are already a reply, not padding.
    client.write_and_wait(0, &[7u8; 512]).await;
    drop(client);
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn unknown_client_flags_close_the_connection() {
    let (stream, task) = duplex_server(8192);
    let mut client = RawClient::new(stream);
    client.greeting().await;
    client
        .write(&(FLAG_C_FIXED_NEWSTYLE | 1 << 5).to_be_bytes())
        .await;
    assert!(client.closed_by_server().await);
    assert!(matches!(
        task.await.unwrap(),
        Err(NbdError::BadClientFlags(_))
    ));
}

#[tokio::test]
async fn export_name_of_unknown_export_closes_the_connection() {
    let (stream, task) = duplex_server(8192);
    let mut client = RawClient::new(stream);
    client.start().await;
    client.send_option(OPT_EXPORT_NAME, b"nope").await;
    assert!(client.closed_by_server().await);
    assert!(matches!(
        task.await.unwrap(),
        Err(NbdError::UnknownExport(_))
    ));
}

#[tokio::test]
async fn oversized_option_is_skipped_and_negotiation_continues() {
    let (stream, task) = duplex_server(8192);
    let mut client = RawClient::new(stream);
    client.start().await;
    let big = vec![0u8; OPTION_DATA_MAX_BYTES as usize + 1];
    client.send_option(OPT_GO, &big).await;
    let (header, _) = client.option_reply().await;
    assert_eq!(header.reply_type, REP_ERR_TOO_BIG);
    // Malformed INFO data gets ERR_INVALID, LIST with data too.
    client.send_option(OPT_INFO, &[0, 0, 0, 9, b'x']).await;
    assert_eq!(client.option_reply().await.0.reply_type, REP_ERR_INVALID);
    client.send_option(OPT_LIST, b"x").await;
    assert_eq!(client.option_reply().await.0.reply_type, REP_ERR_INVALID);
    let info = client.info(OPT_GO, "disk0", &[]).await.unwrap();
    assert_eq!(info.size, 8192);
    client.stream.shutdown().await.unwrap();
    let mut rest = Vec::new();
    client.stream.read_to_end(&mut rest).await.unwrap();
    task.await.unwrap().unwrap();
}
