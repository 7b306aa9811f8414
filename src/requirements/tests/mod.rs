//! Unit tests of the requirements algebra: upstream's operator-pair tables, conversions,
//! compatibility rules and error texts.

mod tables;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec,
    PreferredSchedulingTerm,
};

use super::*;
use crate::labels;

fn sample(name: &str, key: &str) -> Requirement {
    let (base, flexible) = name.strip_suffix('~').map_or((name, false), |b| (b, true));
    let (operator, values): (Operator, &[&str]) = match base {
        "exists" => (Operator::Exists, &[]),
        "doesNotExist" => (Operator::DoesNotExist, &[]),
        "inA" => (Operator::In, &["A"]),
        "inB" => (Operator::In, &["B"]),
        "inAB" => (Operator::In, &["A", "B"]),
        "notInA" => (Operator::NotIn, &["A"]),
        "in1" => (Operator::In, &["1"]),
        "in9" => (Operator::In, &["9"]),
        "in19" => (Operator::In, &["1", "9"]),
        "notIn12" => (Operator::NotIn, &["1", "2"]),
        "greaterThan1" => (Operator::Gt, &["1"]),
        "greaterThan9" => (Operator::Gt, &["9"]),
        "lessThan1" => (Operator::Lt, &["1"]),
        "lessThan9" => (Operator::Lt, &["9"]),
        other => panic!("no sample named {other}"),
    };
    let min_values = flexible.then_some(if values.len() == 2 { 2 } else { 1 });
    Requirement::new(key, operator, values, min_values).expect("samples are valid")
}

fn named(name: &str) -> Requirement {
    sample(name, "key")
}

fn zone(name: &str) -> Requirements {
    if name == "unconstrained" {
        return Requirements::new();
    }
    Requirements::from_iter([sample(name, labels::ZONE)])
}

const SAMPLES: [&str; 14] = [
    "exists",
    "doesNotExist",
    "inA",
    "inB",
    "inAB",
    "notInA",
    "in1",
    "in9",
    "in19",
    "notIn12",
    "greaterThan1",
    "greaterThan9",
    "lessThan1",
    "lessThan9",
];

#[test]
fn intersections_match_upstream_table() {
    assert_eq!(tables::INTERSECTIONS.len(), 542);
    for (existing, incoming, expected) in tables::INTERSECTIONS {
        let (a, b) = (named(existing), named(incoming));
        let result = a.intersection(&b);
        assert_eq!(result.to_string(), *expected, "{existing} ∩ {incoming}");
        assert_eq!(
            a.has_intersection(&b),
            result.operator() != Operator::DoesNotExist,
            "has_intersection({existing}, {incoming})"
        );
    }
}

#[test]
fn intersection_results_equal_freshly_built_requirements() {
    let cases = [
        ("inAB", "notInA", Requirement::in_values("key", ["B"])),
        (
            "notInA",
            "notIn12",
            Requirement::not_in("key", ["1", "2", "A"]),
        ),
        ("inA", "inB", Requirement::does_not_exist("key")),
        (
            "greaterThan9",
            "lessThan1",
            Requirement::does_not_exist("key"),
        ),
        ("greaterThan1", "in19", Requirement::in_values("key", ["9"])),
        (
            "greaterThan1",
            "greaterThan9",
            Requirement::at_least("key", 10),
        ),
    ];
    for (a, b, expected) in cases {
        assert_eq!(named(a).intersection(&named(b)), expected, "{a} ∩ {b}");
    }
}

#[test]
fn has_matches_upstream_table() {
    assert_eq!(tables::HAS.len(), 70);
    for (name, value, expected) in tables::HAS {
        assert_eq!(named(name).has(value), *expected, "{name}.has({value})");
    }
}

