//! Wall-clock conversions between `SystemTime`, the wire `Timestamp`
//! (Unix milliseconds) and RFC 3339 strings for display and JSON.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::proto::Timestamp;

/// Milliseconds since the Unix epoch (0 for times before it).
pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    unix_ms(SystemTime::now())
}

/// The wire form of a point in time.
pub fn to_wire(t: SystemTime) -> Timestamp {
    Timestamp {
        unix_ms: unix_ms(t),
    }
}

/// The `SystemTime` of a wire timestamp (negative values clamp to the epoch).
pub fn from_wire(t: &Timestamp) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(t.unix_ms).unwrap_or(0))
}

/// The last instant RFC 3339 can write (four-digit years):
/// `9999-12-31T23:59:59.999Z`.
const LAST_WRITABLE: Duration = Duration::from_millis(253_402_300_799_999);

/// RFC 3339 in UTC with millisecond precision, e.g. `2026-12-02T12:00:00.000Z`.
/// Times past year 9999 (a garbled or hostile timestamp, say in a pulled
/// copy) are written as the last instant of 9999 rather than failing.
pub fn rfc3339(t: SystemTime) -> String {
    let last = UNIX_EPOCH + LAST_WRITABLE;
    humantime::format_rfc3339_millis(t.min(last)).to_string()
}

/// RFC 3339 of an optional wire timestamp (`None` → empty string).
pub fn rfc3339_wire(t: Option<&Timestamp>) -> String {
    t.map(|t| rfc3339(from_wire(t))).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_the_wire() {
        let t = UNIX_EPOCH + Duration::from_millis(1_764_676_800_123);
        assert_eq!(from_wire(&to_wire(t)), t);
        assert_eq!(rfc3339(t), "2025-12-02T12:00:00.123Z");
    }

    #[test]
    fn a_time_past_year_9999_is_written_not_a_panic() {
        let last = "9999-12-31T23:59:59.999Z";
        assert_eq!(rfc3339(UNIX_EPOCH + LAST_WRITABLE), last);
        let year_10000 = UNIX_EPOCH + Duration::from_secs(253_402_300_800);
        assert_eq!(rfc3339(year_10000), last);
        let far = Timestamp { unix_ms: i64::MAX };
        assert_eq!(rfc3339_wire(Some(&far)), last);
        assert_eq!(crate::export::time_of(i64::MAX), last);
    }
}
