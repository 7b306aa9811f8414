use super::*;
use crate::scheduling::testing::{ZONES, instance_type};
use serde_json::json;

fn overlay(name: &str, spec: serde_json::Value) -> NodeOverlay {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a valid NodeOverlay")
}

fn types() -> Vec<InstanceType> {
    vec![
        instance_type("small", 2, 4, 10),
        instance_type("large", 8, 32, 50),
    ]
}

fn evaluate_one(overlays: &[NodeOverlay], types: &[InstanceType]) -> Overlays {
    let labels = BTreeMap::from([("team".to_owned(), "a".to_owned())]);
    evaluate(
        overlays,
        &[PoolTypes {
            name: "default",
            labels: &labels,
            types,
            zones: None,
        }],
    )
}

fn price(types: &[InstanceType], name: &str, zone: &str, ct: &str) -> f64 {
    types
        .iter()
        .find(|t| t.name == name)
        .and_then(|t| {
            t.offerings
                .iter()
                .find(|o| o.zone == zone && o.capacity_type.as_str() == ct)
        })
        .map(|o| o.price)
        .expect("offering")
}

#[test]
fn price_changes_parse_and_apply_as_upstream() {
    assert_eq!(PriceChange::parse("0.25"), Ok(PriceChange::Set(0.25)));
    assert_eq!(PriceChange::parse("+0.5"), Ok(PriceChange::Add(0.5)));
    assert_eq!(PriceChange::parse("-15%"), Ok(PriceChange::Percent(-15.0)));
    assert!((PriceChange::Percent(-15.0).apply(2.0) - 1.7).abs() < 1e-9);
    assert!((PriceChange::Add(0.5).apply(1.0) - 1.5).abs() < 1e-9);
    assert_eq!(PriceChange::Add(-5.0).apply(1.0), 0.0, "never below zero");
    assert_eq!(PriceChange::Percent(-100.0).apply(3.0), 0.0);
    assert!(PriceChange::parse("+x").is_err());
}

#[test]
fn a_price_overlay_reprices_only_the_offerings_it_selects() {
    let types = types();
    let before = price(&types, "small", ZONES[0], "spot");
    let overlays = evaluate_one(
        &[overlay(
            "spot-discount",
            json!({"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["small"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
             "priceAdjustment": "-50%"}),
        )],
        &types,
    );
    assert_eq!(overlays.verdicts["spot-discount"], Verdict::Applied);
    let shared: Arc<[InstanceType]> = types.into();
    let after = overlays.apply("default", &shared);
    assert!((price(&after, "small", ZONES[0], "spot") - before / 2.0).abs() < 1e-9);
    assert_eq!(
        price(&after, "small", ZONES[0], "on-demand"),
        price(&shared, "small", ZONES[0], "on-demand")
    );
    assert_eq!(
        price(&after, "large", ZONES[0], "spot"),
        price(&shared, "large", ZONES[0], "spot")
    );
    // Another pool is untouched, and shares the list rather than copying it.
    let other = overlays.apply("other", &shared);
    assert!(Arc::ptr_eq(&other, &shared));
}

#[test]
fn requirements_match_the_pools_name_and_template_labels() {
    let types = types();
    let on_team_b = overlay(
        "team-b",
        json!({"requirements": [{"key": "team", "operator": "In", "values": ["b"]}], "price": "9"}),
    );
    let on_pool = overlay(
        "pool",
        json!({"requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}], "price": "9"}),
    );
    let overlays = evaluate_one(&[on_team_b, on_pool.clone()], &types);
    let shared: Arc<[InstanceType]> = types.into();
    let after = overlays.apply("default", &shared);
    assert!(
        after
            .iter()
            .flat_map(|t| &t.offerings)
            .all(|o| o.price == 9.0)
    );
    let only_team_b = evaluate_one(
        &[overlay(
            "team-b",
            json!({"requirements": [{"key": "team", "operator": "In", "values": ["b"]}], "price": "9"}),
        )],
        &shared,
    );
    assert!(only_team_b.is_empty(), "team=a pool: nothing selected");
    assert_eq!(only_team_b.verdicts["team-b"], Verdict::Applied);
}

#[test]
fn the_heavier_overlay_prices_first_and_equal_weights_conflict() {
    let types = types();
    let select_small =
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["small"]}]);
    let heavy = overlay(
        "heavy",
        json!({"requirements": select_small, "price": "1", "weight": 20}),
    );
    let light = overlay(
        "light",
        json!({"requirements": select_small, "price": "2", "weight": 10}),
    );
    let overlays = evaluate_one(&[light.clone(), heavy.clone()], &types);
    assert_eq!(overlays.verdicts["heavy"], Verdict::Applied);
    assert_eq!(overlays.verdicts["light"], Verdict::Applied);
    let shared: Arc<[InstanceType]> = types.into();
    let after = overlays.apply("default", &shared);
    assert_eq!(price(&after, "small", ZONES[1], "on-demand"), 1.0);

    let twin = overlay(
        "twin",
        json!({"requirements": select_small, "price": "3", "weight": 20}),
    );
    let overlays = evaluate_one(&[heavy, twin], &shared);
    // Equal weights: the name later in the alphabet goes first and wins; the other conflicts.
    assert_eq!(overlays.verdicts["twin"], Verdict::Applied);
    assert_eq!(overlays.verdicts["heavy"], Verdict::Conflict);
    let after = overlays.apply("default", &shared);
    assert_eq!(price(&after, "small", ZONES[1], "on-demand"), 3.0);
}

