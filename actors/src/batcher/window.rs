//! The arithmetic of one batching window, apart from the actor so it is tested without
//! timers: when it opened, when it last saw a new pod, and therefore when it closes.

use tokio::time::Instant;

use super::BatchLimits;

/// An open batching window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    opened: Instant,
    last_new_pod: Instant,
}

impl Window {
    /// A window opened by a first pod at `now`.
    pub fn open(now: Instant) -> Self {
        Self {
            opened: now,
            last_new_pod: now,
        }
    }

    pub fn opened(&self) -> Instant {
        self.opened
    }

    /// A new distinct pod arrived at `now`.
    pub fn extend(&mut self, now: Instant) {
        self.last_new_pod = self.last_new_pod.max(now);
    }

    /// Idle time after the last new pod, capped by the window's maximum length.
    pub fn closes_at(&self, limits: BatchLimits) -> Instant {
        (self.last_new_pod + limits.idle).min(self.opened + limits.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const LIMITS: BatchLimits = BatchLimits {
        idle: Duration::from_secs(1),
        max: Duration::from_secs(10),
    };

    #[test]
    fn closes_after_idle_without_new_pods() {
        let t0 = Instant::now();
        let w = Window::open(t0);
        assert_eq!(w.closes_at(LIMITS), t0 + Duration::from_secs(1));
    }

    #[test]
    fn a_new_pod_extends_by_idle_from_its_arrival() {
        let t0 = Instant::now();
        let mut w = Window::open(t0);
        w.extend(t0 + Duration::from_millis(700));
        assert_eq!(w.closes_at(LIMITS), t0 + Duration::from_millis(1700));
    }

    #[test]
    fn never_longer_than_max() {
        let t0 = Instant::now();
        let mut w = Window::open(t0);
        w.extend(t0 + Duration::from_millis(9_800));
        assert_eq!(w.closes_at(LIMITS), t0 + Duration::from_secs(10));
    }
}
