//! The cost of placement, measured: `cargo test --release -p cairn-map
//! timing -- --ignored --nocapture`. Prints nanoseconds per CRUSH
//! evaluation and per memoized `raw_placement`, for OSDs on one host (rule:
//! distinct OSDs) and on hosts of ten in racks of five hosts (rule: distinct
//! hosts).

use std::time::Instant;

use cairn_crush::{CrushMap, DeviceReport, Location};
use cairn_placement::pg_placement_seed;
use cairn_types::OsdId;

use crate::{ClusterMap, WEIGHT_ONE};

const PGS: u32 = 1024;
const ROUNDS: u32 = 20;

fn time(map: &ClusterMap, label: &str) {
    let pool = map.pool_by_name("rbd").expect("pool").clone();
    let is_in = |o: OsdId| map.osds.get(&o).is_some_and(|i| i.is_in);
    let mut placed = 0;
    let start = Instant::now();
    for _ in 0..ROUNDS {
        for pg in pool.pgs() {
            let x = pg_placement_seed(pg.pool, pg.seed);
            placed += map.crush().map_rule(pool.rule, x, 3, is_in).len();
        }
    }
    let evaluation = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS * PGS);
    for pg in pool.pgs() {
        placed += map.raw_placement(pg).len(); // fill the memo
    }
    let start = Instant::now();
    for _ in 0..ROUNDS {
        for pg in pool.pgs() {
            placed += map.raw_placement(pg).len();
        }
    }
    let memoized = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS * PGS);
    eprintln!(
        "{label}: {evaluation:.0} ns per CRUSH evaluation, \
         {memoized:.0} ns per memoized raw_placement ({placed} placed)"
    );
}

#[test]
#[ignore]
fn time_raw_placement() {
    for n in [6u32, 60, 600] {
        let mut map = ClusterMap::new("timing".into());
        for id in 0..n {
            map.osd_boot(id, String::new(), WEIGHT_ONE);
        }
        map.create_pool("rbd", 3, 2, PGS).expect("pool");
        time(&map, &format!("{n} OSDs on one host"));

        let mut map = ClusterMap::with_crush("timing".into(), CrushMap::default());
        let per_host = if n == 6 { 2 } else { 10 };
        for id in 0..n {
            let mut report = DeviceReport::unlocated(WEIGHT_ONE);
            let (host, rack) = (id / per_host, id / (per_host * 5));
            report.location = Location::parse(&format!("host=h{host} rack=r{rack}")).expect("loc");
            map.osd_boot_with(id, String::new(), &report).expect("boot");
        }
        map.create_pool("rbd", 3, 2, PGS).expect("pool");
        time(&map, &format!("{n} OSDs on hosts of {per_host}"));
    }
}
