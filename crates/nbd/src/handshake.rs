//! Fixed newstyle negotiation: the greeting, the client flags check, and option haggling
//! until the client picks an export (`NBD_OPT_GO` / `NBD_OPT_EXPORT_NAME`) or gives up
//! (`NBD_OPT_ABORT`).
//!
//! Owns everything before the transmission phase. Options the server does not implement get
//! `NBD_REP_ERR_UNSUP` and the haggling continues; a malformed option gets
//! `NBD_REP_ERR_INVALID`; an unknown export name gets `NBD_REP_ERR_UNKNOWN` (or, for
//! `NBD_OPT_EXPORT_NAME`, which has no error reply, a closed connection). Bad magic or
//! unknown client flags close the connection.
//!
//! Bounds: option data is at most [`OPTION_DATA_MAX_BYTES`] (longer data is skipped and
//! answered with `NBD_REP_ERR_TOO_BIG`), a connection may send at most [`OPTIONS_MAX`]
//! options, and the caller puts a time limit on the whole negotiation.

use std::sync::Arc;

use cairn_volume::Volume;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use crate::proto::*;
use crate::server::NbdExport;
use crate::NbdError;

/// Most options one connection may send before it is closed.
pub const OPTIONS_MAX: usize = 1024;

/// How the negotiation ended.
pub(crate) enum Negotiation<V: Volume> {
    /// The client chose this export; transmission starts.
    Transmission(Arc<NbdExport<V>>),
    /// The client sent `NBD_OPT_ABORT`.
    Aborted,
}

