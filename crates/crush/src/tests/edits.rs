//! Edits: what each builds, and that bad input is refused with one clear
//! line and changes nothing.

use super::*;

fn loc(text: &str) -> Location {
    Location::parse(text).expect("location")
}

/// Run a failing edit; the map must be unchanged. Returns the message.
fn refused<T: std::fmt::Debug>(
    map: &mut CrushMap,
    edit: impl FnOnce(&mut CrushMap) -> Result<T, CrushError>,
) -> String {
    let before = map.clone();
    let err = edit(map).expect_err("edit should fail");
    assert_eq!(*map, before, "a failed edit changed the map");
    let text = err.to_string();
    assert_eq!(text.lines().count(), 1, "{text}");
    text
}

#[test]
fn a_new_cluster_has_a_default_root_and_rule() {
    let map = CrushMap::new_cluster(&DEFAULT_BUCKET_TYPES, "host").unwrap();
    assert_eq!(map, CrushMap::default());
    assert_eq!(map.types()[0], "osd");
    let rule = map.rule_by_name(DEFAULT_RULE).unwrap();
    assert_eq!(map.item_name(rule.root), DEFAULT_ROOT);
    assert_eq!(map.type_name(rule.failure_domain), "host");
    let flat = CrushMap::new_cluster(&["host", "root"], "osd").unwrap();
    assert_eq!(
        flat.rule_by_name(DEFAULT_RULE).unwrap().failure_domain,
        DEVICE_TYPE
    );
    for (types, domain, words) in [
        (&["host", "host", "root"][..], "host", "twice"),
        (&["rack", "root"][..], "rack", "host"),
        (&["host", "root"][..], "rack", "unknown bucket type 'rack'"),
        (&["host", "ro ot"][..], "host", "invalid name"),
    ] {
        let err = CrushMap::new_cluster(types, domain)
            .unwrap_err()
            .to_string();
        assert!(err.contains(words), "{types:?}: {err}");
    }
}

#[test]
fn booting_osds_build_the_tree_and_move_when_told() {
    let mut map = CrushMap::default();
    assert!(map
        .boot_device(0, &report("host=h1 rack=r1", "hdd", WEIGHT_ONE))
        .unwrap());
    let (h1, r1) = (map.bucket_id("h1").unwrap(), map.bucket_id("r1").unwrap());
    assert_eq!(map.parent_of(0), Some(h1));
    assert_eq!(map.parent_of(h1), Some(r1));
    assert_eq!(
        map.parent_of(r1),
        map.bucket_id(DEFAULT_ROOT),
        "root=default is implied"
    );
    assert_eq!(map.weight_of(r1), u64::from(WEIGHT_ONE));
    // The same report again changes nothing.
    assert!(!map
        .boot_device(0, &report("host=h1 rack=r1", "hdd", 5))
        .unwrap());
    assert_eq!(
        map.device(0).unwrap().weight,
        WEIGHT_ONE,
        "weight is set once"
    );
    // A new location moves it; a detected class does not replace the class.
    assert!(map.boot_device(0, &report("host=h2", "ssd", 5)).unwrap());
    assert_eq!(map.item_name(map.parent_of(0).unwrap()), "h2");
    assert_eq!(map.class_name(map.device(0).unwrap().class), "hdd");
    assert_eq!(map.weight_of(h1), 0);
    // Without update_location it stays; a configured class applies.
    let mut r = report("host=h1", "nvme", 5);
    r.update_location = false;
    r.class_configured = true;
    assert!(map.boot_device(0, &r).unwrap());
    assert_eq!(map.item_name(map.parent_of(0).unwrap()), "h2");
    assert_eq!(map.class_name(map.device(0).unwrap().class), "nvme");
    // Weights follow sizes: 2 TiB, and tiny devices still weigh something.
    let mut r = report("host=h3", "ssd", 0);
    r.initial_weight = None;
    r.size_bytes = 2 << 40;
    map.boot_device(1, &r).unwrap();
    assert_eq!(map.device(1).unwrap().weight, 2 * WEIGHT_ONE);
    r.size_bytes = 4096;
    map.boot_device(2, &r).unwrap();
    assert_eq!(map.device(2).unwrap().weight, 1);
    // An unknown type in a location is refused.
    let text = refused(&mut map, |m| {
        m.boot_device(3, &report("shelf=s1", "ssd", 1))
    });
    assert!(text.contains("unknown bucket type 'shelf'"), "{text}");
}

