//! `cairn cluster up|status|down`: a whole cluster on this machine, for
//! trying Cairn out, tests and benchmarks.
//!
//! `up` writes `DIR/cairn.toml` (first time only, with a free monitor port),
//! starts the monitor and N OSDs as background processes logging to
//! `DIR/*.log`, records their pids and start times in `DIR/cluster.json`,
//! creates pool `rbd` and waits until every PG is active. Run again, it
//! starts only the daemons that are not running. `down` signals exactly the
//! processes in `cluster.json` whose start time still matches.
//!
//! CRUSH: with `--osds N` every OSD is on this machine's host bucket, so a
//! new cluster's default rule separates replicas by OSD (as Ceph's vstart
//! does). With `--hosts H --osds-per-host M` OSDs `(k-1)*M .. k*M-1` are on
//! host `hk` (`--crush-location host=hk`, also written to `[osd.N]` of a new
//! `cairn.toml` so plain restarts keep it) and replicas go to distinct hosts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use cairn_config::{Config, StoreKind};
use cairn_wire::MonCommand;
use clap::Subcommand;
use serde::{Deserialize, Serialize};

use crate::{admin, osd_store, Context};

#[derive(Subcommand)]
pub enum ClusterCmd {
    /// Start a monitor and N OSDs, create pool `rbd`, wait until all PGs are active.
    Up {
        /// OSDs on this machine's host (default 3; with --hosts, the total).
        #[arg(long)]
        osds: Option<u32>,
        /// Spread the OSDs over this many CRUSH hosts (h1, h2, ...),
        /// replicas on distinct hosts.
        #[arg(long)]
        hosts: Option<u32>,
        /// OSDs per host with --hosts (default 1).
        #[arg(long, requires = "hosts")]
        osds_per_host: Option<u32>,
        #[arg(long, default_value = "cairn-cluster", env = "CAIRN_DIR")]
        dir: PathBuf,
        /// Object store for the OSDs (first `up` only).
        #[arg(long, value_name = "bluestore|filestore|memstore")]
        store: Option<String>,
        /// Set an option in the new cluster's cairn.toml, e.g.
        /// `--set osd.bluestore_block_size=2G` (first `up` only; repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// PGs in pool `rbd` (first `up` only).
        #[arg(long)]
        pg_num: Option<u32>,
        /// Seconds to wait for the cluster to become active.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Show the daemons of the local cluster and the cluster status.
    Status {
        #[arg(long, default_value = "cairn-cluster", env = "CAIRN_DIR")]
        dir: PathBuf,
    },
    /// Stop the daemons this cluster started.
    Down {
        #[arg(long, default_value = "cairn-cluster", env = "CAIRN_DIR")]
        dir: PathBuf,
    },
}

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Daemon {
    name: String,
    pid: u32,
    /// Process start time (clock ticks since boot, /proc/PID/stat field 22).
    start: u64,
}

#[derive(Serialize, Deserialize, Default, Debug)]
struct State {
    daemons: Vec<Daemon>,
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join("cluster.json")
}

fn load_state(dir: &Path) -> Result<State> {
    match std::fs::read_to_string(state_path(dir)) {
        Ok(text) => serde_json::from_str(&text).context("corrupt cluster.json"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
        Err(e) => Err(e).context("cannot read cluster.json"),
    }
}

fn save_state(dir: &Path, state: &State) -> Result<()> {
    let tmp = dir.join("cluster.json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(state)?)?;
    std::fs::rename(&tmp, state_path(dir))?;
    Ok(())
}

fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let state = rest.split_whitespace().next()?;
    if state == "Z" {
        return None; // exited, not yet reaped
    }
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn is_running(d: &Daemon) -> bool {
    process_start(d.pid) == Some(d.start)
}

fn spawn_daemon(dir: &Path, name: &str, args: &[String]) -> Result<Daemon> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the cairn binary")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.log")))
        .with_context(|| format!("cannot open {name}.log"))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // Own session: the daemon outlives this command and its terminal.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {name}"))?;
    let pid = child.id();
    let start = process_start(pid).context("daemon exited at once")?;
    Ok(Daemon {
        name: name.to_string(),
        pid,
        start,
    })
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

pub fn run(ctx: &Context, cmd: ClusterCmd) -> Result<()> {
    match cmd {
        ClusterCmd::Up {
            osds,
            hosts,
            osds_per_host,
            dir,
            store,
            set,
            pg_num,
            timeout,
        } => {
            let layout = Layout::new(osds, hosts, osds_per_host)?;
            let fresh = Fresh { store, set };
            up(
                ctx,
                &layout,
                &dir,
                &fresh,
                pg_num,
                Duration::from_secs(timeout),
            )
        }
        ClusterCmd::Status { dir } => status(ctx, &dir),
        ClusterCmd::Down { dir } => down(&dir),
    }
}

