//! A connection speaking another wire version is refused with a line that
//! says so, at the OSD and at the monitor, and both keep serving everyone
//! else.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use cairn_types::Entity;
use cairn_wire::{encode_frame, Message, WIRE_VERSION};
use common::TestCluster;

/// Send a hello framed as wire version `WIRE_VERSION + 1` to `addr` and
/// wait for the other side to close the connection.
fn hello_from_the_future(addr: &str) {
    let hello = Message::Hello {
        entity: Entity::Client(7),
        fsid: None,
    };
    let mut frame = Vec::new();
    encode_frame(&hello, &mut frame).expect("encode a hello");
    frame[3] = WIRE_VERSION + 1;
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.write_all(&frame).expect("send the hello");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("{addr} answered {n} bytes to another wire version"),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{addr} did not close the connection: {e}"),
    }
}

fn log_says(cluster: &TestCluster, daemon: &str, what: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    let path = cluster.path().join(format!("{daemon}.log"));
    while Instant::now() < deadline {
        if std::fs::read_to_string(&path).is_ok_and(|t| t.contains(what)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_wire_version_is_refused_with_a_clear_line() {
    let cluster = TestCluster::up(3);
    let client = cluster.client().await;
    let map = client.map();
    let osd = map.osd_addr(0).expect("osd.0's address").to_string();
    let conf = std::fs::read_to_string(cluster.conf()).expect("read the config");
    let mon = conf
        .lines()
        .find_map(|l| l.trim().strip_prefix("mon_addr"))
        .and_then(|v| v.split('"').nth(1))
        .expect("mon_addr in the config")
        .to_string();

    hello_from_the_future(&osd);
    hello_from_the_future(&mon);
    let line = format!(
        "the peer speaks wire version {}, this build speaks {WIRE_VERSION}",
        WIRE_VERSION + 1
    );
    assert!(
        log_says(&cluster, "osd.0", &line),
        "osd.0 did not log {line:?}"
    );
    assert!(
        log_says(&cluster, "mon", &line),
        "the monitor did not log {line:?}"
    );

    // Both still serve.
    let status = cluster.status();
    assert_eq!(status["osds"]["up"].as_u64(), Some(3), "{status}");
    cluster.ok(&["image", "create", "rbd/after", "--size", "4M"]);
    let out = cluster.ok(&["image", "ls", "rbd"]);
    assert!(out.contains("after"), "{out}");
}
