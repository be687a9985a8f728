//! Unit tests for loading, validating and overriding the configuration.

use std::collections::BTreeSet;
use std::io::Write;

use crate::*;

fn err(text: &str) -> String {
    Config::parse(text).unwrap_err().to_string()
}

fn set_err(key: &str, value: &str) -> String {
    let mut config = Config::default();
    let before = config.clone();
    let e = config.set(key, value).unwrap_err().to_string();
    assert_eq!(config, before, "failed set must not change the config");
    e
}

#[test]
fn defaults_match_the_documented_values() {
    let c = Config::default();
    assert_eq!(c.global.mon_addr, "127.0.0.1:6789");
    assert_eq!(c.global.log_level, "info");
    assert_eq!(c.mon.osd_heartbeat_grace_ms, 6000);
    assert!(c.mon.osd_down_on_disconnect);
    assert_eq!(c.mon.osd_down_out_interval_s, 600);
    assert_eq!(c.mon.pool_default_pg_num, 32);
    assert_eq!(c.mon.pool_default_size, 3);
    assert_eq!(c.mon.pool_default_min_size, 2);
    assert_eq!(c.mon.osd_min_down_reporters, 2);
    assert_eq!(c.mon.osd_reporter_subtree_level, "host");
    assert_eq!(c.osd.bind_addr, "127.0.0.1:0");
    assert_eq!(
        (c.osd.public_addr.as_str(), c.osd.cluster_addr.as_str()),
        ("", "")
    );
    assert_eq!(c.osd.heartbeat_interval_ms, 1000);
    assert_eq!(c.osd.store, StoreKind::Bluestore);
    assert_eq!(c.osd.journal_max_bytes, 268_435_456);
    assert_eq!(c.osd.pg_log_max_entries, 3000);
    assert_eq!(c.osd.worker_threads, 1);
    assert_eq!(c.client.op_timeout_ms, 0);
    assert_eq!(c.client.image_default_object_size, 4_194_304);
    assert_eq!(c.client.max_inflight_ops, 1024);
    c.validate().unwrap();
    assert_eq!(Config::parse("").unwrap(), c);
}

#[test]
fn defaults_round_trip() {
    let c = Config::default();
    assert_eq!(Config::parse(&c.to_toml()).unwrap(), c);
}

#[test]
fn full_config_round_trips_with_overrides() {
    let text = r#"
        [global]
        mon_addr = "10.0.0.1:7000"
        log_level = "debug"
        [mon]
        osd_down_on_disconnect = false
        pool_default_size = 2
        pool_default_min_size = 1
        [osd]
        store = "memstore"
        heartbeat_interval_ms = 250
        [osd.3]
        store = "filestore"
        [osd.12]
        worker_threads = 8
        bind_addr = "0.0.0.0:6812"
        [client]
        op_timeout_ms = 30000
        image_default_object_size = 65536
    "#;
    let c = Config::parse(text).unwrap();
    assert_eq!(c.global.mon_addr, "10.0.0.1:7000");
    assert!(!c.mon.osd_down_on_disconnect);
    assert_eq!(c.osd.store, StoreKind::Memstore);
    assert_eq!(c.client.image_default_object_size, 65536);
    assert_eq!(c.overridden_osds(), vec![3, 12]);
    let back = Config::parse(&c.to_toml()).unwrap();
    assert_eq!(back, c);
    assert_eq!(back.osd_for(12).worker_threads, 8);
}

#[test]
fn osd_overrides_merge_over_osd_section() {
    let c = Config::parse(
        "[osd]\nworker_threads = 4\nheartbeat_interval_ms = 500\n\
         [osd.1]\nstore = \"memstore\"\nheartbeat_interval_ms = 200\n",
    )
    .unwrap();
    let one = c.osd_for(1);
    assert_eq!(one.store, StoreKind::Memstore);
    assert_eq!(one.heartbeat_interval_ms, 200);
    assert_eq!(one.worker_threads, 4, "unset keys come from [osd]");
    let two = c.osd_for(2);
    assert_eq!(two, c.osd);
    assert_eq!(two.store, StoreKind::Bluestore);
    // A later change to [osd] shows through keys the override does not set.
    let mut c = c;
    c.osd.worker_threads = 6;
    assert_eq!(c.osd_for(1).worker_threads, 6);
    assert_eq!(c.osd_for(1).heartbeat_interval_ms, 200);
}