#[test]
fn operators_and_lengths() {
    let expected = [
        ("exists", Operator::Exists, usize::MAX),
        ("doesNotExist", Operator::DoesNotExist, 0),
        ("inA", Operator::In, 1),
        ("inAB", Operator::In, 2),
        ("notInA", Operator::NotIn, usize::MAX - 1),
        ("in19", Operator::In, 2),
        ("notIn12", Operator::NotIn, usize::MAX - 2),
        ("greaterThan1", Operator::Exists, usize::MAX),
        ("lessThan9", Operator::Exists, usize::MAX),
    ];
    for (name, operator, len) in expected {
        let r = named(name);
        assert_eq!(r.operator(), operator, "{name}");
        assert_eq!(r.len(), len, "{name}");
        assert_eq!(r.is_empty(), len == 0, "{name}");
    }
}

#[test]
fn any_picks_an_allowed_value() {
    assert!(
        named("exists")
            .any()
            .is_some_and(|v| v.parse::<i64>().is_ok())
    );
    assert_eq!(named("doesNotExist").any(), None);
    assert_eq!(named("inA").any().as_deref(), Some("A"));
    assert_eq!(named("inAB").any().as_deref(), Some("A"));
    assert_eq!(named("in19").any().as_deref(), Some("1"));
    for _ in 0..100 {
        let v = named("notIn12").any().expect("notIn12 allows integers");
        assert!(named("notIn12").has(&v), "{v}");
        let v: i64 = named("greaterThan9")
            .any()
            .expect("bounded")
            .parse()
            .expect("integer");
        assert!(v >= 10);
        let v: i64 = named("lessThan9")
            .any()
            .expect("bounded")
            .parse()
            .expect("integer");
        assert!((0..=8).contains(&v));
    }
    assert_eq!(named("lessThan1").any().as_deref(), Some("0"));
    // Every integer of a tiny range excluded but one: the scan must find it.
    let narrow = Requirement::at_least("key", 2)
        .intersection(&Requirement::at_most("key", 4))
        .intersection(&Requirement::not_in("key", ["2", "4"]));
    assert_eq!(narrow.any().as_deref(), Some("3"));
    let none_left = narrow.intersection(&Requirement::not_in("key", ["3"]));
    assert_eq!(none_left.any(), None);
    assert_eq!(Requirement::at_most("key", -1).any(), None);
}

#[test]
fn any_differs_between_calls_for_open_requirements() {
    let values: std::collections::BTreeSet<String> =
        (0..20).filter_map(|_| named("exists").any()).collect();
    assert!(values.len() > 1, "{values:?}");
}

#[test]
fn display_matches_upstream() {
    let cases = [
        (named("exists"), "key Exists"),
        (named("doesNotExist"), "key DoesNotExist"),
        (named("inAB"), "key In [A B]"),
        (named("notIn12"), "key NotIn [1 2]"),
        (named("greaterThan1"), "key Exists >=2"),
        (named("lessThan9"), "key Exists <=8"),
        (
            named("greaterThan1").intersection(&named("lessThan9")),
            "key Exists >=2 <=8",
        ),
        (
            named("greaterThan9").intersection(&named("lessThan1")),
            "key DoesNotExist",
        ),
        (named("inAB~"), "key In [A B] minValues 2"),
        (
            Requirement::in_values("key", ["a", "b", "c", "d", "e", "f", "g"]),
            "key In [a b c d e and 2 others]",
        ),
    ];
    for (requirement, expected) in cases {
        assert_eq!(requirement.to_string(), expected);
    }
}

fn selector(
    key: &str,
    operator: Operator,
    values: &[&str],
    min_values: Option<u32>,
) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.to_owned(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: min_values.map(i64::from),
    }
}

#[test]
fn node_selector_requirement_conversion() {
    let cases = [
        ("exists", Operator::Exists, &[][..]),
        ("doesNotExist", Operator::DoesNotExist, &[]),
        ("inAB", Operator::In, &["A", "B"]),
        ("notInA", Operator::NotIn, &["A"]),
        ("in19", Operator::In, &["1", "9"]),
        ("notIn12", Operator::NotIn, &["1", "2"]),
        ("greaterThan1", Operator::Gte, &["2"]),
        ("greaterThan9", Operator::Gte, &["10"]),
        ("lessThan1", Operator::Lte, &["0"]),
        ("lessThan9", Operator::Lte, &["8"]),
    ];
    for (name, operator, values) in cases {
        assert_eq!(
            named(name).to_node_selector_requirement(),
            selector("key", operator, values, None)
        );
        let flexible = format!("{name}~");
        let min_values = named(&flexible).min_values();
        assert!(min_values.is_some());
        assert_eq!(
            named(&flexible).to_node_selector_requirement(),
            selector("key", operator, values, min_values)
        );
    }
}