/// Settings for a cluster's first `up`.
struct Fresh {
    store: Option<String>,
    set: Vec<String>,
}

/// How many OSDs, and on which CRUSH hosts.
struct Layout {
    osds: u32,
    /// `Some(M)`: M OSDs per host `h1`, `h2`, ...; `None`: all on this machine.
    per_host: Option<u32>,
}

impl Layout {
    fn new(osds: Option<u32>, hosts: Option<u32>, per_host: Option<u32>) -> Result<Layout> {
        let Some(hosts) = hosts else {
            let osds = osds.unwrap_or(3);
            if osds == 0 {
                bail!("--osds must be at least 1");
            }
            return Ok(Layout {
                osds,
                per_host: None,
            });
        };
        let per_host = per_host.unwrap_or(1);
        if hosts == 0 || per_host == 0 {
            bail!("--hosts and --osds-per-host must be at least 1");
        }
        let total = hosts
            .checked_mul(per_host)
            .filter(|t| *t <= 4096)
            .context("too many OSDs (at most 4096)")?;
        if osds.is_some_and(|n| n != total) {
            bail!(
                "--osds {} does not match --hosts {hosts} x --osds-per-host {per_host}",
                osds.unwrap_or(0)
            );
        }
        Ok(Layout {
            osds: total,
            per_host: Some(per_host),
        })
    }

    /// The CRUSH host of OSD `id`, if the layout names hosts.
    fn host_of(&self, id: u32) -> Option<String> {
        self.per_host.map(|m| format!("h{}", id / m + 1))
    }

    /// Failure domains the default rule has: hosts, or OSDs.
    fn domains(&self) -> u32 {
        self.per_host.map_or(self.osds, |m| self.osds / m)
    }
}

/// A new cluster's configuration for `layout`: a free monitor port, OSD
/// locations, and (one machine) replicas on distinct OSDs; `--store` and
/// `--set` apply last.
fn new_config(layout: &Layout, fresh: &Fresh) -> Result<Config> {
    let mut config = Config::default();
    config.set("global.mon_addr", &format!("127.0.0.1:{}", free_port()?))?;
    if layout.per_host.is_none() {
        config.set("mon.osd_crush_chooseleaf_type", "osd")?;
    }
    for id in 0..layout.osds {
        if let Some(host) = layout.host_of(id) {
            config.set(&format!("osd.{id}.crush_location"), &format!("host={host}"))?;
        }
    }
    if let Some(store) = &fresh.store {
        config.set("osd.store", store).context("--store")?;
    }
    config.set_args(&fresh.set)?;
    Ok(config)
}

