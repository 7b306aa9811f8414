//! A token bucket as client-go's `flowcontrol.NewTokenBucketRateLimiter(qps, burst)` keeps
//! it: the bucket starts full with `burst` tokens and refills at `qps` tokens per second up
//! to `burst`. [`TokenBucket::reserve`] always hands out a token, possibly one that only
//! exists in the future, and says how long to wait for it — so waiting callers are served in
//! the order they asked, and a burst above the limit is smoothed rather than refused.
//! [`TokenBucket::try_take`] refuses instead of waiting (for best-effort work such as
//! events, and for requests that give way to reserved ones: they retry after
//! [`TokenBucket::until_available`]). Time is passed in, so the arithmetic is tested without
//! clocks.

use std::time::Duration;

use tokio::time::Instant;

/// The bucket's state.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// Tokens available at `updated`; negative when callers hold tokens from the future.
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket refilled at `qps` per second up to `burst` (both at least 1).
    pub fn new(qps: u32, burst: u32, now: Instant) -> Self {
        let qps = f64::from(qps.max(1));
        let burst = f64::from(burst.max(1));
        Self {
            qps,
            burst,
            tokens: burst,
            updated: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        // A clock read earlier than the last update (another caller raced us) adds nothing.
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.updated = self.updated.max(now);
    }

    /// Takes one token and returns how long the caller must wait before it may act.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }

    /// How long until a token is available to [`TokenBucket::try_take`]: after the tokens
    /// reserved ahead are paid for.
    pub fn until_available(&mut self, now: Instant) -> Duration {
        self.refill(now);
        Duration::from_secs_f64(((1.0 - self.tokens) / self.qps).max(0.0))
    }

    /// Takes one token if one is available now.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Float refills are exact only to within nanoseconds.
    fn assert_wait(actual: Duration, millis: u64) {
        let expected = Duration::from_millis(millis);
        let diff = actual.abs_diff(expected);
        assert!(
            diff < Duration::from_micros(1),
            "{actual:?} != {expected:?}"
        );
    }

    #[test]
    fn a_full_bucket_serves_the_burst_at_once_then_one_token_per_interval() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10, 3, start);
        for _ in 0..3 {
            assert_wait(bucket.reserve(start), 0);
        }
        // Callers beyond the burst queue up 100 ms apart.
        assert_wait(bucket.reserve(start), 100);
        assert_wait(bucket.reserve(start), 200);
        // Later callers wait for the tokens reserved before them.
        assert_wait(bucket.reserve(start + Duration::from_millis(150)), 150);
    }

    #[test]
    fn an_idle_bucket_refills_only_up_to_the_burst() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(1, 2, start);
        assert!(bucket.try_take(start));
        assert!(bucket.try_take(start));
        assert!(!bucket.try_take(start), "empty");
        let later = start + Duration::from_secs(3600);
        assert!(bucket.try_take(later));
        assert!(bucket.try_take(later));
        assert!(!bucket.try_take(later), "refilled to the burst, not beyond");
        assert!(bucket.try_take(later + Duration::from_secs(1)));
    }

    #[test]
    fn try_take_refuses_while_tokens_are_reserved_ahead() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(2, 1, start);
        assert_wait(bucket.reserve(start), 0);
        assert_wait(bucket.reserve(start), 500);
        assert!(!bucket.try_take(start + Duration::from_millis(500)));
        assert!(bucket.try_take(start + Duration::from_millis(1000)));
    }

    #[test]
    fn a_token_is_available_once_the_reserved_ones_are_paid_for() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10, 1, start);
        assert_wait(bucket.until_available(start), 0);
        assert_wait(bucket.reserve(start), 0);
        assert_wait(bucket.reserve(start), 100);
        assert_wait(bucket.until_available(start), 200);
        let later = start + Duration::from_millis(200);
        assert_wait(bucket.until_available(later), 0);
        assert!(bucket.try_take(later));
    }
}