#[test]
fn requirements_convert_to_node_selector_requirements_per_key() {
    let requirements: Requirements = SAMPLES.iter().map(|name| sample(name, name)).collect();
    let converted = requirements.node_selector_requirements();
    assert_eq!(converted.len(), 14);
    assert!(converted.contains(&selector("greaterThan9", Operator::Gte, &["10"], None)));
    assert!(converted.contains(&selector("inAB", Operator::In, &["A", "B"], None)));

    let both = Requirements::from_iter([
        Requirement::at_least("cpu", 8),
        Requirement::at_most("cpu", 8),
    ]);
    assert_eq!(
        both.node_selector_requirements(),
        [
            selector("cpu", Operator::Gte, &["8"], None),
            selector("cpu", Operator::Lte, &["8"], None)
        ]
    );
    // A bounded NotIn keeps its exclusions, which upstream's single form would drop.
    let bounded = named("notIn12").intersection(&named("greaterThan1"));
    assert_eq!(
        bounded.to_node_selector_requirements(),
        [
            selector("key", Operator::Gte, &["2"], None),
            selector("key", Operator::NotIn, &["2"], None)
        ]
    );
}

#[test]
fn gte_and_lte_are_inclusive() {
    let gte2 = Requirement::new("key", Operator::Gte, ["2"], None).expect("valid");
    let lte8 = Requirement::new("key", Operator::Lte, ["8"], None).expect("valid");
    assert!(gte2.has("2") && gte2.has("100") && !gte2.has("1"));
    assert!(lte8.has("8") && lte8.has("0") && !lte8.has("9"));
    let both = gte2.intersection(&lte8);
    assert!(both.has("2") && both.has("8") && !both.has("1") && !both.has("9"));
    assert_eq!(
        gte2,
        Requirement::new("key", Operator::Gt, ["1"], None).expect("valid")
    );
    assert_eq!(
        lte8,
        Requirement::new("key", Operator::Lt, ["9"], None).expect("valid")
    );

    let gt4_gte5 = Requirement::new("key", Operator::Gt, ["4"], None)
        .expect("valid")
        .intersection(&Requirement::at_least("key", 5));
    assert_eq!(
        gt4_gte5.to_node_selector_requirement(),
        selector("key", Operator::Gte, &["5"], None)
    );
    let gt5_gte5 = Requirement::new("key", Operator::Gt, ["5"], None)
        .expect("valid")
        .intersection(&Requirement::at_least("key", 5));
    assert_eq!(
        gt5_gte5.to_node_selector_requirement(),
        selector("key", Operator::Gte, &["6"], None)
    );
    let lt5_lte5 = Requirement::new("key", Operator::Lt, ["5"], None)
        .expect("valid")
        .intersection(&Requirement::at_most("key", 5));
    assert_eq!(
        lt5_lte5.to_node_selector_requirement(),
        selector("key", Operator::Lte, &["4"], None)
    );
    assert!(Requirement::at_least("key", 0).has("0") && !Requirement::at_least("key", 0).has("-1"));
}

#[test]
fn unsatisfiable_bounds_become_does_not_exist() {
    let gt_max =
        Requirement::new("key", Operator::Gt, [i64::MAX.to_string()], None).expect("valid");
    assert_eq!(gt_max.operator(), Operator::DoesNotExist);
    assert_eq!(gt_max.len(), 0);
    let lt_min =
        Requirement::new("key", Operator::Lt, [i64::MIN.to_string()], None).expect("valid");
    assert_eq!(lt_min.operator(), Operator::DoesNotExist);
}