#[test]
fn capacity_overlays_merge_and_conflict_on_the_same_resource_at_the_same_weight() {
    let types = types();
    let all = json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]);
    let gpus = overlay(
        "gpus",
        json!({"requirements": all, "capacity": {"example.com/gpu": "2"}, "weight": 5}),
    );
    let licences = overlay(
        "licences",
        json!({"requirements": all, "capacity": {"example.com/licence": "1"}, "weight": 5}),
    );
    let overlays = evaluate_one(&[gpus.clone(), licences], &types);
    assert_eq!(overlays.verdicts["gpus"], Verdict::Applied);
    assert_eq!(overlays.verdicts["licences"], Verdict::Applied);
    let shared: Arc<[InstanceType]> = types.into();
    let after = overlays.apply("default", &shared);
    for it in after.iter() {
        assert_eq!(
            it.capacity.get("example.com/gpu"),
            Quantity::parse("2").ok()
        );
        assert_eq!(
            it.capacity.get("example.com/licence"),
            Quantity::parse("1").ok()
        );
        assert!(it.allocatable().contains("example.com/gpu"));
    }
    let more_gpus = overlay(
        "more-gpus",
        json!({"requirements": all, "capacity": {"example.com/gpu": "4"}, "weight": 5}),
    );
    let overlays = evaluate_one(&[gpus, more_gpus], &shared);
    assert_eq!(overlays.verdicts["more-gpus"], Verdict::Applied);
    assert_eq!(overlays.verdicts["gpus"], Verdict::Conflict);
}

#[test]
fn invalid_overlays_are_reported_and_change_nothing() {
    let types = types();
    let overlays = evaluate_one(
        &[
            overlay(
                "restricted",
                json!({"requirements": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}], "price": "1"}),
            ),
            overlay("cpu", json!({"requirements": [], "capacity": {"cpu": "4"}})),
        ],
        &types,
    );
    assert!(matches!(
        overlays.verdicts["restricted"],
        Verdict::Invalid(_)
    ));
    assert!(matches!(&overlays.verdicts["cpu"], Verdict::Invalid(m) if m.contains("restricted")));
    assert!(overlays.is_empty());
}

#[test]
fn a_price_makes_a_type_without_a_public_price_usable_in_the_classs_zones() {
    let mut preview = instance_type("preview", 4, 16, 20);
    for offering in &mut preview.offerings {
        offering.price = 0.0;
        offering.available = false;
    }
    let types = vec![preview];
    let labels = BTreeMap::new();
    let overlays = evaluate(
        &[overlay(
            "price-preview",
            json!({"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["preview"]}], "price": "0.42"}),
        )],
        &[PoolTypes {
            name: "default",
            labels: &labels,
            types: &types,
            zones: Some(BTreeSet::from([ZONES[0].to_owned()])),
        }],
    );
    let shared: Arc<[InstanceType]> = types.into();
    let after = overlays.apply("default", &shared);
    let available: Vec<&str> = after[0]
        .available_offerings()
        .map(|o| o.zone.as_str())
        .collect();
    assert_eq!(
        available,
        [ZONES[0], ZONES[0]],
        "spot and on-demand in the class's zone only"
    );
    assert!(after[0].available_offerings().all(|o| o.price == 0.42));
}

#[test]
fn ordering_is_weight_then_name_descending() {
    let a = overlay("a", json!({"requirements": [], "weight": 1}));
    let b = overlay("b", json!({"requirements": [], "weight": 1}));
    let c = overlay("c", json!({"requirements": []}));
    let d = overlay("d", json!({"requirements": [], "weight": 7}));
    let mut ordered = vec![&a, &c, &b, &d];
    order(&mut ordered);
    let names: Vec<&str> = ordered.iter().map(|o| o.name()).collect();
    assert_eq!(names, ["d", "b", "a", "c"]);
}
