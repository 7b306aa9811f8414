//! Differential test of the scheduler's interned requirements algebra (`req.rs`) against the
//! public reference `crate::requirements`, which is validated against upstream's tables. Random
//! requirement sets over a small key and value domain are built in both representations; the
//! two must agree on intersections, membership, set compatibility and the rendered forms.

use proptest::prelude::*;

use crate::labels;
use crate::requirements::{AllowUndefined, Operator, Requirement, Requirements};
use crate::scheduling::req::{Op, Req, ReqSet, Vocab};
use crate::scheduling::types::NodeSelectorRequirementWithMinValues;

/// Custom and well-known keys, plus a deprecated alias that must normalise to the zone label.
const KEYS: &[&str] = &[
    "team",
    labels::ZONE,
    labels::INSTANCE_CPU,
    labels::ZONE_BETA,
];
const VALUES: &[&str] = &["a", "b", "c", "-1", "0", "1", "2", "3", "5"];
/// Values probed for membership, including some no requirement names.
const PROBES: &[&str] = &[
    "a", "b", "c", "z", "-2", "-1", "0", "1", "2", "3", "4", "5", "6",
];
const OPERATORS: &[Operator] = &[
    Operator::In,
    Operator::NotIn,
    Operator::Exists,
    Operator::DoesNotExist,
    Operator::Gt,
    Operator::Lt,
    Operator::Gte,
    Operator::Lte,
];

fn selector() -> impl Strategy<Value = NodeSelectorRequirementWithMinValues> {
    (
        prop::sample::select(KEYS),
        prop::sample::select(OPERATORS),
        prop::collection::vec(prop::sample::select(VALUES), 0..4),
        prop::option::of(1i64..4),
        prop::sample::select(&[-1i64, 0, 1, 2, 3, i64::MIN, i64::MAX][..]),
    )
        .prop_map(|(key, operator, values, min_values, bound)| {
            let values = match operator {
                Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                    vec![bound.to_string()]
                }
                _ => values.into_iter().map(str::to_owned).collect(),
            };
            NodeSelectorRequirementWithMinValues {
                key: key.to_owned(),
                operator,
                values,
                min_values,
            }
        })
}

fn selectors() -> impl Strategy<Value = Vec<NodeSelectorRequirementWithMinValues>> {
    prop::collection::vec(selector(), 0..5)
}

fn reference(selectors: &[NodeSelectorRequirementWithMinValues]) -> Requirements {
    selectors
        .iter()
        .map(|s| Requirement::try_from(s).expect("generated selectors are valid"))
        .collect()
}

fn interned(vocab: &mut Vocab, selectors: &[NodeSelectorRequirementWithMinValues]) -> ReqSet {
    let mut set = ReqSet::default();
    for s in selectors {
        let (key, req) = vocab.requirement(s).expect("generated selectors are valid");
        set.add(key, req, &vocab.interner);
    }
    set
}

fn operator_of(req: &Req) -> Operator {
    match req.op() {
        Op::In => Operator::In,
        Op::NotIn => Operator::NotIn,
        Op::Exists => Operator::Exists,
        Op::DoesNotExist => Operator::DoesNotExist,
    }
}

/// Public selectors in a canonical order, so the two renderings compare as sets.
fn canonical(
    mut out: Vec<NodeSelectorRequirementWithMinValues>,
) -> Vec<NodeSelectorRequirementWithMinValues> {
    for s in &mut out {
        s.values.sort();
    }
    out.sort_by(|a, b| {
        (&a.key, a.operator.as_str(), &a.values).cmp(&(&b.key, b.operator.as_str(), &b.values))
    });
    out
}

/// Both representations of one key's requirement say the same thing.
fn assert_same_requirement(
    reference: &Requirement,
    interned: &Req,
    vocab: &mut Vocab,
) -> Result<(), TestCaseError> {
    let key = vocab.intern(reference.key());
    prop_assert_eq!(operator_of(interned), reference.operator(), "{}", reference);
    prop_assert_eq!(interned.gte(), reference.lower_bound(), "{}", reference);
    prop_assert_eq!(interned.lte(), reference.upper_bound(), "{}", reference);
    prop_assert_eq!(interned.min_values, reference.min_values(), "{}", reference);
    for probe in PROBES {
        let sym = vocab.intern(probe);
        prop_assert_eq!(
            interned.has(sym, &vocab.interner),
            reference.has(probe),
            "{} has {}",
            reference,
            probe
        );
    }
    prop_assert_eq!(interned.render(key, &vocab.interner), reference.to_string());
    prop_assert_eq!(
        canonical(interned.to_public(key, &vocab.interner)),
        canonical(reference.to_node_selector_requirements())
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn single_requirements_agree(
        a in selector(),
        b in selector(),
    ) {
        let mut vocab = Vocab::new();
        let ra = Requirement::try_from(&a).expect("valid");
        let rb = Requirement::try_from(&b).expect("valid");
        let (ka, ia) = vocab.requirement(&a).expect("valid");
        let (kb, ib) = vocab.requirement(&b).expect("valid");
        prop_assert_eq!(vocab.interner.name(ka).into_owned(), ra.key());
        assert_same_requirement(&ra, &ia, &mut vocab)?;
        assert_same_requirement(&rb, &ib, &mut vocab)?;
        if ka == kb {
            prop_assert_eq!(
                ia.has_intersection(&ib, &vocab.interner),
                ra.has_intersection(&rb),
                "{} with {}", ra, rb
            );
            let both = ia.intersection(&ib, &vocab.interner);
            assert_same_requirement(&ra.intersection(&rb), &both, &mut vocab)?;
        }
    }

    #[test]
    fn requirement_sets_agree(
        existing in selectors(),
        incoming in selectors(),
    ) {
        let mut vocab = Vocab::new();
        let ref_existing = reference(&existing);
        let ref_incoming = reference(&incoming);
        let int_existing = interned(&mut vocab, &existing);
        let int_incoming = interned(&mut vocab, &incoming);

        prop_assert_eq!(int_existing.0.len(), ref_existing.len());
        for r in &ref_existing {
            let key = vocab.intern(r.key());
            let req = int_existing.get(key).expect("same keys").clone();
            assert_same_requirement(r, &req, &mut vocab)?;
        }
        prop_assert_eq!(
            int_existing.render(&vocab.interner),
            ref_existing.to_string()
        );
        prop_assert_eq!(
            int_existing.intersects(&int_incoming, &vocab.interner).is_ok(),
            ref_existing.intersects(&ref_incoming).is_ok(),
            "{} against {}", ref_existing, ref_incoming
        );
        prop_assert_eq!(
            int_existing.compatible(&int_incoming, &vocab).is_ok(),
            ref_existing.is_compatible(&ref_incoming, AllowUndefined::WellKnownLabels),
            "{} against {}", ref_existing, ref_incoming
        );
        prop_assert_eq!(
            int_existing.compatible_strict(&int_incoming, &vocab.interner).is_ok(),
            ref_existing.is_compatible(&ref_incoming, AllowUndefined::Nothing),
            "{} against {}", ref_existing, ref_incoming
        );

        let mut int_merged = int_existing.clone();
        int_merged.add_all(&int_incoming, &vocab.interner);
        let mut ref_merged = ref_existing.clone();
        ref_merged.add_all(&ref_incoming);
        for r in &ref_merged {
            let key = vocab.intern(r.key());
            let req = int_merged.get(key).expect("same keys").clone();
            assert_same_requirement(r, &req, &mut vocab)?;
        }
    }
}
