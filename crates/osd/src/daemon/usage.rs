//! The daemon's own CPU time and context switches, as the kernel counts
//! them for the whole process (every thread), for `cairn osd perf` and the
//! CPU per op that `cairn bench` reports.

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