#[test]
fn add_move_remove_and_reweight() {
    let mut map = super::realistic();
    let rack = map
        .add_bucket("dc0-r9", "rack", &loc("datacenter=dc0"))
        .unwrap();
    assert_eq!(map.item_name(map.parent_of(rack).unwrap()), "dc0");
    assert!(map.move_item("dc0-r0-h0", &loc("rack=dc0-r9")).unwrap());
    assert!(
        !map.move_item("dc0-r0-h0", &loc("rack=dc0-r9")).unwrap(),
        "already there"
    );
    assert_eq!(
        map.weight_of(rack),
        map.weight_of(map.bucket_id("dc0-r0-h0").unwrap())
    );
    assert!(map.move_item("osd.0", &loc("host=dc1-r1-h2")).unwrap());
    assert_eq!(map.item_name(map.parent_of(0).unwrap()), "dc1-r1-h2");
    // A location naming missing buckets creates them up to an existing one.
    assert!(map
        .move_item("osd.1", &loc("host=new-h rack=new-r datacenter=dc1"))
        .unwrap());
    let new_rack = map.bucket_id("new-r").unwrap();
    assert_eq!(map.item_name(map.parent_of(new_rack).unwrap()), "dc1");
    let before = map.weight_of(map.bucket_id(DEFAULT_ROOT).unwrap());
    assert!(map.reweight("osd.1", 10 * WEIGHT_ONE).unwrap());
    assert_eq!(map.weight_of(new_rack), u64::from(10 * WEIGHT_ONE));
    assert!(map.weight_of(map.bucket_id(DEFAULT_ROOT).unwrap()) > before);
    // Removing: an OSD, then its now empty buckets.
    map.remove_item("osd.1").unwrap();
    assert!(map.device(1).is_none());
    map.remove_item("new-h").unwrap();
    map.remove_item("new-r").unwrap();
    assert!(map.bucket_id("new-r").is_none());
    map.check().unwrap();
}

#[test]
fn loops_are_refused() {
    let mut map = super::realistic();
    for (item, target) in [
        ("default", "host=dc0-r0-h0"),
        ("dc0", "rack=dc0-r1"),
        ("dc0-r0", "host=dc0-r0-h1"),
        ("dc0-r0", "rack=dc0-r0"),
        ("dc1", "host=brand-new datacenter=dc1"),
    ] {
        let text = refused(&mut map, |m| m.move_item(item, &loc(target)));
        assert!(text.contains("loop"), "{item} -> {target}: {text}");
    }
}

type Edit = Box<dyn FnOnce(&mut CrushMap) -> Result<(), CrushError>>;

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let mut map = super::realistic();
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|m| m.add_bucket("dc0", "rack", &loc("")).map(drop)),
            "already exists",
        ),
        (
            Box::new(|m| m.add_bucket("x", "shelf", &loc("")).map(drop)),
            "unknown bucket type 'shelf'",
        ),
        (
            Box::new(|m| m.add_bucket("x", "osd", &loc("")).map(drop)),
            "is for OSDs",
        ),
        (
            Box::new(|m| m.add_bucket("osd.7", "host", &loc("")).map(drop)),
            "osd.N",
        ),
        (
            Box::new(|m| m.add_bucket("a b", "host", &loc("")).map(drop)),
            "invalid name",
        ),
        (
            Box::new(|m| m.add_bucket("x", "host", &loc("rack=dc0")).map(drop)),
            "dc0 is a datacenter, not a rack",
        ),
        (
            Box::new(|m| m.add_bucket("x", "host", &loc("osd=y")).map(drop)),
            "not a bucket type",
        ),
        (
            Box::new(|m| m.move_item("nope", &loc("rack=dc0-r0")).map(drop)),
            "no bucket or OSD named 'nope'",
        ),
        (
            Box::new(|m| m.move_item("osd.999", &loc("rack=dc0-r0")).map(drop)),
            "'osd.999'",
        ),
        (
            Box::new(|m| m.move_item("dc0-r0-h0", &loc("")).map(drop)),
            "at least one",
        ),
        (
            Box::new(|m| m.move_item("dc0-r0-h0", &loc("shelf=s")).map(drop)),
            "unknown bucket type",
        ),
        (Box::new(|m| m.remove_item("dc0").map(drop)), "is not empty"),
        (
            Box::new(|m| m.remove_item("nope").map(drop)),
            "no bucket or OSD",
        ),
        (
            Box::new(|m| m.reweight("dc0", 1).map(drop)),
            "sum of its items",
        ),
        (
            Box::new(|m| m.reweight("osd.1000", 1).map(drop)),
            "osd.1000",
        ),
        (
            Box::new(|m| m.set_device_class("ssd", &[1, 1000]).map(drop)),
            "osd.1000",
        ),
        (
            Box::new(|m| m.set_device_class("s s", &[1]).map(drop)),
            "invalid name",
        ),
        (
            Box::new(|m| {
                m.create_replicated_rule(DEFAULT_RULE, "default", "host", None)
                    .map(drop)
            }),
            "already exists",
        ),
        (
            Box::new(|m| {
                m.create_replicated_rule("r", "nope", "host", None)
                    .map(drop)
            }),
            "'nope'",
        ),
        (
            Box::new(|m| {
                m.create_replicated_rule("r", "default", "shelf", None)
                    .map(drop)
            }),
            "unknown bucket type",
        ),
        (
            Box::new(|m| {
                m.create_replicated_rule("r", "default", "host", Some("tape"))
                    .map(drop)
            }),
            "unknown device class 'tape' (classes: hdd, ssd)",
        ),
        (
            Box::new(|m| {
                m.create_replicated_rule("r", "osd.1", "host", None)
                    .map(drop)
            }),
            "'osd.1'",
        ),
    ];
    for (edit, words) in cases {
        let text = refused(&mut map, edit);
        assert!(text.contains(words), "expected {words:?} in {text:?}");
    }
    // A rule's root cannot go, even when empty.
    map.add_bucket("spare", "root", &loc("")).unwrap();
    map.create_replicated_rule("spare", "spare", "host", None)
        .unwrap();
    let text = refused(&mut map, |m| m.remove_item("spare"));
    assert_eq!(text, "bucket 'spare' is the root of rule 'spare'");
    let text = map.rule_by_name("nope").unwrap_err().to_string();
    assert_eq!(
        text,
        "unknown CRUSH rule 'nope' (rules: replicated_rule, spare)"
    );
}

