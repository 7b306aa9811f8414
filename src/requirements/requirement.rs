//! One key's requirement as a set: either the listed values (In) or everything except them
//! (the complement, for NotIn and Exists), optionally cut down to integers within inclusive
//! bounds (Gt, Lt, Gte and Lte are stored as bounds), plus the NodePool's `minValues`.
//! Intersecting two requirements is closed under this representation, which is what lets
//! the scheduler narrow a NodeClaim pod by pod; the operator is derived back from the set.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::NodeSelectorRequirementWithMinValues;
use super::error::RequirementError;
use super::key::Key;
use super::operator::Operator;
use super::values::ValueSet;
use crate::labels;

/// The allowed values of one label key. Cloning is cheap (shared storage).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: Key,
    /// When set, `values` are the excluded values and every other value is allowed.
    complement: bool,
    values: ValueSet,
    /// Inclusive lower bound; only kept on complements (a listed set is filtered instead).
    gte: Option<i64>,
    /// Inclusive upper bound; only kept on complements.
    lte: Option<i64>,
    min_values: Option<u32>,
}

impl Requirement {
    /// Builds a requirement from a node selector requirement's parts. The key is normalised
    /// (deprecated aliases become their well-known label); Gt and Lt become inclusive bounds.
    /// Values of Exists and DoesNotExist are ignored, as Karpenter ignores them.
    pub fn new<I, S>(
        key: &str,
        operator: Operator,
        values: I,
        min_values: Option<u32>,
    ) -> Result<Self, RequirementError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let base = Requirement::exists(key).with_min_values(min_values);
        let requirement = match operator {
            Operator::In => Requirement {
                complement: false,
                values: value_set(values),
                ..base
            },
            Operator::NotIn => Requirement {
                values: value_set(values),
                ..base
            },
            Operator::Exists => base,
            Operator::DoesNotExist => base.emptied(),
            Operator::Gt => match single_integer(key, operator, values)?.checked_add(1) {
                Some(gte) => base.bounded(Some(gte), None),
                None => base.emptied(),
            },
            Operator::Lt => match single_integer(key, operator, values)?.checked_sub(1) {
                Some(lte) => base.bounded(None, Some(lte)),
                None => base.emptied(),
            },
            Operator::Gte => base.bounded(Some(single_integer(key, operator, values)?), None),
            Operator::Lte => base.bounded(None, Some(single_integer(key, operator, values)?)),
        };
        Ok(requirement)
    }

    /// [`Requirement::new`] with the operator given by name, as manifests spell it.
    pub fn parse<I, S>(
        key: &str,
        operator: &str,
        values: I,
        min_values: Option<u32>,
    ) -> Result<Self, RequirementError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let operator = operator
            .parse()
            .map_err(|source| RequirementError::ParseOperator {
                key: key.to_owned(),
                source,
            })?;
        Requirement::new(key, operator, values, min_values)
    }

    /// `key In values`.
    pub fn in_values<I, S>(key: &str, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Requirement {
            complement: false,
            values: value_set(values),
            ..Requirement::exists(key)
        }
    }

    /// `key NotIn values`.
    pub fn not_in<I, S>(key: &str, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Requirement {
            values: value_set(values),
            ..Requirement::exists(key)
        }
    }

    /// `key Exists`: any value; also what an undefined key means.
    pub fn exists(key: &str) -> Self {
        Requirement {
            key: Key::new(labels::normalize_label_key(key)),
            complement: true,
            values: ValueSet::default(),
            gte: None,
            lte: None,
            min_values: None,
        }
    }

    /// `key DoesNotExist`: no value at all.
    pub fn does_not_exist(key: &str) -> Self {
        Requirement::exists(key).emptied()
    }

    /// Integer values `>= min` (`Gte`).
    pub fn at_least(key: &str, min: i64) -> Self {
        Requirement::exists(key).bounded(Some(min), None)
    }

    /// Integer values `<= max` (`Lte`).
    pub fn at_most(key: &str, max: i64) -> Self {
        Requirement::exists(key).bounded(None, Some(max))
    }

    pub fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    fn emptied(self) -> Self {
        Requirement {
            complement: false,
            values: ValueSet::default(),
            gte: None,
            lte: None,
            ..self
        }
    }

    fn bounded(self, gte: Option<i64>, lte: Option<i64>) -> Self {
        Requirement { gte, lte, ..self }
    }

    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    pub(crate) fn key_ref(&self) -> &Key {
        &self.key
    }

    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// Inclusive lower integer bound, if any (`Gt 3` is stored as `4`).
    pub fn lower_bound(&self) -> Option<i64> {
        self.gte
    }

    /// Inclusive upper integer bound, if any (`Lt 3` is stored as `2`).
    pub fn upper_bound(&self) -> Option<i64> {
        self.lte
    }

    /// The set operator this requirement amounts to: In (listed values), NotIn (all but the
    /// listed values), Exists (any value, possibly bounded) or DoesNotExist (no value).
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
        }
    }

    /// The listed values, sorted: the allowed ones for In, the excluded ones for NotIn.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.values.iter()
    }

    /// How many values are allowed; complements count as `usize::MAX` less the exclusions.
    pub fn len(&self) -> usize {
        if self.complement {
            usize::MAX - self.values.len()
        } else {
            self.values.len()
        }
    }

    /// Whether no value is allowed (the DoesNotExist operator).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a node labelled `key=value` satisfies this requirement.
    pub fn has(&self, value: &str) -> bool {
        self.values.contains(value) != self.complement && within_bounds(value, self.gte, self.lte)
    }

    /// The requirement both `self` and `other` impose, with the larger `minValues`. Both
    /// must be on the same key.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        debug_assert_eq!(
            self.key, other.key,
            "intersecting requirements on different keys"
        );
        let gte = max_bound(self.gte, other.gte);
        let lte = min_bound(self.lte, other.lte);
        let min_values = self.min_values.max(other.min_values);
        let result = Requirement {
            key: self.key.clone(),
            complement: self.complement && other.complement,
            values: ValueSet::default(),
            gte: None,
            lte: None,
            min_values,
        };
        if bounds_are_disjoint(gte, lte) {
            return result.emptied();
        }
        let keep = |value: &str| within_bounds(value, gte, lte);
        let values = match (self.complement, other.complement) {
            (true, true) => self.values.union(&other.values, keep),
            (true, false) => other.values.difference(&self.values, keep),
            (false, true) => self.values.difference(&other.values, keep),
            (false, false) => self.values.intersection(&other.values, keep),
        };
        if result.complement {
            Requirement { values, ..result }.bounded(gte, lte)
        } else {
            Requirement { values, ..result }
        }
    }

    /// Whether [`Requirement::intersection`] would allow any value, without building it.
    /// Two complements always intersect (their bounds permitting), as upstream decides.
    pub fn has_intersection(&self, other: &Requirement) -> bool {
        let gte = max_bound(self.gte, other.gte);
        let lte = min_bound(self.lte, other.lte);
        if bounds_are_disjoint(gte, lte) {
            return false;
        }
        let allowed = |value: &str, excluded: &ValueSet| {
            !excluded.contains(value) && within_bounds(value, gte, lte)
        };
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other.values.iter().any(|v| allowed(v, &self.values)),
            (false, true) => self.values.iter().any(|v| allowed(v, &other.values)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small
                    .iter()
                    .any(|v| large.contains(v) && within_bounds(v, gte, lte))
            }
        }
    }

    /// A value a new node's label could take: the smallest listed value for In; for NotIn and
    /// Exists an integer within the bounds that is not excluded, different from call to call
    /// (as upstream's random pick) so nodes built from the same requirement get distinct
    /// values; `None` for DoesNotExist or when no integer fits.
    pub fn any(&self) -> Option<String> {
        match self.operator() {
            Operator::In => self.values.first().map(str::to_owned),
            Operator::NotIn | Operator::Exists => self.any_integer().map(|n| n.to_string()),
            _ => None,
        }
    }

    fn any_integer(&self) -> Option<i64> {
        let low = self.gte.unwrap_or(0);
        let high = self.lte.unwrap_or(i64::MAX - 1);
        if low > high {
            return None;
        }
        let allowed = |n: i64| !self.values.contains(&n.to_string());
        let span = (i128::from(high) - i128::from(low) + 1) as u128;
        let excluded = self.values.len() as u128;
        if span > 4 * (excluded + 1) {
            // Each draw misses with probability below a quarter, so a few draws suffice.
            for _ in 0..16 {
                let offset = (next_pseudo_random() as u128 % span) as i128;
                let candidate = (i128::from(low) + offset) as i64;
                if allowed(candidate) {
                    return Some(candidate);
                }
            }
        }
        // Among any `excluded + 1` consecutive integers at least one is allowed.
        (low..=high)
            .take(self.values.len() + 1)
            .find(|n| allowed(*n))
    }

    /// The single node selector requirement upstream prints for this requirement: bounds
    /// win over the value set (use [`Requirement::to_node_selector_requirements`] for a
    /// lossless form).
    pub fn to_node_selector_requirement(&self) -> NodeSelectorRequirementWithMinValues {
        if let Some(gte) = self.gte {
            self.selector(Operator::Gte, vec![gte.to_string()])
        } else if let Some(lte) = self.lte {
            self.selector(Operator::Lte, vec![lte.to_string()])
        } else {
            let operator = self.operator();
            self.selector(operator, self.values().map(str::to_owned).collect())
        }
    }

    /// Node selector requirements that together mean exactly this requirement: both bounds
    /// when both are set, and the exclusions of a bounded NotIn, which a single
    /// requirement cannot carry.
    pub fn to_node_selector_requirements(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        if self.gte.is_none() && self.lte.is_none() {
            return vec![self.to_node_selector_requirement()];
        }
        let gte = self
            .gte
            .map(|v| self.selector(Operator::Gte, vec![v.to_string()]));
        let lte = self
            .lte
            .map(|v| self.selector(Operator::Lte, vec![v.to_string()]));
        let excluded = (!self.values.is_empty())
            .then(|| self.selector(Operator::NotIn, self.values().map(str::to_owned).collect()));
        [gte, lte, excluded].into_iter().flatten().collect()
    }

    fn selector(
        &self,
        operator: Operator,
        values: Vec<String>,
    ) -> NodeSelectorRequirementWithMinValues {
        NodeSelectorRequirementWithMinValues {
            key: self.key.as_str().to_owned(),
            operator,
            values,
            min_values: self.min_values.map(i64::from),
        }
    }
}

