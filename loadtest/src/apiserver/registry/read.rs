//! GET and LIST: one object by name, or a page of a resource's objects in key order with
//! label and field selectors, and the opaque `continue` token that resumes a paginated list
//! at the same resourceVersion (410 Expired once it outlives [`CONTINUE_LIFETIME`] or the
//! history it reads is compacted).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Registry, Target};
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::selectors::{FieldSelector, LabelSelector};
use crate::apiserver::store::{ObjKey, StoredObject, read};

/// How long a paginated list's `continue` token is served. kube-apiserver reads later pages
/// from etcd at the list's revision, which lives until etcd is compacted: every five minutes
/// (`--etcd-compaction-interval`), to the revision seen at the run before, so a token lasts
/// five to ten minutes (the API documents "generally five to fifteen"); the shortest is kept.
/// The watch cache's shorter history (`HISTORY_WINDOW`) bounds watches, not these tokens:
/// a relist of 100,000 pods on a busy controller outlasts it.
pub const CONTINUE_LIFETIME: Duration = Duration::from_secs(300);

/// List query.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// `labelSelector`
    pub labels: LabelSelector,
    /// `fieldSelector`
    pub fields: FieldSelector,
    /// `limit` (0 = all)
    pub limit: usize,
    /// `continue`
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// Matching objects in key order.
    pub items: Vec<Arc<StoredObject>>,
    /// The list's resourceVersion.
    pub rv: u64,
    /// Token for the next page.
    pub continue_token: Option<String>,
    /// Matching objects after this page.
    pub remaining: usize,
}

impl Registry {
    /// GET one object.
    pub fn get(&self, t: &Target, name: &str) -> ApiResult<Arc<StoredObject>> {
        read(&t.ts.state)
            .objects
            .get(&t.key(name))
            .cloned()
            .ok_or_else(|| t.not_found(name))
    }

    /// The object, if present (no error built: for controllers' frequent misses).
    pub fn find(&self, t: &Target, name: &str) -> Option<Arc<StoredObject>> {
        read(&t.ts.state).objects.get(&t.key(name)).cloned()
    }

    /// LIST with selectors and pagination.
    pub fn list(&self, t: &Target, q: &ListQuery) -> ApiResult<ListPage> {
        let state = read(&t.ts.state);
        let now = self.clock.now();
        let (rv, issued, after) = match q.continue_token.as_deref().filter(|c| !c.is_empty()) {
            Some(token) => {
                let Continue { rv, issued, after } = parse_continue(token)
                    .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
                let outlived = now
                    .duration_since(issued)
                    .is_ok_and(|age| age > CONTINUE_LIFETIME);
                if rv < state.compacted || outlived {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (rv, issued, Some(after))
            }
            None => (self.store.current_rv(), now, None),
        };
        let matches = |o: &&Arc<StoredObject>| {
            q.labels.matches(&o.attrs.labels) && q.fields.matches_stored(&o.attrs, &o.bytes)
        };
        let mut iter = state
            .range(t.namespace.as_deref(), after.as_ref())
            .filter(matches);
        let items: Vec<Arc<StoredObject>> = if q.limit == 0 {
            iter.by_ref().cloned().collect()
        } else {
            iter.by_ref().take(q.limit).cloned().collect()
        };
        let remaining = iter.count();
        let continue_token = (remaining > 0)
            .then(|| {
                items.last().map(|o| {
                    make_continue(&Continue {
                        rv,
                        issued,
                        after: o.attrs.key(),
                    })
                })
            })
            .flatten();
        Ok(ListPage {
            items,
            rv,
            continue_token,
            remaining,
        })
    }
}

/// What a `continue` token carries: the list's resourceVersion, when its first page was
/// served, and the last key served.
#[derive(Debug, PartialEq)]
struct Continue {
    rv: u64,
    issued: SystemTime,
    after: ObjKey,
}

fn parse_continue(token: &str) -> Option<Continue> {
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut parts = text.splitn(4, '\n');
    let rv = parts.next()?.parse().ok()?;
    let issued = UNIX_EPOCH + Duration::from_millis(parts.next()?.parse().ok()?);
    let after = (parts.next()?.to_string(), parts.next()?.to_string());
    Some(Continue { rv, issued, after })
}

fn make_continue(c: &Continue) -> String {
    let issued = c
        .issued
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    format!("{}\n{issued}\n{}\n{}", c.rv, c.after.0, c.after.1)
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let token = Continue {
            rv: 42,
            issued: UNIX_EPOCH + Duration::from_millis(1_765_000_000_123),
            after: ("ns".into(), "pod-1".into()),
        };
        assert_eq!(parse_continue(&make_continue(&token)), Some(token));
        assert_eq!(parse_continue("zz"), None);
    }

    fn create(registry: &Registry, t: &Target, name: &str) {
        registry
            .create(
                t,
                serde_json::json!({"metadata": {"name": name}}),
                &crate::apiserver::registry::WriteOptions::default(),
            )
            .expect("created");
    }

    fn page(registry: &Registry, t: &Target, token: Option<String>) -> ApiResult<ListPage> {
        registry.list(
            t,
            &ListQuery {
                limit: 1,
                continue_token: token,
                ..ListQuery::default()
            },
        )
    }

    #[test]
    fn a_paginated_list_outlives_the_watch_history_but_not_five_minutes_or_a_compaction() {
        let clock = Arc::new(crate::apiserver::clock::ManualClock::default());
        let (_runtime, registry, t) = crate::apiserver::registry::config_maps_on(clock.clone());
        for name in ["a", "b", "c", "d"] {
            create(&registry, &t, name);
        }
        let first = page(&registry, &t, None).expect("the first page");
        create(&registry, &t, "e");
        // The watch history moves past the list's revision: its next page still comes.
        clock.advance(crate::apiserver::store::HISTORY_WINDOW + Duration::from_secs(1));
        for i in 0..=crate::apiserver::store::HISTORY_FLOOR {
            create(&registry, &t, &format!("later-{i}"));
        }
        assert!(read(&t.ts.state).floor > first.rv);
        let second = page(&registry, &t, first.continue_token).expect("a second page");
        assert_eq!(second.items[0].attrs.name, "b");

        // Five minutes after the first page, the token is refused.
        clock.advance(
            CONTINUE_LIFETIME - crate::apiserver::store::HISTORY_WINDOW - Duration::from_secs(2),
        );
        let third = page(&registry, &t, second.continue_token.clone()).expect("within 5 min");
        assert_eq!(third.items[0].attrs.name, "c");
        clock.advance(Duration::from_secs(3));
        let late = page(&registry, &t, third.continue_token).expect_err("past 5 min");
        assert_eq!(late.reason, crate::apiserver::error::Reason::Expired);

        // A compaction ends a list at once.
        let fresh = page(&registry, &t, None).expect("a new list");
        create(&registry, &t, "after");
        t.ts.compact();
        let compacted = page(&registry, &t, fresh.continue_token).expect_err("compacted");
        assert_eq!(compacted.reason, crate::apiserver::error::Reason::Expired);
    }
}
