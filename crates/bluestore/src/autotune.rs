//! Cache autotuning: keep the process's resident memory near a target by
//! resizing the onode and data caches; the key-value cache keeps the size
//! it was opened with.
//!
//! Once a second the tuner reads the process's resident set size. Above
//! the target it shrinks the caches by the excess; below 90% of it, it
//! grows them by half the headroom, up to the target itself. Nothing else
//! is changed, so a wrong reading can only cost cache hits, never data.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::store::BlueStore;

/// The caches never shrink below this.
const MIN_CACHE: u64 = 16 << 20;

/// Resident memory of this process in bytes, if the system says.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// The next cache size for `rss` bytes resident against `target`.
pub fn next_size(cache: u64, rss: u64, target: u64) -> u64 {
    let low = target / 10 * 9;
    let next = if rss > target {
        cache.saturating_sub(rss - target)
    } else if rss < low {
        cache + (low - rss) / 2
    } else {
        cache
    };
    next.clamp(MIN_CACHE, target.max(MIN_CACHE))
}

/// Start tuning `store`'s caches, beginning from `initial` bytes, until the
/// store is dropped.
pub fn start(store: &Arc<BlueStore>, target: u64, initial: u64) {
    let weak: Weak<BlueStore> = Arc::downgrade(store);
    let spawned = std::thread::Builder::new()
        .name("cairn-bs-autotune".into())
        .spawn(move || {
            let mut cache = initial;
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let Some(store) = weak.upgrade() else {
                    return;
                };
                let Some(rss) = resident_bytes() else {
                    return;
                };
                let next = next_size(cache, rss, target);
                if next != cache {
                    tracing::debug!(rss, target, cache, next, "resizing caches");
                    store.resize_caches(next);
                    cache = next;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cache autotuning not started: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_above_and_grows_below_the_target() {
        let g = 1 << 30;
        assert_eq!(next_size(512 << 20, g + (100 << 20), g), 412 << 20);
        assert_eq!(next_size(20 << 20, 2 * g, g), MIN_CACHE);
        let grown = next_size(100 << 20, g / 2, g);
        assert!(grown > 100 << 20 && grown <= g);
        assert_eq!(next_size(300 << 20, g / 100 * 95, g), 300 << 20);
        assert!(resident_bytes().is_some_and(|r| r > 0));
    }
}