#[test]
fn unknown_keys_and_sections_are_rejected_by_name() {
    assert_eq!(
        err("[osd]\nheartbeat_intervl_ms = 5\n"),
        "cairn.toml: unknown option 'osd.heartbeat_intervl_ms'; \
         did you mean 'osd.heartbeat_interval_ms'?"
    );
    assert!(err("[osd.3]\nstoer = \"memstore\"\n").contains("did you mean 'osd.3.store'?"));
    assert!(!err("[osd]\nzzzzzz = 1\n").contains("did you mean"));
    assert_eq!(
        err("[osdd]\nstore = \"memstore\"\n"),
        "cairn.toml: unknown section '[osdd]'"
    );
    assert!(err("[osd.x]\nstore = \"memstore\"\n").contains("unknown section '[osd.x]'"));
    assert!(err("[osd.03]\nstore = \"memstore\"\n").contains("unknown section '[osd.03]'"));
    assert!(err("[osd.3]\nstoer = \"memstore\"\n").contains("unknown option 'osd.3.stoer'"));
    assert!(err("[osd.3.x]\n").contains("unknown section '[osd.3.x]'"));
    assert!(err("[mon.1]\n").contains("unknown section '[mon.1]'"));
    assert!(err("[osd]\n7 = 1\n").contains("unknown option 'osd.7'"));
    assert!(err("mon_addr = \"1.2.3.4:5\"\n").contains("option 'mon_addr' is outside any section"));
    for opt in options() {
        let text = format!("[{}]\n{}x = 1\n", opt.section, opt.name);
        let e = Config::parse(&text).unwrap_err();
        assert_eq!(e.key(), Some(format!("{}x", opt.key()).as_str()), "{e}");
    }
}

#[test]
fn bad_types_are_rejected_naming_the_key() {
    assert_eq!(
        err("[osd]\nheartbeat_interval_ms = \"fast\"\n"),
        "cairn.toml: invalid value for 'osd.heartbeat_interval_ms': \
         expected an unsigned integer, got \"fast\""
    );
    assert!(err("[mon]\npool_default_size = -1\n").contains("got -1"));
    assert!(err("[mon]\npool_default_size = 4294967296\n")
        .contains("expected an unsigned integer up to 4294967295"));
    assert!(err("[mon]\nosd_down_on_disconnect = \"yes\"\n")
        .contains("'mon.osd_down_on_disconnect': expected true or false"));
    assert!(err("[global]\nmon_addr = 6789\n").contains("expected a string, got 6789"));
    assert!(err("[osd]\nstore = \"bluestor\"\n")
        .contains("'osd.store': expected one of bluestore|filestore|memstore, got \"bluestor\""));
    assert!(err("[osd]\nbluestore_csum_type = \"md5\"\n")
        .contains("'osd.bluestore_csum_type': expected one of crc32c|xxhash64|none"));
    assert!(err("[osd]\nbluestore_cache_kv_ratio = 1.5\n")
        .contains("'osd.bluestore_cache_kv_ratio': expected a number from 0 to 1, got 1.5"));
    assert!(
        err("[osd]\nbluestore_cache_kv_ratio = 0.5\nbluestore_cache_meta_ratio = 0.6\n")
            .contains("'osd.bluestore_cache_kv_ratio': plus bluestore_cache_meta_ratio (0.6)")
    );
    assert!(err("[osd]\nbluestore_min_alloc_size = 3000\n")
        .contains("'osd.bluestore_min_alloc_size': must be a power of two"));
    assert!(err("[osd.2]\nworker_threads = 1.5\n").contains("'osd.2.worker_threads'"));
    assert!(err("[client]\nmax_inflight_ops = [1]\n").contains("got an array"));
    assert!(err("[osd]\nstore = { a = 1 }\n").contains("'osd.store'"));
    assert!(err("global = 1\n").contains("invalid value for 'global': expected a section"));
    assert!(err("[osd\n").starts_with("cairn.toml: TOML parse error"));
    // Every option rejects a value of the wrong type.
    for opt in options() {
        let bad = if opt.kind == "string" {
            "[]"
        } else {
            "\"bad\""
        };
        let e = Config::parse(&format!("[{}]\n{} = {bad}\n", opt.section, opt.name)).unwrap_err();
        assert_eq!(e.key(), Some(opt.key().as_str()), "{e}");
        assert!(e.to_string().contains("invalid value for"), "{e}");
    }
}

