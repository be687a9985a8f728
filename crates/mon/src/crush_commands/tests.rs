//! The CRUSH commands against a monitor with no sockets: OSDs boot through
//! the same map update the boot message makes, commands go through
//! `Monitor::command`.

use std::sync::Arc;

use cairn_map::crush::{DeviceReport, Location};
use cairn_wire::{CrushCommand, MonCommand};
use serde_json::Value;

use crate::{MonOptions, Monitor};

/// A monitor (failure domain host) with OSDs 0-3 on hosts h1 and h2.
fn monitor() -> (tempfile::TempDir, Arc<Monitor>) {
    let dir = tempfile::tempdir().unwrap();
    let mon = Monitor::open(dir.path(), MonOptions::default()).unwrap();
    {
        let mut st = mon.state.lock();
        mon.update(&mut st, |map| {
            for id in 0..4 {
                let report = DeviceReport {
                    location: Location::parse(&format!("host=h{}", id / 2 + 1)).unwrap(),
                    update_location: true,
                    class: "hdd".into(),
                    class_configured: false,
                    size_bytes: 1 << 40,
                    initial_weight: None,
                };
                map.osd_boot_with(id, format!("127.0.0.1:{id}"), &report)
                    .unwrap();
            }
            (true, ())
        })
        .unwrap();
    }
    (dir, mon)
}

fn run(mon: &Monitor, cmd: MonCommand) -> Result<Value, String> {
    let reply = mon.command(cmd).unwrap();
    reply.map(|text| serde_json::from_str(&text).unwrap())
}

fn crush(mon: &Monitor, cmd: CrushCommand) -> Result<Value, String> {
    run(mon, MonCommand::OsdCrush(cmd))
}

fn pool(name: &str, size: u32, rule: Option<&str>) -> MonCommand {
    MonCommand::PoolCreate {
        name: name.into(),
        pg_num: Some(8),
        size: Some(size),
        min_size: Some(1),
        rule: rule.map(str::to_string),
    }
}

