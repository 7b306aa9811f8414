//! Disruption budget schedules: the five-field cron syntax of robfig/cron's standard parser
//! (minute, hour, day of month, month, day of week; `*`, `?`, lists, ranges, steps, month
//! and weekday names, and the `@yearly`…`@hourly` descriptors), always in UTC as upstream
//! evaluates budgets. A budget with `schedule` and `duration` is active when the schedule
//! fired within the last `duration`: robfig's `Next(now - duration)` is not after `now`.
//! The search walks backwards minute by minute from `now`, skipping whole days and hours
//! that cannot match, so a window of weeks costs a few thousand steps at most.

use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::Offset;

/// A parsed schedule: one bit per allowed value of each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    /// Day of month or day of week was `*`/`?`: then both must match, else either does
    /// (cron's historical rule, which robfig keeps).
    day_star: bool,
}

/// Why a schedule could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid schedule {text:?}: {reason}")]
pub struct CronError {
    pub text: String,
    pub reason: String,
}

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Field = Field {
    name: "day of week",
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl Schedule {
    pub fn parse(text: &str) -> Result<Schedule, CronError> {
        let error = |reason: String| CronError {
            text: text.to_string(),
            reason,
        };
        let expanded = match text.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(error(format!("unknown descriptor {other:?}")));
            }
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(error(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            )));
        }
        let (minute, _) = parse_field(fields[0], &MINUTE).map_err(error)?;
        let (hour, _) = parse_field(fields[1], &HOUR).map_err(error)?;
        let (dom, dom_star) = parse_field(fields[2], &DOM).map_err(error)?;
        let (month, _) = parse_field(fields[3], &MONTH).map_err(error)?;
        let (dow, dow_star) = parse_field(fields[4], &DOW).map_err(error)?;
        Ok(Schedule {
            minute,
            hour,
            dom,
            month,
            dow,
            day_star: dom_star || dow_star,
        })
    }

    /// Whether the schedule fired in `(now - window, now]`.
    pub fn fired_within(&self, now: Timestamp, window_secs: i64) -> bool {
        self.last_fire_within(now, window_secs).is_some()
    }

    /// The latest minute in `(now - window, now]` the schedule fired at.
    pub fn last_fire_within(&self, now: Timestamp, window_secs: i64) -> Option<Timestamp> {
        let first = (now.as_second() - window_secs).div_euclid(60) * 60 + 60;
        let mut t = now.as_second().div_euclid(60) * 60;
        while t >= first {
            let at = Timestamp::from_second(t).ok()?;
            let civil = Offset::UTC.to_datetime(at);
            let minute_of_day = i64::from(civil.hour()) * 60 + i64::from(civil.minute());
            if !self.day_ok(civil) {
                // Jump to 23:59 of the previous day.
                t -= (minute_of_day + 1) * 60;
                continue;
            }
            if !bit(self.hour, civil.hour() as u32) {
                t -= (i64::from(civil.minute()) + 1) * 60;
                continue;
            }
            if bit(self.minute, civil.minute() as u32) {
                return Some(at);
            }
            t -= 60;
        }
        None
    }

    /// The first minute after `now`, at most `horizon_secs` later, the schedule fires at:
    /// when a budget's window next opens. Walks forwards as [`Self::last_fire_within`] walks
    /// back, skipping days and hours that cannot match.
    pub fn next_fire_after(&self, now: Timestamp, horizon_secs: i64) -> Option<Timestamp> {
        let last = now.as_second() + horizon_secs;
        let mut t = now.as_second().div_euclid(60) * 60 + 60;
        while t <= last {
            let at = Timestamp::from_second(t).ok()?;
            let civil = Offset::UTC.to_datetime(at);
            let minute_of_day = i64::from(civil.hour()) * 60 + i64::from(civil.minute());
            if !self.day_ok(civil) {
                t += (24 * 60 - minute_of_day) * 60;
                continue;
            }
            if !bit(self.hour, civil.hour() as u32) {
                t += (60 - i64::from(civil.minute())) * 60;
                continue;
            }
            if bit(self.minute, civil.minute() as u32) {
                return Some(at);
            }
            t += 60;
        }
        None
    }

    fn day_ok(&self, civil: k8s_openapi::jiff::civil::DateTime) -> bool {
        self.day_matches(
            civil.day() as u32,
            civil.month() as u32,
            civil.weekday().to_sunday_zero_offset() as u32,
        )
    }

    fn day_matches(&self, dom: u32, month: u32, dow: u32) -> bool {
        if !bit(self.month, month) {
            return false;
        }
        let (d, w) = (bit(self.dom, dom), bit(self.dow, dow));
        if self.day_star { d && w } else { d || w }
    }
}

fn bit(set: u64, value: u32) -> bool {
    set & (1 << value) != 0
}