#[test]
fn constructor_rejects_malformed_input() {
    assert_eq!(
        Requirement::new("cpu", Operator::Gt, ["1", "2"], None),
        Err(RequirementError::BoundValueCount {
            key: "cpu".into(),
            operator: Operator::Gt,
            count: 2
        })
    );
    assert_eq!(
        Requirement::new("cpu", Operator::Lt, Vec::<String>::new(), None),
        Err(RequirementError::BoundValueCount {
            key: "cpu".into(),
            operator: Operator::Lt,
            count: 0
        })
    );
    let err = Requirement::new("cpu", Operator::Gte, ["two"], None).expect_err("not an integer");
    assert_eq!(
        err.to_string(),
        "requirement on key \"cpu\": operator Gte takes an integer value, got \"two\""
    );
    let err = Requirement::parse("cpu", "Equals", ["1"], None).expect_err("unknown operator");
    assert!(
        err.to_string()
            .starts_with("requirement on key \"cpu\": unknown operator \"Equals\""),
        "{err}"
    );
    assert_eq!(
        Requirement::parse("cpu", "NotIn", ["1"], Some(2)),
        Ok(Requirement::not_in("cpu", ["1"]).with_min_values(Some(2)))
    );
}

fn aliased_labels() -> BTreeMap<String, String> {
    [
        labels::ZONE_BETA,
        labels::REGION_BETA,
        labels::ARCH_BETA,
        labels::OS_BETA,
        labels::INSTANCE_TYPE_BETA,
    ]
    .into_iter()
    .map(|k| (k.to_owned(), "test".to_owned()))
    .collect()
}

fn expressions(labels: &BTreeMap<String, String>) -> Vec<NodeSelectorRequirement> {
    labels
        .iter()
        .map(|(k, v)| NodeSelectorRequirement {
            key: k.clone(),
            operator: "In".into(),
            values: Some(vec![v.clone()]),
        })
        .collect()
}

fn term(expressions: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(expressions),
        match_fields: None,
    }
}

fn pod(
    node_selector: Option<BTreeMap<String, String>>,
    required: Vec<NodeSelectorTerm>,
    preferred: Vec<(i32, NodeSelectorTerm)>,
) -> Pod {
    Pod {
        spec: Some(PodSpec {
            node_selector,
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: (!required.is_empty())
                        .then_some(NodeSelector {
                            node_selector_terms: required,
                        }),
                    preferred_during_scheduling_ignored_during_execution: Some(
                        preferred
                            .into_iter()
                            .map(|(weight, preference)| PreferredSchedulingTerm {
                                weight,
                                preference,
                            })
                            .collect(),
                    ),
                }),
                ..Affinity::default()
            }),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

#[test]
fn every_source_normalises_aliased_labels() {
    let selector = aliased_labels();
    let exprs = expressions(&selector);
    let stable = [
        labels::ARCH,
        labels::OS,
        labels::INSTANCE_TYPE,
        labels::REGION,
        labels::ZONE,
    ];
    let mut stable_sorted = stable.to_vec();
    stable_sorted.sort_unstable();
    let sources = [
        Requirements::from_labels(&selector),
        Requirements::from_node_selector_requirements(&exprs).expect("valid"),
        Requirements::from_pod(&pod(
            Some(selector.clone()),
            vec![term(exprs.clone())],
            vec![(1, term(exprs.clone()))],
        ))
        .expect("valid"),
    ];
    for requirements in sources {
        let mut keys: Vec<&str> = requirements.keys().collect();
        keys.sort_unstable();
        assert_eq!(keys, stable_sorted);
        assert!(
            requirements
                .get(labels::ZONE)
                .is_some_and(|r| r.has("test"))
        );
        assert!(!requirements.contains_key(labels::ZONE_BETA));
    }
}

fn expr(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: Some(values.iter().map(|v| v.to_string()).collect()),
    }
}