#[test]
fn ranges_are_validated() {
    let cases = [
        (
            "[mon]\npool_default_min_size = 4\n",
            "mon.pool_default_min_size",
        ),
        ("[mon]\npool_default_size = 0\n", "mon.pool_default_size"),
        (
            "[mon]\npool_default_min_size = 0\n",
            "mon.pool_default_min_size",
        ),
        (
            "[mon]\npool_default_pg_num = 0\n",
            "mon.pool_default_pg_num",
        ),
        (
            "[mon]\nosd_heartbeat_grace_ms = 0\n",
            "mon.osd_heartbeat_grace_ms",
        ),
        (
            "[mon]\nosd_min_down_reporters = 0\n",
            "mon.osd_min_down_reporters",
        ),
        (
            "[mon]\nosd_heartbeat_grace_ms = 1000\n",
            "osd.heartbeat_interval_ms",
        ),
        (
            "[osd.4]\nheartbeat_interval_ms = 9000\n",
            "osd.4.heartbeat_interval_ms",
        ),
        (
            "[osd]\nheartbeat_interval_ms = 0\n",
            "osd.heartbeat_interval_ms",
        ),
        ("[osd]\nworker_threads = 0\n", "osd.worker_threads"),
        ("[osd.1]\nworker_threads = 0\n", "osd.1.worker_threads"),
        ("[osd]\njournal_max_bytes = 0\n", "osd.journal_max_bytes"),
        ("[osd]\nbind_addr = \"localhost\"\n", "osd.bind_addr"),
        ("[osd]\npublic_addr = \"nowhere\"\n", "osd.public_addr"),
        ("[osd]\npublic_addr = \"10.0.0.1\"\n", "osd.public_addr"),
        (
            "[osd]\ncluster_addr = \"0.0.0.0:7000\"\n",
            "osd.cluster_addr",
        ),
        (
            "[osd.2]\ncluster_addr = \"10.1.0.2\"\n",
            "osd.2.cluster_addr",
        ),
        (
            "[osd.2]\npublic_addr = \"10.0.0.2:7000\"\ncluster_addr = \"10.0.0.2:7000\"\n",
            "osd.2.cluster_addr",
        ),
        (
            "[osd]\nbind_addr = \"10.0.0.2:7000\"\ncluster_addr = \"10.0.0.2:7000\"\n",
            "osd.cluster_addr",
        ),
        ("[global]\nmon_addr = \"nowhere\"\n", "global.mon_addr"),
        ("[global]\nlog_level = \"loud\"\n", "global.log_level"),
        (
            "[client]\nimage_default_object_size = 5000\n",
            "client.image_default_object_size",
        ),
        (
            "[client]\nimage_default_object_size = 2048\n",
            "client.image_default_object_size",
        ),
        (
            "[client]\nimage_default_object_size = 134217728\n",
            "client.image_default_object_size",
        ),
        (
            "[client]\nmax_inflight_ops = 0\n",
            "client.max_inflight_ops",
        ),
    ];
    for (text, key) in cases {
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e.key(), Some(key), "{text}: {e}");
        assert!(matches!(e, ConfigError::InvalidValue { .. }), "{e}");
    }
    assert!(err("[mon]\npool_default_min_size = 4\n")
        .contains("must not exceed mon.pool_default_size (3), got 4"));
    // Boundaries that are allowed.
    let ok = Config::parse(
        "[mon]\npool_default_size = 1\npool_default_min_size = 1\n\
         [client]\nimage_default_object_size = 4096\nop_timeout_ms = 0\n\
         [global]\nmon_addr = \"[::1]:6789\"\nlog_level = \"trace\"\n",
    )
    .unwrap();
    assert_eq!(ok.mon.pool_default_size, 1);
    Config::parse("[client]\nimage_default_object_size = 67108864\n").unwrap();
}

