//! The two ways a matrix point is driven, each giving one raw measurement
//! per client:
//!
//! - builtin: Cairn's load generator on the client library, in this
//!   process, one image per client, all clients over one measured window;
//! - fio: one `cairn nbd` gateway per image (started once, kept for the
//!   run) and, per repetition, one fio process per client through it
//!   (`--ioengine=nbd --output-format=json+`), run side by side.
//!
//! Against Ceph (`--ceph DIR`) the images are RBD images made with `rbd
//! create`, filled with fio, and every point runs fio's `rbd` engine, one
//! process per client, whatever the spec's driver: the same method, the
//! same reduction.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use cairn_bench::{BenchSpec, RwMode};
use cairn_client::{Cluster, Image};
use cairn_matrix::results::{ClientRaw, DirRaw};
use cairn_matrix::spec::DriverKind;
use cairn_matrix::{MatrixSpec, Point};

use crate::conf;

/// Object size of the benchmark images.
const OBJECT_SIZE: u64 = 4 << 20;

/// Name of client `i`'s image in pool `rbd`.
pub fn image_name(i: u32) -> String {
    format!("bench-c{i}")
}

/// The images of a run, created (and filled) once.
pub struct Images {
    images: Vec<Arc<Image>>,
    /// NBD gateways (fio driver), one per image, and their sockets.
    gateways: Vec<(Child, PathBuf)>,
    /// The Ceph cluster's configuration file, when the run is against Ceph.
    ceph: Option<PathBuf>,
    /// Last: the images are dropped while it still runs.
    rt: tokio::runtime::Runtime,
}

/// How fio reaches the clients' images.
#[derive(Clone, Copy)]
enum Engine<'a> {
    /// Through the NBD gateways (client `i` on the `i`th).
    Nbd(&'a [(Child, PathBuf)]),
    Rbd,
}

