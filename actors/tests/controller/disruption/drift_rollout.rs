//! Drift carried out end to end: a NodePool requirement change marks the running NodeClaims
//! `Drifted`, and the loop replaces them one command at a time — each replacement launched
//! with the new requirements and Initialized before its drifted node is deleted, the pods
//! moving onto the replacements — with upstream's events on the way.

use std::collections::HashMap;

use super::offerings::events_about;
use super::*;

#[test]
fn a_requirement_change_replaces_the_drifted_nodes_one_by_one() {
    run(|| async {
        let stack = Stack::start(
            pool(&[SMALL, MEDIUM], json!({})),
            quick(Duration::from_millis(200)),
        )
        .await;
        let cluster = stack.cluster();
        create_deployment(&cluster, "web", 2, spread("500m", "web"));
        let old_nodes = stack.running("web", 2).await;
        let old_claims = stack.live_claims();
        assert!(old_claims.iter().all(|c| instance_type(c) == SMALL));

        stack.patch_pool(json!({"spec": {"template": {"spec": {"requirements": [
            {"key": labels::INSTANCE_TYPE, "operator": "In", "values": [MEDIUM]},
            {"key": labels::ZONE, "operator": "In", "values": [ZONE]},
            {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
        ]}}}}));

        // When each drifted NodeClaim was first seen deleting.
        let mut deleted_at: HashMap<String, Timestamp> = HashMap::new();
        within(FLOW, "both drifted nodes replaced", || {
            let claims = stack.nodeclaims();
            for c in &claims {
                if let Some(t) = &c.metadata.deletion_timestamp {
                    deleted_at.entry(c.name().to_owned()).or_insert(t.0);
                }
            }
            let live: Vec<&NodeClaim> = claims
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .collect();
            live.len() == 2
                && live.iter().all(|c| instance_type(c) == MEDIUM)
                && claims.len() == 2
                && stack.running_now("web")
        })
        .await;

        let commands = stack.commands();
        assert_eq!(
            commands.len(),
            2,
            "one command per drifted node: {commands:?}"
        );
        assert!(
            commands
                .iter()
                .all(|(m, nodes)| *m == Method::Drift && nodes.len() == 1)
        );
        let replaced: BTreeSet<String> = commands.iter().flat_map(|(_, n)| n.clone()).collect();
        assert_eq!(replaced, old_nodes);

        let new_claims = stack.live_claims();
        let new_nodes: BTreeSet<String> = new_claims.iter().map(node_name).collect();
        assert_eq!(stack.running("web", 2).await, new_nodes, "the pods moved");
        // Each drifted node went only after a replacement had initialized.
        let mut initialized: Vec<Timestamp> = new_claims
            .iter()
            .map(|c| {
                c.conditions()
                    .iter()
                    .find(|c| c.type_ == types::INITIALIZED && c.is_true())
                    .map(|c| c.last_transition_time.0)
                    .expect("replacement initialized")
            })
            .collect();
        initialized.sort();
        let mut deletions: Vec<Timestamp> =
            old_claims.iter().map(|c| deleted_at[c.name()]).collect();
        deletions.sort();
        for (init, deleted) in initialized.iter().zip(&deletions) {
            assert!(init <= deleted, "{init} > {deleted}");
        }
        for old in &old_claims {
            assert!(
                !events_about(&stack, "DisruptionTerminating", old.name()).is_empty(),
                "DisruptionTerminating on {}",
                old.name()
            );
        }
        for new in &new_claims {
            assert!(
                !events_about(&stack, "DisruptionLaunching", new.name()).is_empty(),
                "DisruptionLaunching on {}",
                new.name()
            );
        }
        stack.stop().await;
    });
}
