//! The emulator's notion of time. Timestamps (`creationTimestamp`, `deletionTimestamp`) and
//! timers (graceful pod termination) go through a [`Clock`] so tests can run a 30 s grace
//! period in microseconds: [`ScaledClock`] runs wall time faster, [`ManualClock`] only moves
//! when the test advances it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// A boxed future that completes when a clock reaches a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Source of the current time and of timers, shared by the whole emulator.
pub trait Clock: Send + Sync + 'static {
    /// The emulated current time.
    fn now(&self) -> SystemTime;
    /// Completes once [`Clock::now`] has reached `deadline`.
    fn sleep_until(&self, deadline: SystemTime) -> Sleep;
}

/// Wall-clock time, optionally sped up: with `speed` 100, a 30 s grace period lasts 0.3 s.
#[derive(Debug)]
pub struct ScaledClock {
    speed: f64,
    origin_wall: SystemTime,
    origin: Instant,
}

impl ScaledClock {
    /// A clock running `speed` times faster than real time (1.0 = real time).
    pub fn new(speed: f64) -> Self {
        let speed = if speed.is_finite() && speed > 0.0 {
            speed
        } else {
            1.0
        };
        Self {
            speed,
            origin_wall: SystemTime::now(),
            origin: Instant::now(),
        }
    }
}

impl Default for ScaledClock {
    fn default() -> Self {
        Self::new(1.0)
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> SystemTime {
        self.origin_wall + self.origin.elapsed().mul_f64(self.speed)
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        let emulated = deadline
            .duration_since(self.now())
            .unwrap_or(Duration::ZERO);
        let real = emulated.div_f64(self.speed);
        Box::pin(tokio::time::sleep(real))
    }
}

/// A clock that stands still until [`ManualClock::advance`] moves it; timers fire on advance.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<SystemTime>,
    ticks: watch::Sender<SystemTime>,
}

impl ManualClock {
    /// A manual clock starting at `start`.
    pub fn new(start: SystemTime) -> Self {
        let (ticks, _) = watch::channel(start);
        Self {
            now: Mutex::new(start),
            ticks,
        }
    }

    /// Moves time forward, firing every timer whose deadline has been reached.
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += by;
        self.ticks.send_replace(*now);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new(SystemTime::now())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        let mut ticks = self.ticks.subscribe();
        Box::pin(async move {
            // `wait_for` also checks the current value, so an already-passed deadline returns at once.
            let _closed = ticks.wait_for(|now| *now >= deadline).await;
        })
    }
}

/// Formats a time as Kubernetes does for `metav1.Time`: RFC 3339, whole seconds, UTC.
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Parses the RFC 3339 form [`rfc3339`] writes (fractions and `Z`/offsets accepted).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 {
        return None;
    }
    let num = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        rest = frac.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            let h = rest.get(1..3)?.parse::<i64>().ok()?;
            let m = rest.get(4..6)?.parse::<i64>().ok()?;
            sign * (h * 3600 + m * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's method).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_round_trip() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20Z");
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20Z"), Some(t));
        assert_eq!(parse_rfc3339("2023-11-14T23:13:20.123+01:00"), Some(t));
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00Z")
                .map(rfc3339)
                .as_deref(),
            Some("2024-02-29T00:00:00Z")
        );
        assert_eq!(parse_rfc3339("garbage"), None);
    }

    #[tokio::test]
    async fn manual_clock_fires_timers_only_on_advance() {
        let clock = std::sync::Arc::new(ManualClock::new(UNIX_EPOCH));
        let deadline = UNIX_EPOCH + Duration::from_secs(30);
        let timer = tokio::spawn(clock.sleep_until(deadline));
        tokio::task::yield_now().await;
        assert!(!timer.is_finished());
        clock.advance(Duration::from_secs(29));
        tokio::task::yield_now().await;
        assert!(!timer.is_finished());
        clock.advance(Duration::from_secs(1));
        timer.await.expect("timer task does not panic");
        assert_eq!(clock.now(), deadline);
    }

    #[test]
    fn scaled_clock_runs_faster() {
        let clock = ScaledClock::new(1000.0);
        let start = clock.now();
        std::thread::sleep(Duration::from_millis(5));
        assert!(clock.now().duration_since(start).expect("monotonic") >= Duration::from_secs(4));
    }
}
