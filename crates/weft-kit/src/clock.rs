//! Times as the wire and the record show them: the wall clock in Unix seconds, and elapsed
//! times in milliseconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in Unix seconds.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Now, in Unix milliseconds.
pub fn unix_now_ms() -> i64 {
    (unix_now() * 1000.0) as i64
}

/// `elapsed` in milliseconds, to the nanosecond. The nanoseconds are divided by a million
/// (one rounding), so 2,934 ns reads `0.002934`; seconds times a thousand (two roundings)
/// read `0.0029340000000000004` in every frame, row and tree that carried it.
pub fn millis(elapsed: Duration) -> f64 {
    elapsed.as_nanos() as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_milliseconds_print_as_their_decimal() {
        for (nanos, shown) in [
            (2_934, "0.002934"),
            (18_327, "0.018327"),
            (1_500_000, "1.5"),
            (0, "0.0"),
        ] {
            let ms = millis(Duration::from_nanos(nanos));
            assert_eq!(serde_json::to_string(&ms).unwrap_or_default(), shown);
        }
    }
}
