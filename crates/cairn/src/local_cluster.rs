//! `cairn cluster up|status|down|cut|heal`: a whole cluster on this
//! machine, for trying Cairn out, tests and benchmarks.
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
//! The layout is recorded in `cluster.json` at the first `up`; a later `up`
//! may restate it but not change it.
//!
//! With `--netns` each host's OSDs also run in their own network namespace
//! with an address on a public and on a cluster network ([`netns`]); the
//! monitor and clients stay in the root namespace, on the public bridge.
//! `cut` and `heal` set a host's links down and up; `down` removes the
//! namespaces, links and bridges after stopping the daemons.

mod layout;
mod netns;
mod state;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use cairn_config::{Config, StoreKind};
use cairn_wire::{CrushCommand, MonCommand};
use clap::Subcommand;

use crate::{admin, osd_store, Context};
use layout::{Layout, LayoutArgs};
use netns::{HostNet, Net};
use state::{is_running, load_state, save_state, spawn_daemon, state_path, Daemon, State};

/// How long `cluster up` waits for the cluster to become active, unless
/// `--timeout` says otherwise.
const UP_TIMEOUT_SECS: u64 = 120;

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
        /// With --hosts: OSDs per host served as emulated spinning disks
        /// (class hdd; `osd.bluestore_device_emulation`), for trying slow
        /// and fast pools on one machine; rule `hdd_rule` places on them.
        #[arg(long, requires = "hosts")]
        hdd_osds_per_host: Option<u32>,
        /// With --hosts: OSDs per host of class nvme (this machine's
        /// device as it is); rule `nvme_rule` places on them.
        #[arg(long, requires = "hosts")]
        nvme_osds_per_host: Option<u32>,
        /// Run each host's OSDs in their own network namespace, with an
        /// address on a public and a cluster network (needs root, --hosts).
        #[arg(long)]
        netns: bool,
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
    },
    /// Show the daemons of the local cluster and the cluster status.
    /// Exits non-zero when a daemon is not running.
    Status {
        /// The cluster's directory (default: that of `--conf` or
        /// `CAIRN_CONF` if it is a local cluster's, else `cairn-cluster`).
        #[arg(long, env = "CAIRN_DIR")]
        dir: Option<PathBuf>,
    },
    /// Stop the daemons this cluster started (and remove its host network).
    Down {
        #[arg(long, default_value = "cairn-cluster", env = "CAIRN_DIR")]
        dir: PathBuf,
    },
    /// Cut a host's links (a --netns cluster): its packets are dropped.
    Cut {
        /// The host, e.g. `h2`.
        #[arg(long)]
        host: String,
        #[arg(long, default_value = "both", value_name = "public|cluster|both")]
        network: String,
        #[arg(long, default_value = "cairn-cluster", env = "CAIRN_DIR")]
        dir: PathBuf,
    },
    /// Restore a host's links (default: every host's).
    Heal {
        #[arg(long)]
        host: Option<String>,
        #[arg(long, default_value = "both", value_name = "public|cluster|both")]
        network: String,
        #[arg(long, default_value = "cairn-cluster", env = "CAIRN_DIR")]
        dir: PathBuf,
    },
}

fn free_port(ip: std::net::Ipv4Addr) -> Result<u16> {
    let listener = std::net::TcpListener::bind((ip, 0))?;
    Ok(listener.local_addr()?.port())
}

pub fn run(ctx: &Context, cmd: ClusterCmd) -> Result<()> {
    match cmd {
        ClusterCmd::Up {
            osds,
            hosts,
            osds_per_host,
            hdd_osds_per_host,
            nvme_osds_per_host,
            netns,
            dir,
            store,
            set,
            pg_num,
        } => {
            let asked = LayoutArgs {
                osds,
                hosts,
                per_host: osds_per_host,
                netns,
                hdd: hdd_osds_per_host,
                nvme: nvme_osds_per_host,
            };
            let fresh = Fresh { store, set };
            up(
                ctx,
                &asked,
                &dir,
                &fresh,
                pg_num,
                Duration::from_secs(ctx.timeout.unwrap_or(UP_TIMEOUT_SECS)),
            )
        }
        ClusterCmd::Status { dir } => status(ctx, &status_dir(ctx, dir)),
        ClusterCmd::Down { dir } => down(&dir),
        ClusterCmd::Cut { host, network, dir } => set_links(&dir, Some(&host), &network, false),
        ClusterCmd::Heal { host, network, dir } => set_links(&dir, host.as_deref(), &network, true),
    }
}