/// One field's bits, and whether it was a bare `*` or `?`.
fn parse_field(text: &str, field: &Field) -> Result<(u64, bool), String> {
    let mut bits = 0;
    let mut star = false;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("{}: bad step {step:?}", field.name))?;
                (range, Some(step))
            }
            None => (part, None),
        };
        let (low, high, is_star) = if range == "*" || range == "?" {
            (field.min, field.max, step.is_none_or(|s| s == 1))
        } else if let Some((low, high)) = range.split_once('-') {
            (value(low, field)?, value(high, field)?, false)
        } else {
            let low = value(range, field)?;
            // `a/n` runs from a to the field's end.
            (low, if step.is_some() { field.max } else { low }, false)
        };
        if low > high {
            return Err(format!("{}: range {range:?} runs backwards", field.name));
        }
        star |= is_star;
        let step = step.unwrap_or(1);
        let mut v = low;
        while v <= high {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

fn value(text: &str, field: &Field) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    let parsed = match field.names.iter().position(|n| *n == lower) {
        Some(i) => i as u32 + field.min,
        None => text
            .parse()
            .map_err(|_| format!("{}: {text:?} is not a number", field.name))?,
    };
    if parsed < field.min || parsed > field.max {
        return Err(format!(
            "{}: {parsed} is outside {}-{}",
            field.name, field.min, field.max
        ));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    fn active(schedule: &str, now: &str, window_secs: i64) -> bool {
        Schedule::parse(schedule)
            .expect("valid")
            .fired_within(at(now), window_secs)
    }

    #[test]
    fn daily_window_is_active_for_its_duration_only() {
        // @daily fires at 00:00; a 1h window covers 00:00..=00:59:59.
        assert!(active("@daily", "2026-11-25T00:00:00Z", 3600));
        assert!(active("@daily", "2026-11-25T00:59:59Z", 3600));
        assert!(!active("@daily", "2026-11-25T01:00:00Z", 3600));
        assert!(!active("@daily", "2026-11-24T23:59:59Z", 3600));
    }

    #[test]
    fn the_next_window_opens_at_the_next_fire_and_the_open_one_at_its_last() {
        let schedule = Schedule::parse("0 9 * * mon-fri").expect("valid");
        // Wednesday 17:00: Thursday 09:00 next; Friday 20:00: Monday 09:00.
        assert_eq!(
            schedule.next_fire_after(at("2026-11-25T17:00:00Z"), 7 * 86400),
            Some(at("2026-11-26T09:00:00Z"))
        );
        assert_eq!(
            schedule.next_fire_after(at("2026-11-27T20:00:00Z"), 7 * 86400),
            Some(at("2026-11-30T09:00:00Z"))
        );
        assert_eq!(
            schedule.next_fire_after(at("2026-11-27T20:00:00Z"), 86400),
            None
        );
        assert_eq!(
            schedule.last_fire_within(at("2026-11-25T12:34:56Z"), 8 * 3600),
            Some(at("2026-11-25T09:00:00Z"))
        );
    }

    #[test]
    fn weekday_business_hours() {
        let schedule = "0 9 * * mon-fri";
        // 2026-11-25 is a Wednesday; 2026-11-29 a Sunday.
        assert!(active(schedule, "2026-11-25T12:00:00Z", 8 * 3600));
        assert!(!active(schedule, "2026-11-25T17:00:00Z", 8 * 3600));
        assert!(!active(schedule, "2026-11-29T12:00:00Z", 8 * 3600));
    }

    #[test]
    fn steps_lists_and_names() {
        assert!(active("*/15 * * * *", "2026-11-25T10:30:30Z", 60));
        assert!(!active("*/15 * * * *", "2026-11-25T10:31:00Z", 60));
        assert!(active("0 0 1 JAN,jul *", "2026-07-01T00:10:00Z", 3600));
        assert!(!active("0 0 1 jan,jul *", "2026-08-01T00:10:00Z", 3600));
        assert!(active("5/20 3 * * *", "2026-11-25T03:45:00Z", 60));
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_are_restricted() {
        // The 13th or any Friday (2026-11-27 is a Friday, 2026-11-26 a Thursday).
        assert!(active("0 0 13 * 5", "2026-11-27T00:00:00Z", 60));
        assert!(active("0 0 13 * 5", "2026-11-13T00:00:00Z", 60));
        assert!(!active("0 0 13 * 5", "2026-11-26T00:00:00Z", 60));
    }

    #[test]
    fn a_long_window_reaches_back_weeks() {
        assert!(active("@monthly", "2026-11-25T00:00:00Z", 30 * 86400));
        assert!(!active("@yearly", "2026-11-25T00:00:00Z", 30 * 86400));
    }

    #[test]
    fn malformed_schedules_are_refused_with_the_reason() {
        for (text, reason) in [
            ("* * * *", "expected 5 fields"),
            ("60 * * * *", "minute: 60 is outside 0-59"),
            ("* * * * 7", "day of week: 7 is outside 0-6"),
            ("*/0 * * * *", "bad step"),
            ("@every 5m", "unknown descriptor"),
            ("5-1 * * * *", "runs backwards"),
        ] {
            let error = Schedule::parse(text).expect_err(text);
            assert!(error.reason.contains(reason), "{text}: {}", error.reason);
        }
    }
}
