//! Go-style durations as Karpenter's API writes them: `720h`, `1h30m`, `60s`, `300ms`, and the
//! `Never` sentinel of `NillableDuration`. Upstream keeps the text the user wrote and emits it
//! again unchanged, so a NodePool read and written back by kerf is byte-for-byte what was
//! applied; [`Duration`] does the same and only formats Go's canonical form for values it
//! created itself.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;
use std::time::Duration as StdDuration;

/// Why a duration string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseDurationError {
    #[error("invalid duration {0:?}: empty")]
    Empty(String),
    #[error("invalid duration {0:?}: negative durations are not allowed")]
    Negative(String),
    #[error("invalid duration {0:?}: expected a number")]
    MissingNumber(String),
    #[error("invalid duration {0:?}: missing unit (one of ns, us, µs, ms, s, m, h)")]
    MissingUnit(String),
    #[error("invalid duration {text:?}: unknown unit {unit:?}")]
    UnknownUnit { text: String, unit: String },
    #[error("invalid duration {0:?}: out of range")]
    Overflow(String),
}

/// A non-negative duration that remembers how it was written.
#[derive(Clone, Debug)]
pub struct Duration {
    value: StdDuration,
    text: String,
}

impl Duration {
    /// Parses Go's `time.ParseDuration` syntax (without negative values): a sequence of
    /// decimal numbers with optional fraction, each followed by a unit.
    pub fn parse(text: &str) -> Result<Self, ParseDurationError> {
        Ok(Self {
            value: parse_go_duration(text)?,
            text: text.to_owned(),
        })
    }

    /// The value, written the way Go's `Duration.String()` writes it (`720h0m0s`).
    pub fn from_std(value: StdDuration) -> Self {
        Self {
            value,
            text: format_go_duration(value),
        }
    }

    pub fn from_secs(secs: u64) -> Self {
        Self::from_std(StdDuration::from_secs(secs))
    }

    pub fn as_std(&self) -> StdDuration {
        self.value
    }

    /// The text as written in the manifest (or Go's canonical form for computed values).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialEq for Duration {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl Eq for Duration {}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Duration {
    type Err = ParseDurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl From<StdDuration> for Duration {
    fn from(value: StdDuration) -> Self {
        Self::from_std(value)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "pattern": "^([0-9]+(s|m|h))+$" })
    }
}

/// A duration that may be disabled with `Never` (upstream's `NillableDuration`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NillableDuration {
    Never,
    After(Duration),
}

impl NillableDuration {
    pub const NEVER: &'static str = "Never";

    pub fn parse(text: &str) -> Result<Self, ParseDurationError> {
        if text == Self::NEVER {
            Ok(Self::Never)
        } else {
            Duration::parse(text).map(Self::After)
        }
    }

    /// The duration, or `None` for `Never`.
    pub fn as_std(&self) -> Option<StdDuration> {
        match self {
            Self::Never => None,
            Self::After(d) => Some(d.as_std()),
        }
    }

    pub fn is_never(&self) -> bool {
        matches!(self, Self::Never)
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Never => Self::NEVER,
            Self::After(d) => d.as_str(),
        }
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Duration> for NillableDuration {
    fn from(d: Duration) -> Self {
        Self::After(d)
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn schema_name() -> Cow<'static, str> {
        "NillableDuration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "pattern": "^(([0-9]+(s|m|h))+|Never)$" })
    }
}

const NANOS_PER_UNIT: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

fn parse_go_duration(text: &str) -> Result<StdDuration, ParseDurationError> {
    let err_text = || text.to_owned();
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err(ParseDurationError::Negative(err_text()));
    }
    if rest.is_empty() {
        return Err(ParseDurationError::Empty(err_text()));
    }
    // Go accepts a bare "0" as zero.
    if rest == "0" {
        return Ok(StdDuration::ZERO);
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let (number, after_number) = split_number(rest);
        if number.is_empty() || number == "." {
            return Err(ParseDurationError::MissingNumber(err_text()));
        }
        let unit_len = after_number
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after_number.len());
        let unit = &after_number[..unit_len];
        if unit.is_empty() {
            return Err(ParseDurationError::MissingUnit(err_text()));
        }
        let scale = NANOS_PER_UNIT
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, scale)| *scale)
            .ok_or_else(|| ParseDurationError::UnknownUnit {
                text: err_text(),
                unit: unit.to_owned(),
            })?;
        let nanos =
            scaled_nanos(number, scale).ok_or_else(|| ParseDurationError::Overflow(err_text()))?;
        total_nanos = total_nanos
            .checked_add(nanos)
            .ok_or_else(|| ParseDurationError::Overflow(err_text()))?;
        rest = &after_number[unit_len..];
    }
    // Go durations are int64 nanoseconds.
    if total_nanos > i64::MAX as u128 {
        return Err(ParseDurationError::Overflow(err_text()));
    }
    let secs = (total_nanos / 1_000_000_000) as u64;
    let nanos = (total_nanos % 1_000_000_000) as u32;
    Ok(StdDuration::new(secs, nanos))
}

