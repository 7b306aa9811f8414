//! The controller's API writes per NodeClaim, read from the emulator's request log (every
//! mutating request the controller's client made): per kind, its creates, patches, status
//! writes and deletes divided by the NodeClaims created, and the writes each NodeClaim took up
//! to `Launched` (its create, then its own writes through its first status write, which
//! records the launch) beside upstream's count for the same steps: create, termination
//! finalizer, launch labels, status.

use std::collections::BTreeMap;

use http::Method;
use kerf_loadtest::apiserver::faults::Mutation;
use serde::Serialize;

/// Upstream's NodeClaim writes before its Node may take pods: create, the termination
/// finalizer, the launch's labels, the `Launched` status.
pub const UPSTREAM_NODECLAIM_WRITES_TO_LAUNCHED: u32 = 4;

/// One kind's writes, per NodeClaim created.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KindWrites {
    pub creates: f64,
    pub patches: f64,
    pub status_writes: f64,
    pub deletes: f64,
}

/// The controller's writes per NodeClaim.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WritesPerNodeClaim {
    /// By kind (`nodeclaims`, `nodes`, `pods`, `pods/binding`, `events`, …).
    pub by_kind: BTreeMap<String, KindWrites>,
    /// Mean NodeClaim writes up to `Launched` (create through the first status write), over
    /// the NodeClaims with a status write; `None` when none had one.
    pub node_claim_writes_to_launched: Option<f64>,
    /// Upstream's count for the same steps.
    pub upstream_node_claim_writes_to_launched: u32,
}

#[derive(Default)]
struct Counts {
    creates: u64,
    patches: u64,
    status_writes: u64,
    deletes: u64,
}

/// The writes of `mutations` (in order), per one of `node_claims` created.
pub fn per_node_claim(mutations: &[Mutation], node_claims: usize) -> WritesPerNodeClaim {
    let mut by_kind: BTreeMap<String, Counts> = BTreeMap::new();
    // Per NodeClaim: its writes so far, and whether its first status write was seen.
    let mut claims: BTreeMap<&str, (u32, bool)> = BTreeMap::new();
    for m in mutations {
        let Some(target) = Target::parse(&m.path) else {
            continue;
        };
        let counts = by_kind.entry(target.kind()).or_default();
        let status = target.subresource == Some("status");
        if m.method == Method::DELETE {
            counts.deletes += 1;
        } else if status {
            counts.status_writes += 1;
        } else if m.method == Method::POST {
            counts.creates += 1;
        } else {
            counts.patches += 1;
        }
        if target.resource == "nodeclaims"
            && let Some(name) = target.name
        {
            let (writes, launched) = claims.entry(name).or_default();
            if !*launched {
                *writes += 1;
                *launched = status;
            }
        }
    }
    let per = |n: u64| {
        if node_claims == 0 {
            0.0
        } else {
            round3(n as f64 / node_claims as f64)
        }
    };
    let launched: Vec<u32> = claims
        .values()
        .filter(|(_, launched)| *launched)
        .map(|(writes, _)| writes + 1)
        .collect();
    WritesPerNodeClaim {
        by_kind: by_kind
            .into_iter()
            .map(|(kind, c)| {
                let writes = KindWrites {
                    creates: per(c.creates),
                    patches: per(c.patches),
                    status_writes: per(c.status_writes),
                    deletes: per(c.deletes),
                };
                (kind, writes)
            })
            .collect(),
        node_claim_writes_to_launched: (!launched.is_empty())
            .then(|| round3(f64::from(launched.iter().sum::<u32>()) / launched.len() as f64)),
        upstream_node_claim_writes_to_launched: UPSTREAM_NODECLAIM_WRITES_TO_LAUNCHED,
    }
}

/// What a request path names: `/api/v1/namespaces/{ns}/pods/{name}/status`,
/// `/apis/karpenter.sh/v1/nodeclaims/{name}`, ….
struct Target<'a> {
    resource: &'a str,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
}

impl<'a> Target<'a> {
    fn parse(path: &'a str) -> Option<Self> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let rest = match segments.as_slice() {
            ["api", _version, rest @ ..] | ["apis", _, _version, rest @ ..] => rest,
            _ => return None,
        };
        let rest = match rest {
            ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
            rest => rest,
        };
        Some(Self {
            resource: rest.first()?,
            name: rest.get(1).copied(),
            subresource: rest.get(2).copied(),
        })
    }

    /// The resource, with a subresource other than `status` (`pods/binding`).
    fn kind(&self) -> String {
        match self.subresource {
            Some(sub) if sub != "status" => format!("{}/{sub}", self.resource),
            _ => self.resource.to_owned(),
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    fn m(method: Method, path: &str) -> Mutation {
        Mutation {
            at: Instant::now(),
            method,
            path: path.to_owned(),
        }
    }

    #[test]
    fn writes_are_counted_per_kind_and_to_launched_per_nodeclaim() {
        let claims = "/apis/karpenter.sh/v1/nodeclaims";
        let log = [
            m(Method::POST, claims),
            m(Method::POST, claims),
            m(Method::PATCH, &format!("{claims}/a")),
            m(Method::PATCH, &format!("{claims}/a/status")),
            m(Method::PATCH, &format!("{claims}/b")),
            m(Method::PATCH, &format!("{claims}/b")),
            m(Method::PATCH, &format!("{claims}/b/status")),
            // After Launched: counted for the kind, not to Launched.
            m(Method::PATCH, &format!("{claims}/a/status")),
            m(Method::PATCH, "/api/v1/nodes/n1"),
            m(Method::POST, "/api/v1/namespaces/default/pods/p/binding"),
            m(Method::POST, "/api/v1/namespaces/default/events"),
            m(Method::DELETE, &format!("{claims}/a")),
        ];
        let writes = per_node_claim(&log, 2);
        let nc = &writes.by_kind["nodeclaims"];
        assert_eq!(
            (nc.creates, nc.patches, nc.status_writes, nc.deletes),
            (1.0, 1.5, 1.5, 0.5)
        );
        assert_eq!(writes.by_kind["nodes"].patches, 0.5);
        assert_eq!(writes.by_kind["pods/binding"].creates, 0.5);
        assert_eq!(writes.by_kind["events"].creates, 0.5);
        // a: create, labels, status = 3; b: create, two patches, status = 4.
        assert_eq!(writes.node_claim_writes_to_launched, Some(3.5));
        assert_eq!(writes.upstream_node_claim_writes_to_launched, 4);
    }
}
