//! `DIR/cluster.json`: the daemons a local cluster started (pid and
//! start time, so `down` signals exactly those processes), its layout and
//! its host network; and starting a daemon in the background.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::layout::Layout;
use super::netns::HostNet;

#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) struct Daemon {
    pub(super) name: String,
    pub(super) pid: u32,
    /// Process start time (clock ticks since boot, /proc/PID/stat field 22).
    pub(super) start: u64,
}

#[derive(Serialize, Deserialize, Default, Debug)]
pub(super) struct State {
    pub(super) daemons: Vec<Daemon>,
    /// The layout of the cluster's first `up` (absent in clusters made
    /// before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) layout: Option<Layout>,
    /// The host network of a `--netns` cluster: kept after `down`, as
    /// `cairn.toml` holds its addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) net: Option<HostNet>,
}

pub(super) fn state_path(dir: &Path) -> PathBuf {
    dir.join("cluster.json")
}

pub(super) fn load_state(dir: &Path) -> Result<State> {
    match std::fs::read_to_string(state_path(dir)) {
        Ok(text) => serde_json::from_str(&text).context("corrupt cluster.json"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
        Err(e) => Err(e).context("cannot read cluster.json"),
    }
}

pub(super) fn save_state(dir: &Path, state: &State) -> Result<()> {
    let tmp = dir.join("cluster.json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(state)?)?;
    std::fs::rename(&tmp, state_path(dir))?;
    Ok(())
}

pub(super) fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let state = rest.split_whitespace().next()?;
    if state == "Z" {
        return None; // exited, not yet reaped
    }
    rest.split_whitespace().nth(19)?.parse().ok()
}

pub(super) fn is_running(d: &Daemon) -> bool {
    process_start(d.pid) == Some(d.start)
}

/// Start `cairn ARGS` in the background, logging to `DIR/NAME.log`, in
/// network namespace `netns` if given.
pub(super) fn spawn_daemon(
    dir: &Path,
    name: &str,
    args: &[String],
    netns: Option<&str>,
) -> Result<Daemon> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the cairn binary")?;
    // Opened here, entered in the child before exec (as `ip netns exec`).
    let netns_file = match netns {
        Some(ns) => Some(
            std::fs::File::open(format!("/run/netns/{ns}"))
                .with_context(|| format!("{name}: cannot open network namespace {ns}"))?,
        ),
        None => None,
    };
    let netns_fd = netns_file.as_ref().map(|f| f.as_raw_fd());
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
        cmd.pre_exec(move || {
            libc::setsid();
            if let Some(fd) = netns_fd {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {name}"))?;
    drop(netns_file);
    let pid = child.id();
    let start = process_start(pid).context("daemon exited at once")?;
    Ok(Daemon {
        name: name.to_string(),
        pid,
        start,
    })
}