#[test]
fn osd_addresses_resolve_public_then_cluster() {
    let c = Config::default();
    let addrs = c.osd.addrs().unwrap();
    assert_eq!(addrs.public.to_string(), "127.0.0.1:0");
    assert_eq!(addrs.cluster.to_string(), "127.0.0.1:0");
    let c = Config::parse(
        "[osd]\nbind_addr = \"10.0.0.9:0\"\n\
         [osd.1]\npublic_addr = \"10.0.0.1:6800\"\n\
         [osd.2]\npublic_addr = \"10.0.0.2:0\"\ncluster_addr = \"10.1.0.2:0\"\n",
    )
    .unwrap();
    // bind_addr is the public address when public_addr is empty.
    let a0 = c.osd_for(0).addrs().unwrap();
    assert_eq!(
        (a0.public.to_string(), a0.cluster.to_string()),
        ("10.0.0.9:0".into(), "10.0.0.9:0".into())
    );
    // The cluster address defaults to the public IP with any port.
    let a1 = c.osd_for(1).addrs().unwrap();
    assert_eq!(
        (a1.public.to_string(), a1.cluster.to_string()),
        ("10.0.0.1:6800".into(), "10.0.0.1:0".into())
    );
    let a2 = c.osd_for(2).addrs().unwrap();
    assert_eq!(
        (a2.public.to_string(), a2.cluster.to_string()),
        ("10.0.0.2:0".into(), "10.1.0.2:0".into())
    );
    assert!(err("[osd]\npublic_addr = \"0.0.0.0:6800\"\n").contains("not 0.0.0.0"));
    // One IP for both networks is fine with any ports.
    Config::parse("[osd]\ncluster_addr = \"127.0.0.1:0\"\npublic_addr = \"127.0.0.1:0\"\n")
        .unwrap();
}

#[test]
fn set_paths() {
    let mut c = Config::default();
    c.set("osd.heartbeat_interval_ms", "500").unwrap();
    c.set("osd.3.store", "memstore").unwrap();
    c.set("global.mon_addr", "192.168.1.1:6789").unwrap();
    c.set("mon.osd_down_on_disconnect", "false").unwrap();
    c.set("client.op_timeout_ms", "1500").unwrap();
    assert_eq!(c.osd.heartbeat_interval_ms, 500);
    assert_eq!(c.osd_for(3).store, StoreKind::Memstore);
    assert_eq!(c.osd_for(3).heartbeat_interval_ms, 500);
    assert_eq!(c.osd_for(4).store, StoreKind::Bluestore);
    assert_eq!(c.global.mon_addr, "192.168.1.1:6789");
    assert!(!c.mon.osd_down_on_disconnect);
    assert_eq!(Config::parse(&c.to_toml()).unwrap(), c);

    assert_eq!(
        set_err("osd.heartbeat_interval_ms", "fast"),
        "override: invalid value for 'osd.heartbeat_interval_ms': \
         expected an unsigned integer, got \"fast\""
    );
    assert_eq!(
        set_err("osd.heartbeat_intervl_ms", "5"),
        "override: unknown option 'osd.heartbeat_intervl_ms'; \
         did you mean 'osd.heartbeat_interval_ms'?"
    );
    assert!(set_err("osd.3.stor", "memstore").contains("unknown option 'osd.3.stor'"));
    assert!(set_err("osd.3.store", "disk").contains("'osd.3.store'"));
    assert!(set_err("osd.x.store", "memstore").contains("unknown section '[osd.x]'"));
    assert!(set_err("osdd.store", "memstore").contains("unknown section '[osdd]'"));
    assert!(set_err("mon.1.x", "1").contains("unknown section '[mon.1]'"));
    assert!(set_err("store", "memstore").contains("invalid option name 'store'"));
    assert!(set_err("a.b.c.d", "1").contains("invalid option name"));
    assert!(set_err("osd.worker_threads", "0").contains("must be at least 1"));
    assert!(set_err("mon.pool_default_size", "1").contains("'mon.pool_default_min_size'"));
    assert!(set_err("client.op_timeout_ms", "18446744073709551615")
        .contains("got 18446744073709551615"));
    assert!(set_err("client.op_timeout_ms", "-3").contains("got -3"));
    assert!(set_err("mon.osd_down_on_disconnect", "yes").contains("expected true or false"));
}

