//! Shared pieces of Weft's benchmark binaries: the server as a child process, process
//! memory and CPU readings, medians.

pub mod server;

use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// How the benchmarks' websocket clients read. tungstenite's default read buffer is 128 KiB,
/// and it zeroes the room left in it before every read of the socket: a client that reads a
/// few hundred bytes at a time spent half its CPU in `memset` (W2), on the cores the server
/// under test shares. 8 KiB holds many frames; a bigger one gets room made for it.
pub fn client_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(8 * 1024)
}

/// Peak and current resident set size of this process, in KiB (from /proc/self/status).
pub fn rss_kib() -> (u64, u64) {
    rss_kib_of("self")
}

/// Peak and current resident set size of process `pid` ("self" for this one), in KiB.
pub fn rss_kib_of(pid: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// CPU time (user + system) process `pid` ("self" for this one) has used, in seconds.
pub fn cpu_seconds_of(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) as f64 / per_second
}

/// Bytes process `pid` has caused to be written to storage (`write_bytes` of
/// `/proc/<pid>/io`: files, not sockets; counted as pages are dirtied in the page cache).
pub fn disk_write_bytes_of(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The median of a non-empty list (the lower middle for an even count).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values
        .get((values.len().saturating_sub(1)) / 2)
        .copied()
        .unwrap_or(f64::NAN)
}

/// A global allocator wrapper over mimalloc (the allocator the `weft` binary uses) that tracks
/// live and peak heap bytes, for per-turn heap figures.
pub mod counting {
    use std::alloc::{GlobalAlloc, Layout};

    use mimalloc::MiMalloc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub struct Counting;

    static LIVE: AtomicUsize = AtomicUsize::new(0);
    static PEAK: AtomicUsize = AtomicUsize::new(0);

    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
            // SAFETY: forwarded unchanged to mimalloc.
            unsafe { MiMalloc.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            // SAFETY: forwarded unchanged to mimalloc.
            unsafe { MiMalloc.dealloc(ptr, layout) }
        }
    }

    /// Live heap bytes now.
    pub fn live() -> usize {
        LIVE.load(Ordering::Relaxed)
    }

    /// Restart peak tracking from the current live figure.
    pub fn reset_peak() {
        PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    pub fn peak() -> usize {
        PEAK.load(Ordering::Relaxed)
    }
}
