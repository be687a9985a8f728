//! A local cluster of real `cairn` processes for integration tests: started
//! with `cairn cluster up` in a temporary directory and stopped (the exact
//! processes it started) when dropped.

#![allow(dead_code)]

pub mod nbd;
pub mod writes;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use cairn_client::{ClientOptions, Cluster};

pub const CAIRN: &str = env!("CARGO_BIN_EXE_cairn");

pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub osds: u32,
}

impl TestCluster {
    /// Start a monitor and `osds` OSDs with pool `rbd` of 16 PGs.
    pub fn up(osds: u32) -> Self {
        Self::up_with(osds, &["--pg-num", "16"])
    }

    pub fn up_with(osds: u32, extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("cairn-test-")
            .tempdir()
            .expect("tempdir");
        let cluster = TestCluster { dir, osds };
        let n = osds.to_string();
        let mut args = vec!["cluster", "up", "--osds", &n, "--timeout", "60"];
        // `CAIRN_TEST_STORE=bluestore|filestore|memstore` runs every
        // cluster test on that backend (BlueStore devices are kept small).
        let store = std::env::var("CAIRN_TEST_STORE").ok();
        if let Some(store) = store.as_deref().filter(|_| !extra.contains(&"--store")) {
            args.extend_from_slice(&["--store", store]);
        }
        args.extend_from_slice(&["--set", "osd.bluestore_block_size=536870912"]);
        args.extend_from_slice(&["--set", "osd.bluestore_cache_size=33554432"]);
        args.extend_from_slice(extra);
        let dir_arg = cluster.dir.path().display().to_string();
        args.extend_from_slice(&["--dir", &dir_arg]);
        let out = Command::new(CAIRN).args(&args).output().expect("run cairn");
        if !out.status.success() {
            cluster.dump_logs();
            panic!(
                "cluster up failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        cluster
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn conf(&self) -> PathBuf {
        self.dir.path().join("cairn.toml")
    }

    /// Run `cairn --conf <this cluster> ARGS`.
    pub fn cairn(&self, args: &[&str]) -> Output {
        Command::new(CAIRN)
            .arg("--conf")
            .arg(self.conf())
            .args(args)
            .output()
            .expect("run cairn")
    }

    /// Run a command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cairn(args);
        assert!(
            out.status.success(),
            "cairn {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run a command that must fail; returns its stderr (one line).
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.cairn(args);
        assert!(!out.status.success(), "cairn {args:?} should have failed");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "error should be one line: {err}"
        );
        err
    }

    /// The pid of a daemon (`mon`, `osd.N`) from the cluster's state file.
    pub fn pid(&self, name: &str) -> u32 {
        self.state()["daemons"]
            .as_array()
            .expect("daemons")
            .iter()
            .find(|d| d["name"] == name)
            .and_then(|d| d["pid"].as_u64())
            .unwrap_or_else(|| panic!("no daemon {name}")) as u32
    }

    /// `kill -9` a daemon and wait until it is gone.
    pub fn kill9(&self, name: &str) {
        self.signal_and_wait(name, libc::SIGKILL, Duration::from_secs(2));
    }

    /// Stop a daemon cleanly (`SIGTERM`) and wait until it is gone.
    pub fn stop(&self, name: &str) {
        self.signal_and_wait(name, libc::SIGTERM, Duration::from_secs(10));
    }

    fn signal_and_wait(&self, name: &str, signal: i32, within: Duration) {
        let pid = self.pid(name);
        unsafe { libc::kill(pid as i32, signal) };
        let start = std::time::Instant::now();
        while start.elapsed() < within {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.is_empty() || stat.contains(") Z ") {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{name} (pid {pid}) did not exit on signal {signal} within {within:?}");
    }

    /// Start every daemon that is not running and wait for all PGs active.
    pub fn restart_missing(&self) {
        let n = self.osds.to_string();
        let dir_arg = self.dir.path().display().to_string();
        let out = Command::new(CAIRN)
            .args([
                "cluster",
                "up",
                "--osds",
                &n,
                "--timeout",
                "90",
                "--dir",
                &dir_arg,
            ])
            .output()
            .expect("run cairn");
        if !out.status.success() {
            self.dump_logs();
            panic!(
                "cluster up (restart) failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Run `cairn cluster SUBCOMMAND ARGS --dir <this cluster>`.
    pub fn cluster_cmd(&self, args: &[&str]) -> Output {
        Command::new(CAIRN)
            .arg("cluster")
            .args(args)
            .arg("--dir")
            .arg(self.dir.path())
            .output()
            .expect("run cairn")
    }

    /// `cairn cluster status --json`: daemons, hosts (of a `--netns`
    /// cluster: namespace, addresses, link states) and the cluster status.
    pub fn cluster_status(&self) -> serde_json::Value {
        let out = self.cluster_cmd(&["status", "--json"]);
        assert!(out.status.success(), "cluster status failed");
        serde_json::from_slice(&out.stdout).expect("cluster status json")
    }

    /// Cut (`up` false) or heal host `host`'s links on `network`
    /// (`public`, `cluster` or `both`) of a `--netns` cluster.
    pub fn set_links(&self, host: &str, network: &str, up: bool) {
        let verb = if up { "heal" } else { "cut" };
        let out = self.cluster_cmd(&[verb, "--host", host, "--network", network]);
        assert!(
            out.status.success(),
            "cluster {verb} {host}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The cluster's recorded state (`cluster.json`).
    pub fn state(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.dir.path().join("cluster.json")).expect("state");
        serde_json::from_str(&text).expect("json")
    }

    pub fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["--json", "status"])).expect("status json")
    }

    /// A client connected to this cluster.
    pub async fn client(&self) -> Arc<Cluster> {
        let config = cairn_config::Config::load(&self.conf()).expect("config");
        let opts = ClientOptions {
            mon_addr: config.global.mon_addr.clone(),
            op_timeout: None,
            op_complaint_time: None,
            watch_timeout: Duration::from_millis(config.client.watch_timeout_ms),
            command_timeout: Duration::from_millis(config.client.command_timeout_ms),
            reconfigure: None,
        };
        Cluster::connect(opts).await.expect("connect")
    }

    /// The daemons' log files.
    fn log_files(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.dir.path())
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == "log"))
            .collect()
    }

    pub fn dump_logs(&self) {
        for path in self.log_files() {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            eprintln!("==== {} (last lines) ====", path.display());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump_logs();
            // `CAIRN_TEST_KEEP_LOGS=DIR` keeps a failed test's logs whole.
            if let Some(keep) = std::env::var_os("CAIRN_TEST_KEEP_LOGS") {
                let name = self.dir.path().file_name().unwrap_or_default();
                let to = Path::new(&keep).join(name);
                let _ = std::fs::create_dir_all(&to);
                for path in self.log_files() {
                    if let Some(file) = path.file_name() {
                        let _ = std::fs::copy(&path, to.join(file));
                    }
                }
                eprintln!("logs kept in {}", to.display());
            }
        }
        let dir_arg = self.dir.path().display().to_string();
        let _ = Command::new(CAIRN)
            .args(["cluster", "down", "--dir", &dir_arg])
            .output();
    }
}

/// Can this process make network namespaces (root, with `ip netns`)?
/// Tests of `--netns` clusters need it.
pub fn netns_usable() -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    root && Command::new("ip")
        .args(["netns", "list"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Deterministic pseudo-random bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