#[test]
fn set_all_validates_once_and_is_atomic() {
    let mut c = Config::default();
    c.set_all([
        ("mon.pool_default_size", "1"),
        ("mon.pool_default_min_size", "1"),
    ])
    .unwrap();
    assert_eq!(
        (c.mon.pool_default_size, c.mon.pool_default_min_size),
        (1, 1)
    );

    let before = c.clone();
    let e = c
        .set_all([("osd.worker_threads", "3"), ("osd.store", "tape")])
        .unwrap_err();
    assert_eq!(e.key(), Some("osd.store"));
    assert_eq!(c, before);

    c.set_args(&["osd.7.worker_threads=5", " client.max_inflight_ops = 8 "])
        .unwrap();
    assert_eq!(c.osd_for(7).worker_threads, 5);
    assert_eq!(c.client.max_inflight_ops, 8);
    assert!(c
        .set_args(&["osd.store"])
        .unwrap_err()
        .to_string()
        .contains("expected key=value"));
}

#[test]
fn options_list_matches_serialized_defaults_exactly() {
    let text = toml::to_string(&Config::default()).unwrap();
    let table: toml::Table = text.parse().unwrap();
    let mut serialized = BTreeSet::new();
    for (section, value) in &table {
        for key in value.as_table().unwrap().keys() {
            serialized.insert(format!("{section}.{key}"));
        }
    }
    let docs = options();
    let documented: BTreeSet<String> = docs.iter().map(OptionDoc::key).collect();
    assert_eq!(documented.len(), docs.len(), "duplicate option docs");
    assert_eq!(documented, serialized);
    for opt in &docs {
        assert!(
            opt.doc.len() > 10 && !opt.doc.contains('\n'),
            "{}",
            opt.key()
        );
        let value = &table[opt.section][opt.name];
        assert_eq!(opt.default, value.to_string(), "{}", opt.key());
    }
    let kinds: BTreeSet<_> = docs.iter().map(|o| o.kind).collect();
    let expected = BTreeSet::from([
        "u64",
        "u32",
        "bool",
        "string",
        "ratio",
        "bluestore|filestore|memstore",
        "crc32c|xxhash64|none",
        "none|passive|aggressive|force",
        "lz4|zstd|snappy",
        "uring|threads",
    ]);
    assert_eq!(kinds, expected);
    // The serde derive on each section agrees with the field list.
    let osd = toml::Table::try_from(OsdConfig::default()).unwrap();
    let osd_keys: BTreeSet<String> = osd.keys().map(|k| format!("osd.{k}")).collect();
    assert!(osd_keys.is_subset(&documented));
    assert_eq!(
        osd_keys.len(),
        docs.iter().filter(|o| o.section == "osd").count()
    );
}

#[test]
fn render_defaults_parses_to_defaults() {
    let text = render_defaults();
    assert_eq!(Config::parse(&text).unwrap(), Config::default());
    for opt in options() {
        let line = format!("\n{} = {}\n", opt.name, opt.default);
        let at = text
            .find(&line)
            .unwrap_or_else(|| panic!("{} missing", opt.key()));
        let before = &text[..at];
        let when = if opt.runtime {
            "Changes at runtime (cairn config set)."
        } else {
            "Read at start."
        };
        assert!(
            before.ends_with(&format!("# Type: {}. {when}", opt.kind)),
            "{}",
            opt.key()
        );
        let first_word = opt.doc.split_whitespace().next().unwrap();
        assert!(before.contains(&format!("# {first_word}")), "{}", opt.key());
    }
    assert!(text.lines().all(|l| l.len() <= 80));
}

