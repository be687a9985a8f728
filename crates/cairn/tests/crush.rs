//! CRUSH on real processes: `osd tree`, the `osd crush` commands and their
//! bad input (one line, non-zero exit, nothing changed), pools with
//! `--rule`, undersized PGs in health, and a cluster of three hosts whose
//! every acting set spans the three.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TestCluster, CAIRN};
use serde_json::Value;

fn json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = cluster.ok(&full);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

/// The tree's nodes by name.
fn nodes(tree: &Value) -> BTreeMap<String, Value> {
    tree["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| (n["name"].as_str().expect("name").to_string(), n.clone()))
        .collect()
}

/// The bucket holding each OSD, from the tree.
fn parents(tree: &Value) -> BTreeMap<u64, String> {
    let mut out = BTreeMap::new();
    for n in tree["nodes"].as_array().expect("nodes") {
        for child in n["children"].as_array().into_iter().flatten() {
            if let Some(osd) = child.as_u64() {
                out.insert(osd, n["name"].as_str().expect("name").to_string());
            }
        }
    }
    out
}

/// The acting sets of every PG of pool `pool` (all pools if `None`).
fn acting_sets(cluster: &TestCluster, pool: Option<&str>) -> Vec<(String, Vec<u64>)> {
    json(cluster, &["pg", "ls"])
        .as_array()
        .expect("pgs")
        .iter()
        .filter(|pg| {
            pool.is_none_or(|p| {
                pg["pg"]
                    .as_str()
                    .is_some_and(|id| id.starts_with(&format!("{p}.")))
            })
        })
        .map(|pg| {
            let acting = pg["acting"]
                .as_array()
                .expect("acting")
                .iter()
                .map(|o| o.as_u64().expect("id"))
                .collect();
            (pg["pg"].as_str().expect("pg").to_string(), acting)
        })
        .collect()
}

#[test]
fn tree_and_crush_commands_on_one_machine() {
    let cluster = TestCluster::up(3);
    let tree = json(&cluster, &["osd", "tree"]);
    let by_name = nodes(&tree);
    let root = &tree["nodes"][0];
    assert_eq!(
        (root["name"].as_str(), root["type"].as_str()),
        (Some("default"), Some("root")),
        "{tree}"
    );
    let host = tree["nodes"][1]["name"].as_str().expect("host").to_string();
    assert_eq!(tree["nodes"][1]["type"], "host");
    for id in 0..3 {
        let osd = &by_name[&format!("osd.{id}")];
        assert_eq!(osd["depth"], 2, "{osd}");
        assert_eq!(osd["status"], "up");
        assert_eq!(osd["in"], true);
        assert!(
            osd["crush_weight"].as_f64().is_some_and(|w| w > 0.0),
            "{osd}"
        );
        assert!(
            ["hdd", "ssd", "nvme"].contains(&osd["class"].as_str().unwrap_or("")),
            "{osd}"
        );
    }
    let text = cluster.ok(&["osd", "tree"]);
    assert!(
        text.contains("root default") && text.contains(&format!("host {host}")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("osd.1") && l.contains("up") && l.ends_with("in")),
        "{text}"
    );
    // One machine: the default rule separates replicas by OSD.
    let rules = json(&cluster, &["osd", "crush", "rule", "ls"]);
    assert_eq!(rules[0]["name"], "replicated_rule");
    assert_eq!(rules[0]["failure_domain"], "osd");
    assert_eq!(rules[0]["pools"], serde_json::json!(["rbd"]));

    cluster.ok(&["osd", "crush", "add-bucket", "r1", "rack", "root=default"]);
    cluster.ok(&["osd", "crush", "move", &host, "rack=r1"]);
    cluster.ok(&["osd", "crush", "reweight", "osd.0", "0.25"]);
    cluster.ok(&["osd", "crush", "set-device-class", "nvme", "osd.1", "osd.2"]);
    let tree = json(&cluster, &["osd", "tree"]);
    let by_name = nodes(&tree);
    assert_eq!(by_name[&host]["depth"], 2);
    assert_eq!(by_name["osd.0"]["crush_weight"], 0.25);
    assert_eq!(by_name["osd.1"]["class"], "nvme");
    assert_eq!(parents(&tree)[&2], host);

    let out = cluster.ok(&[
        "osd",
        "crush",
        "rule",
        "create-replicated",
        "fast",
        "default",
        "osd",
        "nvme",
    ]);
    assert!(
        out.contains("take default class nvme; chooseleaf firstn 0 type osd; emit"),
        "{out}"
    );
    cluster.ok(&[
        "pool", "create", "fastpool", "--rule", "fast", "--size", "2", "--pg-num", "8",
    ]);
    let pools = json(&cluster, &["pool", "ls"]);
    let fast = pools
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "fastpool")
        .expect("pool")
        .clone();
    assert_eq!(fast["crush_rule"], "fast");
    let pool_id = fast["id"].to_string();
    for (pg, acting) in acting_sets(&cluster, Some(&pool_id)) {
        let set: BTreeSet<u64> = acting.into_iter().collect();
        assert_eq!(set, BTreeSet::from([1, 2]), "{pg}");
    }
    assert!(cluster
        .ok(&["osd", "crush", "rule", "ls"])
        .contains("fastpool"));
}

