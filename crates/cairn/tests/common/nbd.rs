//! `cairn nbd` as a child process for tests, and the NBD client tools
//! (nbdinfo, nbdcopy, qemu-io, qemu-img, fio, nbdsh) they drive it with.

#![allow(dead_code)]

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{TestCluster, CAIRN};

/// Longest wait for a gateway to start serving (it first connects to the cluster).
pub const GATEWAY_START_TIMEOUT: Duration = Duration::from_secs(90);
/// Longest run of one client tool; only a hang gets near it.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(240);
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943; // "NBDMAGIC"

// ---------------------------------------------------------------------------------------
// The gateway: `cairn nbd` as a child process, killed when dropped.
// ---------------------------------------------------------------------------------------

/// Where a gateway listens.
pub enum Listen {
    Unix(PathBuf),
    /// TCP on 127.0.0.1, port chosen by the kernel.
    Tcp,
}

/// A running `cairn nbd` child; killed (and reaped) on drop, also when a test panics.
pub struct Gateway {
    pub child: Child,
    pub log: PathBuf,
    pub name: String,
    /// The URI clients use.
    pub uri: String,
    /// The Unix socket, if it serves on one.
    pub socket: Option<PathBuf>,
}

impl Gateway {
    /// Starts `cairn nbd --image rbd/NAME` and waits (bounded) until it accepts NBD
    /// connections. Its output goes to `nbd-gateway.log` in the cluster directory, which the
    /// harness prints if the test fails.
    pub fn start(cluster: &TestCluster, name: &str, listen: Listen, extra: &[&str]) -> Gateway {
        let log = cluster.path().join("nbd-gateway.log");
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("gateway log");
        let image = format!("rbd/{name}");
        let mut command = Command::new(CAIRN);
        command
            .arg("--conf")
            .arg(cluster.conf())
            .args(["nbd", "--image", &image])
            .args(extra)
            .env("RUST_LOG", "info,cairn_nbd=debug")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log fd"))
            .stderr(log_file);
        let socket = match &listen {
            Listen::Unix(path) => {
                command.arg("--socket").arg(path);
                Some(path.clone())
            }
            Listen::Tcp => {
                command.args(["--listen", "127.0.0.1:0"]);
                None
            }
        };
        let log_start = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) as usize;
        let child = command.spawn().expect("spawn cairn nbd");
        let mut gateway = Gateway {
            child,
            log,
            name: name.to_string(),
            uri: String::new(),
            socket,
        };
        gateway.uri = gateway.wait_until_serving(log_start);
        gateway
    }

    /// Waits for the "serving ..." line and for the listener to answer with an NBD greeting;
    /// returns the URI to give clients.
    pub fn wait_until_serving(&mut self, log_start: usize) -> String {
        let deadline = Instant::now() + GATEWAY_START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "cairn nbd exited ({status}) before serving:\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "cairn nbd not serving after {GATEWAY_START_TIMEOUT:?}:\n{}",
                self.log_text()
            );
            let text = self.log_text();
            let announced = text
                .get(log_start..)
                .unwrap_or_default()
                .lines()
                .find(|line| line.starts_with("serving "))
                .map(str::to_string);
            if let Some(line) = announced {
                let uri = match &self.socket {
                    Some(path) => {
                        if greets(UnixStream::connect(path)) {
                            Some(format!(
                                "nbd+unix:///{}?socket={}",
                                self.name,
                                path.display()
                            ))
                        } else {
                            None
                        }
                    }
                    None => {
                        // "serving rbd/NAME on nbd://127.0.0.1:PORT/NAME"
                        let addr = line
                            .split("nbd://")
                            .nth(1)
                            .and_then(|rest| rest.split('/').next())
                            .unwrap_or_else(|| panic!("no address in {line:?}"))
                            .to_string();
                        if greets(std::net::TcpStream::connect(&addr)) {
                            Some(format!("nbd://{addr}/{}", self.name))
                        } else {
                            None
                        }
                    }
                };
                if let Some(uri) = uri {
                    return uri;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    pub fn socket(&self) -> &Path {
        self.socket
            .as_deref()
            .expect("gateway serves on a Unix socket")
    }

    /// Panics unless the gateway process is still running.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!("cairn nbd exited ({status}):\n{}", self.log_text());
        }
    }

    /// Stop with SIGTERM (as a service manager would) and wait, bounded, for the exit: the
    /// gateway drops its watch on the way out.
    pub fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.child.try_wait().expect("try_wait").is_none() {
            assert!(
                Instant::now() < deadline,
                "cairn nbd did not exit on SIGTERM:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

/// True if `stream` connected and the server sent the NBD greeting. (The probe connection
/// then closes during negotiation, which the server must take in its stride.)
pub fn greets<S: Read>(stream: std::io::Result<S>) -> bool {
    let Ok(mut stream) = stream else {
        return false;
    };
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).is_ok() && greeting[..8] == NBD_MAGIC.to_be_bytes()
}

// ---------------------------------------------------------------------------------------
// Client tools.
// ---------------------------------------------------------------------------------------

/// An external client program and the Debian package that provides it.
#[derive(Clone, Copy)]
pub struct Tool {
    pub program: &'static str,
    pub package: &'static str,
}

pub const NBDINFO: Tool = Tool {
    program: "nbdinfo",
    package: "libnbd-bin",
};
pub const NBDCOPY: Tool = Tool {
    program: "nbdcopy",
    package: "libnbd-bin",
};
pub const QEMU_IO: Tool = Tool {
    program: "qemu-io",
    package: "qemu-utils",
};
pub const QEMU_IMG: Tool = Tool {
    program: "qemu-img",
    package: "qemu-utils",
};
pub const FIO: Tool = Tool {
    program: "fio",
    package: "fio",
};
pub const NBDSH: Tool = Tool {
    program: "nbdsh",
    package: "python3-libnbd",
};

/// `PATH` for client tools: the system's directories first, because `nbdsh`
/// runs `python3 -m nbd`, which only the system's python3 (the one
/// `python3-libnbd` installs into) can import.
pub fn tool_path() -> String {
    let inherited = std::env::var("PATH").unwrap_or_default();
    format!("/usr/bin:/bin:{inherited}")
}

impl Tool {
    /// Runs the tool to completion (bounded by [`TOOL_TIMEOUT`]) and returns its output,
    /// whatever its exit status.
    pub fn run<S: AsRef<std::ffi::OsStr>>(self, args: &[S]) -> Output {
        let mut child = Command::new(self.program)
            .env("PATH", tool_path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot run `{}` ({error}): these tests need it; install the Debian \
                     package `{}` (apt-get install {})",
                    self.program, self.package, self.package
                )
            });
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let out = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = stdout.read_to_end(&mut buf);
            buf
        });
        let err = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = stderr.read_to_end(&mut buf);
            buf
        });
        let deadline = Instant::now() + TOOL_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "`{} {}` did not finish within {TOOL_TIMEOUT:?}",
                    self.program,
                    show_args(args)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Output {
            status,
            stdout: out.join().expect("stdout reader"),
            stderr: err.join().expect("stderr reader"),
        }
    }

    /// Runs the tool; it must exit with status 0. Returns stdout and stderr together.
    pub fn ok<S: AsRef<std::ffi::OsStr>>(self, args: &[S]) -> String {
        let output = self.run(args);
        let text = both(&output);
        assert!(
            output.status.success(),
            "`{} {}` failed ({}):\n{text}",
            self.program,
            show_args(args),
            output.status
        );
        text
    }
}