fn names(tree: &Value) -> Vec<String> {
    tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            format!(
                "{}{}",
                " ".repeat(n["depth"].as_u64().unwrap() as usize),
                n["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn the_tree_and_the_edits() {
    let (_dir, mon) = monitor();
    let tree = run(&mon, MonCommand::OsdTree).unwrap();
    assert_eq!(
        names(&tree),
        ["default", " h1", "  osd.0", "  osd.1", " h2", "  osd.2", "  osd.3"]
    );
    let osd0 = &tree["nodes"][2];
    assert_eq!(osd0["status"], "up");
    assert_eq!(osd0["in"], true);
    assert_eq!(osd0["class"], "hdd");
    assert_eq!(osd0["crush_weight"], 1.0);
    assert_eq!(tree["nodes"][0]["crush_weight"], 4.0);

    crush(
        &mon,
        CrushCommand::AddBucket {
            name: "r1".into(),
            type_name: "rack".into(),
            location: "root=default".into(),
        },
    )
    .unwrap();
    crush(
        &mon,
        CrushCommand::Move {
            name: "h1".into(),
            location: "rack=r1".into(),
        },
    )
    .unwrap();
    crush(
        &mon,
        CrushCommand::Reweight {
            name: "osd.0".into(),
            weight: "2.5".into(),
        },
    )
    .unwrap();
    crush(
        &mon,
        CrushCommand::SetDeviceClass {
            class: "nvme".into(),
            names: vec!["osd.1".into(), "3".into()],
        },
    )
    .unwrap();
    let tree = run(&mon, MonCommand::OsdTree).unwrap();
    assert_eq!(
        names(&tree),
        ["default", " h2", "  osd.2", "  osd.3", " r1", "  h1", "   osd.0", "   osd.1"]
    );
    assert_eq!(tree["nodes"][0]["crush_weight"], 5.5);

    let rule = crush(
        &mon,
        CrushCommand::RuleCreateReplicated {
            name: "fast".into(),
            root: "default".into(),
            failure_domain: "host".into(),
            class: Some("nvme".into()),
        },
    )
    .unwrap();
    assert_eq!(rule["steps"][0], "take default class nvme");
    assert_eq!(rule["steps"][1], "chooseleaf firstn 0 type host");
    run(&mon, pool("fast", 2, Some("fast"))).unwrap();
    let rules = crush(&mon, CrushCommand::RuleLs).unwrap();
    assert_eq!(rules[1]["pools"], serde_json::json!(["fast"]));
    // The pool's PGs sit on the two nvme OSDs only.
    let pgs = run(&mon, MonCommand::PgLs).unwrap();
    for pg in pgs.as_array().unwrap() {
        let mut acting: Vec<u64> = pg["acting"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        acting.sort();
        assert_eq!(acting, [1, 3], "{pg}");
    }
    let osds = run(&mon, MonCommand::OsdLs).unwrap();
    assert_eq!(osds[0]["crush_weight"], 2.5);
    assert_eq!(osds[1]["class"], "nvme");
}

#[test]
fn bad_input_is_one_line_and_changes_nothing() {
    let (_dir, mon) = monitor();
    run(&mon, pool("rbd", 2, None)).unwrap();
    let cases: Vec<(MonCommand, &str)> = vec![
        (pool("big", 3, None), "rule replicated_rule places replicas on distinct hosts, but only 2 hosts have in OSDs; size 3 cannot be met"),
        (pool("p", 2, Some("nope")), "unknown CRUSH rule 'nope' (rules: replicated_rule)"),
        (MonCommand::OsdCrush(CrushCommand::Move { name: "nope".into(), location: "root=default".into() }), "no bucket or OSD named 'nope'"),
        (MonCommand::OsdCrush(CrushCommand::Move { name: "default".into(), location: "host=h1".into() }), "would create a loop"),
        (MonCommand::OsdCrush(CrushCommand::Move { name: "h1".into(), location: "host h2".into() }), "expected type=name"),
        (MonCommand::OsdCrush(CrushCommand::AddBucket { name: "x".into(), type_name: "shelf".into(), location: String::new() }), "unknown bucket type 'shelf'"),
        (MonCommand::OsdCrush(CrushCommand::AddBucket { name: "h1".into(), type_name: "host".into(), location: String::new() }), "already exists"),
        (MonCommand::OsdCrush(CrushCommand::Rm { name: "h1".into() }), "is not empty"),
        (MonCommand::OsdCrush(CrushCommand::Reweight { name: "h1".into(), weight: "1".into() }), "sum of its items"),
        (MonCommand::OsdCrush(CrushCommand::Reweight { name: "osd.0".into(), weight: "-1".into() }), "invalid weight"),
        (MonCommand::OsdCrush(CrushCommand::SetDeviceClass { class: "ssd".into(), names: vec!["osd.9".into()] }), "osd.9"),
        (MonCommand::OsdCrush(CrushCommand::SetDeviceClass { class: "ssd".into(), names: vec!["h1".into()] }), "not an OSD"),
        (MonCommand::OsdCrush(CrushCommand::RuleCreateReplicated { name: "r".into(), root: "default".into(), failure_domain: "host".into(), class: Some("ssd".into()) }), "unknown device class 'ssd' (classes: hdd)"),
        (MonCommand::OsdCrush(CrushCommand::RuleCreateReplicated { name: "r".into(), root: "nowhere".into(), failure_domain: "host".into(), class: None }), "'nowhere'"),
    ];
    for (cmd, words) in cases {
        let epoch = mon.map().epoch;
        let tree = run(&mon, MonCommand::OsdTree).unwrap();
        let err = run(&mon, cmd.clone()).unwrap_err();
        assert!(err.contains(words), "{cmd:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert_eq!(mon.map().epoch, epoch, "{cmd:?} made an epoch");
        assert_eq!(run(&mon, MonCommand::OsdTree).unwrap(), tree);
    }
}

#[test]
fn undersized_pgs_show_in_health() {
    let (_dir, mon) = monitor();
    run(&mon, pool("rbd", 2, None)).unwrap();
    let status = run(&mon, MonCommand::Status).unwrap();
    assert_eq!(status["pgs"]["undersized"], 0);
    for id in [2, 3] {
        run(&mon, MonCommand::OsdOut { id }).unwrap();
    }
    let status = run(&mon, MonCommand::Status).unwrap();
    assert_eq!(status["pgs"]["undersized"], 8, "{status}");
    assert!(
        status["health"]
            .as_str()
            .unwrap()
            .contains("8 pgs undersized"),
        "{status}"
    );
}