/// Runs the negotiation on a fresh connection. `writer` is flushed whenever the server
/// waits for the client.
pub(crate) async fn negotiate<V, R, W>(
    exports: &[Arc<NbdExport<V>>],
    reader: &mut R,
    writer: &mut W,
) -> Result<Negotiation<V>, NbdError>
where
    V: Volume,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    writer
        .write_all(&encode_greeting(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
        .await?;
    writer.flush().await?;
    let client_flags = reader.read_u32().await?;
    if client_flags & !CLIENT_FLAGS_KNOWN != 0 {
        return Err(NbdError::BadClientFlags(client_flags));
    }
    let no_zeroes = client_flags & FLAG_C_NO_ZEROES != 0;

    for _ in 0..OPTIONS_MAX {
        let mut header_bytes = [0u8; OptionHeader::BYTES];
        reader.read_exact(&mut header_bytes).await?;
        let header = OptionHeader::decode(&header_bytes).map_err(NbdError::BadOptionMagic)?;
        debug!(
            option = option_name(header.option),
            code = header.option,
            length = header.length,
            "option"
        );
        if header.length > OPTION_DATA_MAX_BYTES {
            skip(reader, u64::from(header.length)).await?;
            if header.option == OPT_EXPORT_NAME {
                let name = format!("<{} byte name>", header.length);
                return Err(NbdError::UnknownExport(name));
            }
            send_reply(
                writer,
                header.option,
                REP_ERR_TOO_BIG,
                b"option data too large",
            )
            .await?;
            writer.flush().await?;
            continue;
        }
        let mut data = vec![0u8; header.length as usize];
        reader.read_exact(&mut data).await?;

        let outcome = handle_option(exports, header.option, &data, no_zeroes, writer).await?;
        writer.flush().await?;
        if let Some(negotiation) = outcome {
            return Ok(negotiation);
        }
    }
    Err(NbdError::Io(std::io::Error::other(format!(
        "more than {OPTIONS_MAX} options during negotiation"
    ))))
}

/// Answers one option; `Some` when the negotiation is over.
async fn handle_option<V, W>(
    exports: &[Arc<NbdExport<V>>],
    option: u32,
    data: &[u8],
    no_zeroes: bool,
    writer: &mut W,
) -> Result<Option<Negotiation<V>>, NbdError>
where
    V: Volume,
    W: AsyncWrite + Unpin,
{
    match option {
        OPT_EXPORT_NAME => {
            let Some(export) = find_export(exports, data) else {
                return Err(NbdError::UnknownExport(
                    String::from_utf8_lossy(data).into_owned(),
                ));
            };
            writer.write_all(&export.size().to_be_bytes()).await?;
            writer
                .write_all(&export.transmission_flags().to_be_bytes())
                .await?;
            if !no_zeroes {
                writer.write_all(&[0u8; EXPORT_NAME_PADDING_BYTES]).await?;
            }
            Ok(Some(Negotiation::Transmission(export.clone())))
        }
        OPT_ABORT => {
            // The client may already have closed its end; the ACK is best effort.
            let _ = send_reply(writer, option, REP_ACK, &[]).await;
            let _ = writer.flush().await;
            Ok(Some(Negotiation::Aborted))
        }
        OPT_LIST => {
            if !data.is_empty() {
                send_reply(writer, option, REP_ERR_INVALID, b"LIST takes no data").await?;
                return Ok(None);
            }
            for export in exports {
                send_reply(
                    writer,
                    option,
                    REP_SERVER,
                    &encode_rep_server(export.name()),
                )
                .await?;
            }
            send_reply(writer, option, REP_ACK, &[]).await?;
            Ok(None)
        }
        OPT_INFO | OPT_GO => answer_info(exports, option, data, writer).await,
        _ => {
            let message = format!("option {} ({option}) is not supported", option_name(option));
            send_reply(writer, option, REP_ERR_UNSUP, message.as_bytes()).await?;
            Ok(None)
        }
    }
}

/// Answers `NBD_OPT_INFO` / `NBD_OPT_GO`: export size and flags, block sizes, and the name
/// and description if asked for.
async fn answer_info<V, W>(
    exports: &[Arc<NbdExport<V>>],
    option: u32,
    data: &[u8],
    writer: &mut W,
) -> Result<Option<Negotiation<V>>, NbdError>
where
    V: Volume,
    W: AsyncWrite + Unpin,
{
    let Some(request) = InfoRequest::decode(data) else {
        send_reply(writer, option, REP_ERR_INVALID, b"malformed INFO/GO data").await?;
        return Ok(None);
    };
    let Some(export) = find_export(exports, &request.name) else {
        let message = format!(
            "no export named {:?}",
            String::from_utf8_lossy(&request.name)
        );
        send_reply(writer, option, REP_ERR_UNKNOWN, message.as_bytes()).await?;
        return Ok(None);
    };
    let info = encode_info_export(export.size(), export.transmission_flags());
    send_reply(writer, option, REP_INFO, &info).await?;
    // Block sizes are sent whether or not they were requested, as the protocol allows.
    send_reply(writer, option, REP_INFO, &encode_info_block_size()).await?;
    if request.info_types.contains(&INFO_NAME) {
        let name = encode_info_string(INFO_NAME, export.name());
        send_reply(writer, option, REP_INFO, &name).await?;
    }
    if request.info_types.contains(&INFO_DESCRIPTION) && !export.description().is_empty() {
        let description = encode_info_string(INFO_DESCRIPTION, export.description());
        send_reply(writer, option, REP_INFO, &description).await?;
    }
    send_reply(writer, option, REP_ACK, &[]).await?;
    if option == OPT_GO {
        return Ok(Some(Negotiation::Transmission(export.clone())));
    }
    Ok(None)
}

/// The export called `name`; the empty name selects the first (default) export.
fn find_export<'a, V: Volume>(
    exports: &'a [Arc<NbdExport<V>>],
    name: &[u8],
) -> Option<&'a Arc<NbdExport<V>>> {
    if name.is_empty() {
        return exports.first();
    }
    exports.iter().find(|e| e.name().as_bytes() == name)
}

async fn send_reply<W: AsyncWrite + Unpin>(
    writer: &mut W,
    option: u32,
    reply_type: u32,
    data: &[u8],
) -> std::io::Result<()> {
    let header = OptionReplyHeader {
        option,
        reply_type,
        length: data.len() as u32,
    };
    writer.write_all(&header.encode()).await?;
    writer.write_all(data).await
}

/// Reads and discards `bytes` bytes (an oversized option or `WRITE` payload).
pub(crate) async fn skip<R: AsyncRead + Unpin>(reader: &mut R, bytes: u64) -> std::io::Result<()> {
    let copied = tokio::io::copy(&mut reader.take(bytes), &mut tokio::io::sink()).await?;
    if copied != bytes {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}
