//! The context meter both binaries show: how full the model's context window
//! is, as one number that also drives automatic compaction.

use crate::proto;

/// How full the model's context window is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Meter {
    pub used_tokens: u64,
    pub window_tokens: u64,
    /// No server reported usage since the last change: counted locally.
    pub estimated: bool,
    /// Share of the window (0..1) where automatic compaction starts; `None`: off.
    pub auto_compact_at: Option<f64>,
    pub window_source: &'static str,
}

impl Meter {
    /// `used / window` in percent (0 when the window is unknown).
    pub fn percent(&self) -> f64 {
        if self.window_tokens == 0 {
            return 0.0;
        }
        self.used_tokens as f64 * 100.0 / self.window_tokens as f64
    }

    /// `ctx 96k/200k 48%` (`~96k` when estimated).
    pub fn line(&self) -> String {
        format!(
            "ctx {}{}/{} {:.0}%",
            if self.estimated { "~" } else { "" },
            short(self.used_tokens),
            short(self.window_tokens),
            self.percent()
        )
    }
}

/// A token count the way the meter shows it: `950`, `96k`, `1.2M`.
pub fn short(tokens: u64) -> String {
    match tokens {
        0..1000 => tokens.to_string(),
        1000..999_500 => format!("{}k", (tokens + 500) / 1000),
        _ => {
            let m = tokens as f64 / 1_000_000.0;
            if m < 9.95 {
                format!("{m:.1}M")
            } else {
                format!("{m:.0}M")
            }
        }
    }
}

impl From<&Meter> for proto::ContextMeter {
    fn from(m: &Meter) -> Self {
        Self {
            used_tokens: m.used_tokens,
            window_tokens: m.window_tokens,
            percent: m.percent(),
            estimated: m.estimated,
            auto_compact_at: m.auto_compact_at.map_or(0.0, |a| a * 100.0),
            window_source: m.window_source.to_owned(),
        }
    }
}

impl From<&proto::ContextMeter> for Meter {
    fn from(m: &proto::ContextMeter) -> Self {
        Self {
            used_tokens: m.used_tokens,
            window_tokens: m.window_tokens,
            estimated: m.estimated,
            auto_compact_at: (m.auto_compact_at > 0.0).then_some(m.auto_compact_at / 100.0),
            window_source: match m.window_source.as_str() {
                "config" => "config",
                "server" => "server",
                "overflow" => "overflow",
                _ => "default",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_shown_short() {
        assert_eq!(short(950), "950");
        assert_eq!(short(96_400), "96k");
        assert_eq!(short(200_000), "200k");
        assert_eq!(short(1_047_576), "1.0M");
        assert_eq!(short(12_000_000), "12M");
    }

    #[test]
    fn the_line_says_used_window_and_percent() {
        let m = Meter {
            used_tokens: 96_000,
            window_tokens: 200_000,
            estimated: false,
            auto_compact_at: Some(0.85),
            window_source: "config",
        };
        assert_eq!(m.line(), "ctx 96k/200k 48%");
        let wire = proto::ContextMeter::from(&m);
        assert_eq!(wire.auto_compact_at, 85.0);
        assert_eq!(Meter::from(&wire), m);
        let est = Meter {
            estimated: true,
            ..m
        };
        assert_eq!(est.line(), "ctx ~96k/200k 48%");
    }
}
