//! The server against real NBD clients: libnbd's `nbdinfo` and `nbdcopy`, QEMU's `qemu-io`
//! and `qemu-img`, and `fio` with its nbd engine. A missing tool fails the test with the
//! Debian package to install, unless `CAIRN_SKIP_INTEROP=1`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_nbd::NbdExport;
use cairn_volume::{MemVolume, Volume};
use common::*;
use rand::{RngCore, SeedableRng};

const MIB: u64 = 1 << 20;
const TOOL_TIMEOUT: Duration = Duration::from_secs(45);

/// The path of `name`, or `None` when interop tests are skipped. Panics if the tool is
/// missing: a silently skipped test would hide a broken environment.
fn tool(name: &str, package: &str) -> Option<PathBuf> {
    if std::env::var("CAIRN_SKIP_INTEROP").as_deref() == Ok("1") {
        eprintln!("CAIRN_SKIP_INTEROP=1: not running {name}");
        return None;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file());
    match found {
        Some(found) => Some(found),
        None => panic!(
            "`{name}` is not installed: install the Debian package `{package}` \
             (apt-get install {package}), or set CAIRN_SKIP_INTEROP=1 to skip interop tests"
        ),
    }
}

/// Runs a tool to completion, fails the test on a non-zero exit, returns its stdout.
async fn run(program: &Path, args: &[&str]) -> String {
    run_in(program, args, Path::new(".")).await
}

