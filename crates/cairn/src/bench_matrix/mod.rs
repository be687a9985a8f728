//! `cairn bench matrix --spec FILE.toml --out DIR` and `cairn bench compare
//! A.json B.json`.
//!
//! A matrix run: check the spec (and that its driver's tools are here)
//! before anything starts; start a fresh local cluster in `DIR/cluster`;
//! create one image per client and fill each once; then for every point
//! and repetition, drive the clients and read every daemon's CPU time at
//! the start and end of the measured window. After each point the reports
//! in `DIR` are rewritten, so an interrupted run (Ctrl-C) keeps every
//! finished point. A point that fails (a daemon died, fio failed) is
//! recorded with its error and the run goes on. The cluster is stopped at
//! the end, however the run ends.
//!
//! The method (what is summed, merged, reduced) is `cairn_matrix`'s.

mod cluster;
mod drivers;
mod progress;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use cairn_matrix::results::{RepRaw, Target, FORMAT};
use cairn_matrix::spec::DriverKind;
use cairn_matrix::{compare, plot, report, MatrixSpec, PointResult, Results};
use clap::Args;

use cluster::{count_between, cpu_between, LocalCluster};
use drivers::Images;
use progress::Progress;

#[derive(Args)]
pub struct MatrixArgs {
    /// The matrix spec (TOML; see docs/benchmarking.md).
    #[arg(long)]
    spec: PathBuf,
    /// Directory for results.json, results.csv, report.md, the charts and
    /// the run's cluster (DIR/cluster). Made if missing.
    #[arg(long)]
    out: PathBuf,
    /// Replace the results (and cluster) of an earlier run in DIR.
    #[arg(long)]
    force: bool,
    /// Only check the spec and print its points.
    #[arg(long)]
    dry_run: bool,
    /// Run against the Ceph cluster that `bench/ceph/cluster.sh up DIR`
    /// started (DIR/ceph.conf, DIR/pids) instead of a fresh Cairn cluster,
    /// through fio's rbd engine; the spec's [cluster] section is then
    /// only a description.
    #[arg(long, value_name = "DIR")]
    ceph: Option<PathBuf>,
}