#[test]
fn pod_requirements_take_first_required_term_and_heaviest_preference() {
    let selector = BTreeMap::from([("team".to_owned(), "a".to_owned())]);
    let p = pod(
        Some(selector),
        vec![
            term(vec![expr(labels::ZONE, "In", &["z1", "z2"])]),
            term(vec![expr(labels::ZONE, "In", &["z3"])]),
        ],
        vec![
            (
                10,
                term(vec![expr(labels::CAPACITY_TYPE, "In", &["on-demand"])]),
            ),
            (50, term(vec![expr(labels::ZONE, "In", &["z2"])])),
            (50, term(vec![expr(labels::ARCH, "In", &["arm64"])])),
        ],
    );
    let all = Requirements::from_pod(&p).expect("valid");
    assert_eq!(
        all.to_string(),
        "team In [a], topology.kubernetes.io/zone In [z2]"
    );
    let strict = Requirements::from_pod_strict(&p).expect("valid");
    assert_eq!(
        strict.to_string(),
        "team In [a], topology.kubernetes.io/zone In [z1 z2]"
    );
    assert!(has_preferred_node_affinity(&p));
    let preferred = p
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .expect("the pod has preferences");
    assert_eq!(heaviest_preferred_term(preferred), Some(1));
    assert_eq!(heaviest_preferred_term(&[]), None);
    assert!(!has_preferred_node_affinity(&Pod::default()));
    assert!(
        Requirements::from_pod(&Pod::default())
            .expect("valid")
            .is_empty()
    );
}

#[test]
fn pod_requirements_report_malformed_expressions() {
    let p = pod(None, vec![term(vec![expr("cpu", "Gt", &["many"])])], vec![]);
    let err = Requirements::from_pod(&p).expect_err("Gt needs an integer");
    assert_eq!(
        err,
        RequirementError::ParseBound {
            key: "cpu".into(),
            operator: Operator::Gt,
            value: "many".into()
        }
    );
    let p = pod(
        None,
        vec![],
        vec![(1, term(vec![expr("cpu", "Equal", &["1"])]))],
    );
    assert!(Requirements::from_pod(&p).is_err());
    assert!(
        Requirements::from_pod_strict(&p).is_ok(),
        "strict ignores preferences"
    );
}

#[test]
fn compatibility_matches_upstream_tables() {
    assert_eq!(tables::COMPATIBLE_ALLOWING_WELL_KNOWN.len(), 225);
    for (receiver, incoming, expected) in tables::COMPATIBLE_ALLOWING_WELL_KNOWN {
        let (a, b) = (zone(receiver), zone(incoming));
        let result = a.compatible(&b, AllowUndefined::WellKnownLabels);
        assert_eq!(
            result.is_ok(),
            *expected,
            "{receiver}.compatible({incoming}): {result:?}"
        );
        assert_eq!(
            a.is_compatible(&b, AllowUndefined::WellKnownLabels),
            *expected
        );
    }
    assert_eq!(tables::COMPATIBLE_STRICTLY.len(), 225);
    for (receiver, incoming, expected) in tables::COMPATIBLE_STRICTLY {
        let (a, b) = (zone(receiver), zone(incoming));
        let result = a.compatible(&b, AllowUndefined::Nothing);
        assert_eq!(
            result.is_ok(),
            *expected,
            "{receiver}.compatible({incoming}) strictly: {result:?}"
        );
        assert_eq!(a.is_compatible(&b, AllowUndefined::Nothing), *expected);
    }
}

