//! `cairn nbd`: export an image over NBD (TCP or a Unix socket).

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};
use cairn_client::{Cluster, Image};
use clap::Args;

use crate::{admin, conf, Context};

#[derive(Args)]
pub struct NbdArgs {
    /// The image to export, as POOL/NAME; the export is named NAME.
    #[arg(long)]
    image: String,
    /// Serve on a Unix socket at PATH.
    #[arg(long, conflicts_with = "listen")]
    socket: Option<PathBuf>,
    /// Serve on TCP at ADDR:PORT.
    #[arg(long)]
    listen: Option<String>,
    /// Refuse writes.
    #[arg(long)]
    read_only: bool,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: u32,
}

pub fn run(ctx: &Context, args: NbdArgs) -> Result<()> {
    let (pool, name) = admin::split_image(&args.image)?;
    if args.socket.is_none() && args.listen.is_none() {
        bail!("give --socket PATH or --listen ADDR:PORT");
    }
    let config = conf::load_client(ctx)?;
    conf::init_logging(&config.global.log_level);
    let rt = crate::daemons::runtime(args.threads)?;
    rt.block_on(async move {
        let cluster = Cluster::connect(conf::client_options(&config)).await?;
        cairn_client::image::watch::set_process_role(format!("cairn nbd {pool}/{name}"));
        let image = Image::open(&cluster, &pool, &name).await?;
        let server = cairn_nbd::NbdServer::new(name.clone(), image.clone(), args.read_only);
        let serve = async {
            if let Some(path) = &args.socket {
                remove_stale_socket(path)?;
                let listener = tokio::net::UnixListener::bind(path)
                    .with_context(|| format!("cannot listen on {}", path.display()))?;
                println!(
                    "serving {pool}/{name} on nbd+unix:///{name}?socket={}",
                    path.display()
                );
                server.serve_unix(listener).await?;
            } else if let Some(addr) = &args.listen {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr}"))?;
                println!(
                    "serving {pool}/{name} on nbd://{}/{name}",
                    listener.local_addr()?
                );
                server.serve_tcp(listener).await?;
            }
            anyhow::Ok(())
        };
        let outcome = tokio::select! {
            served = serve => served,
            signal = stop_signal() => {
                tracing::info!("{signal}: closing {pool}/{name}");
                Ok(())
            }
        };
        // Drop the watch, so the image can be removed or shrunk at once
        // (after a kill -9 it lapses after client.watch_timeout_ms).
        match tokio::time::timeout(CLOSE_TIMEOUT, image.close()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("closing {pool}/{name}: {e}"),
            Err(_) => tracing::warn!("closing {pool}/{name}: no answer in {CLOSE_TIMEOUT:?}"),
        }
        outcome
    })
}

/// How long a stopping gateway tries to drop its watch.
const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The first of SIGTERM and SIGINT, by name.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without handlers the default (exit) applies: never resolve.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Remove a leftover socket from a gateway that is gone; refuse to touch a
/// path that is not a socket, or a socket someone still listens on.
fn remove_stale_socket(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        bail!(
            "{} exists and is not a socket; not replacing it",
            path.display()
        );
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        bail!("{} is in use by a running server", path.display());
    }
    std::fs::remove_file(path).with_context(|| format!("cannot replace {}", path.display()))
}