#[test]
fn locations_and_weights_parse_strictly() {
    let l = loc("host=h1 rack=r1,root=x");
    assert_eq!(l.get("rack"), Some("r1"));
    assert_eq!(l.to_string(), "host=h1 rack=r1 root=x");
    assert_eq!(l.with_default_root(), l);
    assert_eq!(
        loc("host=h").with_default_root().get("root"),
        Some(DEFAULT_ROOT)
    );
    assert!(loc("").is_empty());
    for bad in ["host", "host=", "=h", "host=h host=g", "host=a/b"] {
        assert!(Location::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(parse_weight("1").unwrap(), WEIGHT_ONE);
    assert_eq!(parse_weight("0.5").unwrap(), WEIGHT_ONE / 2);
    assert_eq!(parse_weight(".25").unwrap(), WEIGHT_ONE / 4);
    assert_eq!(parse_weight("0").unwrap(), 0);
    assert_eq!(parse_weight("3.63869").unwrap(), 238_465);
    for bad in ["", ".", "-1", "1e3", "abc", "65536", "0.1234567890"] {
        assert!(parse_weight(bad).is_err(), "{bad}");
    }
    assert_eq!(format_weight(u64::from(WEIGHT_ONE) * 3 / 2), "1.50000");
    assert_eq!(weight_from_bytes(1 << 40), WEIGHT_ONE);
    assert_eq!(weight_from_bytes(0), 1);
}

#[test]
fn maps_round_trip_and_corrupt_ones_do_not_decode() {
    let map = super::realistic();
    let json = serde_json::to_value(&map).unwrap();
    let back: CrushMap = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, map);
    let bytes = bincode::serialize(&map).unwrap();
    assert_eq!(bincode::deserialize::<CrushMap>(&bytes).unwrap(), map);
    // A device whose parent does not list it.
    let mut bad = json.clone();
    bad["devices"]["0"]["parent"] = serde_json::json!(-1);
    let err = serde_json::from_value::<CrushMap>(bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("corrupt CRUSH map"), "{err}");
    // A loop: the root inside one of its hosts.
    let mut bad = json;
    let host = map.bucket_id("dc0-r0-h0").unwrap().to_string();
    bad["buckets"]["-1"]["parent"] = serde_json::json!(host.parse::<i32>().unwrap());
    let items = bad["buckets"][&host]["items"].as_array_mut().unwrap();
    items.push(serde_json::json!(-1));
    assert!(serde_json::from_value::<CrushMap>(bad).is_err());
}

#[test]
fn rule_counts_follow_ceph() {
    let mut rule = CrushMap::default()
        .rule_by_name(DEFAULT_RULE)
        .unwrap()
        .clone();
    assert_eq!(rule.replicas(3), 3);
    rule.count = -1;
    assert_eq!(rule.replicas(3), 2);
    rule.count = -5;
    assert_eq!(rule.replicas(3), 0);
    rule.count = 2;
    assert_eq!(rule.replicas(3), 2);
    assert_eq!(rule.replicas(1), 1);
}

#[test]
fn the_tree_lists_every_item_once_depth_first() {
    let map = super::realistic();
    let tree = map.tree();
    assert_eq!(tree.len(), 1 + 2 + 4 + 12 + 48);
    assert_eq!(tree[0].name, DEFAULT_ROOT);
    assert_eq!(tree[0].depth, 0);
    assert_eq!(tree[1].type_name, "datacenter");
    assert_eq!(tree[4].type_name, "osd");
    assert_eq!(tree[4].depth, 4);
    assert_eq!(tree[4].class.as_deref(), Some("hdd"));
    let total: u64 = tree.iter().filter(|n| n.id >= 0).map(|n| n.weight).sum();
    assert_eq!(tree[0].weight, total);
}