/// Settings for a cluster's first `up`.
struct Fresh {
    store: Option<String>,
    set: Vec<String>,
}

impl Fresh {
    /// Apply `--store` and `--set` to `config`.
    fn apply(&self, config: &mut Config) -> Result<()> {
        if let Some(store) = &self.store {
            config.set("osd.store", store).context("--store")?;
        }
        config.set_args(&self.set)?;
        Ok(())
    }
}

/// A new cluster's configuration for `layout`: a free monitor port, OSD
/// locations, and (one machine) replicas on distinct OSDs; `--store` and
/// `--set` apply last.
fn new_config(layout: &Layout, net: Option<&HostNet>, fresh: &Fresh) -> Result<Config> {
    let mut config = Config::default();
    let mon_ip = net.map_or(std::net::Ipv4Addr::LOCALHOST, HostNet::mon_ip);
    config.set(
        "global.mon_addr",
        &format!("{mon_ip}:{}", free_port(mon_ip)?),
    )?;
    if layout.per_host.is_none() {
        // One machine: replicas and failure reports count by OSD.
        config.set("mon.osd_crush_chooseleaf_type", "osd")?;
        config.set("mon.osd_reporter_subtree_level", "osd")?;
    }
    for id in 0..layout.osds {
        if let Some(host) = layout.host_of(id) {
            config.set(&format!("osd.{id}.crush_location"), &format!("host={host}"))?;
        }
        if let Some(class) = layout.class_of(id) {
            config.set(&format!("osd.{id}.crush_device_class"), class)?;
            if class == "hdd" {
                config.set(&format!("osd.{id}.bluestore_device_emulation"), "hdd")?;
            }
        }
        if let (Some(net), Some(k)) = (net, layout.host_number(id)) {
            let public = format!("{}:0", net.ip(Net::Public, k));
            let cluster = format!("{}:0", net.ip(Net::Cluster, k));
            config.set(&format!("osd.{id}.public_addr"), &public)?;
            config.set(&format!("osd.{id}.cluster_addr"), &cluster)?;
        }
    }
    fresh.apply(&mut config)?;
    Ok(config)
}

fn up(
    ctx: &Context,
    asked: &LayoutArgs,
    dir: &Path,
    fresh: &Fresh,
    pg_num: Option<u32>,
    timeout: Duration,
) -> Result<()> {
    if let Some(pg_num) = pg_num {
        if !pg_num.is_power_of_two() {
            bail!("pg_num {pg_num} must be a power of two");
        }
    }
    // Everything that can refuse does so before anything is made.
    let recorded = match dir.canonicalize() {
        Ok(existing) => load_state(&existing)?.layout,
        Err(_) => None,
    };
    let layout = Layout::resolve(asked, recorded.as_ref())?;
    if layout.netns {
        netns::check_usable()?;
    }
    if !dir.join("cairn.toml").exists() {
        fresh.apply(&mut Config::default())?;
    } else {
        refuse_fresh_flags(&dir.join("cairn.toml"), fresh, pg_num)?;
    }
    let made_dir = !dir.exists();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let had_state = state_path(&dir).exists();
    let mut state = load_state(&dir)?;
    state.daemons.retain(is_running);
    let net = match layout.netns {
        false => None,
        true => match ensure_network(&dir, &mut state, &layout) {
            Ok(net) => Some(net),
            Err(e) => {
                // Leave nothing behind: the network removed itself.
                if made_dir {
                    let _ = std::fs::remove_dir_all(&dir);
                } else if !had_state {
                    let _ = std::fs::remove_file(state_path(&dir));
                }
                return Err(e);
            }
        },
    };
    let conf_path = dir.join("cairn.toml");
    if !conf_path.exists() {
        let config = new_config(&layout, net.as_ref(), fresh)?;
        std::fs::write(&conf_path, config.to_toml())?;
    }
    state.layout = Some(layout.clone());
    save_state(&dir, &state)?;
    let config = Config::load(&conf_path)?;
    let started = start_daemons(&dir, &conf_path, &config, &layout, net.as_ref(), &mut state)?;
    if had_state && !ctx.json {
        match started.is_empty() {
            true => println!("every daemon was running"),
            false => println!("started {}", started.join(", ")),
        }
    }
    let ctx = Context {
        conf_path: Some(conf_path.clone()),
        mon_override: None,
        json: ctx.json,
        timeout: ctx.timeout,
    };
    let status = wait_active(&ctx, &layout, pg_num, Instant::now() + timeout)?;
    if ctx.json {
        println!("{status}");
    } else {
        print_up(&status, &conf_path, net.as_ref());
    }
    Ok(())
}