#[test]
fn crush_mistakes_are_one_line_and_change_nothing() {
    let cluster = TestCluster::up(3);
    let host = json(&cluster, &["osd", "tree"])["nodes"][1]["name"]
        .as_str()
        .expect("host")
        .to_string();
    cluster.ok(&[
        "osd",
        "crush",
        "rule",
        "create-replicated",
        "by_host",
        "default",
        "host",
    ]);
    let snapshot = |c: &TestCluster| {
        (
            json(c, &["osd", "tree"]),
            json(c, &["pool", "ls"]),
            json(c, &["osd", "crush", "rule", "ls"]),
        )
    };
    let before = snapshot(&cluster);
    let epoch = cluster.status()["epoch"].clone();
    let cases: &[(&[&str], &str)] = &[
        (&["osd", "crush", "move", "nope", "root=default"], "no bucket or OSD named 'nope'"),
        (&["osd", "crush", "move", "default", &format!("host={host}")], "would create a loop"),
        (&["osd", "crush", "move", &host], "at least one type=name"),
        (&["osd", "crush", "move", &host, "rack"], "expected type=name"),
        (&["osd", "crush", "move", &host, "shelf=s1"], "unknown bucket type 'shelf'"),
        (&["osd", "crush", "add-bucket", "x", "shelf"], "unknown bucket type 'shelf'"),
        (&["osd", "crush", "add-bucket", "x", "osd"], "is for OSDs"),
        (&["osd", "crush", "add-bucket", &host, "host"], "already exists"),
        (&["osd", "crush", "add-bucket", "x", "rack", &format!("rack={host}")], "is a host, not a rack"),
        (&["osd", "crush", "rm", "default"], "is not empty"),
        (&["osd", "crush", "rm", "osd.77"], "'osd.77'"),
        (&["osd", "crush", "reweight", &host, "1"], "sum of its items"),
        (&["osd", "crush", "reweight", "osd.0", "heavy"], "invalid weight 'heavy'"),
        (&["osd", "crush", "reweight", "osd.9", "1"], "'osd.9'"),
        (&["osd", "crush", "set-device-class", "ssd", "osd.9"], "osd.9"),
        (&["osd", "crush", "set-device-class", "ssd"], "at least one OSD"),
        (&["osd", "crush", "rule", "create-replicated", "r", "nowhere", "host"], "'nowhere'"),
        (&["osd", "crush", "rule", "create-replicated", "r", "default", "shelf"], "unknown bucket type"),
        (&["osd", "crush", "rule", "create-replicated", "r", "default", "host", "tape"], "unknown device class 'tape'"),
        (&["osd", "crush", "rule", "create-replicated", "by_host", "default", "host"], "already exists"),
        (&["pool", "create", "p", "--rule", "nope"], "unknown CRUSH rule 'nope'"),
        (
            &["pool", "create", "p", "--rule", "by_host"],
            "rule by_host places replicas on distinct hosts, but only 1 host has in OSDs; size 3 cannot be met",
        ),
        (&["pool", "create", "p", "--size", "4"], "only 3 osds have in OSDs; size 4 cannot be met"),
    ];
    for (args, words) in cases {
        let err = cluster.fails(args);
        assert!(
            err.starts_with("cairn: error: ") && err.contains(words),
            "cairn {args:?}: {err:?} should say {words:?}"
        );
    }
    assert_eq!(
        snapshot(&cluster),
        before,
        "a failed command changed something"
    );
    assert_eq!(
        cluster.status()["epoch"],
        epoch,
        "a failed command made an epoch"
    );

    // An OSD refuses a location naming an unknown type before it starts.
    let dir = cluster.path().join("osd.9");
    let out = cluster.cairn(&[
        "osd",
        "--id",
        "9",
        "--dir",
        &dir.display().to_string(),
        "--crush-location",
        "shelf=s1",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("--crush-location") && err.contains("unknown bucket type \"shelf\""),
        "{err}"
    );
}

/// Poll `status` until `ok` holds (at most 30 s); returns the last status.
fn wait_status(cluster: &TestCluster, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = cluster.status();
        if ok(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The up sets (CRUSH's placement of the up OSDs) of every PG.
fn up_sets(cluster: &TestCluster) -> Vec<Vec<u64>> {
    json(cluster, &["pg", "ls"])
        .as_array()
        .expect("pgs")
        .iter()
        .map(|pg| {
            pg["up"]
                .as_array()
                .expect("up")
                .iter()
                .map(|o| o.as_u64().expect("id"))
                .collect()
        })
        .collect()
}

#[test]
fn pgs_that_lose_their_failure_domains_show_undersized() {
    let cluster = TestCluster::up(3);
    assert_eq!(cluster.status()["health"], "HEALTH_OK");
    // Out: CRUSH places no PG on it (its data stays served until moved).
    cluster.ok(&["osd", "out", "2"]);
    for up in up_sets(&cluster) {
        assert_eq!(up.len(), 2, "{up:?}");
        assert!(!up.contains(&2));
    }
    cluster.ok(&["osd", "in", "2"]);
    wait_status(&cluster, "all clean again", |s| {
        s["pgs"]["clean"] == s["pgs"]["total"]
    });
    // Down: every PG is left with two of its three OSDs.
    cluster.kill9("osd.2");
    let status = wait_status(&cluster, "undersized PGs", |s| s["pgs"]["undersized"] == 16);
    let health = status["health"].as_str().unwrap_or("");
    assert!(health.contains("16 pgs undersized"), "{status}");
    for (pg, acting) in acting_sets(&cluster, None) {
        assert_eq!(acting.len(), 2, "{pg}");
        assert!(!acting.contains(&2));
    }
    cluster.restart_missing();
    wait_status(&cluster, "no undersized PG", |s| {
        s["pgs"]["undersized"] == 0
    });
}

#[test]
fn three_hosts_every_acting_set_spans_them() {
    let cluster = TestCluster::up_with(
        6,
        &["--hosts", "3", "--osds-per-host", "2", "--pg-num", "32"],
    );
    let tree = json(&cluster, &["osd", "tree"]);
    let host_of = parents(&tree);
    let expected: BTreeMap<u64, String> =
        (0..6).map(|id| (id, format!("h{}", id / 2 + 1))).collect();
    assert_eq!(host_of, expected, "{tree}");
    let rules = json(&cluster, &["osd", "crush", "rule", "ls"]);
    assert_eq!(rules[0]["failure_domain"], "host");
    let sets = acting_sets(&cluster, None);
    assert_eq!(sets.len(), 32);
    for (pg, acting) in &sets {
        let hosts: BTreeSet<&String> = acting.iter().map(|o| &host_of[o]).collect();
        assert_eq!((acting.len(), hosts.len()), (3, 3), "{pg}: {acting:?}");
    }
    assert_eq!(cluster.status()["health"], "HEALTH_OK");
    let err = cluster.fails(&["pool", "create", "p", "--size", "4"]);
    assert!(
        err.contains("only 3 hosts have in OSDs; size 4 cannot be met"),
        "{err}"
    );

    // A restarted OSD comes back to its host (the location is in cairn.toml).
    cluster.kill9("osd.3");
    cluster.restart_missing();
    assert_eq!(parents(&json(&cluster, &["osd", "tree"])), expected);

    // Both OSDs of h2 out: CRUSH places every PG on the two other hosts.
    cluster.ok(&["osd", "out", "2"]);
    cluster.ok(&["osd", "out", "3"]);
    for up in up_sets(&cluster) {
        let hosts: BTreeSet<&String> = up.iter().map(|o| &host_of[o]).collect();
        assert_eq!((up.len(), hosts.len()), (2, 2), "{up:?}");
        assert!(!hosts.contains(&"h2".to_string()));
    }
    cluster.ok(&["osd", "in", "2"]);
    cluster.ok(&["osd", "in", "3"]);
    wait_status(&cluster, "all clean again", |s| {
        s["pgs"]["clean"] == s["pgs"]["total"]
    });
    // Both OSDs of h2 down: every PG keeps two hosts and shows undersized.
    cluster.kill9("osd.2");
    cluster.kill9("osd.3");
    let status = wait_status(&cluster, "undersized PGs", |s| s["pgs"]["undersized"] == 32);
    assert!(
        status["health"]
            .as_str()
            .unwrap_or("")
            .contains("32 pgs undersized"),
        "{status}"
    );
    for (pg, acting) in acting_sets(&cluster, None) {
        let hosts: BTreeSet<&String> = acting.iter().map(|o| &host_of[o]).collect();
        assert_eq!((acting.len(), hosts.len()), (2, 2), "{pg}: {acting:?}");
        assert!(!hosts.contains(&"h2".to_string()));
    }
}

#[test]
fn cluster_up_refuses_inconsistent_host_layouts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(CAIRN)
        .args([
            "cluster",
            "up",
            "--hosts",
            "2",
            "--osds-per-host",
            "2",
            "--osds",
            "3",
            "--dir",
        ])
        .arg(dir.path())
        .output()
        .expect("run cairn");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("--osds 3 does not match --hosts 2 x --osds-per-host 2"),
        "{err}"
    );
    assert!(!dir.path().join("cairn.toml").exists(), "nothing was made");
}
