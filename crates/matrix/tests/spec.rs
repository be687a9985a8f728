//! Spec parsing and validation: good specs expand to the right points, bad
//! ones are refused with the line of the value at fault.

use cairn_bench::RwMode;
use cairn_matrix::spec::DriverKind;
use cairn_matrix::{MatrixSpec, SpecError};

const GOOD: &str = r#"
name = "clients"
description = "4K vs clients"

[cluster]
osds = 3
store = "filestore"
pg_num = 16
set = ["osd.bluestore_cache_size=67108864"]

[workload]
rw = ["randread", "randwrite"]
bs = "4k"
iodepth = [1, 32]
clients = [1, 2, 4]
image_size = "256M"
runtime = 5
ramp = 1
repetitions = 3

[driver]
kind = "fio"
"#;

fn refused(text: &str) -> SpecError {
    match MatrixSpec::parse(text, "t") {
        Ok(spec) => panic!("accepted: {spec:?}"),
        Err(e) => e,
    }
}

/// A spec with one workload line replaced (by key).
fn with(key: &str, line: &str) -> String {
    GOOD.lines()
        .map(|l| {
            if l.starts_with(&format!("{key} =")) {
                line.to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| l.starts_with(&format!("{key} =")))
        .expect("key in spec")
        + 1
}

#[test]
fn a_good_spec_expands_to_every_point_in_order() {
    let spec = MatrixSpec::parse(GOOD, "file-stem").unwrap();
    assert_eq!(spec.name, "clients");
    assert_eq!(spec.cluster.store, "filestore");
    assert_eq!(spec.cluster.pg_num, 16);
    assert_eq!(spec.driver, DriverKind::Fio);
    assert_eq!(spec.bs, vec![4096]);
    assert_eq!(spec.image_size, 256 << 20);
    assert!(spec.precondition, "preconditioning is on unless turned off");
    let points = spec.points();
    assert_eq!(points.len(), 2 * 2 * 3);
    assert_eq!(points[0].id(), "randread-4k-qd1-j1-c1");
    assert_eq!(points[2].id(), "randread-4k-qd1-j1-c4");
    assert_eq!(points[3].id(), "randread-4k-qd32-j1-c1");
    assert_eq!(points[11].rw, RwMode::RandWrite);
    assert_eq!(points[11].clients, 4);
    assert_eq!(spec.images(), 4);
    // 12 points x 3 repetitions x (1 + 5) s.
    assert_eq!(spec.measured_seconds(), 12 * 3 * 6);
}

#[test]
fn defaults_fill_what_a_spec_leaves_out() {
    let spec = MatrixSpec::parse(
        "[workload]\nrw = \"randrw\"\nbs = 8192\niodepth = 4\nimage_size = \"64M\"\nruntime = 2\n",
        "stem",
    )
    .unwrap();
    assert_eq!(spec.name, "stem");
    assert_eq!(spec.cluster.osds, 3);
    assert_eq!(spec.cluster.store, "bluestore");
    assert_eq!(spec.driver, DriverKind::Builtin);
    assert_eq!(spec.rwmixread, 70);
    assert_eq!(
        (spec.numjobs.clone(), spec.clients.clone()),
        (vec![1], vec![1])
    );
    assert_eq!(spec.repetitions, 1);
    assert_eq!(spec.points()[0].id(), "randrw70-8k-qd4-j1-c1");
    assert_eq!(spec.points()[0].workload(), "randrw 70/30 8K");
}

#[test]
fn an_unknown_rw_is_refused_with_its_line() {
    let text = with("rw", "rw = [\"randread\", \"randomwrite\"]");
    let e = refused(&text);
    assert_eq!(e.line, Some(line_of(&text, "rw")), "{e}");
    assert!(e.reason.contains("unknown rw \"randomwrite\""), "{e}");
}

#[test]
fn a_bs_not_a_multiple_of_512_is_refused() {
    let text = with("bs", "bs = [4096, 1000]");
    let e = refused(&text);
    assert_eq!(e.line, Some(line_of(&text, "bs")), "{e}");
    assert!(
        e.reason
            .contains("bs 1000 is not a positive multiple of 512"),
        "{e}"
    );
    let e = refused(&with("bs", "bs = \"4q\""));
    assert!(e.reason.contains("invalid size \"4q\""), "{e}");
}

#[test]
fn an_iodepth_of_zero_is_refused() {
    let text = with("iodepth", "iodepth = [0, 32]");
    let e = refused(&text);
    assert_eq!(e.line, Some(line_of(&text, "iodepth")), "{e}");
    assert!(e.reason.contains("iodepth 0 is not in 1..="), "{e}");
    assert_eq!(
        e.to_string(),
        format!("line {}: {}", line_of(&text, "iodepth"), e.reason)
    );
}

#[test]
fn more_clients_than_the_cluster_holds_images_for_are_refused() {
    // BlueStore, 3 OSDs of 4 GiB (the default): 64 images of 1 GiB with 3
    // replicas need 192 GiB.
    let text = with("clients", "clients = [1, 64]")
        .replace("store = \"filestore\"", "store = \"bluestore\"")
        .replace("image_size = \"256M\"", "image_size = \"1G\"");
    let e = refused(&text);
    assert_eq!(e.line, Some(line_of(&text, "clients")), "{e}");
    assert!(e.reason.contains("64 clients need 64 images"), "{e}");
    // Bigger block files make room.
    let roomy = text.replace(
        "set = [\"osd.bluestore_cache_size=67108864\"]",
        "set = [\"osd.bluestore_block_size=85899345920\"]",
    );
    MatrixSpec::parse(&roomy, "t").expect("80 GiB OSDs hold 64 images");
    // Over the hard limit of clients.
    let e = refused(&with("clients", "clients = 1000"));
    assert!(e.reason.contains("clients 1000 is not in 1..=256"), "{e}");
}

#[test]
fn unknown_keys_and_bad_values_elsewhere_are_refused() {
    let text = GOOD.replace("repetitions = 3", "repetitions = 3\nrepeats = 2");
    let e = refused(&text);
    assert_eq!(e.line, Some(line_of(&text, "repeats")), "{e}");
    assert!(e.reason.contains("repeats"), "{e}");

    let text = GOOD.replace("kind = \"fio\"", "kind = \"vdbench\"");
    let e = refused(&text);
    assert_eq!(e.line, Some(line_of(&text, "kind")), "{e}");
    assert!(e.reason.contains("unknown driver"), "{e}");

    let e = refused(&GOOD.replace("store = \"filestore\"", "store = \"zfs\""));
    assert!(e.reason.contains("unknown store \"zfs\""), "{e}");
    let e = refused(&with("runtime", "runtime = 0"));
    assert!(e.reason.contains("runtime 0 s"), "{e}");
    let e = refused(&GOOD.replace("[workload]", "[workload]\nrwmixread = 130"));
    assert!(e.reason.contains("rwmixread 130"), "{e}");
    let e = refused(&GOOD.replace("osd.bluestore_cache_size=67108864", "no equals sign"));
    assert!(e.reason.contains("is not KEY=VALUE"), "{e}");
    let text = GOOD.replace("osd.bluestore_cache_size=67108864", "osd.no_such_option=1");
    let e = refused(&text);
    assert_eq!(e.line, Some(line_of(&text, "set")), "{e}");
    assert!(e.reason.contains("no_such_option"), "{e}");
    let e = refused(&GOOD.replace("pg_num = 16", "pg_num = 24"));
    assert!(e.reason.contains("pg_num 24 is not a power of two"), "{e}");
    let e = refused(&with("clients", "clients = [1, 2, 1]"));
    assert!(e.reason.contains("clients lists a value twice"), "{e}");
    let e = refused(&with("image_size", "image_size = 1048577"));
    assert!(
        e.reason
            .contains("image_size 1048577 is not a multiple of 512"),
        "{e}"
    );
    let seq = with("rw", "rw = \"write\"").replace("[workload]", "[workload]\nnumjobs = 32");
    let e = refused(&seq.replace("bs = \"4k\"", "bs = \"16M\""));
    assert!(
        e.reason
            .contains("32 sequential jobs of bs 16777216 do not fit"),
        "{e}"
    );
    let e = refused(&with("rw", "rw = []"));
    assert!(e.reason.contains("rw lists no values"), "{e}");
    let e = refused("[workload]\nrw = \"read\"\n");
    assert!(e.reason.contains("missing field"), "{e}");
    let e = refused("this is not toml");
    assert_eq!(e.line, Some(1), "{e}");
}