fn print_up(status: &serde_json::Value, conf_path: &Path, net: Option<&HostNet>) {
    println!(
        "cluster up: {} osds, {} pgs active ({}); config {}",
        status["osds"]["up"],
        status["pgs"]["active"],
        status["health"].as_str().unwrap_or("?"),
        conf_path.display()
    );
    if let Some(net) = net {
        println!(
            "hosts h1..h{} in network namespaces cairn-{}-hK; public network {}, \
             cluster network {}",
            net.hosts,
            net.tag,
            net.network(Net::Public),
            net.network(Net::Cluster)
        );
    }
    println!("use it with: export CAIRN_CONF={}", conf_path.display());
}

/// The host network of a `--netns` cluster, made if missing. The plan is
/// recorded before anything is made, so `down` can remove a partial one;
/// a failed make removes what it made.
fn ensure_network(dir: &Path, state: &mut State, layout: &Layout) -> Result<HostNet> {
    let hosts = layout.domains();
    let net = match &state.net {
        Some(net) => net.clone(),
        None => {
            let net = HostNet::plan(dir, hosts)?;
            if net.any_exists()? {
                bail!(
                    "network names cn{0}* or namespaces cairn-{0}-* already exist (another \
                     cluster, or left over): remove them, or use another directory",
                    net.tag
                );
            }
            net
        }
    };
    if net.is_complete()? {
        return Ok(net);
    }
    if state.daemons.iter().any(|d| d.name.starts_with("osd.")) {
        bail!(
            "the host network of this cluster is incomplete while OSDs run in it; \
             run `cairn cluster down` first"
        );
    }
    net.check_free()?;
    let had_plan = state.net.is_some();
    state.net = Some(net.clone());
    save_state(dir, state)?;
    net.remove()?; // what a crash may have left half made
    if let Err(e) = net.create() {
        if !had_plan {
            state.net = None;
            save_state(dir, state)?;
        }
        return Err(e);
    }
    Ok(net)
}

/// Start the monitor and every OSD that is not running (OSDs of a
/// `--netns` cluster in their host's namespace), making BlueStores first.
fn start_daemons(
    dir: &Path,
    conf_path: &Path,
    config: &Config,
    layout: &Layout,
    net: Option<&HostNet>,
    state: &mut State,
) -> Result<Vec<String>> {
    let mut started = Vec::new();
    let conf_arg = conf_path.display().to_string();
    let running = |state: &State, name: &str| state.daemons.iter().any(|d| d.name == name);
    if !running(state, "mon") {
        let args = vec![
            "mon".into(),
            "--conf".into(),
            conf_arg.clone(),
            "--dir".into(),
            dir.join("mon").display().to_string(),
        ];
        state.daemons.push(spawn_daemon(dir, "mon", &args, None)?);
        // Recorded at once: if a later step fails, `down` still finds it.
        save_state(dir, state)?;
        started.push("mon".to_string());
    }
    for id in 0..layout.osds {
        let name = format!("osd.{id}");
        let osd_dir = dir.join(&name);
        let osd_conf = config.osd_for(id);
        if osd_conf.store == StoreKind::Bluestore && osd_store::recorded_kind(&osd_dir)?.is_none() {
            let req = osd_store::MkfsRequest::default();
            osd_store::mkfs(&osd_dir, osd_conf.store, &osd_conf, &req)
                .with_context(|| format!("{name}: mkfs"))?;
        }
        if running(state, &name) {
            continue;
        }
        let mut args = vec![
            "osd".into(),
            "--conf".into(),
            conf_arg.clone(),
            "--id".into(),
            id.to_string(),
            "--dir".into(),
            osd_dir.display().to_string(),
        ];
        if let Some(host) = layout.host_of(id) {
            args.extend(["--crush-location".into(), format!("host={host}")]);
        }
        let namespace = net.zip(layout.host_number(id)).map(|(n, k)| n.namespace(k));
        state
            .daemons
            .push(spawn_daemon(dir, &name, &args, namespace.as_deref())?);
        save_state(dir, state)?;
        started.push(name);
    }
    Ok(started)
}

