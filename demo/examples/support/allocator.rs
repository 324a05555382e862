//! The sweep examples' allocator setting (shared by `sweep` and `sweep_profile` through
//! `#[path]`): mimalloc keeps the memory a seed freed instead of returning it to the OS a second
//! later (`mi_option_purge_delay = -1`). Every seed runs on a fresh thread and runtime, so the
//! purged pages were faulted in again by the next seed. Measured on seeds 0–299 (2 threads, idle
//! 2-core machine, the fat-LTO build): 271,917 minor page faults, 1.78 s system time, 26.8 s
//! wall by default; 18,650, 0.65 s and 25.5 s without purging (−4.7% wall); peak memory 190 and
//! 193 MB. `MIMALLOC_PURGE_DELAY` in the environment still wins (the option is left alone when
//! it is not at its default).

use std::ffi::{c_int, c_long};

unsafe extern "C" {
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (what libmimalloc-sys 0.1.49 builds).
const PURGE_DELAY: c_int = 15;
/// Its default in milliseconds (v3's `src/options.c`: 1000; the header's comment still says
/// 10): read back first, so a different option table is never written.
const PURGE_DELAY_DEFAULT: c_long = 1000;

/// Turns mimalloc's purging off for this process; whether it did.
pub fn keep_freed_memory() -> bool {
    // SAFETY: mimalloc's option accessors take an enum index and a value and touch only its
    // option table; they are thread-safe and callable at any time. The index is checked against
    // the option's documented default before it is written.
    unsafe {
        if mi_option_get(PURGE_DELAY) != PURGE_DELAY_DEFAULT {
            return false;
        }
        mi_option_set(PURGE_DELAY, -1);
    }
    true
}