#[test]
fn undefined_label_errors_hint_at_typos() {
    let cases = [
        ("zone", labels::ZONE),
        ("region", labels::REGION),
        ("nodepool", labels::NODEPOOL),
        ("instance-type", labels::INSTANCE_TYPE),
        ("arch", labels::ARCH),
        ("capacity-type", labels::CAPACITY_TYPE),
        ("topology.kubernetesio/zone", labels::ZONE),
        ("node.io/zone", labels::ZONE),
        ("topology.kubernetes.io/regio", labels::REGION),
        ("node.kubernetes.io/region", labels::REGION),
        ("karpenter/nodepool", labels::NODEPOOL),
    ];
    for (bad, meant) in cases {
        let incoming = Requirements::from_iter([Requirement::exists(bad)]);
        let err = Requirements::new()
            .compatible(&incoming, AllowUndefined::WellKnownLabels)
            .expect_err("undefined");
        assert_eq!(
            err.to_string(),
            format!("label \"{bad}\" does not have known values (typo of \"{meant}\"?)")
        );
    }
    let incoming = Requirements::from_iter([Requirement::exists("deployment")]);
    let err = Requirements::new()
        .compatible(&incoming, AllowUndefined::Nothing)
        .expect_err("undefined");
    assert_eq!(
        err.to_string(),
        "label \"deployment\" does not have known values"
    );
    // Keys the receiver defines are candidates too.
    let receiver = Requirements::from_iter([Requirement::in_values("example.com/team", ["a"])]);
    let incoming = Requirements::from_iter([Requirement::exists("team")]);
    let err = receiver
        .compatible(&incoming, AllowUndefined::Nothing)
        .expect_err("undefined");
    assert_eq!(
        err.to_string(),
        "label \"team\" does not have known values (typo of \"example.com/team\"?)"
    );
}

#[test]
fn conflicts_name_the_key_and_both_sides() {
    let existing = Requirements::from_iter([
        Requirement::in_values(labels::CAPACITY_TYPE, [labels::CAPACITY_TYPE_ON_DEMAND]),
        Requirement::in_values(labels::ZONE, ["z1"]),
        Requirement::in_values(labels::ARCH, ["amd64"]),
    ]);
    let incoming = Requirements::from_iter([
        Requirement::in_values(labels::CAPACITY_TYPE, [labels::CAPACITY_TYPE_SPOT]),
        Requirement::in_values(labels::ZONE, ["z2"]),
        Requirement::in_values(labels::ARCH, ["amd64"]),
    ]);
    let err = existing.intersects(&incoming).expect_err("conflicting");
    assert_eq!(
        err.to_string(),
        "key karpenter.sh/capacity-type, karpenter.sh/capacity-type In [spot] not in karpenter.sh/capacity-type In [on-demand]; \
         key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [z2] not in topology.kubernetes.io/zone In [z1]"
    );
    let Incompatible::Conflicts(conflicts) = &err else {
        panic!("expected conflicts, got {err:?}")
    };
    assert_eq!(conflicts[0].key, labels::CAPACITY_TYPE);
    assert_eq!(
        existing.compatible(&incoming, AllowUndefined::WellKnownLabels),
        Err(err)
    );
}

#[test]
fn undefined_keys_are_checked_before_conflicts() {
    let existing = Requirements::from_iter([Requirement::in_values(labels::ZONE, ["z1"])]);
    let incoming = Requirements::from_iter([
        Requirement::in_values(labels::ZONE, ["z2"]),
        Requirement::in_values("team", ["a"]),
    ]);
    assert!(matches!(
        existing.compatible(&incoming, AllowUndefined::WellKnownLabels),
        Err(Incompatible::UndefinedLabel { key, .. }) if key == "team"
    ));
    assert!(
        existing
            .intersects(&Requirements::from_iter([Requirement::in_values(
                "team",
                ["a"]
            )]))
            .is_ok()
    );
}

#[test]
fn lookups_agree_whichever_side_is_larger() {
    // Enough keys on the receiver to take the binary-search path.
    let mut receiver: Requirements = (0..40)
        .map(|i| Requirement::in_values(&format!("k{i:02}"), ["v"]))
        .collect();
    receiver.add(Requirement::in_values(labels::ZONE, ["z1"]));
    let fits = Requirements::from_iter([Requirement::in_values("k07", ["v", "w"])]);
    let clashes = Requirements::from_iter([Requirement::in_values("k07", ["w"])]);
    let undefined = Requirements::from_iter([Requirement::in_values("k99", ["v"])]);
    for allow in [AllowUndefined::Nothing, AllowUndefined::WellKnownLabels] {
        assert!(receiver.is_compatible(&fits, allow));
        assert!(!receiver.is_compatible(&clashes, allow));
        assert!(!receiver.is_compatible(&undefined, allow));
        // The other way round the receiver's custom keys are undefined on `fits`.
        assert!(!fits.is_compatible(&receiver, allow));
    }
    assert!(receiver.has_intersection(&undefined));
}