/// Upstream's rendering, e.g. `zone In [a b]`, `cpu Exists >=2 <=8`, `key NotIn [x] minValues 2`;
/// long value lists end in `and N others`.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 5;
        let operator = self.operator();
        write!(f, "{} {}", self.key, operator)?;
        if matches!(operator, Operator::In | Operator::NotIn) {
            f.write_str(" [")?;
            for (i, value) in self.values().take(SHOWN).enumerate() {
                if i > 0 {
                    f.write_str(" ")?;
                }
                f.write_str(value)?;
            }
            if self.values.len() > SHOWN {
                write!(f, " and {} others", self.values.len() - SHOWN)?;
            }
            f.write_str("]")?;
        }
        if let Some(gte) = self.gte {
            write!(f, " >={gte}")?;
        }
        if let Some(lte) = self.lte {
            write!(f, " <={lte}")?;
        }
        if let Some(min_values) = self.min_values {
            write!(f, " minValues {min_values}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Requirement({self})")
    }
}

fn value_set<I, S>(values: I) -> ValueSet
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let values: Vec<S> = values.into_iter().collect();
    ValueSet::from_strs(values.iter().map(AsRef::as_ref))
}

fn single_integer<I, S>(key: &str, operator: Operator, values: I) -> Result<i64, RequirementError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let values: Vec<S> = values.into_iter().collect();
    let [value] = values.as_slice() else {
        return Err(RequirementError::BoundValueCount {
            key: key.to_owned(),
            operator,
            count: values.len(),
        });
    };
    value
        .as_ref()
        .parse()
        .map_err(|_| RequirementError::ParseBound {
            key: key.to_owned(),
            operator,
            value: value.as_ref().to_owned(),
        })
}

/// Whether a label value lies within inclusive integer bounds; with any bound set, values
/// that are not integers are outside.
fn within_bounds(value: &str, gte: Option<i64>, lte: Option<i64>) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    let Ok(n) = value.parse::<i64>() else {
        return false;
    };
    gte.is_none_or(|g| n >= g) && lte.is_none_or(|l| n <= l)
}

fn bounds_are_disjoint(gte: Option<i64>, lte: Option<i64>) -> bool {
    matches!((gte, lte), (Some(g), Some(l)) if g > l)
}

fn max_bound(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_bound(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A process-wide splitmix64 sequence: label values for new nodes need to differ, not to be
/// unpredictable, and a counter keeps the core free of an RNG dependency and reproducible.
fn next_pseudo_random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0x5DEE_CE66_D1CE_4E5B);
    let mut z = STATE
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