/// `--store`, `--set` and `--pg-num` shape a new cluster only: on an
/// existing one, a flag that would change something is refused rather
/// than ignored.
fn refuse_fresh_flags(conf_path: &Path, fresh: &Fresh, pg_num: Option<u32>) -> Result<()> {
    let existing = Config::load(conf_path)?;
    let mut asked = existing.clone();
    fresh.apply(&mut asked)?;
    if asked.to_toml() != existing.to_toml() {
        bail!(
            "this cluster exists ({}): --store and --set apply only when it is made; \
             edit that file and restart the daemons (or `cairn cluster down` and remove the directory)",
            conf_path.display()
        );
    }
    if let Some(n) = pg_num {
        bail!(
            "this cluster exists ({}): --pg-num applies only when it is made; \
             use `cairn pool set rbd pg_num {n}`",
            conf_path.display()
        );
    }
    Ok(())
}

/// Wait for every OSD to boot, create pool `rbd` if missing, and wait for
/// every PG to be active; returns the last status.
fn wait_active(
    ctx: &Context,
    layout: &Layout,
    pg_num: Option<u32>,
    deadline: Instant,
) -> Result<serde_json::Value> {
    let osds = layout.osds;
    wait_for(ctx, deadline, "OSDs to boot", |status| {
        status["osds"]["up"].as_u64() >= Some(osds as u64)
    })?;
    if layout.hdd_per_host.is_some() {
        class_rules(ctx)?;
    }
    let pools = admin::mon_command(ctx, MonCommand::PoolLs)?;
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
        admin::mon_command(ctx, cmd)?;
    }
    wait_for(ctx, deadline, "every PG to be active", |status| {
        let pgs = &status["pgs"];
        pgs["total"].as_u64().unwrap_or(0) > 0 && pgs["active"] == pgs["total"]
    })
}

