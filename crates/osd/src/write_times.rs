//! Where this OSD's client writes, as primary, spent their time: running
//! sums over every write completed, for `cairn osd perf`, so that a
//! benchmark can split a write's latency between the wait before it ran,
//! the local commit, the slowest other member's commit, and what the
//! network and the client add outside the primary (the client's latency
//! minus `write_total`).
//!
//! Owns only counters; never decides anything.

use std::time::Duration;

/// Sums in microseconds; means are a sum over its count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteTimes {
    /// Client writes completed as primary.
    pub writes: u64,
    /// Arrival of the first request at the primary to its reply.
    pub total_us: u64,
    /// Arrival to submission (held by peering, recovery of the object,
    /// writes ahead of it on the object).
    pub held_us: u64,
    /// Submission to the local store's commit.
    pub local_commit_us: u64,
    /// Writes that had other members, and the sum of submission to the
    /// last of their commits.
    pub with_members: u64,
    pub last_member_us: u64,
}

impl WriteTimes {
    /// A write that arrived at `arrived`, was submitted at `submitted`,
    /// committed locally at `local` and on the last other member at
    /// `last_member` (`None`: no other member), completed at `now`.
    pub fn add(
        &mut self,
        arrived: Duration,
        submitted: Duration,
        local: Duration,
        last_member: Option<Duration>,
        now: Duration,
    ) {
        let us = |d: Duration| d.as_micros() as u64;
        self.writes += 1;
        self.total_us += us(now.saturating_sub(arrived));
        self.held_us += us(submitted.saturating_sub(arrived));
        self.local_commit_us += us(local.saturating_sub(submitted));
        if let Some(at) = last_member {
            self.with_members += 1;
            self.last_member_us += us(at.saturating_sub(submitted));
        }
    }

    /// As `(name, value)` pairs for `cairn osd perf`.
    pub fn counters(&self) -> [(&'static str, u64); 6] {
        [
            ("primary_writes", self.writes),
            ("primary_write_total_us", self.total_us),
            ("primary_write_held_us", self.held_us),
            ("primary_write_local_commit_us", self.local_commit_us),
            ("primary_writes_with_members", self.with_members),
            ("primary_write_last_member_us", self.last_member_us),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_each_stage_of_each_write() {
        let ms = Duration::from_millis;
        let mut t = WriteTimes::default();
        t.add(ms(10), ms(12), ms(15), Some(ms(17)), ms(18));
        t.add(ms(20), ms(20), ms(21), None, ms(21));
        assert_eq!(
            t,
            WriteTimes {
                writes: 2,
                total_us: 9_000,
                held_us: 2_000,
                local_commit_us: 4_000,
                with_members: 1,
                last_member_us: 5_000,
            }
        );
    }
}