fn split_number(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    text.split_at(end)
}

/// `number` (digits with at most one '.') times `scale` nanoseconds, truncating the fraction
/// below one nanosecond as Go does.
fn scaled_nanos(number: &str, scale: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos = whole.checked_mul(scale)?;
    let mut place = scale;
    for digit in fraction.chars() {
        place /= 10;
        if place == 0 {
            break;
        }
        nanos = nanos.checked_add(u128::from(digit.to_digit(10)?) * place)?;
    }
    Some(nanos)
}

/// Go's `time.Duration.String()`.
fn format_go_duration(value: StdDuration) -> String {
    let total = value.as_nanos();
    if total == 0 {
        return "0s".to_owned();
    }
    if total < 1_000_000_000 {
        let (unit, scale) = if total < 1_000 {
            ("ns", 1)
        } else if total < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", decimal(total, scale));
    }
    let hours = total / 3_600_000_000_000;
    let minutes = (total / 60_000_000_000) % 60;
    let sub_minute = total % 60_000_000_000;
    let seconds = decimal(sub_minute, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

fn decimal(value: u128, scale: u128) -> String {
    let whole = value / scale;
    let fraction = value % scale;
    if fraction == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> f64 {
        Duration::parse(text).unwrap().as_std().as_secs_f64()
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(secs("720h"), 720.0 * 3600.0);
        assert_eq!(secs("1h30m"), 5400.0);
        assert_eq!(secs("0s"), 0.0);
        assert_eq!(secs("0"), 0.0);
        assert_eq!(secs("60s"), 60.0);
        assert_eq!(secs("300ms"), 0.3);
        assert_eq!(secs("1.5h"), 5400.0);
        assert_eq!(secs("1h0m0s"), 3600.0);
        assert_eq!(secs("2m3s4ms"), 123.004);
        assert_eq!(
            Duration::parse("10us").unwrap().as_std(),
            StdDuration::from_micros(10)
        );
    }

    #[test]
    fn rejects_malformed_durations() {
        assert!(matches!(
            Duration::parse(""),
            Err(ParseDurationError::Empty(_))
        ));
        assert!(matches!(
            Duration::parse("-1s"),
            Err(ParseDurationError::Negative(_))
        ));
        assert!(matches!(
            Duration::parse("10"),
            Err(ParseDurationError::MissingUnit(_))
        ));
        assert!(matches!(
            Duration::parse("h"),
            Err(ParseDurationError::MissingNumber(_))
        ));
        assert!(matches!(
            Duration::parse("3d"),
            Err(ParseDurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            Duration::parse("9999999999999h"),
            Err(ParseDurationError::Overflow(_))
        ));
        assert!(Duration::parse("Never").is_err());
    }

    #[test]
    fn keeps_the_written_text_and_formats_computed_values_like_go() {
        assert_eq!(Duration::parse("720h").unwrap().to_string(), "720h");
        assert_eq!(Duration::from_secs(720 * 3600).to_string(), "720h0m0s");
        assert_eq!(Duration::from_secs(90).to_string(), "1m30s");
        assert_eq!(Duration::from_secs(0).to_string(), "0s");
        assert_eq!(
            Duration::from_std(StdDuration::from_millis(1500)).to_string(),
            "1.5s"
        );
        assert_eq!(
            Duration::from_std(StdDuration::from_millis(300)).to_string(),
            "300ms"
        );
        assert_eq!(
            Duration::parse("60m").unwrap(),
            Duration::parse("1h").unwrap()
        );
    }

    #[test]
    fn nillable_duration_reads_never() {
        let never: NillableDuration = serde_json::from_str("\"Never\"").unwrap();
        assert!(never.is_never());
        assert_eq!(never.as_std(), None);
        let after: NillableDuration = serde_json::from_str("\"30s\"").unwrap();
        assert_eq!(after.as_std(), Some(StdDuration::from_secs(30)));
        assert_eq!(serde_json::to_string(&after).unwrap(), "\"30s\"");
        assert!(serde_json::from_str::<NillableDuration>("\"never\"").is_err());
    }
}