/// Rules `hdd_rule` and `nvme_rule`: replicas on distinct hosts, on OSDs
/// of that class only (made once).
fn class_rules(ctx: &Context) -> Result<()> {
    let rules = admin::mon_command(ctx, MonCommand::OsdCrush(CrushCommand::RuleLs))?;
    for class in ["hdd", "nvme"] {
        let name = format!("{class}_rule");
        let exists = rules
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["name"] == name);
        if !exists {
            let cmd = CrushCommand::RuleCreateReplicated {
                name,
                root: "default".into(),
                failure_domain: "host".into(),
                class: Some(class.into()),
            };
            admin::mon_command(ctx, MonCommand::OsdCrush(cmd))?;
        }
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

/// The directory `cluster status` looks at: `--dir`, else the directory
/// of the configuration in use if a local cluster made it.
fn status_dir(ctx: &Context, dir: Option<PathBuf>) -> PathBuf {
    if let Some(dir) = dir {
        return dir;
    }
    let conf = ctx
        .conf_path
        .clone()
        .or_else(|| std::env::var_os("CAIRN_CONF").map(PathBuf::from));
    conf.and_then(|c| c.parent().map(Path::to_path_buf))
        .filter(|d| state_path(d).exists())
        .unwrap_or_else(|| PathBuf::from("cairn-cluster"))
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
        timeout: ctx.timeout,
    };
    let daemons: Vec<serde_json::Value> = state
        .daemons
        .iter()
        .map(|d| serde_json::json!({ "name": d.name, "pid": d.pid, "running": is_running(d) }))
        .collect();
    let hosts = state.net.as_ref().map(network_status);
    let cluster = admin::mon_command(&ctx, MonCommand::Status).ok();
    let stopped: Vec<&str> = state
        .daemons
        .iter()
        .filter(|d| !is_running(d))
        .map(|d| d.name.as_str())
        .collect();
    let verdict = || -> Result<()> {
        if stopped.is_empty() {
            Ok(())
        } else {
            bail!(
                "{} of {} daemons not running: {} (`cairn cluster up` restarts them)",
                stopped.len(),
                state.daemons.len(),
                stopped.join(", ")
            )
        }
    };
    if ctx.json {
        let value = serde_json::json!({ "daemons": daemons, "hosts": hosts, "status": cluster });
        println!("{value}");
        return verdict();
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
    for h in hosts.iter().flatten() {
        println!(
            "{:<4} {:<18} public {:<13} {:<8} cluster {:<13} {}",
            s(&h["host"]),
            s(&h["namespace"]),
            s(&h["public_addr"]),
            s(&h["public_link"]),
            s(&h["cluster_addr"]),
            s(&h["cluster_link"])
        );
    }
    match cluster {
        Some(status) => crate::output::print_status(&status),
        None => println!("monitor not reachable"),
    }
    verdict()
}

fn s(v: &serde_json::Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// Each host of a `--netns` cluster: namespace, addresses, link states
/// (`up`, `cut`, or `missing` after `down`).
fn network_status(net: &HostNet) -> Vec<serde_json::Value> {
    let link = |host, n| match net.link_is_up(host, n) {
        Ok(true) => "up",
        Ok(false) => "cut",
        Err(_) => "missing",
    };
    (1..=net.hosts)
        .map(|k| {
            serde_json::json!({
                "host": format!("h{k}"),
                "namespace": net.namespace(k),
                "public_addr": net.ip(Net::Public, k).to_string(),
                "cluster_addr": net.ip(Net::Cluster, k).to_string(),
                "public_link": link(k, Net::Public),
                "cluster_link": link(k, Net::Cluster),
            })
        })
        .collect()
}

/// `cut` (`up` false) or `heal` one host's links, or every host's.
fn set_links(dir: &Path, host: Option<&str>, network: &str, up: bool) -> Result<()> {
    let nets: &[Net] = match network {
        "public" => &[Net::Public],
        "cluster" => &[Net::Cluster],
        "both" => &Net::BOTH,
        other => bail!("--network must be public, cluster or both, got '{other}'"),
    };
    if !state_path(dir).exists() {
        bail!("no local cluster in {}", dir.display());
    }
    let state = load_state(dir)?;
    let Some(net) = state.net else {
        bail!(
            "the cluster in {} has no host network namespaces (start it with --hosts N --netns)",
            dir.display()
        );
    };
    if !net.is_complete()? {
        bail!(
            "the host network of the cluster in {} is not up (start it with `cairn cluster up`)",
            dir.display()
        );
    }
    let hosts: Vec<u32> = match host {
        None => (1..=net.hosts).collect(),
        Some(name) => {
            let k = name
                .strip_prefix('h')
                .and_then(|k| k.parse::<u32>().ok())
                .filter(|k| (1..=net.hosts).contains(k) && name == format!("h{k}"));
            match k {
                Some(k) => vec![k],
                None => bail!(
                    "no host '{name}' in this cluster (its hosts are h1 to h{})",
                    net.hosts
                ),
            }
        }
    };
    for &k in &hosts {
        for &n in nets {
            net.set_link(k, n, up)?;
        }
    }
    let names: Vec<String> = hosts.iter().map(|k| format!("h{k}")).collect();
    let which: Vec<&str> = nets.iter().map(|n| n.name()).collect();
    let verb = if up { "healed" } else { "cut" };
    println!("{verb} {} ({})", names.join(" "), which.join(", "));
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
    // A namespace outlives its last process: wait for the killed ones.
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive.iter().any(is_running) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    state.daemons.clear();
    save_state(dir, &state)?;
    let removed = match &state.net {
        Some(net) => net.remove()?,
        None => 0,
    };
    if removed > 0 {
        println!("stopped {} daemons; removed the host network", alive.len());
    } else {
        println!("stopped {} daemons", alive.len());
    }
    Ok(())
}