#[test]
fn add_intersects_and_keeps_keys_sorted() {
    let mut r = Requirements::new();
    r.add(Requirement::in_values("b", ["1", "2"]));
    r.add(Requirement::exists("a"));
    r.add(Requirement::not_in("b", ["1"]).with_min_values(Some(1)));
    let sorted: Vec<&str> = r.sorted().iter().map(|x| x.key()).collect();
    assert_eq!(sorted, ["a", "b"]);
    assert_eq!(
        r.get("b").map(ToString::to_string).as_deref(),
        Some("b In [2] minValues 1")
    );
    assert!(r.has_min_values());
    let mut other = Requirements::new();
    other.add_all(&r);
    assert_eq!(other, r);
    assert_eq!(r.remove("a").map(|x| x.operator()), Some(Operator::Exists));
    assert_eq!(r.len(), 1);
}

#[test]
fn requirements_render_in_key_order_without_hostname() {
    let mut r: Requirements = SAMPLES.iter().map(|name| sample(name, name)).collect();
    r.add(Requirement::in_values(labels::HOSTNAME, ["node-1"]));
    assert_eq!(
        r.to_string(),
        "doesNotExist DoesNotExist, exists Exists, greaterThan1 Exists >=2, greaterThan9 Exists >=10, \
         in1 In [1], in19 In [1 9], in9 In [9], inA In [A], inAB In [A B], inB In [B], \
         lessThan1 Exists <=0, lessThan9 Exists <=8, notIn12 NotIn [1 2], notInA NotIn [A]"
    );
}

#[test]
fn node_labels_from_requirements() {
    let r = Requirements::from_iter([
        Requirement::in_values("team", ["b", "a"]),
        Requirement::exists("example.com/any"),
        Requirement::does_not_exist("example.com/none"),
        Requirement::in_values(labels::ZONE, ["z1"]),
        Requirement::in_values(labels::CAPACITY_TYPE, ["spot", "on-demand"]),
        Requirement::in_values(labels::HOSTNAME, ["h"]),
        Requirement::in_values(labels::REGISTERED, ["true"]),
    ]);
    let custom = r.labels();
    assert_eq!(
        custom.keys().collect::<Vec<_>>(),
        ["example.com/any", "team"]
    );
    assert_eq!(custom["team"], "a");
    assert!(custom["example.com/any"].parse::<i64>().is_ok());
    let pinned = r.single_value_labels();
    assert_eq!(
        pinned,
        BTreeMap::from([
            (labels::HOSTNAME.to_owned(), "h".to_owned()),
            (labels::REGISTERED.to_owned(), "true".to_owned()),
            (labels::ZONE.to_owned(), "z1".to_owned()),
        ])
    );
}

#[test]
fn min_values_requirement_json_shape() {
    let parsed: NodeSelectorRequirementWithMinValues = serde_json::from_str(
        r#"{"key":"karpenter.k8s.aws/instance-family","operator":"In","values":["m5","c5"],"minValues":2}"#,
    )
    .expect("valid JSON");
    assert_eq!(
        parsed,
        selector(
            labels::INSTANCE_FAMILY,
            Operator::In,
            &["m5", "c5"],
            Some(2)
        )
    );
    let exists: NodeSelectorRequirementWithMinValues =
        serde_json::from_str(r#"{"key":"a","operator":"Exists"}"#).expect("values are optional");
    assert_eq!(
        serde_json::to_string(&exists).expect("serialises"),
        r#"{"key":"a","operator":"Exists"}"#
    );
    let requirements = Requirements::from_requirements_with_min_values(&[parsed]).expect("valid");
    assert_eq!(
        requirements.to_string(),
        "karpenter.k8s.aws/instance-family In [c5 m5] minValues 2"
    );
}
