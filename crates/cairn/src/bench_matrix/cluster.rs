//! The throwaway local cluster a matrix runs against: started with
//! `cairn cluster up` in `OUT/cluster`, its daemons' CPU time read from
//! /proc, stopped with `cairn cluster down` (only the processes it
//! started).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use cairn_matrix::spec::ClusterSpec;
use serde::Deserialize;

#[derive(Deserialize)]
struct Daemon {
    name: String,
    pid: u32,
}

#[derive(Deserialize)]
struct State {
    daemons: Vec<Daemon>,
}

/// A running local cluster.
pub struct LocalCluster {
    pub dir: PathBuf,
    daemons: Vec<(String, u32)>,
    /// Started (and so stopped) by this run.
    owned: bool,
}

fn cairn(args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the cairn binary")?;
    // Its own process group: a Ctrl-C at the terminal must not kill a
    // `cluster up` or `down` half-way (the run notices it afterwards).
    let out = Command::new(exe)
        .process_group(0)
        .args(args)
        .output()
        .with_context(|| format!("cannot run cairn {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "cairn {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl LocalCluster {
    /// Start a fresh cluster as `spec` says in `dir` (which must not hold
    /// one yet).
    pub fn start(spec: &ClusterSpec, dir: &Path) -> Result<LocalCluster> {
        if dir.join("cluster.json").exists() {
            bail!(
                "{} already holds a cluster; remove it or use another --out",
                dir.display()
            );
        }
        let mut args: Vec<String> = [
            "cluster",
            "up",
            "--dir",
            &dir.display().to_string(),
            "--osds",
            &spec.osds.to_string(),
            "--store",
            &spec.store,
            "--pg-num",
            &spec.pg_num.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for s in &spec.set {
            args.push("--set".into());
            args.push(s.clone());
        }
        let started = cairn(&args);
        let mut cluster = LocalCluster {
            dir: dir.to_path_buf(),
            daemons: Vec::new(),
            owned: true,
        };
        // Read the daemons even if `up` failed, so they are stopped.
        let state = std::fs::read_to_string(dir.join("cluster.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<State>(&t).ok());
        if let Some(state) = state {
            cluster.daemons = state.daemons.into_iter().map(|d| (d.name, d.pid)).collect();
        }
        if let Err(e) = started {
            cluster.stop();
            return Err(e);
        }
        Ok(cluster)
    }

    /// A cluster started by someone else (a Ceph cluster of
    /// `bench/ceph/cluster.sh`), its daemons listed in `pids` as lines
    /// `NAME PID`. It is left running.
    pub fn attach(dir: &Path, pids: &Path) -> Result<LocalCluster> {
        let text = std::fs::read_to_string(pids)
            .with_context(|| format!("cannot read {}", pids.display()))?;
        let mut daemons = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut words = line.split_whitespace();
            let (Some(name), Some(pid)) = (words.next(), words.next()) else {
                bail!("{}: {line:?} is not NAME PID", pids.display());
            };
            let pid: u32 = pid
                .parse()
                .with_context(|| format!("{}: bad pid in {line:?}", pids.display()))?;
            if cpu_ticks(pid).is_none() {
                bail!("{}: {name} (pid {pid}) is not running", pids.display());
            }
            daemons.push((name.to_string(), pid));
        }
        if daemons.is_empty() {
            bail!("{} lists no daemons", pids.display());
        }
        Ok(LocalCluster {
            dir: dir.to_path_buf(),
            daemons,
            owned: false,
        })
    }

    /// The cluster's configuration file.
    pub fn conf(&self) -> PathBuf {
        self.dir.join("cairn.toml")
    }

    /// CPU seconds (user + system) each daemon has used so far; a daemon
    /// that is gone is missing.
    pub fn cpu_seconds(&self) -> BTreeMap<String, f64> {
        Self::cpu_seconds_of(&self.daemons)
    }

    /// Context switches (voluntary and involuntary, over every thread)
    /// each daemon, and each of `extra` (name, pid), made so far; one that
    /// is gone is missing.
    pub fn context_switches(&self, extra: &[(String, u32)]) -> BTreeMap<String, u64> {
        self.daemons
            .iter()
            .chain(extra)
            .filter_map(|(name, pid)| Some((name.clone(), context_switches(*pid)?)))
            .collect()
    }

    /// [`Self::cpu_seconds`] of `extra` (name, pid) processes, such as the
    /// NBD gateways.
    pub fn cpu_seconds_of(extra: &[(String, u32)]) -> BTreeMap<String, f64> {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        extra
            .iter()
            .filter_map(|(name, pid)| Some((name.clone(), cpu_ticks(*pid)? as f64 / ticks)))
            .collect()
    }

    /// Daemons that are no longer running.
    pub fn dead(&self) -> Vec<String> {
        self.daemons
            .iter()
            .filter(|(_, pid)| cpu_ticks(*pid).is_none())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Stop the daemons this cluster started.
    pub fn stop(&mut self) {
        if self.daemons.is_empty() || !self.owned {
            return;
        }
        let args = vec![
            "cluster".to_string(),
            "down".into(),
            "--dir".into(),
            self.dir.display().to_string(),
        ];
        let stopped = cairn(&args);
        self.daemons.clear();
        if let Err(e) = stopped {
            eprintln!("warning: stopping the benchmark cluster: {e:#}");
            return;
        }
        // The daemons' data (block files, databases) can be many GiB; keep
        // only the configuration, state and logs.
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                        eprintln!("warning: cannot remove {}: {e}", entry.path().display());
                    }
                }
            }
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// utime + stime of a live process, in clock ticks (/proc/PID/stat
/// fields 14 and 15); `None` if it is gone or a zombie.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    // `rest` starts at field 3 (state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Context switches of a live process over all its threads (the
/// `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` of each
/// `/proc/PID/task/TID/status`); `None` if it is gone.
fn context_switches(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        // A thread that ended since the listing counts nothing more.
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        total += status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    Some(total)
}

/// Counts made between two readings, per process present in both.
pub fn count_between(
    a: &BTreeMap<String, u64>,
    b: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    b.iter()
        .filter_map(|(name, end)| Some((name.clone(), end.saturating_sub(*a.get(name)?))))
        .collect()
}

/// CPU seconds used between two readings, per daemon present in both.
pub fn cpu_between(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    b.iter()
        .filter_map(|(name, end)| Some((name.clone(), (end - a.get(name)?).max(0.0))))
        .collect()
}