#[test]
fn serde_derives_reject_unknown_fields_and_fill_defaults() {
    let osd: OsdConfig = toml::from_str("store = \"memstore\"").unwrap();
    assert_eq!(osd.store, StoreKind::Memstore);
    assert_eq!(osd.worker_threads, OsdConfig::default().worker_threads);
    assert!(toml::from_str::<OsdConfig>("stor = \"memstore\"").is_err());
    let json = serialize_via_value(&Config::default());
    assert!(json.contains("heartbeat_interval_ms"));
}

/// Serializes through a non-TOML path (serde's TOML value serializer) to show
/// `Config: Serialize` works generically.
fn serialize_via_value(c: &Config) -> String {
    toml::Value::try_from(c).unwrap().to_string()
}

#[test]
fn load_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.toml");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "[osd]\nheartbeat_interval_ms = \"fast\"").unwrap();
    drop(f);
    let e = Config::load(&path).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: invalid value for", path.display())),
        "{e}"
    );
    std::fs::write(&path, "[osd.2]\nstore = \"memstore\"\n").unwrap();
    assert_eq!(
        Config::load(&path).unwrap().osd_for(2).store,
        StoreKind::Memstore
    );
    let missing = dir.path().join("nope.toml");
    let e = Config::load(&missing).unwrap_err();
    assert!(matches!(e, ConfigError::Io { .. }));
    assert!(e.to_string().starts_with(&missing.display().to_string()));
}

#[test]
fn validate_catches_direct_field_changes() {
    let mut c = Config::default();
    c.client.image_default_object_size = 3;
    assert_eq!(
        c.validate().unwrap_err().key(),
        Some("client.image_default_object_size")
    );
    let mut c = Config::default();
    c.client.op_timeout_ms = u64::MAX;
    assert_eq!(
        c.validate().unwrap_err().key(),
        Some("client.op_timeout_ms")
    );
}

#[test]
fn crush_options_are_checked_against_the_bucket_types() {
    let ok = Config::parse(
        "[mon]\ncrush_bucket_types = \"host chassis rack root\"\n\
         osd_crush_chooseleaf_type = \"chassis\"\n\
         [osd]\ncrush_location = \"host=h1 chassis=c1\"\ncrush_device_class = \"nvme\"\n\
         crush_initial_weight = \"1.5\"\n[osd.3]\ncrush_location = \"host=h3,rack=r1\"\n",
    )
    .unwrap();
    assert_eq!(ok.osd_for(3).crush_location, "host=h3,rack=r1");
    let cases = [
        (
            "[mon]\nosd_crush_chooseleaf_type = \"shelf\"\n",
            "mon.osd_crush_chooseleaf_type",
            "osd|host|rack",
        ),
        (
            "[mon]\nosd_reporter_subtree_level = \"shelf\"\n",
            "mon.osd_reporter_subtree_level",
            "osd|host|rack",
        ),
        (
            "[mon]\ncrush_bucket_types = \"host rack\"\n",
            "mon.crush_bucket_types",
            "root",
        ),
        (
            "[mon]\ncrush_bucket_types = \"osd host root\"\n",
            "mon.crush_bucket_types",
            "device type",
        ),
        (
            "[mon]\ncrush_bucket_types = \"host host root\"\n",
            "mon.crush_bucket_types",
            "twice",
        ),
        (
            "[osd]\ncrush_location = \"host\"\n",
            "osd.crush_location",
            "type=name",
        ),
        (
            "[osd]\ncrush_location = \"host=a host=b\"\n",
            "osd.crush_location",
            "twice",
        ),
        (
            "[osd]\ncrush_location = \"host=a/b\"\n",
            "osd.crush_location",
            "A-Z",
        ),
        (
            "[osd]\ncrush_location = \"shelf=s1\"\n",
            "osd.crush_location",
            "unknown bucket type \"shelf\"",
        ),
        (
            "[osd.2]\ncrush_location = \"shelf=s1\"\n",
            "osd.2.crush_location",
            "unknown bucket type",
        ),
        (
            "[osd]\ncrush_device_class = \"fast disk\"\n",
            "osd.crush_device_class",
            "A-Z",
        ),
        (
            "[osd]\ncrush_initial_weight = \"-1\"\n",
            "osd.crush_initial_weight",
            "TiB",
        ),
        (
            "[osd]\ncrush_initial_weight = \"70000\"\n",
            "osd.crush_initial_weight",
            "65536",
        ),
    ];
    for (text, key, words) in cases {
        let e = err(text);
        assert!(e.contains(key) && e.contains(words), "{text}: {e}");
    }
    // The failure domain may be osd, as a cluster on one machine needs.
    let mut config = Config::default();
    config.set("mon.osd_crush_chooseleaf_type", "osd").unwrap();
    assert!(set_err("osd.crush_location", "rack=r1 row").contains("type=name"));
}