fn up(
    ctx: &Context,
    layout: &Layout,
    dir: &Path,
    fresh: &Fresh,
    pg_num: Option<u32>,
    timeout: Duration,
) -> Result<()> {
    let osds = layout.osds;
    if let Some(pg_num) = pg_num {
        if !pg_num.is_power_of_two() {
            bail!("pg_num {pg_num} must be a power of two");
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let conf_path = dir.join("cairn.toml");
    if !conf_path.exists() {
        let config = new_config(layout, fresh)?;
        std::fs::write(&conf_path, config.to_toml())?;
    }
    let config = Config::load(&conf_path)?;
    let conf_arg = conf_path.display().to_string();
    let mut state = load_state(&dir)?;
    state.daemons.retain(is_running);
    let running = |state: &State, name: &str| state.daemons.iter().any(|d| d.name == name);
    if !running(&state, "mon") {
        let args = vec![
            "mon".into(),
            "--conf".into(),
            conf_arg.clone(),
            "--dir".into(),
            dir.join("mon").display().to_string(),
        ];
        state.daemons.push(spawn_daemon(&dir, "mon", &args)?);
        // Recorded at once: if a later step fails, `down` still finds it.
        save_state(&dir, &state)?;
    }
    for id in 0..osds {
        let name = format!("osd.{id}");
        let osd_dir = dir.join(&name);
        let osd_conf = config.osd_for(id);
        if osd_conf.store == StoreKind::Bluestore && osd_store::recorded_kind(&osd_dir)?.is_none() {
            let req = osd_store::MkfsRequest::default();
            osd_store::mkfs(&osd_dir, osd_conf.store, &osd_conf, &req)
                .with_context(|| format!("{name}: mkfs"))?;
        }
        if !running(&state, &name) {
            let mut args = vec![
                "osd".into(),
                "--conf".into(),
                conf_arg.clone(),
                "--id".into(),
                id.to_string(),
                "--dir".into(),
                dir.join(&name).display().to_string(),
            ];
            if let Some(host) = layout.host_of(id) {
                args.extend(["--crush-location".into(), format!("host={host}")]);
            }
            state.daemons.push(spawn_daemon(&dir, &name, &args)?);
            save_state(&dir, &state)?;
        }
    }
    save_state(&dir, &state)?;
    let ctx = Context {
        conf_path: Some(conf_path.clone()),
        mon_override: None,
        json: ctx.json,
    };
    let deadline = Instant::now() + timeout;
    wait_for(&ctx, deadline, "OSDs to boot", |status| {
        status["osds"]["up"].as_u64() >= Some(osds as u64)
    })?;
    let pools = admin::mon_command(&ctx, MonCommand::PoolLs)?;
    let has_rbd = pools
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["name"] == "rbd");
    if !has_rbd {
        let size = layout.domains().min(3);
        let cmd = MonCommand::PoolCreate {
            name: "rbd".into(),
            pg_num,
            size: Some(size),
            min_size: Some(size.min(2)),
            rule: None,
        };
        admin::mon_command(&ctx, cmd)?;
    }
    let status = wait_for(&ctx, deadline, "every PG to be active", |status| {
        let pgs = &status["pgs"];
        pgs["total"].as_u64().unwrap_or(0) > 0 && pgs["active"] == pgs["total"]
    })?;
    if ctx.json {
        println!("{status}");
    } else {
        println!(
            "cluster up: {} osds, {} pgs active ({}); config {}",
            status["osds"]["up"],
            status["pgs"]["active"],
            status["health"].as_str().unwrap_or("?"),
            conf_path.display()
        );
        println!("use it with: export CAIRN_CONF={}", conf_path.display());
    }
    Ok(())
}

fn wait_for(
    ctx: &Context,
    deadline: Instant,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value> {
    loop {
        let last_error = match admin::mon_command(ctx, MonCommand::Status) {
            Ok(status) if ok(&status) => return Ok(status),
            Ok(status) => format!("status: {status}"),
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() > deadline {
            bail!("timed out waiting for {what} ({last_error}); see the logs in the cluster directory");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn status(ctx: &Context, dir: &Path) -> Result<()> {
    if !state_path(dir).exists() {
        bail!(
            "no local cluster in {} (start one with `cairn cluster up`)",
            dir.display()
        );
    }
    let state = load_state(dir)?;
    let conf_path = dir.join("cairn.toml");
    let ctx = Context {
        conf_path: Some(conf_path),
        mon_override: None,
        json: ctx.json,
    };
    let daemons: Vec<serde_json::Value> = state
        .daemons
        .iter()
        .map(|d| serde_json::json!({ "name": d.name, "pid": d.pid, "running": is_running(d) }))
        .collect();
    let cluster = admin::mon_command(&ctx, MonCommand::Status).ok();
    if ctx.json {
        println!(
            "{}",
            serde_json::json!({ "daemons": daemons, "status": cluster })
        );
        return Ok(());
    }
    println!("{:<8} {:>8}  STATE", "DAEMON", "PID");
    for d in &state.daemons {
        println!(
            "{:<8} {:>8}  {}",
            d.name,
            d.pid,
            if is_running(d) { "running" } else { "stopped" }
        );
    }
    match cluster {
        Some(status) => crate::output::print_status(&status),
        None => println!("monitor not reachable"),
    }
    Ok(())
}

fn down(dir: &Path) -> Result<()> {
    if !state_path(dir).exists() {
        bail!("no local cluster in {} (nothing to stop)", dir.display());
    }
    let mut state = load_state(dir)?;
    let alive: Vec<Daemon> = state
        .daemons
        .iter()
        .filter(|d| is_running(d))
        .cloned()
        .collect();
    // OSDs first, then the monitor, so OSDs are not marked down one by one.
    for d in alive.iter().rev() {
        unsafe { libc::kill(d.pid as i32, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive.iter().any(is_running) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for d in alive.iter().filter(|d| is_running(d)) {
        unsafe { libc::kill(d.pid as i32, libc::SIGKILL) };
    }
    println!("stopped {} daemons", alive.len());
    state.daemons.clear();
    save_state(dir, &state)?;
    Ok(())
}
