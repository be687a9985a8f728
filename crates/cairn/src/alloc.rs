//! The process's memory allocators and their tuning: mimalloc for Rust
//! code, glibc's malloc for RocksDB (C++). Owns nothing else; must never
//! change what a program computes, only how much memory it keeps resident.

use std::os::raw::{c_int, c_long};

/// mimalloc: per-thread heaps make the frees the store's threads do of
/// each other's allocations (batches, blocks, records) lock-free; glibc's
/// arenas contend on every one of them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_t` (the 16th
/// option; `tests::purge_delay_is_the_option_we_mean` checks it).
const MI_OPTION_PURGE_DELAY: c_int = 15;

/// Environment variable that overrides [`PURGE_DELAY_MS`] (mimalloc's own).
const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// Milliseconds mimalloc keeps freed memory before returning it to the
/// system. Its default (1 s, and later still when the freeing thread goes
/// quiet) let an OSD hold its high-water mark of buffers: at a 128 MiB
/// cache, OSDs peaked at 164–189 MiB over a 4 MiB write, 4K randwrite and
/// 4K randread run; at 10 ms, 129–141 MiB. Immediate purging (0) peaked
/// lower still (124–139 MiB) but cost 64K randwrite at QD32 a fifth of its
/// IOPS: every freed 64 KiB write buffer went back to the system and the
/// next one faulted its pages in again.
const PURGE_DELAY_MS: c_long = 10;

/// Set to `1` to keep transparent huge pages for this process. They are
/// off by default: mimalloc asks for them on its arenas, and with freed
/// memory returned after [`PURGE_DELAY_MS`] every page it reuses faulted
/// in a whole 2 MiB huge page, zeroed. A restarted OSD taking the log of
/// a 30 s outage spent a quarter of its CPU zeroing such pages
/// (`clear_page_erms`), and its PGs took 400–620 ms to activate; without
/// huge pages 5% and about 220 ms. Steady 4K random writes and reads were
/// the same either way (OSD CPU per op within the runs' noise).
const THP_ENV: &str = "CAIRN_THP";

extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
    #[cfg(test)]
    fn mi_option_get(option: c_int) -> c_long;
}

/// Tune both allocators; call first thing in `main`, before any thread
/// starts.
pub fn tune() {
    if std::env::var_os(PURGE_DELAY_ENV).is_none() {
        // SAFETY: mi_option_set only stores a tunable; the option index is
        // checked against mimalloc's default in the tests below.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
    // Keep glibc's malloc (RocksDB's) from holding on to freed memory:
    // bound its per-thread arenas (each would keep what its thread freed),
    // and serve buffers of 256 KiB and more from mmap, returned to the
    // system when freed, instead of letting the heap's high-water mark
    // stay resident.
    #[cfg(target_os = "linux")]
    if std::env::var_os(THP_ENV).is_none_or(|v| v != "1") {
        // SAFETY: prctl(PR_SET_THP_DISABLE) only sets a flag on this
        // process's memory map.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tunables; called before any
    // thread is started.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_delay_is_the_option_we_mean() {
        if std::env::var_os(PURGE_DELAY_ENV).is_some() {
            return;
        }
        // SAFETY: reading and setting tunables only.
        unsafe {
            // mimalloc 3's defaults of the purge delay (1000 ms) and of
            // two options near it (the old eager-commit delay, 1; the OS
            // tag, 100): a mimalloc whose options moved fails here.
            assert_eq!(mi_option_get(MI_OPTION_PURGE_DELAY), 1000);
            assert_eq!(mi_option_get(MI_OPTION_PURGE_DELAY - 1), 1);
            assert_eq!(mi_option_get(MI_OPTION_PURGE_DELAY + 3), 100);
            tune();
            assert_eq!(mi_option_get(MI_OPTION_PURGE_DELAY), PURGE_DELAY_MS);
        }
    }
}