#[test]
fn full_ratios_are_in_range_and_ordered() {
    let c = Config::default();
    assert_eq!(
        (
            c.mon.osd_nearfull_ratio.get(),
            c.mon.osd_backfillfull_ratio.get(),
            c.mon.osd_full_ratio.get()
        ),
        (0.85, 0.90, 0.95)
    );
    let key = |text: &str| Config::parse(text).unwrap_err().key().map(str::to_string);
    assert_eq!(
        key("[mon]\nosd_full_ratio = 0\n").as_deref(),
        Some("mon.osd_full_ratio")
    );
    assert!(err("[mon]\nosd_nearfull_ratio = 0.0\n").contains("greater than 0"));
    assert!(err("[mon]\nosd_full_ratio = 1.5\n").contains("from 0 to 1"));
    assert!(err("[mon]\nosd_nearfull_ratio = 0.92\n")
        .contains("must not exceed mon.osd_backfillfull_ratio (0.9), got 0.92"));
    assert!(err("[mon]\nosd_full_ratio = 0.5\n").contains("mon.osd_backfillfull_ratio"));
    // One at a time they clash; together they are accepted.
    assert!(set_err("mon.osd_full_ratio", "0.5").contains("must not exceed"));
    let mut c = Config::default();
    c.set_all([
        ("mon.osd_nearfull_ratio", "0.3"),
        ("mon.osd_backfillfull_ratio", "0.4"),
        ("mon.osd_full_ratio", "0.5"),
    ])
    .unwrap();
    assert_eq!(c.mon.osd_full_ratio.get(), 0.5);
    Config::parse(
        "[mon]\nosd_nearfull_ratio = 1\nosd_backfillfull_ratio = 1\nosd_full_ratio = 1\n",
    )
    .unwrap();
}

#[test]
fn a_client_reads_its_sections_and_only_warns_about_a_daemons() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cairn.toml");
    let load = |body: &str| {
        std::fs::write(&path, body).expect("write");
        Config::load_for_client(&path)
    };
    // A typo under [osd]: the client goes on, with a warning naming it.
    let (c, warnings) = load(
        "[global]\nmon_addr = \"10.0.0.1:6789\"\n[osd]\nheartbeat_intervl_ms = 5\n\
         [client]\nop_timeout_ms = 7\n",
    )
    .expect("client config");
    assert_eq!(c.global.mon_addr, "10.0.0.1:6789");
    assert_eq!(c.client.op_timeout_ms, 7);
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].to_string().contains("osd.heartbeat_intervl_ms"));
    // Daemon values that do not fit together: defaults, and a warning.
    let (c, warnings) =
        load("[mon]\nosd_nearfull_ratio = 0.99\nosd_full_ratio = 0.5\n").expect("ok");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(
        c.mon.osd_full_ratio.get(),
        Config::default().mon.osd_full_ratio.get()
    );
    // A mistake in [client] or [global] still stops it.
    assert!(load("[client]\nop_timout_ms = 7\n").is_err());
    assert!(load("[global]\nmon_addr = 5\n").is_err());
    // The strict load refuses the first file outright.
    std::fs::write(&path, "[osd]\nheartbeat_intervl_ms = 5\n").expect("write");
    assert!(Config::load(&path).is_err());
}
