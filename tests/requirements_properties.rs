//! Property tests of the requirements algebra over small key and value domains, where
//! random requirements collide often: intersection is commutative, associative and exact
//! (a value is allowed by the intersection iff both sides allow it), compatibility agrees
//! with intersection, and conversion to node selector requirements round-trips.

use kerf::requirements::{AllowUndefined, Operator, Requirement, Requirements};
use proptest::prelude::*;

const VALUES: &[&str] = &["A", "B", "1", "2", "5", "9", "10", "-1", "03"];
const KEYS: &[&str] = &["a", "b", "c"];

/// Values to probe `has` with: the domain plus integers around every bound used.
fn probes() -> impl Iterator<Item = String> {
    VALUES
        .iter()
        .map(|v| v.to_string())
        .chain((-2..14).map(|n| n.to_string()))
        .chain(["x".to_owned(), String::new()])
}

fn simple(key: &'static str) -> impl Strategy<Value = Requirement> {
    (
        prop::sample::select(Operator::ALL.to_vec()),
        prop::collection::vec(prop::sample::select(VALUES), 0..4),
        -1i64..12,
        prop::option::of(1u32..4),
    )
        .prop_map(move |(operator, values, bound, min_values)| {
            let values = if operator.is_numeric() {
                vec![bound.to_string()]
            } else {
                values.iter().map(|v| v.to_string()).collect()
            };
            Requirement::new(key, operator, values, min_values)
                .expect("generated requirements are valid")
        })
}

/// Simple requirements and intersections of two or three, so bounded NotIn sets and
/// two-sided bounds appear too.
fn requirement(key: &'static str) -> impl Strategy<Value = Requirement> {
    prop::collection::vec(simple(key), 1..4).prop_map(|parts| {
        parts
            .iter()
            .skip(1)
            .fold(parts[0].clone(), |acc, r| acc.intersection(r))
    })
}

fn requirements() -> impl Strategy<Value = Requirements> {
    prop::collection::vec(
        (prop::sample::select(KEYS), any::<prop::sample::Index>()),
        0..4,
    )
    .prop_flat_map(|keys| {
        keys.into_iter()
            .map(|(key, _)| requirement(key))
            .collect::<Vec<_>>()
            .prop_map(|rs| rs.into_iter().collect::<Requirements>())
    })
}

fn allows_absence(r: &Requirement) -> bool {
    matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn intersection_is_commutative(a in requirement("k"), b in requirement("k")) {
        prop_assert_eq!(a.intersection(&b), b.intersection(&a));
    }

    #[test]
    fn intersection_is_associative(a in requirement("k"), b in requirement("k"), c in requirement("k")) {
        prop_assert_eq!(a.intersection(&b).intersection(&c), a.intersection(&b.intersection(&c)));
    }

    #[test]
    fn intersection_is_idempotent(a in requirement("k")) {
        prop_assert_eq!(a.intersection(&a), a);
    }

    #[test]
    fn intersection_allows_exactly_what_both_allow(a in requirement("k"), b in requirement("k")) {
        let both = a.intersection(&b);
        for value in probes() {
            prop_assert_eq!(both.has(&value), a.has(&value) && b.has(&value), "value {:?}: {} ∩ {} = {}", value, a, b, both);
        }
        prop_assert_eq!(both.min_values(), a.min_values().max(b.min_values()));
    }

    #[test]
    fn has_intersection_agrees_with_intersection(a in requirement("k"), b in requirement("k")) {
        let expected = a.intersection(&b).operator() != Operator::DoesNotExist;
        prop_assert_eq!(a.has_intersection(&b), expected);
        prop_assert_eq!(b.has_intersection(&a), expected);
    }

    #[test]
    fn set_operators_round_trip(a in requirement("k")) {
        if a.lower_bound().is_none() && a.upper_bound().is_none() {
            let rebuilt = Requirement::new(a.key(), a.operator(), a.values(), a.min_values()).expect("valid");
            prop_assert_eq!(&rebuilt, &a);
            let parsed = Requirement::parse(a.key(), a.operator().as_str(), a.values(), a.min_values()).expect("valid");
            prop_assert_eq!(parsed, a);
        } else {
            prop_assert_ne!(a.operator(), Operator::In);
            prop_assert_ne!(a.operator(), Operator::DoesNotExist);
        }
    }

    #[test]
    fn node_selector_requirements_round_trip(a in requirement("k")) {
        let rebuilt = Requirements::from_requirements_with_min_values(&a.to_node_selector_requirements()).expect("valid");
        prop_assert_eq!(rebuilt.len(), 1);
        prop_assert_eq!(rebuilt.get("k"), Some(&a));
    }

    #[test]
    fn any_is_allowed(a in requirement("k")) {
        match a.any() {
            Some(value) => prop_assert!(a.has(&value), "{} gave {:?}", a, value),
            None => prop_assert!(a.operator() != Operator::In),
        }
    }

    #[test]
    fn compatibility_agrees_with_intersection(existing in requirements(), incoming in requirements()) {
        let mut expected = true;
        let mut shared_ok = true;
        for r in &incoming {
            match existing.get(r.key()) {
                Some(e) => {
                    let fits = e.intersection(r).operator() != Operator::DoesNotExist || (allows_absence(e) && allows_absence(r));
                    expected &= fits;
                    shared_ok &= fits;
                }
                // Custom keys: only requirements a missing label satisfies may be undefined.
                None => expected &= allows_absence(r),
            }
        }
        for allow in [AllowUndefined::Nothing, AllowUndefined::WellKnownLabels] {
            prop_assert_eq!(existing.is_compatible(&incoming, allow), expected);
            prop_assert_eq!(existing.compatible(&incoming, allow).is_ok(), expected);
        }
        prop_assert_eq!(existing.has_intersection(&incoming), shared_ok);
        prop_assert_eq!(existing.intersects(&incoming).is_ok(), shared_ok);
    }

    #[test]
    fn adding_is_order_independent(parts in prop::collection::vec((prop::sample::select(KEYS), 0u8..1), 1..6)
        .prop_flat_map(|keys| keys.into_iter().map(|(k, _)| requirement(k)).collect::<Vec<_>>())) {
        let forwards: Requirements = parts.iter().cloned().collect();
        let backwards: Requirements = parts.iter().rev().cloned().collect();
        prop_assert_eq!(&forwards, &backwards);
        let mut merged = Requirements::new();
        for r in &parts {
            merged.add_all(&Requirements::from_iter([r.clone()]));
        }
        prop_assert_eq!(merged, forwards);
    }
}

#[test]
fn well_known_keys_may_be_undefined_only_when_allowed() {
    let incoming = Requirements::from_iter([Requirement::in_values(
        kerf::labels::INSTANCE_FAMILY,
        ["m5"],
    )]);
    assert!(Requirements::new().is_compatible(&incoming, AllowUndefined::WellKnownLabels));
    assert!(!Requirements::new().is_compatible(&incoming, AllowUndefined::Nothing));
}
