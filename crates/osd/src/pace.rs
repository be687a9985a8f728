//! Recovery pacing by what clients see.
//!
//! While clients are served, the OSD starts one recovery operation (an
//! object to recover, a backfill step) at a time, spaced by a gap. A fixed
//! gap is wrong for every disk but one: too long and recovery crawls on a
//! fast device, too short and client writes queue behind recovery's copies
//! on a slow one. The [`Pacer`] sets the gap from the latency of the client
//! writes this OSD completes as primary, per window of [`WINDOW`]:
//!
//! - a window without recovery here teaches the *baseline* (a moving
//!   average of such windows' p99);
//! - a window with recovery whose p99 is above `slowdown` × the baseline
//!   doubles the gap (up to `max_gap`); one within it shrinks the gap by an
//!   eighth (down to `min_gap`): add slowly, back off fast.
//!
//! Until a baseline is known, and when `max_gap` is not above `min_gap`,
//! the gap is `min_gap` (a fixed gap). The pacer only decides spacing; it
//! never holds an op and has no clock of its own (callers pass `now`).

use std::time::Duration;

/// The length of one measuring window.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Client write latencies kept per window (more are not sampled).
pub const MAX_SAMPLES: usize = 4096;
/// Fewer samples than this in a window teach nothing.
pub const MIN_SAMPLES: usize = 20;

#[derive(Debug)]
pub struct Pacer {
    min_gap: Duration,
    max_gap: Duration,
    /// Allowed p99 during recovery, in percent of the baseline.
    slowdown_pct: u32,
    gap: Duration,
    baseline: Option<Duration>,
    window_start: Duration,
    /// Client write latencies of the current window, in microseconds.
    samples: Vec<u32>,
    /// Recovery ran here during the current window.
    recovered_in_window: bool,
}

impl Pacer {
    pub fn new(min_gap: Duration, max_gap: Duration, slowdown_pct: u32) -> Self {
        Pacer {
            min_gap,
            max_gap: max_gap.max(min_gap),
            slowdown_pct: slowdown_pct.max(100),
            gap: min_gap,
            baseline: None,
            window_start: Duration::ZERO,
            samples: Vec::new(),
            recovered_in_window: false,
        }
    }

    /// New limits (a runtime configuration change); what was measured so
    /// far is kept, the current gap brought within the new bounds.
    pub fn set_limits(&mut self, min_gap: Duration, max_gap: Duration, slowdown_pct: u32) {
        self.min_gap = min_gap;
        self.max_gap = max_gap.max(min_gap);
        self.slowdown_pct = slowdown_pct.max(100);
        self.gap = self.gap.clamp(self.min_gap, self.max_gap);
    }

    /// The gap between recovery starts while clients are served.
    pub fn gap(&mut self, now: Duration) -> Duration {
        self.roll(now);
        self.gap
    }

    /// The baseline p99 client write latency, once known.
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline
    }

    /// A client write completed here after `latency`.
    pub fn client_write(&mut self, now: Duration, latency: Duration) {
        self.roll(now);
        if self.samples.len() < MAX_SAMPLES {
            let us = latency.as_micros().min(u128::from(u32::MAX)) as u32;
            self.samples.push(us);
        }
    }

    /// A recovery operation started here.
    pub fn recovery_started(&mut self, now: Duration) {
        self.roll(now);
        self.recovered_in_window = true;
    }

    /// Close the window if it is over, and adjust from what it saw.
    fn roll(&mut self, now: Duration) {
        if now < self.window_start + WINDOW {
            return;
        }
        if self.samples.len() >= MIN_SAMPLES {
            let p99 = Duration::from_micros(u64::from(p99(&mut self.samples)));
            self.learn(p99);
        }
        self.samples.clear();
        self.recovered_in_window = false;
        self.window_start = now;
    }

    fn learn(&mut self, p99: Duration) {
        if !self.recovered_in_window {
            // Moving average over quiet windows (weight 1/8 for the new).
            self.baseline = Some(match self.baseline {
                None => p99,
                Some(b) => (b * 7 + p99) / 8,
            });
            return;
        }
        let Some(baseline) = self.baseline else {
            return;
        };
        if self.max_gap <= self.min_gap {
            return;
        }
        let allowed = baseline * self.slowdown_pct / 100;
        let gap = if p99 > allowed {
            (self.gap * 2)
                .max(Duration::from_millis(1))
                .min(self.max_gap)
        } else {
            (self.gap * 7 / 8).max(self.min_gap)
        };
        if gap != self.gap {
            tracing::debug!(
                "recovery gap {gap:?}: client write p99 {p99:?} during recovery, {baseline:?} without"
            );
        }
        self.gap = gap;
    }
}

/// The 99th percentile of `samples` (reordered; not empty).
fn p99(samples: &mut [u32]) -> u32 {
    let rank = (samples.len() * 99 / 100).min(samples.len() - 1);
    *samples.select_nth_unstable(rank).1
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// One window of 100 client writes at `latency`, with or without
    /// recovery; returns the gap after it closes.
    fn window(p: &mut Pacer, start: &mut Duration, latency: Duration, recovery: bool) -> Duration {
        if recovery {
            p.recovery_started(*start);
        }
        for i in 0..100 {
            p.client_write(*start + WINDOW * i / 100, latency);
        }
        *start += WINDOW;
        p.gap(*start)
    }

    #[test]
    fn slow_clients_during_recovery_back_it_off_and_quick_ones_bring_it_back() {
        let mut p = Pacer::new(20 * MS, 1000 * MS, 200);
        let mut t = Duration::ZERO;
        // No baseline yet: the fixed minimum gap, whatever clients see.
        assert_eq!(window(&mut p, &mut t, 500 * MS, true), 20 * MS);
        assert_eq!(window(&mut p, &mut t, 10 * MS, false), 20 * MS);
        assert_eq!(p.baseline(), Some(10 * MS));
        // 3x the baseline with recovery on: the gap doubles to the cap.
        let gaps: Vec<Duration> = (0..8)
            .map(|_| window(&mut p, &mut t, 30 * MS, true))
            .collect();
        assert_eq!(gaps[..3], [40 * MS, 80 * MS, 160 * MS]);
        assert_eq!(*gaps.last().unwrap(), 1000 * MS, "capped at max_gap");
        // Within 2x: it shrinks by an eighth per window, to the floor.
        assert_eq!(window(&mut p, &mut t, 15 * MS, true), 875 * MS);
        for _ in 0..40 {
            window(&mut p, &mut t, 15 * MS, true);
        }
        assert_eq!(p.gap(t), 20 * MS);
        // Windows with recovery never move the baseline.
        assert_eq!(p.baseline(), Some(10 * MS));
    }

    #[test]
    fn sparse_windows_teach_nothing_and_a_fixed_gap_stays_fixed() {
        let mut p = Pacer::new(20 * MS, 1000 * MS, 200);
        p.client_write(Duration::ZERO, 5 * MS);
        assert_eq!(p.gap(WINDOW * 2), 20 * MS);
        assert_eq!(p.baseline(), None, "one sample is not a window");

        let mut fixed = Pacer::new(20 * MS, 20 * MS, 200);
        let mut t = Duration::ZERO;
        window(&mut fixed, &mut t, 10 * MS, false);
        for _ in 0..5 {
            assert_eq!(window(&mut fixed, &mut t, 900 * MS, true), 20 * MS);
        }
    }

    #[test]
    fn the_p99_ignores_the_worst_percent() {
        let mut v: Vec<u32> = (1..=1000).collect();
        assert_eq!(p99(&mut v), 991);
        assert_eq!(p99(&mut [7]), 7);
    }
}