/// Runs qemu-io on `uri` with `commands`; all must succeed and every pattern check pass.
pub fn qemu_io(uri: &str, commands: &[&str]) -> String {
    let mut args = vec!["-f", "raw", uri];
    for command in commands {
        args.extend_from_slice(&["-c", command]);
    }
    let text = QEMU_IO.ok(&args);
    assert!(
        !text.contains("Pattern verification failed") && !text.contains("failed:"),
        "qemu-io {commands:?} on {uri} reported a failure:\n{text}"
    );
    text
}

pub fn both(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

pub fn show_args<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| format!("'{}'", a.as_ref().to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs fio with the nbd engine on `uri`; returns its output and whether it succeeded.
pub fn fio(uri: &str, name: &str, options: &[&str]) -> (bool, String) {
    let mut args = vec![
        format!("--name={name}"),
        "--ioengine=nbd".to_string(),
        format!("--uri={uri}"),
        // No `*-verify.state` files left in the working directory.
        "--verify_state_save=0".to_string(),
    ];
    args.extend(options.iter().map(|o| o.to_string()));
    let output = FIO.run(&args);
    let text = both(&output);
    assert!(
        !text.contains("engine nbd not loadable") && !text.contains("failed to load engine"),
        "this fio has no nbd engine (Debian's package `fio` has it):\n{text}"
    );
    (output.status.success(), text)
}

pub fn assert_fio_ok(uri: &str, name: &str, options: &[&str]) -> String {
    let (ok, text) = fio(uri, name, options);
    assert!(ok, "fio {options:?} failed:\n{text}");
    assert!(
        !text.contains("verify:") && text.contains("err= 0"),
        "fio {options:?} reported errors:\n{text}"
    );
    text
}

/// fio's verified load: 4 KiB random writes at queue depth 16 over the
/// first `size` of the disk at `uri`, each block once, read back and
/// verified (crc32c) at the end; runs in a thread while a test breaks
/// things. Join for fio's outcome.
pub fn spawn_verified_writes(uri: &str, size: &str) -> std::thread::JoinHandle<(bool, String)> {
    let uri = uri.to_string();
    let size = format!("--size={size}");
    std::thread::spawn(move || {
        fio(
            &uri,
            "load",
            &[
                "--rw=randwrite",
                "--bs=4k",
                "--iodepth=16",
                &size,
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
                "--randrepeat=0",
            ],
        )
    })
}

/// Read the first `size` of the disk at `uri` back through a new fio
/// connection and verify what [`spawn_verified_writes`] wrote.
pub fn assert_reads_verify(uri: &str, name: &str, size: &str) {
    assert_fio_ok(
        uri,
        name,
        &[
            "--rw=read",
            "--bs=4k",
            "--iodepth=16",
            &format!("--size={size}"),
            "--verify=crc32c",
            "--verify_fatal=1",
        ],
    );
}
