//! The daemon's own CPU time and context switches, as the kernel counts
//! them for the whole process (every thread), for `cairn osd perf` and the
//! CPU per op that `cairn bench` reports; and the bytes stored in the PGs
//! this OSD is primary for, for `cairn df`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cairn_store::{ObjectId, ObjectStore};
use cairn_types::PgId;
use cairn_wire::PgStat;
use parking_lot::Mutex;

/// Bytes stored per PG (the sum of its objects' sizes, one copy), counted
/// by a blocking task that asks every object its size, never under the
/// core's lock; at most one count runs at a time.
#[derive(Default)]
pub(crate) struct PgBytes {
    counted: Mutex<HashMap<PgId, u64>>,
    counting: AtomicBool,
}

impl PgBytes {
    /// Put the latest counts into `stats` (0 for a PG not counted yet).
    pub fn fill(&self, stats: &mut [PgStat]) {
        let counted = self.counted.lock();
        for st in stats {
            st.bytes = counted.get(&st.pg).copied().unwrap_or(0);
        }
    }

    /// Count `pgs` again in a blocking task, unless a count is running.
    pub fn recount(self: &Arc<Self>, store: Arc<dyn ObjectStore>, pgs: Vec<PgId>) {
        if self.counting.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut counted = HashMap::with_capacity(pgs.len());
            for pg in pgs {
                let Ok(names) = store.list_objects(pg) else {
                    continue;
                };
                let bytes = names
                    .into_iter()
                    .filter(|n| !crate::pg::persist::is_internal(n))
                    .map(|n| store.stat(&ObjectId::new(pg, n)).map_or(0, |st| st.size))
                    .sum();
                counted.insert(pg, bytes);
            }
            *me.counted.lock() = counted;
            me.counting.store(false, Ordering::Release);
        });
    }
}

/// CPU time and context switches of this process since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessUsage {
    /// User plus system CPU time, in microseconds.
    pub cpu_us: u64,
    /// Voluntary plus involuntary context switches.
    pub context_switches: u64,
}

impl ProcessUsage {
    /// This process's usage now (`getrusage(RUSAGE_SELF)`); `None` if the
    /// kernel refuses, which it does not for this call.
    pub fn now() -> Option<ProcessUsage> {
        // SAFETY: getrusage writes a plain struct we own.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return None;
        }
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Some(ProcessUsage {
            cpu_us: us(ru.ru_utime) + us(ru.ru_stime),
            context_switches: ru.ru_nvcsw as u64 + ru.ru_nivcsw as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let before = ProcessUsage::now().expect("getrusage");
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = ProcessUsage::now().expect("getrusage");
        assert!(
            after.cpu_us >= before.cpu_us + 20_000,
            "{before:?} → {after:?} after 50 ms of spinning"
        );
    }
}
