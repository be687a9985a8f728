//! Hosts on one machine: `cairn cluster up --hosts 3 --osds-per-host 2
//! --netns` runs each host's OSDs in a network namespace with an address on
//! a public network (clients, monitor) and one on a cluster network
//! (replication, recovery); the monitor and the clients stay in the root
//! namespace. Checked on real processes: replicas on three hosts, both
//! addresses in `osd dump`, the networks kept apart, a host cut off under
//! load (it acknowledges nothing, the others go on) and healed (everything
//! converges and reads back), a host cut from the cluster network only
//! (its peers report it down; it stays down until healed), bad input, and
//! `cluster down` removing every namespace, veth and bridge.
//!
//! These tests need root and `ip netns`; without them they check only that
//! `--netns` is refused, and say so.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::{Cluster, Image};
use cairn_types::Entity;
use cairn_volume::Volume;
use cairn_wire::Message;
use common::writes::*;
use common::{netns_usable, pattern, TestCluster, CAIRN};
use serde_json::Value;

/// Three hosts of two OSDs, each host in its own namespace; a short grace
/// so a cut host is marked down within seconds.
const NETNS_HOSTS: &[&str] = &[
    "--hosts",
    "3",
    "--osds-per-host",
    "2",
    "--netns",
    "--pg-num",
    "32",
    "--set",
    "mon.osd_heartbeat_grace_ms=3000",
    "--set",
    "osd.heartbeat_interval_ms=500",
];

fn skip_without_netns(test: &str) -> bool {
    if netns_usable() {
        return false;
    }
    eprintln!("{test}: SKIPPED: needs root and a working `ip netns`");
    true
}

fn json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = cluster.ok(&full);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

/// The CRUSH host of every OSD, from `osd tree`.
fn hosts_of(cluster: &TestCluster) -> BTreeMap<u32, String> {
    let tree = json(cluster, &["osd", "tree"]);
    let mut out = BTreeMap::new();
    for n in tree["nodes"].as_array().expect("nodes") {
        for child in n["children"].as_array().into_iter().flatten() {
            if let Some(osd) = child.as_u64() {
                out.insert(osd as u32, n["name"].as_str().expect("name").to_string());
            }
        }
    }
    out
}

fn expected_hosts() -> BTreeMap<u32, String> {
    (0..6).map(|id| (id, format!("h{}", id / 2 + 1))).collect()
}

fn addr(v: &Value) -> SocketAddr {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a socket address: {v}"))
}

/// The first three octets: the /24 an address is on.
fn subnet(addr: SocketAddr) -> String {
    let ip = addr.ip().to_string();
    ip.rsplit_once('.').expect("IPv4").0.to_string()
}