#[derive(Args)]
pub struct CompareArgs {
    /// The baseline run's results.json.
    a: PathBuf,
    /// The run compared with it.
    b: PathBuf,
    /// Also write the comparison as markdown to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Set by SIGINT.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// `cairn bench compare`.
pub fn compare(args: CompareArgs) -> Result<()> {
    let a = report::load(&args.a).map_err(anyhow::Error::msg)?;
    let b = report::load(&args.b).map_err(anyhow::Error::msg)?;
    print!("{}", compare::text(&a, &b));
    if let Some(out) = &args.out {
        report::write_atomic(out, &compare::markdown(&a, &b))
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    Ok(())
}

/// Refuse what would fail later: the driver's tools, the output directory.
fn preflight(spec: &MatrixSpec, args: &MatrixArgs) -> Result<()> {
    if let Some(dir) = &args.ceph {
        for tool in ["ceph", "rbd"] {
            if std::process::Command::new(tool)
                .arg("--version")
                .output()
                .is_err()
            {
                bail!("Ceph is not installed ({tool} not found): run bench/ceph/install.sh");
            }
        }
        let rbd_engine = std::process::Command::new("fio")
            .arg("--enghelp=rbd")
            .output();
        if !rbd_engine.is_ok_and(|o| o.status.success()) {
            bail!("running against Ceph needs fio with its rbd engine (apt-get install fio)");
        }
        for file in ["ceph.conf", "pids"] {
            if !dir.join(file).exists() {
                bail!(
                    "{} has no {file}: start a cluster there with bench/ceph/cluster.sh up {}",
                    dir.display(),
                    dir.display()
                );
            }
        }
    } else if spec.driver == DriverKind::Fio {
        let fio = std::process::Command::new("fio")
            .arg("--enghelp=nbd")
            .output();
        match fio {
            Err(_) => {
                bail!("the fio driver needs fio, which is not installed (apt-get install fio)")
            }
            Ok(out) if !out.status.success() => {
                bail!("the fio driver needs fio's nbd engine (fio 3.16 or later built with libnbd)")
            }
            Ok(_) => {}
        }
    }
    if args.out.join("results.json").exists() && !args.force && !args.dry_run {
        bail!(
            "{} already holds results; use --force to replace them, or another --out",
            args.out.display()
        );
    }
    Ok(())
}

/// `cairn bench matrix`.
pub fn run(args: MatrixArgs) -> Result<()> {
    let mut spec = MatrixSpec::load(&args.spec)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.spec.display()))?;
    let points = spec.points();
    preflight(&spec, &args)?;
    if args.ceph.is_some() {
        // Against Ceph every point goes through fio (its rbd engine).
        spec.driver = DriverKind::Fio;
    }
    if args.dry_run {
        println!(
            "{}: {} points x {} repetitions, about {} s measured",
            spec.name,
            points.len(),
            spec.repetitions,
            spec.measured_seconds()
        );
        for p in &points {
            println!("  {}", p.id());
        }
        return Ok(());
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let cluster_dir = args.out.join("cluster");
    if args.force && cluster_dir.exists() {
        // An earlier run's cluster: stop whatever of it still runs.
        let _ = std::process::Command::new(std::env::current_exe()?)
            .args(["cluster", "down", "--dir"])
            .arg(&cluster_dir)
            .output();
        std::fs::remove_dir_all(&cluster_dir)
            .with_context(|| format!("cannot remove {}", cluster_dir.display()))?;
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
    }

    let c = &spec.cluster;
    let (mut cluster, target) = match &args.ceph {
        Some(dir) => {
            let dir = dir
                .canonicalize()
                .with_context(|| format!("cannot find {}", dir.display()))?;
            eprintln!("running against the Ceph cluster in {}", dir.display());
            let cluster = LocalCluster::attach(&dir, &dir.join("pids"))?;
            (cluster, ceph_target(&dir, spec.cluster.osds))
        }
        None => {
            eprintln!(
                "starting a {}-OSD {} cluster in {}",
                c.osds,
                c.store,
                cluster_dir.display()
            );
            let cluster = LocalCluster::start(c, &cluster_dir)?;
            let target = Target {
                system: "cairn".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                config: describe(&spec),
            };
            (cluster, target)
        }
    };
    let mut results = Results {
        format: FORMAT,
        spec: spec.clone(),
        target,
        machine: machine(),
        started: utc_now(),
        points: Vec::new(),
        interrupted: false,
    };
    eprintln!(
        "creating {} image(s) of {} bytes{}",
        spec.images(),
        spec.image_size,
        if spec.precondition {
            " and filling them"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let images = match &args.ceph {
        Some(dir) => Images::create_ceph(&spec, &dir.join("ceph.conf"))?,
        None => Images::create(&spec, &cluster.conf(), &args.out)?,
    };
    eprintln!("ready in {:.0} s", started.elapsed().as_secs_f64());

    let mut progress = Progress::new(points.len(), spec.measured_seconds());
    for (n, point) in points.iter().enumerate() {
        let mut reps = Vec::new();
        let mut error = None;
        for rep in 0..spec.repetitions {
            if INTERRUPTED.load(Ordering::Relaxed) {
                break;
            }
            progress.show(n, &point.id(), rep, spec.repetitions);
            match measure(&spec, point, &images, &cluster) {
                Ok(r) => reps.push(r),
                Err(e) => {
                    error = Some(format!("{e:#}"));
                    break;
                }
            }
            progress.done(spec.ramp_s + spec.runtime_s);
        }
        if INTERRUPTED.load(Ordering::Relaxed) {
            results.interrupted = true;
            break;
        }
        let result = PointResult::new(*point, reps, error)?;
        progress.finish_point(&result);
        results.points.push(result);
        write_reports(&args.out, &results)?;
    }
    progress.clear();
    drop(images);
    cluster.stop();
    write_reports(&args.out, &results)?;
    let failed = results.points.iter().filter(|p| p.error.is_some()).count();
    eprintln!(
        "{}{} of {} points measured{}; results in {}",
        if results.interrupted {
            "interrupted: "
        } else {
            ""
        },
        results.points.len() - failed,
        points.len(),
        if failed > 0 {
            format!(", {failed} failed")
        } else {
            String::new()
        },
        args.out.display()
    );
    print!("{}", report::markdown(&results));
    if results.interrupted {
        // As a process killed by SIGINT would: scripts must not go on.
        std::process::exit(130);
    }
    Ok(())
}

/// One repetition: the clients' measurements and the daemons' CPU time in
/// the measured window.
fn measure(
    spec: &MatrixSpec,
    point: &cairn_matrix::Point,
    images: &Images,
    cluster: &LocalCluster,
) -> Result<RepRaw> {
    let dead_before = cluster.dead();
    let (ramp, runtime) = (
        Duration::from_secs(spec.ramp_s),
        Duration::from_secs(spec.runtime_s),
    );
    let done = AtomicBool::new(false);
    let gateways = images.gateway_pids();
    let cpu = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            // Sleep in short steps: a point that ends early (an error,
            // Ctrl-C) must not wait out the window here.
            let nap = |d: Duration| {
                let until = Instant::now() + d;
                while Instant::now() < until {
                    if done.load(Ordering::Relaxed) || INTERRUPTED.load(Ordering::Relaxed) {
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                true
            };
            if !nap(ramp) {
                return None;
            }
            let cpu = || {
                let mut cpu = cluster.cpu_seconds();
                cpu.extend(LocalCluster::cpu_seconds_of(&gateways));
                cpu
            };
            let (cpu0, csw0) = (cpu(), cluster.context_switches(&gateways));
            // The workload may end a little before this thread wakes (it
            // runs ramp + runtime too): its end is then the window's end.
            if !nap(runtime) && INTERRUPTED.load(Ordering::Relaxed) {
                return None;
            }
            let csw = count_between(&csw0, &cluster.context_switches(&gateways));
            Some((cpu_between(&cpu0, &cpu()), csw))
        });
        let measured = images.run(spec, point, &INTERRUPTED);
        done.store(true, Ordering::Relaxed);
        (measured, sampler.join())
    });
    let (measured, cpu) = cpu;
    let (clients, seconds) = measured?;
    // Only deaths during this point fail it: later points run on what is
    // left, as a user's cluster would.
    let died: Vec<String> = cluster
        .dead()
        .into_iter()
        .filter(|d| !dead_before.contains(d))
        .collect();
    if !died.is_empty() {
        bail!("daemon(s) died during the point: {}", died.join(", "));
    }
    let (cpu_s, csw) = match cpu.ok().flatten() {
        Some((cpu_s, csw)) => (cpu_s, Some(csw)),
        None => (BTreeMap::new(), None),
    };
    Ok(RepRaw {
        seconds,
        clients,
        cpu_s,
        csw,
    })
}

fn write_reports(out: &Path, results: &Results) -> Result<()> {
    let write = |name: &str, text: &str| {
        report::write_atomic(&out.join(name), text)
            .with_context(|| format!("cannot write {}", out.join(name).display()))
    };
    write("results.json", &report::json(results))?;
    write("results.csv", &report::csv(results))?;
    write("report.md", &report::markdown(results))?;
    for chart in plot::charts(results) {
        write(chart.file, &plot::svg(&chart))?;
    }
    Ok(())
}

/// What a Ceph run measured: its version (`ceph --version`) and the
/// cluster script's own description.
fn ceph_target(dir: &Path, osds: u32) -> Target {
    let version = std::process::Command::new("ceph")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let version = version
        .split_whitespace()
        .nth(2)
        .unwrap_or("unknown")
        .to_string();
    let described = std::fs::read_to_string(dir.join("description.txt"))
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|_| format!("{osds} OSDs"));
    Target {
        system: "ceph".into(),
        version,
        config: format!("{described}, fio rbd engine"),
    }
}

/// The cluster's configuration in words.
fn describe(spec: &MatrixSpec) -> String {
    let c = &spec.cluster;
    let mut text = format!(
        "{} OSDs, {}, pool rbd with {} replicas and {} PGs, {} driver",
        c.osds,
        c.store,
        c.osds.min(3),
        c.pg_num,
        spec.driver.as_str()
    );
    if !c.set.is_empty() {
        text.push_str(&format!(", set {}", c.set.join(" ")));
    }
    text
}

/// Host, CPUs, memory and kernel of this machine.
pub fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let host = read("/proc/sys/kernel/hostname").trim().to_string();
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    let model = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_default();
    format!(
        "{host}: {cpus} CPUs ({model}), {:.1} GiB, Linux {kernel}",
        mem_kib as f64 / (1 << 20) as f64
    )
}

/// The time now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