/// Run a command to completion; its stderr in the error.
fn command(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().with_context(|| format!("cannot run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Images {
    /// Connect to the cluster of `conf_path`, create `spec.images()`
    /// images and, if the spec asks, write each once in full.
    pub fn create(spec: &MatrixSpec, conf_path: &Path, out: &Path) -> Result<Images> {
        let config = conf::load_file(conf_path)?;
        // One thread, as `cairn bench`: the client's CPU shows in its own
        // process, not in the daemons' CPU-seconds.
        let rt = crate::daemons::runtime(1)?;
        let count = spec.images();
        let (size, precondition) = (spec.image_size, spec.precondition);
        let images = rt.block_on(async {
            let cluster = Cluster::connect(conf::client_options(&config)).await?;
            let mut images = Vec::new();
            for i in 0..count {
                let name = image_name(i);
                Image::create(
                    &cluster,
                    "rbd",
                    &name,
                    size,
                    OBJECT_SIZE,
                    // No exclusive lock: the library handles (kept open)
                    // and the fio driver's gateways write each image in
                    // turn, and a gateway's writes would wait for the lock.
                    Vec::new(),
                )
                .await
                .with_context(|| format!("cannot create image rbd/{name}"))?;
                images.push(Image::open(&cluster, "rbd", &name).await?);
            }
            if precondition {
                let mut fills = tokio::task::JoinSet::new();
                for image in &images {
                    fills.spawn(cairn_bench::fill(image.clone(), size, 4 << 20, 16, None));
                }
                while let Some(done) = fills.join_next().await {
                    done.context("precondition task")?
                        .context("precondition (sequential fill)")?;
                }
            }
            anyhow::Ok(images)
        })?;
        let mut this = Images {
            images,
            gateways: Vec::new(),
            ceph: None,
            rt,
        };
        if spec.driver == DriverKind::Fio {
            this.start_gateways(conf_path, out)?;
        }
        Ok(this)
    }

    /// Create `spec.images()` RBD images in pool `rbd` of the Ceph cluster
    /// of `ceph_conf` and, if the spec asks, fill each once with fio.
    pub fn create_ceph(spec: &MatrixSpec, ceph_conf: &Path) -> Result<Images> {
        let mib = spec.image_size.div_ceil(1 << 20);
        for i in 0..spec.images() {
            let name = image_name(i);
            command(
                Command::new("rbd").arg("-c").arg(ceph_conf).args([
                    "create",
                    &format!("rbd/{name}"),
                    "--size",
                    &format!("{mib}M"),
                ]),
                &format!("rbd create rbd/{name}"),
            )?;
        }
        let this = Images {
            images: Vec::new(),
            gateways: Vec::new(),
            ceph: Some(ceph_conf.to_path_buf()),
            rt: crate::daemons::runtime(1)?,
        };
        if spec.precondition {
            let mut fills = Vec::new();
            for i in 0..spec.images() {
                let child = Command::new("fio")
                    .env("CEPH_CONF", ceph_conf)
                    .args([
                        format!("--name=fill{i}"),
                        "--ioengine=rbd".into(),
                        "--clientname=admin".into(),
                        "--pool=rbd".into(),
                        format!("--rbdname={}", image_name(i)),
                        "--rw=write".into(),
                        "--bs=4M".into(),
                        "--iodepth=16".into(),
                        format!("--size={}", spec.image_size),
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .context("cannot run fio")?;
                // Killed if an earlier fill fails and this one is left.
                fills.push(Reaped(Some(child)));
            }
            for (i, fill) in fills.iter_mut().enumerate() {
                let Some(child) = fill.0.take() else { continue };
                let out = child.wait_with_output()?;
                if !out.status.success() {
                    bail!(
                        "filling rbd/{} with fio failed: {}",
                        image_name(i as u32),
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
            }
        }
        Ok(this)
    }

    fn start_gateways(&mut self, conf_path: &Path, out: &Path) -> Result<()> {
        let exe = std::env::current_exe().context("cannot find the cairn binary")?;
        let dir = out.join("nbd");
        // Sockets of an earlier run would look ready before the new
        // gateways listen.
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot remove {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)?;
        for i in 0..self.images.len() as u32 {
            let socket = dir.join(format!("c{i}.sock"));
            let log = std::fs::File::create(dir.join(format!("c{i}.log")))?;
            let child = Command::new(&exe)
                .arg("--conf")
                .arg(conf_path)
                .args(["nbd", "--image", &format!("rbd/{}", image_name(i))])
                .arg("--socket")
                .arg(&socket)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("cannot start cairn nbd")?;
            self.gateways.push((child, socket));
        }
        for (child, socket) in &mut self.gateways {
            let mut waited = 0;
            while std::os::unix::net::UnixStream::connect(&*socket).is_err() {
                if let Some(status) = child.try_wait()? {
                    bail!("cairn nbd for {} exited: {status}", socket.display());
                }
                if waited > 300 {
                    bail!("cairn nbd does not listen on {}", socket.display());
                }
                std::thread::sleep(Duration::from_millis(100));
                waited += 1;
            }
        }
        Ok(())
    }

    /// The NBD gateways' processes, as (`nbd.I`, pid).
    pub fn gateway_pids(&self) -> Vec<(String, u32)> {
        self.gateways
            .iter()
            .enumerate()
            .map(|(i, (child, _))| (format!("nbd.{i}"), child.id()))
            .collect()
    }

    /// Run one repetition of `point` with `driver`; one raw measurement
    /// per client and the measured seconds. Returns early with an error if
    /// `stop` is set (Ctrl-C).
    pub fn run(
        &self,
        spec: &MatrixSpec,
        point: &Point,
        stop: &AtomicBool,
    ) -> Result<(Vec<ClientRaw>, f64)> {
        match spec.driver {
            _ if self.ceph.is_some() => self.run_fio(spec, point, stop),
            DriverKind::Builtin => self.run_builtin(spec, point, stop),
            DriverKind::Fio => self.run_fio(spec, point, stop),
        }
    }

    fn run_builtin(
        &self,
        spec: &MatrixSpec,
        point: &Point,
        stop: &AtomicBool,
    ) -> Result<(Vec<ClientRaw>, f64)> {
        let bench = BenchSpec {
            rw: point.rw,
            rwmixread: point.rwmixread,
            bs: point.bs,
            iodepth: point.iodepth,
            numjobs: point.numjobs,
            runtime: Duration::from_secs(spec.runtime_s),
            ramp: Duration::from_secs(spec.ramp_s),
            precondition: false,
            size: None,
            seed: None,
        };
        let volumes: Vec<Arc<Image>> = self.images[..point.clients as usize].to_vec();
        let reports = self.rt.block_on(async {
            let interrupted = async {
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            let limit = deadline(spec);
            tokio::select! {
                r = cairn_bench::run_each(volumes, &bench) => r.map_err(anyhow::Error::from),
                () = interrupted => Err(anyhow::anyhow!("interrupted")),
                () = tokio::time::sleep(limit) => Err(anyhow::anyhow!(
                    "the point did not finish within {} s (a stalled cluster?)",
                    limit.as_secs()
                )),
            }
        })?;
        let clients = reports
            .iter()
            .zip(0u32..)
            .map(|(r, client)| ClientRaw {
                client,
                read: DirRaw {
                    ops: r.read.ops,
                    bytes: r.read.bytes,
                    lat_ns: DirRaw::buckets(r.read_histogram()),
                },
                write: DirRaw {
                    ops: r.write.ops,
                    bytes: r.write.bytes,
                    lat_ns: DirRaw::buckets(r.write_histogram()),
                },
            })
            .collect();
        Ok((clients, spec.runtime_s as f64))
    }

    fn run_fio(
        &self,
        spec: &MatrixSpec,
        point: &Point,
        stop: &AtomicBool,
    ) -> Result<(Vec<ClientRaw>, f64)> {
        // One fio process, one job section per client: every client
        // measured over the same window.
        let mut fio = Command::new("fio");
        let engine = match &self.ceph {
            Some(conf) => {
                fio.env("CEPH_CONF", conf);
                Engine::Rbd
            }
            None => Engine::Nbd(&self.gateways),
        };
        fio.args(fio_args(spec, point, engine))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let deadline = deadline(spec);
        let out = run_with_deadline(&mut fio, deadline, stop)?;
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            bail!("fio exited with {}: {}", out.status, stderr.trim());
        }
        cairn_matrix::fio::parse_clients(&String::from_utf8_lossy(&out.stdout), point.clients)
            .map_err(|e| anyhow::anyhow!("fio: {e}; stderr: {}", stderr.trim()))
    }
}

/// How long a repetition may take before it is given up: its ramp and
/// runtime and a minute more (a stalled cluster must not hang the run).
fn deadline(spec: &MatrixSpec) -> Duration {
    Duration::from_secs(spec.ramp_s + spec.runtime_s + 60)
}

/// A child process killed (and reaped) if dropped unfinished.
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Run `cmd` to completion, its output read as it comes (so a large
/// output never blocks it); killed at `limit` or when `stop` is set.
fn run_with_deadline(
    cmd: &mut Command,
    limit: Duration,
    stop: &AtomicBool,
) -> Result<std::process::Output> {
    use std::io::Read;
    let mut child = Reaped(Some(cmd.spawn().context("cannot run fio")?));
    let inner = child.0.as_mut().context("no child")?;
    let mut stdout = inner.stdout.take().context("no stdout")?;
    let mut stderr = inner.stderr.take().context("no stderr")?;
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = inner.try_wait()? {
            break status;
        }
        if stop.load(Ordering::Relaxed) {
            drop(child);
            bail!("interrupted");
        }
        if start.elapsed() > limit {
            drop(child);
            bail!(
                "fio did not finish within {} s (a stalled cluster?); killed",
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    child.0 = None;
    Ok(std::process::Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    })
}

impl Drop for Images {
    fn drop(&mut self) {
        for (child, socket) in &mut self.gateways {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(socket);
        }
    }
}

/// fio's arguments for `point`: global options, then one job section per
/// client (`c0`, `c1`, ...) naming its image.
fn fio_args(spec: &MatrixSpec, point: &Point, engine: Engine) -> Vec<String> {
    let mut args = vec![
        format!("--rw={}", point.rw),
        format!("--bs={}", point.bs),
        format!("--iodepth={}", point.iodepth),
        format!("--numjobs={}", point.numjobs),
        format!("--ramp_time={}", spec.ramp_s),
        format!("--runtime={}", spec.runtime_s),
        "--time_based".into(),
        "--randrepeat=0".into(),
        "--norandommap".into(),
        "--output-format=json+".into(),
    ];
    if point.rw == RwMode::RandRw {
        args.push(format!("--rwmixread={}", point.rwmixread));
    }
    if point.rw.is_random() {
        args.push(format!("--size={}", spec.image_size));
    } else {
        // Each job walks its own block-aligned slice, as the builtin
        // driver does (the spec ensures a slice holds a block).
        let slice = spec.image_size / u64::from(point.numjobs) / point.bs * point.bs;
        args.push(format!("--size={slice}"));
        args.push(format!("--offset_increment={slice}"));
    }
    match engine {
        Engine::Nbd(_) => args.push("--ioengine=nbd".into()),
        Engine::Rbd => {
            args.push("--ioengine=rbd".into());
            args.push("--clientname=admin".into());
            args.push("--pool=rbd".into());
        }
    }
    for i in 0..point.clients {
        args.push(format!("--name=c{i}"));
        match engine {
            Engine::Nbd(gateways) => args.push(format!(
                "--uri=nbd+unix:///{}?socket={}",
                image_name(i),
                gateways[i as usize].1.display()
            )),
            Engine::Rbd => args.push(format!("--rbdname={}", image_name(i))),
        }
    }
    args
}
