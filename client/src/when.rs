//! Times as people read them in listings: local time, relative when near
//! ("just now", "3 min ago", "yesterday 14:02"). `--json` keeps RFC 3339.

use jiff::{Timestamp, Zoned, tz::TimeZone};

use agentx_shared::proto;

/// A wire timestamp for a listing, in the system's local time zone.
pub fn human(t: Option<&proto::Timestamp>) -> String {
    let Some(t) = t else {
        return String::new();
    };
    let tz = TimeZone::system();
    match Timestamp::from_millisecond(t.unix_ms) {
        Ok(at) => relative(&at.to_zoned(tz.clone()), &Timestamp::now().to_zoned(tz)),
        Err(_) => String::new(),
    }
}

/// `at` described from the point of view of `now` (both in one zone).
fn relative(at: &Zoned, now: &Zoned) -> String {
    let secs = now.timestamp().as_second() - at.timestamp().as_second();
    let (date, today) = (at.date(), now.date());
    let clock = at.strftime("%H:%M");
    if (0..60).contains(&secs) {
        return "just now".into();
    }
    if (60..3600).contains(&secs) {
        return format!("{} min ago", secs / 60);
    }
    if date == today {
        return format!("today {clock}");
    }
    if today.yesterday().is_ok_and(|y| y == date) {
        return format!("yesterday {clock}");
    }
    let days = (0..6).any(|n| {
        today
            .checked_sub(jiff::Span::new().days(n))
            .is_ok_and(|d| d == date)
    });
    if days && secs > 0 {
        return at.strftime("%a %H:%M").to_string();
    }
    if date.year() == today.year() {
        return at.strftime("%b %d %H:%M").to_string();
    }
    at.strftime("%Y-%m-%d %H:%M").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Zoned {
        s.parse().unwrap()
    }

    #[test]
    fn near_times_are_relative_far_ones_dated() {
        let now = at("2026-12-03T15:30:00+01:00[Europe/Paris]");
        let cases = [
            ("2026-12-03T15:29:31+01:00[Europe/Paris]", "just now"),
            ("2026-12-03T15:27:00+01:00[Europe/Paris]", "3 min ago"),
            ("2026-12-03T09:05:00+01:00[Europe/Paris]", "today 09:05"),
            ("2026-12-02T14:02:00+01:00[Europe/Paris]", "yesterday 14:02"),
            ("2026-11-30T08:00:00+01:00[Europe/Paris]", "Mon 08:00"),
            ("2026-10-01T08:00:00+02:00[Europe/Paris]", "Oct 01 08:00"),
            (
                "2025-12-02T08:00:00+01:00[Europe/Paris]",
                "2025-12-02 08:00",
            ),
        ];
        for (time, want) in cases {
            assert_eq!(relative(&at(time), &now), want, "{time}");
        }
    }

    #[test]
    fn missing_or_absurd_times_are_blank() {
        assert_eq!(human(None), "");
        assert_eq!(human(Some(&proto::Timestamp { unix_ms: i64::MAX })), "");
    }
}