/// As [`run`], in working directory `dir` (fio leaves state files behind).
async fn run_in(program: &Path, args: &[&str], dir: &Path) -> String {
    let mut command = tokio::process::Command::new(program);
    command.args(args).current_dir(dir).kill_on_drop(true);
    let output = tokio::time::timeout(TOOL_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} {args:?} did not finish in {TOOL_TIMEOUT:?}",
                program.display()
            )
        })
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{} {args:?} failed with {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        program.display(),
        output.status
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdinfo_and_qemu_img_report_the_export() {
    let Some(nbdinfo) = tool("nbdinfo", "libnbd-bin") else {
        return;
    };
    let Some(qemu_img) = tool("qemu-img", "qemu-utils") else {
        return;
    };
    let exports = vec![
        NbdExport::new("disk0", Arc::new(MemVolume::new(16 * MIB)), false)
            .with_description("cairn test disk"),
        NbdExport::new("disk1", Arc::new(MemVolume::new(8 * MIB)), true),
    ];
    let server = TestServer::start(exports).await;

    let size = run(&nbdinfo, &["--size", &server.unix_uri("disk0")]).await;
    assert_eq!(size.trim(), (16 * MIB).to_string());
    let size = run(&nbdinfo, &["--size", &server.tcp_uri("disk1")]).await;
    assert_eq!(size.trim(), (8 * MIB).to_string());

    let details = run(&nbdinfo, &[&server.unix_uri("disk0")]).await;
    for expected in [
        "export-size: 16777216",
        "cairn test disk",
        "block_size_minimum: 512",
        "block_size_preferred: 4096",
        "block_size_maximum: 33554432",
        "can_multi_conn: true",
        "can_flush: true",
        "can_fua: true",
        "can_trim: true",
        "can_zero: true",
    ] {
        assert!(
            details.contains(expected),
            "nbdinfo output lacks {expected:?}:\n{details}"
        );
    }
    let read_only = run(&nbdinfo, &[&server.tcp_uri("disk1")]).await;
    assert!(read_only.contains("is_read_only: true"), "{read_only}");

    let listing = run(&nbdinfo, &["--list", &format!("nbd://{}", server.tcp)]).await;
    assert!(
        listing.contains("disk0") && listing.contains("disk1"),
        "{listing}"
    );

    let info = run(
        &qemu_img,
        &["info", "--output=json", &server.tcp_uri("disk0")],
    )
    .await;
    assert!(info.contains("\"virtual-size\": 16777216"), "{info}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_io_writes_and_reads_back_a_pattern() {
    let Some(qemu_io) = tool("qemu-io", "qemu-utils") else {
        return;
    };
    let (server, volume) = mem_server("disk0", 16 * MIB).await;

    let uri = server.unix_uri("disk0");
    let output = run(
        &qemu_io,
        &[
            "-f",
            "raw",
            &uri,
            "-c",
            "write -P 0xab 0 1M",
            "-c",
            "read -P 0xab 0 1M",
        ],
    )
    .await;
    assert!(!output.contains("Pattern verification failed"), "{output}");
    assert!(output.contains("wrote 1048576/1048576"), "{output}");
    assert!(output.contains("read 1048576/1048576"), "{output}");

    let uri = server.tcp_uri("disk0");
    let commands = [
        "write -P 0xcd 4M 3M",
        "write -z 5M 512k",
        "discard 6M 512k",
        "flush",
        "aio_write -P 0x11 8M 64k",
        "aio_write -P 0x22 9M 64k",
        "aio_flush",
        "read -P 0xcd 4M 1M",
        "read -P 0 5M 512k",
        "read -P 0xcd 5632k 512k",
        "read -P 0 6M 512k",
        "read -P 0x11 8M 64k",
        "read -P 0xab 0 1M",
    ];
    let mut args = vec!["-f", "raw", uri.as_str()];
    for command in &commands {
        args.extend(["-c", command]);
    }
    let output = run(&qemu_io, &args).await;
    assert!(!output.contains("Pattern verification failed"), "{output}");
    assert!(!output.to_lowercase().contains("error"), "{output}");

    let snapshot = volume.snapshot();
    let mib = MIB as usize;
    assert!(snapshot[..mib].iter().all(|b| *b == 0xab));
    assert!(snapshot[4 * mib..5 * mib].iter().all(|b| *b == 0xcd));
    let half = mib / 2;
    assert!(snapshot[5 * mib..5 * mib + half].iter().all(|b| *b == 0));
    assert!(snapshot[5 * mib + half..6 * mib].iter().all(|b| *b == 0xcd));
    assert!(snapshot[6 * mib..6 * mib + half].iter().all(|b| *b == 0));
    assert!(snapshot[6 * mib + mib / 2..7 * mib]
        .iter()
        .all(|b| *b == 0xcd));
    assert!(snapshot[8 * mib..8 * mib + 65536]
        .iter()
        .all(|b| *b == 0x11));
    assert!(snapshot[9 * mib..9 * mib + 65536]
        .iter()
        .all(|b| *b == 0x22));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdcopy_round_trips_a_random_image() {
    let Some(nbdcopy) = tool("nbdcopy", "libnbd-bin") else {
        return;
    };
    const SIZE: u64 = 32 * MIB;
    let (server, volume) = mem_server("disk0", SIZE).await;
    // Pre-fill so that zeroed regions of the upload must really be written as zeros.
    volume
        .write(0, Bytes::from(vec![0xee; SIZE as usize]))
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut image = vec![0u8; SIZE as usize];
    rand::rngs::StdRng::seed_from_u64(7).fill_bytes(&mut image);
    // A hole in the middle: nbdcopy sends it as zeroing or trimming, not as data.
    image[(8 * MIB) as usize..(12 * MIB) as usize].fill(0);
    let source = dir.path().join("source.img");
    let file = std::fs::File::create(&source).unwrap();
    file.set_len(SIZE).unwrap();
    use std::os::unix::fs::FileExt;
    file.write_all_at(&image[..(8 * MIB) as usize], 0).unwrap();
    file.write_all_at(&image[(12 * MIB) as usize..], 12 * MIB)
        .unwrap();
    drop(file);

    // Upload over the Unix socket with several connections (the server allows multi-conn).
    let source_path = source.to_str().unwrap();
    run(
        &nbdcopy,
        &[
            "--connections=4",
            "--requests=32",
            source_path,
            &server.unix_uri("disk0"),
        ],
    )
    .await;
    let snapshot = volume.snapshot();
    assert!(snapshot == image, "volume differs from the uploaded image");

    // Download over TCP and compare bytes.
    let target = dir.path().join("target.img");
    let target_path = target.to_str().unwrap();
    run(&nbdcopy, &[&server.tcp_uri("disk0"), target_path]).await;
    let downloaded = std::fs::read(&target).unwrap();
    assert_eq!(downloaded.len(), image.len());
    assert!(
        downloaded == image,
        "downloaded image differs from the uploaded one"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fio_random_writes_verify() {
    let Some(fio) = tool("fio", "fio") else {
        return;
    };
    let (server, volume) = mem_server("disk0", 64 * MIB).await;
    let uri = server.unix_uri("disk0");
    let uri_arg = format!("--uri={uri}");
    let mut args = vec![
        "--name=cairn-nbd",
        "--ioengine=nbd",
        uri_arg.as_str(),
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=32",
        "--size=32M",
        "--verify=crc32c",
        "--randseed=1234",
    ];
    let mut write_pass = args.clone();
    write_pass.push("--do_verify=1");
    let work_dir = tempfile::tempdir().unwrap();
    let output = run_in(&fio, &write_pass, work_dir.path()).await;
    assert!(output.contains("cairn-nbd"), "{output}");
    assert!(!output.contains("verify: bad"), "{output}");
    assert!(volume.snapshot()[..(32 * MIB) as usize]
        .iter()
        .any(|b| *b != 0));

    // A second run that only reads and checks what the first one wrote.
    args.push("--verify_only=1");
    let output = run_in(&fio, &args, work_dir.path()).await;
    assert!(!output.contains("verify: bad"), "{output}");
    assert!(
        output.contains("total=8192,"),
        "verify pass did not read every block:\n{output}"
    );

    // The checker must be able to fail: corrupt one block and verify again.
    volume
        .write(12 * MIB, Bytes::from(vec![0x5a; 4096]))
        .await
        .unwrap();
    let status = tokio::process::Command::new(&fio)
        .args(&args)
        .current_dir(work_dir.path())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run fio");
    assert!(!status.status.success(), "fio verified a corrupted volume");
    server.stop().await;
}