/// Namespaces and root-namespace links named after the cluster's tag.
fn network_objects(tag: &str) -> (Vec<String>, Vec<String>) {
    let run = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().expect("run ip");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let namespaces = run(&["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("cairn-{tag}-")))
        .map(str::to_string)
        .collect();
    let links = run(&["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .filter(|n| n.starts_with(&format!("cn{tag}")))
        .map(str::to_string)
        .collect();
    (namespaces, links)
}

/// Does `addr` accept a TCP connection within `limit`?
async fn reachable(addr: SocketAddr, limit: Duration) -> bool {
    matches!(
        tokio::time::timeout(limit, tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

/// Say hello as `entity` to `addr`, then ping: does the OSD answer, or
/// close the connection?
async fn answers_ping(addr: SocketAddr, entity: Entity) -> bool {
    let hello = Message::Hello { entity, fsid: None };
    let Ok(mut conn) = cairn_wire::connect(&addr.to_string(), hello).await else {
        return false;
    };
    conn.sender.send(Message::Ping { nonce: 7 });
    let reply = tokio::time::timeout(Duration::from_secs(5), conn.reader.read()).await;
    matches!(reply, Ok(Ok(Message::Pong { nonce: 7 })))
}

fn mon_addr(cluster: &TestCluster) -> SocketAddr {
    let config = cairn_config::Config::load(&cluster.conf()).expect("config");
    config.global.mon_addr.parse().expect("mon_addr")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn netns_hosts_keep_replicas_and_networks_apart() {
    if skip_without_netns("netns_hosts_keep_replicas_and_networks_apart") {
        return;
    }
    let cluster = TestCluster::up_with(6, NETNS_HOSTS);
    let host_of = hosts_of(&cluster);
    assert_eq!(host_of, expected_hosts());

    // Size 3, failure domain host: every acting set spans the three hosts.
    let pgs = json(&cluster, &["pg", "ls"]);
    let pgs = pgs.as_array().expect("pgs");
    assert_eq!(pgs.len(), 32);
    for pg in pgs {
        let acting: Vec<u32> = pg["acting"]
            .as_array()
            .expect("acting")
            .iter()
            .map(|o| o.as_u64().expect("id") as u32)
            .collect();
        let hosts: BTreeSet<&String> = acting.iter().map(|o| &host_of[o]).collect();
        assert_eq!((acting.len(), hosts.len()), (3, 3), "{pg}");
    }

    // Both addresses of every OSD in the map, on its host's two networks.
    let hosts = cluster.cluster_status()["hosts"].clone();
    let dump = json(&cluster, &["osd", "dump"]);
    let osds = dump["osds"].as_array().expect("osds");
    assert_eq!(osds.len(), 6, "{dump}");
    let (mut publics, mut clusters) = (BTreeSet::new(), BTreeSet::new());
    for osd in osds {
        let id = osd["id"].as_u64().expect("id") as u32;
        let host = &host_of[&id];
        let k: usize = host[1..].parse().expect("hK");
        let (public, cluster_addr) = (addr(&osd["public_addr"]), addr(&osd["cluster_addr"]));
        assert_eq!(
            public.ip().to_string(),
            hosts[k - 1]["public_addr"],
            "osd.{id}: {osd}"
        );
        assert_eq!(
            cluster_addr.ip().to_string(),
            hosts[k - 1]["cluster_addr"],
            "osd.{id}: {osd}"
        );
        assert!(public.port() != 0 && cluster_addr.port() != 0, "{osd}");
        assert_eq!(osd["location"]["host"], host.as_str(), "{osd}");
        assert_eq!(
            (osd["up"].as_bool(), osd["in"].as_bool()),
            (Some(true), Some(true))
        );
        publics.insert(subnet(public));
        clusters.insert(subnet(cluster_addr));
    }
    assert_eq!((publics.len(), clusters.len()), (1, 1), "{dump}");
    assert_ne!(publics, clusters, "one network for both: {dump}");
    let distinct_ips: BTreeSet<String> = osds
        .iter()
        .map(|o| addr(&o["public_addr"]).ip().to_string())
        .collect();
    assert_eq!(distinct_ips.len(), 3, "an address per host: {dump}");
    let mon = mon_addr(&cluster);
    assert!(
        publics.contains(&subnet(mon)),
        "monitor {mon} is not on {publics:?}"
    );
    assert_eq!(dump["pools"][0]["name"], "rbd");
    let text = cluster.ok(&["osd", "dump"]);
    let line = text
        .lines()
        .find(|l| l.starts_with("osd.3 "))
        .expect("osd.3 line");
    assert!(
        line.contains(" up in ")
            && line.contains(&format!(
                "public {}",
                osds[3]["public_addr"].as_str().unwrap()
            ))
            && line.contains(&format!(
                "cluster {}",
                osds[3]["cluster_addr"].as_str().unwrap()
            ))
            && line.contains("host=h2"),
        "{line}"
    );

    // The root namespace (monitor, clients) is on the public network only;
    // each listener takes only its own kind of connection.
    let osd2 = &osds[2];
    let (public2, cluster2) = (addr(&osd2["public_addr"]), addr(&osd2["cluster_addr"]));
    assert!(answers_ping(public2, Entity::Client(77)).await);
    assert!(
        !answers_ping(public2, Entity::Osd(0)).await,
        "a peer on the public address"
    );
    assert!(
        !reachable(cluster2, Duration::from_secs(1)).await,
        "a client reached the cluster network at {cluster2}"
    );

    // Client I/O through the public network.
    let client = cluster.client().await;
    cluster.ok(&[
        "image",
        "create",
        "rbd/io",
        "--size",
        "4M",
        "--object-size",
        "64K",
    ]);
    let image = Image::open(&client, "rbd", "io").await.expect("open");
    let data = pattern(5, 4 << 20);
    within("write", WAIT, image.write(0, Bytes::from(data.clone())))
        .await
        .expect("write");
    let back = within("read", WAIT, image.read(0, 4 << 20))
        .await
        .expect("read");
    assert!(back[..] == data[..], "read back differs");
    // The primaries count the objects (in their next reports).
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.status()["objects"].as_u64() < Some(64) {
        assert!(Instant::now() < deadline, "{}", cluster.status());
        std::thread::sleep(Duration::from_millis(200));
    }

    bad_input_changes_nothing(&cluster);

    // `down` removes every namespace, veth and bridge it made.
    let tag = cluster.state()["net"]["tag"]
        .as_str()
        .expect("net.tag")
        .to_string();
    let (namespaces, links) = network_objects(&tag);
    assert_eq!(
        (namespaces.len(), links.len()),
        (3, 8),
        "{namespaces:?} {links:?}"
    );
    let out = cluster.cluster_cmd(&["down"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (namespaces, links) = network_objects(&tag);
    assert!(
        namespaces.is_empty() && links.is_empty(),
        "left behind: {namespaces:?} {links:?}"
    );
    let out = cluster.cluster_cmd(&["cut", "--host", "h1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is not up"), "{err}");
}

/// Mistakes on a running namespaced cluster: one line, non-zero, nothing
/// changed (map, links).
fn bad_input_changes_nothing(cluster: &TestCluster) {
    let snapshot = || {
        (
            json(cluster, &["osd", "dump"]),
            cluster.cluster_status()["hosts"].clone(),
        )
    };
    let before = snapshot();
    let cases: &[(&[&str], &str)] = &[
        (&["cut", "--host", "h4"], "no host 'h4' in this cluster (its hosts are h1 to h3)"),
        (&["cut", "--host", "osd.2"], "no host 'osd.2'"),
        (&["cut", "--host", "h01"], "no host 'h01'"),
        (&["heal", "--host", "h0"], "no host 'h0'"),
        (&["cut", "--host", "h2", "--network", "sideways"], "--network must be public, cluster or both"),
        (
            &["up", "--hosts", "2", "--osds-per-host", "3", "--netns"],
            "this cluster was made with --hosts 3 --osds-per-host 2 --netns; its layout cannot change",
        ),
        (&["up", "--hosts", "3", "--osds-per-host", "2"], "its layout cannot change"),
        (&["up", "--osds", "4"], "--osds 4 does not match it"),
    ];
    for (args, words) in cases {
        let out = cluster.cluster_cmd(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "cluster {args:?} should fail");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("cairn: error: ") && err.contains(words),
            "cluster {args:?}: {err:?} should say {words:?}"
        );
    }
    assert_eq!(snapshot(), before, "a refused command changed something");
}

/// The primary of each object of `image` in the client's current map.
fn primaries(client: &Cluster, image: &Image) -> Vec<u32> {
    (0..image.info_now().objects())
        .map(|n| object_primary(client, image, n).expect("a primary"))
        .collect()
}

async fn set_links(cluster: &Arc<TestCluster>, host: &str, up: bool) {
    let c = cluster.clone();
    let h = host.to_string();
    blocking("cut/heal", move || c.set_links(&h, "both", up)).await;
    eprintln!("{} {host}", if up { "healed" } else { "cut" });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_host_acknowledges_nothing_and_converges_when_healed() {
    if skip_without_netns("a_cut_host_acknowledges_nothing_and_converges_when_healed") {
        return;
    }
    let cluster = Arc::new(TestCluster::up_with(6, NETNS_HOSTS));
    let client = cluster.client().await;
    let size: u64 = 16 << 20; // 256 objects over 32 PGs: every OSD holds data
    let image = create_image(&cluster, &client, "load", size).await;
    let model = Model::new(size / BLOCK);
    let stats = Arc::new(Stats::default());
    let mut load = Load::new();
    load.spawn(&image, &model, &stats, 0..size / BLOCK, 8, 4);
    wait_acks(&stats, 0, 100, "before the cut").await;

    // A probe: one object whose primary is on h2 (osd.2 or osd.3). About a
    // third of the PGs have theirs there; 64 objects make missing them all
    // (chance ~1e-10) no reason for this test to fail.
    let probe = create_image(&cluster, &client, "probe", 64 * OBJ).await;
    let probe_primaries = primaries(&client, &probe);
    let (object, primary) = probe_primaries
        .iter()
        .copied()
        .enumerate()
        .find(|(_, p)| [2, 3].contains(p))
        .unwrap_or_else(|| {
            panic!(
                "no object of the probe has its primary on h2 (epoch {}): {probe_primaries:?}",
                client.map().epoch
            )
        });
    let up_from = |id: u32| client.map().osds[&id].up_from;
    let incarnations = (up_from(2), up_from(3));

    set_links(&cluster, "h2", false).await;
    let cut_at = Instant::now();
    // A write whose primary was on h2 completes only once another host
    // serves its PG: h2 acknowledges nothing.
    let probe_write = {
        let (probe, client) = (probe.clone(), client.clone());
        tokio::spawn(async move {
            let data = Bytes::from(pattern(9, OBJ as usize));
            probe
                .write(object as u64 * OBJ, data)
                .await
                .expect("probe write");
            client.map()
        })
    };
    wait_osd_state(&client, 2, false).await;
    wait_osd_state(&client, 3, false).await;
    eprintln!("h2's OSDs marked down {:?} after the cut", cut_at.elapsed());
    let map_at_ack = within("the probe write", WAIT, probe_write)
        .await
        .expect("probe task");
    assert!(
        !map_at_ack.is_up(primary),
        "the probe write was acknowledged while osd.{primary} (cut off) was its primary"
    );
    let map = client.map();
    for pg in map.all_pgs() {
        let acting = map.acting(pg).osds;
        assert!(
            !acting.contains(&2) && !acting.contains(&3),
            "{pg}: {acting:?}"
        );
    }
    for osd in [2, 3] {
        let public = addr(&Value::from(client.map().osds[&osd].addr.clone()));
        assert!(
            !reachable(public, Duration::from_secs(1)).await,
            "osd.{osd} reachable at {public} while cut"
        );
    }
    let degraded = stats.acks();
    wait_acks(&stats, degraded, 200, "with h2 cut off").await;
    load.stop().await;
    verify(&image, &model, "with h2 cut off").await;

    // Heal under load.
    let mut load = Load::new();
    load.spawn(&image, &model, &stats, 0..size / BLOCK, 8, 4);
    set_links(&cluster, "h2", true).await;
    wait_osd_state(&client, 2, true).await;
    wait_osd_state(&client, 3, true).await;
    assert!(
        up_from(2) > incarnations.0 && up_from(3) > incarnations.1,
        "h2's OSDs came back without booting again"
    );
    let healed = stats.acks();
    wait_acks(&stats, healed, 100, "after the heal").await;
    load.stop().await;
    assert!(
        stats.errors().is_empty(),
        "writes failed: {:?}",
        stats.errors()
    );
    wait_all_clean(&cluster).await;
    verify(&image, &model, "after the heal, all clean").await;

    // h2 holds everything acknowledged, also while it was cut off: with h1
    // cut off in turn, h2 and h3 serve it all.
    set_links(&cluster, "h1", false).await;
    wait_osd_state(&client, 0, false).await;
    wait_osd_state(&client, 1, false).await;
    verify(&image, &model, "served by h2 and h3").await;
    set_links(&cluster, "h1", true).await;
    wait_all_clean(&cluster).await;
    verify(&image, &model, "all hosts back").await;
}

#[test]
fn netns_refusals_make_nothing() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("cluster");
    let run = |extra: &[&str]| {
        let out = Command::new(CAIRN)
            .args(["cluster", "up"])
            .args(extra)
            .arg("--dir")
            .arg(&dir)
            .output()
            .expect("run cairn");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{extra:?} should fail");
        assert_eq!(err.trim_end().lines().count(), 1, "{extra:?}: {err}");
        assert!(!dir.exists(), "{extra:?} made {}", dir.display());
        err
    };
    if !netns_usable() {
        let err = run(&["--hosts", "3", "--netns"]);
        assert!(err.contains("--netns needs root"), "{err}");
        eprintln!("netns_refusals_make_nothing: only the refusal checked (not root)");
        return;
    }
    let cases: &[(&[&str], &str)] = &[
        (&["--netns"], "--netns needs --hosts"),
        (&["--netns", "--osds", "3"], "--netns needs --hosts"),
        (
            &["--hosts", "201", "--netns"],
            "--netns supports at most 200 hosts",
        ),
        (
            &[
                "--hosts",
                "3",
                "--netns",
                "--set",
                "osd.public_addr=nowhere",
            ],
            "osd.public_addr",
        ),
        (
            &[
                "--hosts",
                "3",
                "--netns",
                "--set",
                "osd.cluster_addr=0.0.0.0:0",
            ],
            "not 0.0.0.0",
        ),
        (
            &[
                "--hosts",
                "3",
                "--netns",
                "--set",
                "osd.1.public_addr=10.0.0.1",
            ],
            "osd.1.public_addr",
        ),
    ];
    for (args, words) in cases {
        let err = run(args);
        assert!(
            err.starts_with("cairn: error: ") && err.contains(words),
            "{args:?}: {err:?} should say {words:?}"
        );
    }
    // As another user: refused before anything is made.
    let nobody = Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            CAIRN,
        ])
        .args(["cluster", "up", "--hosts", "3", "--netns", "--dir"])
        .arg(&dir)
        .output();
    match nobody {
        Ok(out) if String::from_utf8_lossy(&out.stderr).starts_with("cairn: error: ") => {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && err.contains("--netns needs root"),
                "{err}"
            );
            assert!(!dir.exists());
        }
        other => eprintln!("not checked as another user (setpriv: {other:?})"),
    }
    // A configuration whose public and cluster addresses collide.
    let conf = parent.path().join("bad.toml");
    std::fs::write(
        &conf,
        "[osd.2]\npublic_addr = \"10.0.0.2:6800\"\ncluster_addr = \"10.0.0.2:6800\"\n",
    )
    .expect("write");
    let out = Command::new(CAIRN)
        .arg("--conf")
        .arg(&conf)
        .args(["config", "check"])
        .output()
        .expect("run cairn");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "config check passed");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("osd.2.cluster_addr") && err.contains("must differ from the public address"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_cut_from_the_cluster_network_only_is_reported_down_until_healed() {
    if skip_without_netns("a_host_cut_from_the_cluster_network_only") {
        return;
    }
    let cluster = Arc::new(TestCluster::up_with(6, NETNS_HOSTS));
    let client = cluster.client().await;
    let size: u64 = 16 << 20;
    let image = create_image(&cluster, &client, "load", size).await;
    let model = Model::new(size / BLOCK);
    let stats = Arc::new(Stats::default());
    let mut load = Load::new();
    load.spawn(&image, &model, &stats, 0..size / BLOCK, 8, 4);
    wait_acks(&stats, 0, 100, "before the cut").await;

    // h2 keeps its public link: the monitor hears its heartbeats, but its
    // peers do not, and report it.
    let c = cluster.clone();
    blocking("cut", move || c.set_links("h2", "cluster", false)).await;
    let cut_at = Instant::now();
    wait_osd_state(&client, 2, false).await;
    wait_osd_state(&client, 3, false).await;
    eprintln!(
        "h2's OSDs reported down {:?} after the cut",
        cut_at.elapsed()
    );
    let mon_log = std::fs::read_to_string(cluster.path().join("mon.log")).expect("mon.log");
    for osd in [2, 3] {
        assert!(
            mon_log
                .lines()
                .any(|l| l.contains(&format!("osd.{osd} is silent on the cluster network"))),
            "osd.{osd} was not marked down by its peers' reports"
        );
    }
    // They live and answer on the public network, yet stay down: they
    // boot again only once their peers answer.
    for osd in [2, 3] {
        let public = addr(&Value::from(client.map().osds[&osd].addr.clone()));
        assert!(
            answers_ping(public, Entity::Client(78)).await,
            "osd.{osd} at {public}"
        );
    }
    let from = stats.acks();
    let watch_until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < watch_until {
        let map = client.map();
        assert!(
            !map.is_up(2) && !map.is_up(3),
            "a cut-off OSD came back up (epoch {})",
            map.epoch
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_acks(&stats, from, 200, "with h2's cluster link cut").await;
    load.stop().await;
    verify(&image, &model, "with h2's cluster link cut").await;

    let mut load = Load::new();
    load.spawn(&image, &model, &stats, 0..size / BLOCK, 8, 4);
    let c = cluster.clone();
    blocking("heal", move || c.set_links("h2", "cluster", true)).await;
    let healed_at = Instant::now();
    wait_osd_state(&client, 2, true).await;
    wait_osd_state(&client, 3, true).await;
    eprintln!(
        "h2's OSDs up again {:?} after the heal",
        healed_at.elapsed()
    );
    let healed = stats.acks();
    wait_acks(&stats, healed, 100, "after the heal").await;
    load.stop().await;
    assert!(
        stats.errors().is_empty(),
        "writes failed: {:?}",
        stats.errors()
    );
    wait_all_clean(&cluster).await;
    verify(&image, &model, "after the heal, all clean").await;
}
