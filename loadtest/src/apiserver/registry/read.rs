//! GET and LIST: one object by name, or a page of a resource's objects in key order with
//! label and field selectors, and the opaque `continue` token that resumes a paginated list
//! at the same resourceVersion (410 Expired once the history has moved past it).

use std::sync::Arc;

use super::{Registry, Target};
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::selectors::{FieldSelector, LabelSelector};
use crate::apiserver::store::{ObjKey, StoredObject, read};

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
        let (rv, after) = match q.continue_token.as_deref().filter(|c| !c.is_empty()) {
            Some(token) => {
                let (rv, key) = parse_continue(token)
                    .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
                if rv < state.floor {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (rv, Some(key))
            }
            None => (self.store.current_rv(), None),
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
            .then(|| items.last().map(|o| make_continue(rv, &o.attrs.key())))
            .flatten();
        Ok(ListPage {
            items,
            rv,
            continue_token,
            remaining,
        })
    }
}

fn parse_continue(token: &str) -> Option<(u64, ObjKey)> {
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut parts = text.splitn(3, '\n');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, (parts.next()?.to_string(), parts.next()?.to_string())))
}

fn make_continue(rv: u64, key: &ObjKey) -> String {
    format!("{rv}\n{}\n{}", key.0, key.1)
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let token = make_continue(42, &("ns".into(), "pod-1".into()));
        assert_eq!(
            parse_continue(&token),
            Some((42, ("ns".to_string(), "pod-1".to_string())))
        );
        assert_eq!(parse_continue("zz"), None);
    }
}
