//! Client tokens that make a launch idempotent per NodeClaim, for providers whose launch call
//! takes one (EC2 CreateFleet's `ClientToken`). A NodeClaim's launches are numbered by
//! generation and each carries the token `kerf-<uid>-<generation>`: derived from the uid, so
//! another process (a restart, the next leader) sends the same token for the same NodeClaim,
//! and EC2 answers a repeated token with what the first request launched instead of
//! launching again — even while DescribeInstances does not show that instance yet.
//!
//! [`LaunchAttempts`] keeps, per NodeClaim, the generation and the request whose answer was
//! lost. The generation moves on only after an answer that says nothing was launched (a
//! fleet without instances, a refusal); a lost answer (timeout, 5xx) keeps it, and the next
//! attempt sends that same request again, so a retry never carries a new token for a launch
//! that may have happened. Pure bookkeeping behind a mutex: no I/O, no clock but `Instant`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// EC2's longest client token.
pub const MAX_CLIENT_TOKEN_LEN: usize = 64;

/// How long a NodeClaim's attempts are remembered after its last one: past its launch TTL
/// (15 minutes) a NodeClaim that never launched is deleted, so nothing retries it later.
pub const ATTEMPT_MEMORY: Duration = Duration::from_secs(30 * 60);

/// The client token of `key`'s (a NodeClaim uid) launch number `generation`; at most
/// [`MAX_CLIENT_TOKEN_LEN`] ASCII characters, a stable hash of `key` standing in for a key
/// too long or not ASCII.
pub fn client_token(key: &str, generation: u32) -> String {
    let suffix = format!("-{generation}");
    let fits = "kerf-".len() + key.len() + suffix.len() <= MAX_CLIENT_TOKEN_LEN;
    if fits && key.bytes().all(|b| b.is_ascii_graphic()) {
        format!("kerf-{key}{suffix}")
    } else {
        format!("kerf-{:016x}{suffix}", fnv1a(key.as_bytes()))
    }
}

/// FNV-1a, 64 bits: stable across builds and releases, unlike the standard library's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What the next launch of a NodeClaim sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NextAttempt<R> {
    /// A request whose answer was lost: send it again, exactly, with its token.
    Resend { token: String, request: R },
    /// Build the request afresh and send it with this token. `repeats_launch`: the token
    /// launched before, so EC2 answers with that instance, which the caller checks is
    /// still live (and calls [`LaunchAttempts::answered_without_instance`] if not).
    Fresh { token: String, repeats_launch: bool },
}

impl<R> NextAttempt<R> {
    pub fn token(&self) -> &str {
        match self {
            Self::Resend { token, .. } | Self::Fresh { token, .. } => token,
        }
    }
}

struct Attempt<R> {
    generation: u32,
    unanswered: Option<R>,
    launched: bool,
    last: Instant,
}

/// Per NodeClaim (by uid): the launch generation and the request whose answer was lost.
pub struct LaunchAttempts<R> {
    by_key: Mutex<HashMap<String, Attempt<R>>>,
}

impl<R> Default for LaunchAttempts<R> {
    fn default() -> Self {
        Self {
            by_key: Mutex::new(HashMap::new()),
        }
    }
}

impl<R: Clone> LaunchAttempts<R> {
    /// What `key`'s next launch sends.
    pub fn next(&self, key: &str) -> NextAttempt<R> {
        let map = self.lock();
        match map.get(key) {
            Some(Attempt {
                generation,
                unanswered: Some(request),
                ..
            }) => NextAttempt::Resend {
                token: client_token(key, *generation),
                request: request.clone(),
            },
            Some(attempt) => NextAttempt::Fresh {
                token: client_token(key, attempt.generation),
                repeats_launch: attempt.launched,
            },
            None => NextAttempt::Fresh {
                token: client_token(key, 0),
                repeats_launch: false,
            },
        }
    }

    /// The answer to `request` was lost: it may have launched, so the next attempt sends it
    /// again with the same token.
    pub fn unanswered(&self, key: &str, request: R) {
        self.update(key, |attempt| attempt.unanswered = Some(request));
    }

    /// The answer said nothing was launched (or what it launched has ended): the next
    /// attempt is a new request with a new token.
    pub fn answered_without_instance(&self, key: &str) {
        self.update(key, |attempt| {
            attempt.generation += 1;
            attempt.unanswered = None;
            attempt.launched = false;
        });
    }

    /// Launched: nothing is resent. The generation stays, so a later attempt (its status
    /// write lost) repeats the launching token and EC2 answers with the same instance.
    pub fn launched(&self, key: &str) {
        self.update(key, |attempt| {
            attempt.unanswered = None;
            attempt.launched = true;
        });
    }

    /// The NodeClaims remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn update(&self, key: &str, change: impl FnOnce(&mut Attempt<R>)) {
        let mut map = self.lock();
        let now = Instant::now();
        map.retain(|_, a| now.duration_since(a.last) < ATTEMPT_MEMORY);
        let attempt = map.entry(key.to_owned()).or_insert(Attempt {
            generation: 0,
            unanswered: None,
            launched: false,
            last: now,
        });
        attempt.last = now;
        change(attempt);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Attempt<R>>> {
        self.by_key.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f8b2c1e-3d4a-4b5c-9d6e-7f8091a2b3c4";

    #[test]
    fn tokens_derive_from_the_uid_and_fit_ec2() {
        assert_eq!(
            client_token(UID, 0),
            "kerf-0f8b2c1e-3d4a-4b5c-9d6e-7f8091a2b3c4-0"
        );
        assert_ne!(client_token(UID, 0), client_token(UID, 1));
        let long = "n".repeat(253);
        let token = client_token(&long, 7);
        assert!(token.len() <= MAX_CLIENT_TOKEN_LEN, "{token}");
        assert_eq!(token, client_token(&long, 7), "stable");
        assert_ne!(token, client_token(&"m".repeat(253), 7));
        assert!(client_token("ünïcode", 0).is_ascii());
    }

    #[test]
    fn a_lost_answer_is_resent_with_its_token_and_only_a_known_miss_moves_on() {
        let attempts: LaunchAttempts<&str> = LaunchAttempts::default();
        let first = attempts.next(UID);
        assert_eq!(
            first,
            NextAttempt::Fresh {
                token: client_token(UID, 0),
                repeats_launch: false,
            }
        );

        attempts.unanswered(UID, "spot request");
        assert_eq!(
            attempts.next(UID),
            NextAttempt::Resend {
                token: client_token(UID, 0),
                request: "spot request"
            },
            "the same request under the same token"
        );

        attempts.answered_without_instance(UID);
        assert_eq!(
            attempts.next(UID),
            NextAttempt::Fresh {
                token: client_token(UID, 1),
                repeats_launch: false,
            }
        );

        attempts.unanswered(UID, "on-demand request");
        attempts.launched(UID);
        assert_eq!(
            attempts.next(UID),
            NextAttempt::Fresh {
                token: client_token(UID, 1),
                repeats_launch: true,
            },
            "a launched NodeClaim asked again repeats its launching token"
        );
        // What it launched ended: a new launch.
        attempts.answered_without_instance(UID);
        assert_eq!(attempts.next(UID).token(), client_token(UID, 2));
        assert_eq!(attempts.len(), 1);
    }
}
