//! fio's json+ output, saved from real runs (fio 3.33) in `tests/data`,
//! read into raw measurements. Expected totals were read from the files
//! with a separate JSON tool.

use cairn_matrix::fio::{parse, FioError};
use cairn_matrix::results::RepRaw;

fn data(name: &str) -> String {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn one_job_randwrite() {
    let (raw, seconds) = parse(&data("fio-randwrite.json"), 7).unwrap();
    assert_eq!(raw.client, 7);
    assert_eq!(raw.write.ops, 47266);
    assert_eq!(raw.write.bytes, 193_601_536);
    assert_eq!(raw.read.ops, 0);
    assert_eq!(seconds, 1.001);
    let counted: u64 = raw.write.lat_ns.iter().map(|b| b.1).sum();
    assert_eq!(counted, 47266, "every completion is in the histogram");
    assert!(raw.write.lat_ns.windows(2).all(|w| w[0].0 < w[1].0));
    let rep = RepRaw {
        seconds,
        clients: vec![raw],
        ..RepRaw::default()
    };
    let s = rep.summary().unwrap();
    assert!((s.iops - 47266.0 / 1.001).abs() < 1.0, "{}", s.iops);
    assert!(s.write_lat.p50_us > 1.0 && s.write_lat.p50_us < s.write_lat.p99_99_us);
}

#[test]
fn two_jobs_of_one_client_are_summed() {
    let (raw, _) = parse(&data("fio-randrw-2jobs.json"), 0).unwrap();
    assert_eq!(raw.read.ops, 23055 + 22954);
    assert_eq!(raw.write.ops, 9852 + 9904);
    let reads: u64 = raw.read.lat_ns.iter().map(|b| b.1).sum();
    assert_eq!(reads, 23055 + 22954);
}

#[test]
fn failures_are_reported() {
    let failed = r#"fio: some warning
{"jobs": [{"jobname": "c0", "error": 5, "read": {}, "write": {}}]}"#;
    assert_eq!(
        parse(failed, 0).unwrap_err(),
        FioError::JobFailed {
            job: "c0".into(),
            error: 5
        }
    );
    assert!(matches!(
        parse("fio: engine nbd not loadable", 0),
        Err(FioError::NotJson(_))
    ));
    assert_eq!(parse(r#"{"jobs": []}"#, 0).unwrap_err(), FioError::NoJobs);
    // Plain json (not json+) has no histogram bins.
    let plain = data("fio-randwrite.json").replace("\"bins\"", "\"nobins\"");
    assert!(matches!(parse(&plain, 0), Err(FioError::Missing(m)) if m.contains("bins")));
}

#[test]
fn one_run_for_all_clients_is_split_by_job_name() {
    // Both jobs of this file are named c0 (numjobs = 2): one client.
    let (clients, seconds) =
        cairn_matrix::fio::parse_clients(&data("fio-randrw-2jobs.json"), 1).unwrap();
    assert_eq!(clients.len(), 1);
    assert_eq!(clients[0].read.ops, 23055 + 22954);
    assert!(seconds > 0.9);
    // A client with no job is an error, not a silent zero.
    let e = cairn_matrix::fio::parse_clients(&data("fio-randrw-2jobs.json"), 2).unwrap_err();
    assert_eq!(e, FioError::Missing("job c1".into()));
    // Text after the JSON (fio may print more) is ignored.
    let trailing = format!(
        "{}\nfio: done\n",
        data("fio-randwrite.json").replace("\"c1\"", "\"c0\"")
    );
    let (clients, _) = cairn_matrix::fio::parse_clients(&trailing, 1).unwrap();
    assert_eq!(clients[0].write.ops, 47266);
}
