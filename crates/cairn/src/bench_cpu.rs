//! CPU per op for `cairn bench`: every up OSD's process CPU time and
//! context switches (from its perf counters, `cairn osd perf`) and this
//! client's own, sampled when the measured window starts and when the run
//! ends, divided by the operations measured.

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_client::Cluster;
use cairn_osd::ProcessUsage;
use serde::Serialize;
use serde_json::Value;

use crate::admin;

/// One sample of every answering OSD and of this process.
pub struct Sample {
    osds: BTreeMap<u32, ProcessUsage>,
    client: Option<ProcessUsage>,
}

/// CPU per op over the measured window. OSD figures cover the OSDs that
/// answered both samples (all OSDs of the cluster for a local one); an
/// OSD that did not answer is named in `missing_osds`.
#[derive(Debug, Serialize)]
pub struct CpuPerOp {
    pub osds: Vec<u32>,
    pub missing_osds: Vec<u32>,
    pub osd_cpu_us_per_op: Option<f64>,
    pub osd_context_switches_per_op: Option<f64>,
    pub client_cpu_us_per_op: Option<f64>,
}

/// Longest a sample waits for the OSDs: one that has not answered by then
/// is left out, so a hung OSD delays the report by this at most.
pub const SAMPLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Every up OSD's usage (those that answer within [`SAMPLE_TIMEOUT`], asked
/// all at once) and this process's.
pub async fn sample(cluster: &Cluster) -> Sample {
    let map = cluster.map();
    let ask = map
        .osds
        .keys()
        .copied()
        .filter(|id| map.is_up(*id))
        .map(|id| async move {
            let perf = admin::osd_request(cluster, id, cairn_wire::OsdAdminCommand::Perf);
            let reply = tokio::time::timeout(SAMPLE_TIMEOUT, perf).await;
            (
                id,
                reply
                    .ok()
                    .and_then(Result::ok)
                    .and_then(|text| usage_of(&text)),
            )
        });
    let osds = futures::future::join_all(ask)
        .await
        .into_iter()
        .filter_map(|(id, usage)| Some((id, usage?)))
        .collect();
    Sample {
        osds,
        client: ProcessUsage::now(),
    }
}

/// The process counters in an OSD's perf reply (absent from OSDs older
/// than them).
fn usage_of(perf: &str) -> Option<ProcessUsage> {
    let v: Value = serde_json::from_str(perf).ok()?;
    Some(ProcessUsage {
        cpu_us: v.get("process_cpu_us")?.as_u64()?,
        context_switches: v.get("process_context_switches")?.as_u64()?,
    })
}

impl CpuPerOp {
    pub fn between(before: &Sample, after: &Sample, ops: u64) -> CpuPerOp {
        let mut osds = Vec::new();
        let mut missing = Vec::new();
        let (mut cpu, mut csw) = (0u64, 0u64);
        for id in before.osds.keys().chain(after.osds.keys()) {
            if osds.contains(id) || missing.contains(id) {
                continue;
            }
            match (before.osds.get(id), after.osds.get(id)) {
                // A restarted OSD's counters start again: not comparable.
                (Some(b), Some(a)) if a.cpu_us >= b.cpu_us => {
                    osds.push(*id);
                    cpu += a.cpu_us - b.cpu_us;
                    csw += a.context_switches.saturating_sub(b.context_switches);
                }
                _ => missing.push(*id),
            }
        }
        let per_op = |x: u64| (ops > 0).then(|| x as f64 / ops as f64);
        let some_osds = !osds.is_empty();
        CpuPerOp {
            osd_cpu_us_per_op: per_op(cpu).filter(|_| some_osds),
            osd_context_switches_per_op: per_op(csw).filter(|_| some_osds),
            client_cpu_us_per_op: match (before.client, after.client) {
                (Some(b), Some(a)) => per_op(a.cpu_us.saturating_sub(b.cpu_us)),
                _ => None,
            },
            osds,
            missing_osds: missing,
        }
    }

    /// One line for the table.
    pub fn line(&self) -> String {
        let f = |x: Option<f64>, unit: &str| match x {
            Some(x) => format!("{x:.0}{unit}"),
            None => "–".to_string(),
        };
        let mut out = format!(
            "cpu per op: osds {} over {} osd(s), client {}; osd context switches per op {}",
            f(self.osd_cpu_us_per_op, " µs"),
            self.osds.len(),
            f(self.client_cpu_us_per_op, " µs"),
            self.osd_context_switches_per_op
                .map(|x| format!("{x:.1}"))
                .unwrap_or_else(|| "–".into()),
        );
        if !self.missing_osds.is_empty() {
            out.push_str(&format!(
                " (not counted: osd {:?}, no answer or restarted)",
                self.missing_osds
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(cpu_us: u64, context_switches: u64) -> ProcessUsage {
        ProcessUsage {
            cpu_us,
            context_switches,
        }
    }

    #[test]
    fn per_op_over_the_osds_that_answered_twice() {
        let before = Sample {
            osds: BTreeMap::from([
                (0, usage(1_000, 10)),
                (1, usage(5_000, 50)),
                (2, usage(9, 9)),
            ]),
            client: Some(usage(100, 0)),
        };
        // osd.2 restarted (its counters went back); osd.3 answered only after.
        let after = Sample {
            osds: BTreeMap::from([
                (0, usage(3_000, 30)),
                (1, usage(9_000, 90)),
                (2, usage(1, 1)),
                (3, usage(7, 7)),
            ]),
            client: Some(usage(1_100, 0)),
        };
        let cpu = CpuPerOp::between(&before, &after, 100);
        assert_eq!(cpu.osds, vec![0, 1]);
        assert_eq!(cpu.missing_osds, vec![2, 3]);
        assert_eq!(cpu.osd_cpu_us_per_op, Some(60.0)); // (2000 + 4000) / 100
        assert_eq!(cpu.osd_context_switches_per_op, Some(0.6));
        assert_eq!(cpu.client_cpu_us_per_op, Some(10.0));
        assert!(
            cpu.line().contains("not counted: osd [2, 3]"),
            "{}",
            cpu.line()
        );
    }

    #[test]
    fn no_ops_or_no_osds_is_no_figure_not_zero() {
        let empty = Sample {
            osds: BTreeMap::new(),
            client: None,
        };
        let cpu = CpuPerOp::between(&empty, &empty, 0);
        assert_eq!(cpu.osd_cpu_us_per_op, None);
        assert_eq!(cpu.client_cpu_us_per_op, None);
        assert!(cpu.line().contains("osds – over 0"), "{}", cpu.line());
    }

    #[test]
    fn perf_replies_without_the_counters_give_nothing() {
        assert_eq!(usage_of(r#"{"client_ops_in_flight":0}"#), None);
        assert_eq!(
            usage_of(r#"{"process_cpu_us":5,"process_context_switches":7}"#),
            Some(usage(5, 7))
        );
        assert_eq!(usage_of("not json"), None);
    }
}
